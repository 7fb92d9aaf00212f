"""The results of a whole run in one place: its best individual and its best distinct individuals.

After :meth:`Propulator.propulate` every rank holds them, whatever its island and whichever rank of its
worker it is (:attr:`Propulator.best`, :attr:`~Propulator.best_params`, :attr:`~Propulator.best_loss`,
:meth:`~Propulator.top`), so that user code reads them without a collective call of its own — on the
first rank only, if it likes.

They are gathered once at the end of ``propulate()`` by a reduction over the workers' roots whose operation
merges two lists of distinct best individuals (:func:`propulate.population.distinct_best`) and adds up the
evaluations by status: each island's first worker contributes the :data:`KEPT` best distinct individuals
of its island and the counts of its island's evaluations, every other worker nothing. A binomial-tree
reduction moves O(:data:`KEPT` log P) individuals per rank for P workers, not a list per island to every
rank.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mpi4py import MPI

from .errors import PropulateError
from .individual import Individual, Status
from .objectives import loss_vector, pareto_front
from .population import distinct_best

__all__ = ["COUNTED", "KEPT", "NoResultError", "RunResults", "gather_results"]

#: How many distinct best individuals of the run every rank holds after ``propulate()``.
KEPT = 100


#: The statuses counted at the end of a run, with their names in the log.
COUNTED = {
    Status.COMPLETED: "completed",
    Status.FAILED: "failed",
    Status.PRUNED: "pruned",
    Status.INTERRUPTED: "interrupted",
}


class NoResultError(PropulateError, RuntimeError):
    """No result to report: ``propulate()`` has not run, or no evaluation of the run completed."""


class RunResults:
    """The run's best distinct individuals, best first (at most :data:`KEPT`), the same on every rank.

    Parameters
    ----------
    top : sequence of Individual
        Completed individuals with pairwise different parameters or loss, best first.
    counts : dict
        The run's evaluations by status (the keys of :data:`COUNTED`), earlier sessions included; each
        evaluation once (not its copies on other islands). ``interrupted`` ones are evaluated again on
        resume.
    front : sequence of Individual, optional
        In a run with several objectives, its Pareto front (:func:`propulate.objectives.pareto_front`);
        ``None`` in a run with one loss.
    """

    def __init__(
        self, top: Sequence[Individual], counts: dict[Status, int], front: Sequence[Individual] | None = None
    ) -> None:
        self._top = list(top)
        self.counts = {status: int(counts.get(status, 0)) for status in COUNTED}
        self._front = None if front is None else list(front)

    @property
    def all_failed(self) -> bool:
        """Whether evaluations failed and none completed (pruned ones count as done)."""
        done = self.counts[Status.COMPLETED] + self.counts[Status.PRUNED]
        return self.counts[Status.FAILED] > 0 and done == 0

    def counts_text(self) -> str:
        """Return the counts as the log writes them: ``"8 completed, 2 failed, 0 pruned, 0 interrupted"``."""
        return ", ".join(f"{self.counts[status]} {name}" for status, name in COUNTED.items())

    @property
    def multi_objective(self) -> bool:
        """Whether the run had several objectives."""
        return self._front is not None

    @property
    def front(self) -> list[Individual]:
        """Copies of the run's Pareto front: the distinct completed individuals no other one dominates.

        In the order of the first objective. Raises :class:`NoResultError` in a run with one loss (use
        :attr:`best`) and when no evaluation completed.
        """
        if self._front is None:
            raise NoResultError("the run has one loss, no Pareto front: use best or top(n)")
        if not self._front:
            raise NoResultError(
                f"no evaluation of the run completed ({self.counts_text()}); see the log for the failures"
            )
        return [ind.copy() for ind in self._front]

    def _single(self, name: str) -> None:
        if self._front is not None:
            raise NoResultError(
                f"{name}: a run with several objectives has no single best individual; use pareto_front"
            )

    @property
    def best(self) -> Individual:
        """The individual of lowest loss of the whole run (a copy).

        Raises
        ------
        NoResultError
            If no evaluation completed, or the run has several objectives (see :attr:`front`).
        """
        self._single("best")
        if not self._top:
            raise NoResultError(
                f"no evaluation of the run completed ({self.counts_text()}); see the log for the failures"
            )
        return self._top[0].copy()

    def top(self, n: int) -> list[Individual]:
        """Return copies of the ``n`` best distinct individuals of the whole run, best first.

        Parameters
        ----------
        n : int in [1, KEPT]
            How many; fewer are returned when the run has fewer distinct completed individuals.

        Raises
        ------
        ValueError
            If ``n`` is not an int in ``[1, KEPT]`` (for more, read the checkpoint:
            :func:`propulate.results.load_dataframe`).
        NoResultError
            If the run has several objectives (see :attr:`front`).
        """
        self._single("top")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= KEPT:
            raise ValueError(
                f"n: expected an int in [1, {KEPT}], got {n!r}; for more, read the checkpoint with "
                "propulate.results.load_dataframe(checkpoint_path)"
            )
        return [ind.copy() for ind in self._top[:n]]


def gather_results(
    island_members: Sequence[Individual] | Callable[[], Sequence[Individual]] | None,
    comm: MPI.Comm,
    wait: Callable[[MPI.Request], None],
    multi_objective: bool = False,
    counts: Mapping[Status, int] | None = None,
) -> RunResults:
    """Merge the islands' best distinct individuals over ``comm``; collective over ``comm``.

    Parameters
    ----------
    island_members : sequence of Individual, callable or None
        Everything the island holds, on one worker per island (its first); ``None`` on every other. A
        callable returning them is called once every worker has arrived (their checkpoint files are
        closed then, so it may read them).
    comm : MPI.Comm
        The roots of all workers.
    wait : callable
        Waits for a request without blocking in MPI (checking for failures of other ranks meanwhile): the
        reduction starts once every worker has arrived, so that no rank spins in it while a slower one
        still evaluates.
    multi_objective : bool
        Also merge the islands' Pareto fronts into the run's (the same on every rank).
    counts : mapping of Status to int, optional
        The island's evaluations by status, as its population tallies them
        (:meth:`propulate.population.Population.evaluation_counts`, which also counts the individuals a
        worker released from memory); by default counted from ``island_members``.
    """
    wait(comm.Ibarrier())
    empty: list[Individual] | None = [] if multi_objective else None
    mine: tuple[list[Individual], dict[int, int], list[Individual] | None] = ([], {}, empty)
    if callable(island_members):
        island_members = island_members()
    if island_members is not None:
        tally: dict[int, int] = {}
        if counts is not None:
            tally = {int(status): n for status, n in counts.items()}
        else:
            for ind in island_members:
                if ind.migration_steps == 0:  # the evaluation itself, not a copy sent to another island
                    tally[int(ind.status)] = tally.get(int(ind.status), 0) + 1
        front = pareto_front(island_members) if multi_objective else None
        mine = (distinct_best(island_members, KEPT), tally, front)
    top, merged, front = comm.allreduce(mine, op=_MERGE)
    if front is not None:
        front.sort(key=loss_vector)
    return RunResults(top, {Status(status): n for status, n in merged.items()}, front)


def _merge(a: Any, b: Any, _datatype: Any = None) -> Any:
    counts = dict(a[1])
    for status, n in b[1].items():
        counts[status] = counts.get(status, 0) + n
    front = None if a[2] is None else pareto_front([*a[2], *b[2]])
    return distinct_best([*a[0], *b[0]], KEPT), counts, front


# mpi4py calls a user operation on the objects themselves in a reduction of Python objects (its stubs only
# describe reductions of buffers).
_MERGE = MPI.Op.Create(_merge, commute=True)  # type: ignore[arg-type]
