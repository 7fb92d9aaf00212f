"""Surrogates: early stopping of an evaluation from its interim losses.

A loss function that is a generator yields interim losses (e.g. the validation loss after each epoch); after
each one the worker's surrogate decides whether to cancel the evaluation. Pass a factory to
:class:`propulate.Propulator` or :class:`propulate.Islands`, e.g. ``surrogate_factory=StaticSurrogate`` or
``surrogate_factory=lambda: DynamicSurrogate(limits)``.

- :class:`NullSurrogate` never cancels.
- :class:`StaticSurrogate` compares each interim loss with the best completed run's curve at the same step.
- :class:`LogLinearSurrogate` extrapolates the run's curve and compares it with the best final loss.
- :class:`SuccessiveHalving` stops runs outside the best ``1 / η`` at each rung (ASHA, optionally Hyperband).
- :class:`DynamicSurrogate` predicts the final loss with a Gaussian process (needs scikit-learn).
"""

from __future__ import annotations

from .asha import SuccessiveHalving
from .base import NullSurrogate, Surrogate
from .dynamic import DynamicSurrogate
from .loglinear import LogLinearSurrogate
from .static import StaticSurrogate

__all__ = [
    "DynamicSurrogate",
    "LogLinearSurrogate",
    "NullSurrogate",
    "StaticSurrogate",
    "SuccessiveHalving",
    "Surrogate",
]
