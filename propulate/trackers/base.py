"""The tracker interface: what a search tells a tracker, and when.

A tracker sends the results of a search to an experiment tracker (TensorBoard, MLflow) as they come, so that
they can be watched there while the search runs. Like Optuna's ``MLflowCallback``, a tracker is called once
per finished evaluation; unlike it, a tracker is called on the first rank of the worker that evaluated, in
a background thread (:mod:`propulate.trackers.runner`), so that a slow or failing tracker never holds up
the search.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..individual import Individual, Status
from ..objectives import Objectives

__all__ = [
    "STATES",
    "EvaluationRecord",
    "SearchInfo",
    "Tracker",
    "check_timeout",
    "check_trackers",
    "require",
]

#: The state names of finished evaluations, those of the results frame (:data:`propulate.report.STATES`).
STATES: dict[Status, str] = {Status.COMPLETED: "COMPLETE", Status.PRUNED: "PRUNED", Status.FAILED: "FAIL"}


@dataclass(frozen=True)
class SearchInfo:
    """What a tracker learns about the search when a worker begins a session (a call of ``propulate()``).

    Attributes
    ----------
    search : str
        The search's identity: its checkpoint folder, resolved. The same in every session of the search.
    token : str
        This session's identity, the same on every worker: what the workers of a session share, e.g. a
        parent run created by the first of them, is found under it.
    checkpoint_path : pathlib.Path
        The checkpoint folder, where trackers keep their local stores by default.
    objectives : tuple of str
        The names of the values minimized: ``("loss",)``, or the objectives' names in a run with several.
    session : int >= 0
        The session's number in the checkpoint: 0 for a fresh start, counting up with each resume.
    island, worker : int
        This worker's island, and its index in the island.
    worker_index : int
        This worker's index among all workers of the search; worker 0 is the *first* worker.
    num_workers, num_islands, ranks_per_worker : int
        The layout of the session.
    """

    search: str
    token: str
    checkpoint_path: Path
    objectives: tuple[str, ...]
    session: int
    island: int
    worker: int
    worker_index: int
    num_workers: int
    num_islands: int
    ranks_per_worker: int

    @property
    def first(self) -> bool:
        """Whether this is the first worker of the search, which creates what all workers share."""
        return self.worker_index == 0

    @property
    def resumed(self) -> bool:
        """Whether the session continues a search from its checkpoint."""
        return self.session > 0


@dataclass(frozen=True)
class EvaluationRecord:
    """One finished evaluation of a worker: an immutable copy, safe to hand to another thread.

    Attributes
    ----------
    uid : int
        The individual's identifier in the checkpoint (:attr:`propulate.Individual.uid`), unique in a search.
    island, worker, generation : int
        The island and worker that bred and evaluated it, and the worker's generation counter then.
    params : dict[str, Any]
        The parameter values the loss function received.
    status : Status
        Completed, pruned (stopped early by a surrogate) or failed.
    values : dict[str, float]
        The final value of each objective as the loss function returned it: ``{"loss": loss}`` in a run
        with one loss. Empty for a failed evaluation.
    metrics : dict[str, float]
        The further numbers the loss function returned with its final value.
    interim : tuple of (float, dict[str, float])
        For a generator loss function, the loss (the first objective, minimized) and metrics yielded at
        each step, step ``k`` at index ``k - 1``; for a pruned evaluation up to the step it was stopped at.
        Empty for a plain loss function.
    started, finished : float
        Epoch seconds when the evaluation started and finished.
    error : str or None
        For a failed evaluation, the last line of its traceback (e.g. ``ValueError: broken loss``).
    """

    uid: int
    island: int
    worker: int
    generation: int
    params: dict[str, Any]
    status: Status
    values: dict[str, float]
    metrics: dict[str, float]
    interim: tuple[tuple[float, dict[str, float]], ...]
    started: float
    finished: float
    error: str | None

    @property
    def state(self) -> str:
        """The state's name as the results frame writes it: ``"COMPLETE"``, ``"PRUNED"`` or ``"FAIL"``."""
        return STATES[self.status]

    @property
    def steps(self) -> int:
        """The number of interim losses (0 for a plain loss function)."""
        return len(self.interim)

    def points(self) -> list[tuple[int, float, dict[str, float]]]:
        """Return the values to log as ``(step, epoch seconds, {name: value})``, NaN left out.

        A plain loss function gives one point at step 0: each objective's value and each metric. A generator
        loss function gives one per step ``1..n``: ``"loss"`` (the first objective, minimized) and the
        metrics yielded then, the last step with the final values too; the steps' times are spread evenly
        over the evaluation. A failed evaluation has the values of the steps that brought some.
        """
        final = {**self.values, **self.metrics} if self.status is not Status.FAILED else {}
        if not self.interim:
            return [(0, self.finished, _real(final))] if final else []
        span, steps = self.finished - self.started, len(self.interim)
        points = [
            (step, self.started + span * step / steps, _real({"loss": loss, **metrics}))
            for step, (loss, metrics) in enumerate(self.interim, start=1)
        ]
        points[-1] = (steps, self.finished, {**points[-1][2], **_real(final)})
        return [point for point in points if point[2]]

    @classmethod
    def of(
        cls,
        ind: Individual,
        interim: list[tuple[float, dict[str, float]]],
        objectives: Objectives | None = None,
    ) -> EvaluationRecord:
        """Record the evaluation of ``ind`` just finished, with its ``interim`` losses and metrics.

        Raises
        ------
        ValueError
            If ``ind`` is not finished (pending or interrupted: it is evaluated again, and recorded then).
        """
        if ind.status not in STATES:
            raise ValueError(f"ind: expected a finished evaluation, got status {ind.status.name}")
        values: dict[str, float] = {}
        if ind.status is not Status.FAILED:
            if objectives is None or ind.losses is None:
                values = {"loss": float(ind.loss)}
            else:
                values = dict(zip(objectives.names, objectives.values(ind.losses), strict=True))
        error = ind.error.strip().splitlines()[-1] if ind.error else None
        return cls(
            int(ind.uid),
            int(ind.island),
            int(ind.rank),
            int(ind.generation),
            ind.params(),
            ind.status,
            values,
            dict(ind.metrics),
            tuple((float(loss), dict(metrics)) for loss, metrics in interim),
            float(ind.evaltime - ind.evalperiod),
            float(ind.evaltime),
            error,
        )


