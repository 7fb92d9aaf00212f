"""Log-linear surrogate: extrapolate the current learning curve and compare it with the best final loss."""

from __future__ import annotations

import math

import numpy as np

from ..validation import check_int
from .base import CurveSurrogate, Run, check_margin, exceeds

__all__ = ["LogLinearSurrogate"]


class LogLinearSurrogate(CurveSurrogate):
    """Cancel a run whose extrapolated final loss is too far behind the best final loss seen.

    After ``min_steps`` interim losses ``y_0, ..., y_k`` the model ``y_t ≈ a + b * log(t + 1)`` is fitted to
    them by least squares and evaluated at the horizon ``T``, the step index of the last interim loss of
    the longest completed run seen (or the current step, if the run is already longer). A rising fit
    (``b > 0``) is not extrapolated upwards: the prediction is then the fitted value at the current step.
    The run is cancelled when the prediction ``p`` exceeds ``best + (1 / margin - 1) * |best|``, where
    ``best`` is the lowest final loss of a completed run this worker evaluated or merged. Nothing is
    cancelled before a run has completed, except that a NaN or infinite interim loss always cancels (the
    training diverged). Pruned and failed runs count neither for ``best`` nor for the horizon.

    A decreasing log-linear model keeps falling where real learning curves level off, so it tends to
    underestimate the final loss: its errors lean towards letting runs finish. This is a deliberately
    simple relative of the learning-curve extrapolation of Domhan, Springenberg & Hutter, "Speeding up
    automatic hyperparameter optimization of deep neural networks by extrapolation of learning curves",
    IJCAI 2015, which fits a Bayesian ensemble of eleven parametric curve families by MCMC and cancels by
    the probability of beating the best run; here there is one family, a least-squares fit and a margin.

    Parameters
    ----------
    margin : float in (0, 1]
        How close the extrapolated final loss must stay to the best final loss: ``1`` tolerates nothing,
        ``0.8`` (the default) tolerates 25 % of the best loss's magnitude.
    min_steps : int >= 2
        Interim losses needed before the first fit; with fewer the run is not cancelled (unless diverged).

    Raises
    ------
    ValueError
        If ``margin`` is not in (0, 1] or ``min_steps`` is not an int >= 2.
    """

    def __init__(self, margin: float = 0.8, min_steps: int = 3) -> None:
        super().__init__()
        self.margin = check_margin(margin)
        self.min_steps = check_int("min_steps", min_steps, 2)
        # The lowest final loss and the longest curve of the completed runs so far.
        self._best: float | None = None
        self._horizon = 0

    def judge(self, step: int, loss: float) -> bool:  # noqa: D102
        if self._best is None or step + 1 < self.min_steps:
            return False
        return exceeds(self.predict(), self._best, self.margin)

    def predict(self) -> float:
        """Return the extrapolated final loss of the current run (needs two interim losses at least).

        Returns
        -------
        float
            The fitted curve at the horizon, or at the current step if the fit rises.

        Raises
        ------
        ValueError
            If the current run has fewer than two finite interim losses.
        """
        curve = np.asarray(self._run.curve)
        if curve.size < 2:
            raise ValueError(f"predict: needs two interim losses at least, the run has {curve.size}")
        log_steps = np.log(np.arange(1, curve.size + 1))
        design = np.column_stack([np.ones_like(log_steps), log_steps])
        (a, b), *_ = np.linalg.lstsq(design, curve, rcond=None)
        # log(t + 1) at the horizon's step index and at the current one.
        at_horizon = a + b * math.log(max(self._horizon, curve.size))
        at_current = a + b * log_steps[-1]
        return float(min(at_horizon, at_current))

    def learn(self, run: Run) -> None:  # noqa: D102
        if not run.completed:
            return
        assert run.loss is not None
        self._best = run.loss if self._best is None else min(self._best, run.loss)
        self._horizon = max(self._horizon, len(run.curve))
