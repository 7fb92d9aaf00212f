"""Trackers: the results of a search sent to TensorBoard or MLflow as the evaluations finish.

Opt-in callbacks passed as ``Islands(..., trackers=[...])`` or ``Propulator(..., trackers=[...])``; the
first rank of each worker calls them, in a background thread, after each of the worker's own evaluations
(:class:`Tracker`). A failing tracker never fails an evaluation nor stalls the search
(:mod:`propulate.trackers.runner`). TensorBoard and MLflow are optional dependencies, imported when a
tracker first needs them: ``pip install "propulate[tensorboard]"`` or ``"propulate[mlflow]"``.
See :doc:`/trackers`.
"""

from __future__ import annotations

from .base import EvaluationRecord, SearchInfo, Tracker
from .mlflow import MLflowTracker
from .tensorboard import TensorBoardTracker

__all__ = ["EvaluationRecord", "MLflowTracker", "SearchInfo", "TensorBoardTracker", "Tracker"]
