"""The surrogate interface: early stopping of an evaluation from its interim losses.

A loss function that is a generator yields interim losses (e.g. the validation loss after each epoch). After
each one the worker asks its surrogate whether to cancel the evaluation; a cancelled individual is marked
pruned and keeps that interim loss as its loss. Every worker owns one surrogate (made by the
``surrogate_factory`` given to :class:`propulate.Propulator` or :class:`propulate.Islands`), and the
workers of an island keep their surrogates in step by exchanging a small record per evaluation
(:meth:`Surrogate.data`, :meth:`Surrogate.merge`).
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..individual import Individual

__all__ = ["CurveSurrogate", "NullSurrogate", "Run", "Surrogate", "check_margin", "exceeds"]


class Surrogate(ABC):
    """Decides after each interim loss whether an evaluation is worth finishing.

    Only :meth:`cancel` must be implemented; the other hooks do nothing by default. The worker calls them on
    its first rank, for each evaluation, in this order:

    1. :meth:`start_run` before the loss function is called;
    2. :meth:`cancel` after each interim loss, in order (the ``k``-th call gets the ``k``-th interim loss,
       ``k = 0, 1, ...``). When it returns ``True`` the evaluation stops, the individual is marked pruned and
       keeps that interim loss; :meth:`cancel` is not called again for this evaluation;
    3. :meth:`update` with the final loss, only if the evaluation was not cancelled;
    4. :meth:`data` after every evaluation, completed or cancelled: what the island's other workers should
       learn from it. The record travels inside the individual and is stored in the checkpoint.

    After each :meth:`cancel` the worker also asks :meth:`interim_data` for what the island's other workers
    should learn at once, before the run ends (a successive-halving rung result, say: records that lag by a
    whole evaluation make decisions on stale information, the more so the more workers there are); it is
    sent to them straight away, and the worker takes in what its peers sent before each :meth:`cancel`.

    :meth:`merge` is called on the other workers with that record, at any time between evaluations.

    An evaluation resumed from its own checkpoint folder after an interruption (see
    :func:`propulate.evaluation_checkpoint`) does not report its earlier interim losses again: after
    :meth:`start_run`, :meth:`replay` is called with each of them, in order, and :meth:`cancel` then goes on
    from the next one.

    Merging must not depend on order, and a fresh surrogate that merges the :meth:`data` of every evaluation
    of the island (its own included, in any order) must make the same decisions as the surrogate that
    recorded them: that is how surrogates are rebuilt when a run resumes from its checkpoint.
    """

    def start_run(self, ind: Individual) -> None:  # noqa: B027 (an optional hook)
        """Prepare for the evaluation of ``ind``.

        Parameters
        ----------
        ind : propulate.Individual
            The individual about to be evaluated.
        """

    @abstractmethod
    def cancel(self, loss: float) -> bool:
        """Return whether to stop the current evaluation after its next interim loss.

        Parameters
        ----------
        loss : float
            The next interim loss of the current evaluation; may be NaN or infinite.

        Returns
        -------
        bool
            ``True`` stops the evaluation.
        """

    def replay(self, loss: float) -> None:
        """Take in an interim loss that an earlier attempt of the current evaluation reported.

        The decision about it was taken then (to go on); the surrogate's view of the run is only brought
        back to where it was. The default calls :meth:`cancel` and ignores its answer; a surrogate whose
        ``cancel`` records the decision should override this.

        Parameters
        ----------
        loss : float
            The interim loss, finite (a non-finite one would have cancelled the evaluation).
        """
        self.cancel(loss)

    def update(self, loss: float) -> None:  # noqa: B027 (an optional hook)
        """Learn from the current evaluation, which finished without being cancelled.

        Parameters
        ----------
        loss : float
            Its final loss.
        """

    def interim_data(self) -> Any:
        """Return what other workers should learn now from the evaluation under way; ``None`` for nothing.

        Called after each :meth:`cancel`. Merged with :meth:`merge` like :meth:`data`, which must later
        carry it too (the checkpoint stores only :meth:`data`), so merging both must equal merging
        :meth:`data` alone. The default shares nothing.

        Returns
        -------
        Any
            A small JSON-serializable value, or ``None``.
        """
        return None

    def data(self) -> Any:
        """Return what other workers should learn from this worker's latest evaluation.

        Returns
        -------
        Any
            A small JSON-serializable value (dicts and lists of finite floats, ints, strings, bools and
            ``None``), of the size of one learning curve at most; ``None`` when there is nothing to share.
        """
        return None

    def merge(self, data: Any) -> None:  # noqa: B027 (an optional hook)
        """Take in the :meth:`data` of an evaluation done by another worker (``None`` is ignored).

        Parameters
        ----------
        data : Any
            What :meth:`data` returned there, possibly after a JSON round trip.
        """


class NullSurrogate(Surrogate):
    """A surrogate that never cancels: every evaluation runs to its end."""

    def cancel(self, loss: float) -> bool:  # noqa: D102
        return False


@dataclass
class Run:
    """One evaluation as the learning-curve surrogates record it.

    Parameters
    ----------
    curve : list of float
        The finite interim losses in the order they were reported. A non-finite interim loss always cancels
        (it is the run's last one) and is left out, so the record stays valid JSON.
    loss : float or None
        The final loss of a completed run; ``None`` while running, or when the run was pruned or failed.
    pruned : bool
        Whether a surrogate cancelled the run.
    """

    curve: list[float] = field(default_factory=list)
    loss: float | None = None
    pruned: bool = False

    @property
    def completed(self) -> bool:
        """Whether the run finished, not pruned, with a finite final loss."""
        return not self.pruned and self.loss is not None

    def observe(self, loss: float) -> int:
        """Record the next interim loss and return its step index ``k`` (0 for the first one)."""
        step = len(self.curve)
        if math.isfinite(loss):
            self.curve.append(float(loss))
        return step

    def finish(self, loss: float) -> None:
        """Record the final loss of a run that was not cancelled; a non-finite one counts as failed."""
        if not self.pruned and math.isfinite(loss):
            self.loss = float(loss)

    def to_data(self) -> dict[str, Any]:
        """Return the run as a JSON-serializable dict."""
        return {"curve": list(self.curve), "loss": self.loss, "pruned": self.pruned}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Run:
        """Rebuild a run from :meth:`to_data` (possibly after a JSON round trip).

        Parameters
        ----------
        data : Mapping[str, Any]
            ``{"curve": [...], "loss": float or None, "pruned": bool}``; further keys are ignored.

        Returns
        -------
        Run
            A new run.

        Raises
        ------
        ValueError
            If ``data`` is not such a dict.
        """
        try:
            curve = [float(x) for x in data["curve"]]
            loss = None if data["loss"] is None else float(data["loss"])
            pruned = bool(data["pruned"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"data: expected a dict with 'curve', 'loss' and 'pruned' as made by data(), got {data!r}"
            ) from None
        return cls(curve, loss, pruned)


class CurveSurrogate(Surrogate):
    """A surrogate that records each evaluation's learning curve as a :class:`Run` and shares it.

    :meth:`start_run` begins a new run; :meth:`cancel` records the interim loss, cancels at once when it is
    NaN or infinite (the training diverged) and otherwise asks :meth:`judge`; :meth:`update` finishes the
    run. :meth:`data` is the latest run (:meth:`Run.to_data`), and :meth:`merge` takes in another worker's.
    Every run that finished here or was merged goes to :meth:`learn`, which sees completed and pruned ones
    alike (check :attr:`Run.completed`).
    """

    def __init__(self) -> None:
        self._run = Run()

    def start_run(self, ind: Individual) -> None:  # noqa: D102
        self._run = Run()

    def replay(self, loss: float) -> None:  # noqa: D102
        self._run.observe(loss)

    def cancel(self, loss: float) -> bool:  # noqa: D102
        step = self._run.observe(loss)
        stop = not math.isfinite(loss) or self.judge(step, loss)
        self._run.pruned |= stop
        return stop

    @abstractmethod
    def judge(self, step: int, loss: float) -> bool:
        """Return whether to cancel the current run at its finite interim loss ``loss`` of step ``step``."""

    @abstractmethod
    def learn(self, run: Run) -> None:
        """Take in ``run``, finished on this worker or merged from another one."""

    def update(self, loss: float) -> None:  # noqa: D102
        self._run.finish(loss)
        self.learn(self._run)

    def data(self) -> dict[str, Any]:
        """Return the latest run: ``{"curve": [...], "loss": final loss or None, "pruned": bool}``."""
        return self._run.to_data()

    def merge(self, data: Any) -> None:  # noqa: D102
        if data is not None:
            self.learn(Run.from_data(data))


def check_margin(margin: object) -> float:
    """Return ``margin`` as a float if it is a number in (0, 1].

    Parameters
    ----------
    margin : object
        The value to check.

    Returns
    -------
    float
        ``margin``.

    Raises
    ------
    ValueError
        Naming ``margin`` and the allowed range.
    """
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real) or not 0 < float(margin) <= 1:
        raise ValueError(f"margin: expected a number in (0, 1], got {margin!r}")
    return float(margin)


def exceeds(loss: float, reference: float, margin: float) -> bool:
    """Whether ``loss`` is worse than ``reference`` by more than the relative tolerance ``margin`` allows.

    The tolerance is ``(1 / margin - 1) * |reference|``: ``margin = 1`` tolerates nothing, ``margin = 0.8``
    tolerates 25 % of the reference's magnitude. For positive losses this is Propulate's rule
    ``margin * loss > reference``; taking the magnitude keeps it meaningful for negative losses. A reference
    of exactly 0 tolerates nothing.

    Parameters
    ----------
    loss : float
        The loss judged (lower is better).
    reference : float
        The loss it is compared with, e.g. the baseline's interim loss at the same step.
    margin : float in (0, 1]
        How close ``loss`` must stay to ``reference``.

    Returns
    -------
    bool
        ``True`` when ``loss > reference + (1 / margin - 1) * |reference|``.
    """
    return loss > reference + (1.0 / margin - 1.0) * abs(reference)