def _real(values: dict[str, float]) -> dict[str, float]:
    return {name: float(v) for name, v in values.items() if not math.isnan(v)}


class Tracker:
    """Base class of the trackers: sends each finished evaluation of a worker to an experiment tracker.

    Subclasses implement :meth:`log_evaluation`; :meth:`start` and :meth:`finish` do nothing unless
    overridden. Every method is called on the first rank of a worker only, in a background thread of the
    tracker's own, one call at a time and in this order: :meth:`start` when the worker begins a session,
    :meth:`log_evaluation` after each evaluation the worker finished itself (not for individuals it heard of
    from its island or received from other islands, so that each evaluation is logged once in the whole
    job; not for an evaluation interrupted by the end of a job, which is evaluated again, and logged then,
    when the search resumes), and :meth:`finish` at the end of the session. A tracker object is used by one
    worker; a session that resumes in the same process calls :meth:`start` again.

    What a method raises is caught: the worker logs a warning, once, and goes on; a tracker whose
    :meth:`start` failed, or whose :meth:`log_evaluation` failed
    :data:`~propulate.trackers.runner.MAX_FAILURES` times in a row, is called no more in that session.
    Evaluations wait in a bounded queue; at the end of the session the worker waits at most
    :attr:`flush_timeout` seconds for them to be logged.

    Attributes
    ----------
    flush_timeout : float >= 0
        Seconds the worker waits at the end of a session for the evaluations still queued (default 30).
    """

    flush_timeout: float = 30.0

    def start(self, search: SearchInfo) -> None:
        """Begin a session of the search (open files, connect, create what is shared)."""

    def log_evaluation(self, record: EvaluationRecord) -> None:
        """Log one finished evaluation of this worker."""
        raise NotImplementedError(f"{type(self).__name__} must implement log_evaluation(record)")

    def finish(self, stop_reason: str | None) -> None:
        """End the session; ``stop_reason`` says why it stopped early (a signal, a time limit) or is None."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def check_trackers(trackers: Any) -> tuple[Tracker, ...]:
    """Return ``trackers`` (``None``, a :class:`Tracker` or an iterable of them) as a tuple.

    Raises
    ------
    TypeError
        Naming the argument, for anything else.
    """
    if trackers is None:
        return ()
    if isinstance(trackers, Tracker):
        return (trackers,)
    if isinstance(trackers, (str, bytes, Mapping)) or not hasattr(trackers, "__iter__"):
        raise TypeError(f"trackers: expected a sequence of propulate.trackers.Tracker, got {trackers!r}")
    given = tuple(trackers)
    for tracker in given:
        if not isinstance(tracker, Tracker):
            raise TypeError(
                f"trackers: expected propulate.trackers.Tracker instances, got {type(tracker).__name__} "
                f"({tracker!r})"
            )
    return given


def require(module: str, extra: str, what: str) -> None:
    """Check that ``module`` can be imported, without importing it.

    Raises
    ------
    ImportError
        Naming the extra that installs it.
    """
    from importlib.util import find_spec

    try:
        found = find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ImportError(f'{what} needs {module}; install it with: pip install "propulate[{extra}]"')


def check_timeout(name: str, value: Any) -> float:
    """Return ``value`` as a float of seconds >= 0.

    Raises
    ------
    ValueError
        Naming the argument, for a negative, NaN or infinite value or one that is no number.
    """
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{name}: expected a finite number of seconds >= 0, got {value!r}")
    return seconds
