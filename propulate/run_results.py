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

:class:`RunResultsMixin`, a base of :class:`~propulate.Propulator`, holds what the propulator reports of its
run: these results, its worker's population and the per-worker summary.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from .checkpoint import CheckpointError, load_checkpoint
from .errors import PropulateError
from .individual import Individual, Status
from .island_state import IslandState
from .mpi.messaging import wait
from .objectives import Objectives, loss_vector, pareto_front
from .population import Population, distinct_best
from .validation import check_int

__all__ = ["COUNTED", "KEPT", "NoResultError", "RunResults", "RunResultsMixin", "gather_results"]

log = logging.getLogger("propulate")

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
            :func:`propulate.report.load_dataframe <propulate.report.frame.load_dataframe>`).
        NoResultError
            If the run has several objectives (see :attr:`front`).
        """
        self._single("top")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= KEPT:
            raise ValueError(
                f"n: expected an int in [1, {KEPT}], got {n!r}; for more, read the checkpoint with "
                "propulate.report.load_dataframe(checkpoint_path)"
            )
        return [ind.copy() for ind in self._top[:n]]


class RunResultsMixin:
    """What a :class:`~propulate.Propulator` reports of its run: population, best, top, front, summary.

    A base of :class:`~propulate.Propulator`, which sets the attributes below; kept apart from the loop so
    that ``propulator.py`` holds the run itself. The run's results (:attr:`best`, :meth:`top`,
    :attr:`pareto_front`) come from :class:`RunResults`, gathered at the end of ``propulate()``; the
    population and :meth:`summarize` from this worker's memory, or from the checkpoint where the worker
    released individuals from memory (*Memory* in :mod:`propulate.island_state`).
    """

    _results: RunResults | None
    _in_run: bool
    _world: MPI.Comm
    _worker: MPI.Comm
    checkpoint_path: Path
    island_idx: int
    island_rank: int
    island_displs: np.ndarray
    is_worker_root: bool
    objectives: Objectives | None
    state: IslandState

    @property
    def _population(self) -> Population:
        """The island's individuals as this worker knows them (:attr:`IslandState.population`)."""
        return self.state.population

    @property
    def population(self) -> list[Individual]:
        """The individuals this worker knows of, in arrival order (on sub-ranks: after ``propulate()``).

        Where the worker released individuals from memory (see *Memory* in :mod:`propulate.island_state`),
        the island's population is read back from the checkpoint instead, in the checkpoint's order: the
        same set, with every attribute the checkpoint stores; each access reads it again. Not during
        :meth:`~propulate.Propulator.propulate` (from the loss function, say), while the island's workers
        are writing those files: there it gives the individuals in memory, the best ones where some were
        released.
        """
        if not self._population.released or self._in_run:
            return list(self._population)
        return self._read_back()

    def _read_back(self) -> list[Individual]:
        """Return the island's population as the checkpoint holds it; only once its writers are closed.

        If the checkpoint cannot be read (moved away, or a file still being closed by another rank after a
        failure), the individuals in memory, with a warning that says how many are missing.
        """
        try:
            checkpoint = load_checkpoint(self.checkpoint_path)
        except (CheckpointError, OSError) as err:
            checkpoint, reason = None, f"it cannot be read ({err})"
        else:
            reason = "it holds nothing"
        if checkpoint is None:
            population = self._population
            log.warning(
                f"population: {population.released} of the {population.n_known} individuals this worker "
                f"knew were released from memory to the checkpoint in {self.checkpoint_path}, but {reason}; "
                f"giving the {len(population)} in memory"
            )
            return list(population)
        return list(checkpoint.populations.get(self.island_idx, []))

    def _island_members(self, k: int) -> list[Individual]:
        """Return individuals of the island among which are its ``k`` best distinct ones; after a run only.

        Those in memory, unless some were released (see *Memory* in :mod:`propulate.island_state`) and
        fewer than ``k`` distinct ones stayed: then the checkpoint's population, once every worker closed
        its files.
        """
        members = list(self._population)
        if self._population.released and len(distinct_best(members, k)) < k:
            return self._read_back()
        return members

    @property
    def best(self) -> Individual:
        """The individual of lowest loss of the whole run, all islands; on every rank after ``propulate()``.

        A copy: its parameters (``best.params()`` or ``best["lr"]``), ``best.loss``, ``best.metrics``, and
        where it was evaluated (``island``, ``rank``, ``generation``). Pruned individuals (an interim loss)
        and failed ones are never the best.

        Raises
        ------
        propulate.run_results.NoResultError
            (a ``RuntimeError``) before ``propulate()`` returned, or if no evaluation of the run completed.
        """
        return self._run_results().best

    @property
    def best_params(self) -> dict[str, Any]:
        """The parameters of :attr:`best`, as the loss function received them; see :attr:`best`."""
        return self._run_results().best.params()

    @property
    def best_loss(self) -> float:
        """The loss of :attr:`best`; see :attr:`best`."""
        return float(self._run_results().best.loss)

    def top(self, n: int = 5) -> list[Individual]:
        """Return the ``n`` best distinct individuals of the whole run, all islands, best first.

        Available on every rank after ``propulate()``, without communication (see
        :mod:`propulate.run_results`). Distinct: no two have the same parameters and loss (a migrant and its
        copies count once). :meth:`summarize` gives the best of each worker instead, as in Propulate 1.2.2.

        Parameters
        ----------
        n : int in [1, 100]
            How many; fewer when the run has fewer distinct completed individuals.

        Raises
        ------
        ValueError
            If ``n`` is out of range (for more,
            :func:`propulate.report.load_dataframe <propulate.report.frame.load_dataframe>` reads them all).
        propulate.run_results.NoResultError
            Before ``propulate()`` returned.
        """
        return self._run_results().top(n)

    @property
    def pareto_front(self) -> list[Individual]:
        """The Pareto front of the whole run, all islands; on every rank after ``propulate()``.

        In a run with several ``objectives``: copies of the distinct completed individuals that no other
        completed individual of the run dominates (:func:`propulate.objectives.pareto_front`), in the order
        of the first objective; each holds its :attr:`~Individual.losses` (maximized objectives negated;
        :meth:`propulate.objectives.Objectives.values` turns them back). Gathered over the islands' fronts,
        without communication after ``propulate()`` (see :mod:`propulate.run_results`).

        Raises
        ------
        propulate.run_results.NoResultError
            (a ``RuntimeError``) before ``propulate()`` returned, in a run with one loss (use :attr:`best`),
            or if no evaluation of the run completed.
        """
        return self._run_results().front

    def _kept_best(self, n: int) -> list[Individual]:
        """Return the individuals whose evaluation folders outlive the run: the best n, or n of the front."""
        results = self._run_results()
        if not results.multi_objective:
            return results.top(n)
        front = results.front if results.counts[Status.COMPLETED] else []
        return front[:: max(1, math.ceil(len(front) / n))][:n] if front else []

    def _gather_results(self, roots: MPI.Comm, check: Callable[[], None], island_head: bool) -> RunResults:
        """Gather the run's results over the worker ``roots`` (collective); ``check`` raises if a rank failed.

        Each island's head contributes its island's best and counts (see :func:`gather_results`).
        """
        return gather_results(
            (lambda: self._island_members(KEPT)) if island_head else None,
            roots,
            lambda request: wait(request, check),
            self.objectives is not None,
            self._population.evaluation_counts() if island_head else None,
        )

    def _run_results(self) -> RunResults:
        if self._results is None:
            raise NoResultError("the results of the run are known once propulate() has returned")
        return self._results

    def summarize(self, top_n: int = 1, debug: int = 1) -> list[list[Individual]]:
        """Log and return the best ``top_n`` distinct individuals of each worker; collective over all ranks.

        Parameters
        ----------
        top_n : int >= 0
            How many individuals per worker; more than exist returns what exists.
        debug : int
            Logs the results of each island (first rank only) when >= 1.

        Returns
        -------
        list of list of Individual
            One list per worker (in ``propulate_comm`` order), best first; the same on every rank. In a run
            with several objectives, each worker's list is its island's Pareto front instead (all of it,
            whatever ``top_n``), in the order of the first objective. The workers of an island hold the same
            population once the run is over, so only each island's first worker sends its list: the lists of
            an island's workers are equal, and share their individuals.

        Raises
        ------
        ValueError
            If ``top_n`` is not a non-negative int (on every rank).
        """
        check_int("top_n", top_n, 0)
        gathered: list[list[Individual]] | None = None
        if self.is_worker_root:
            mine: list[Individual] | None = None
            if self.island_rank == 0:  # the island's other workers' lists are the same (see Returns)
                if self.objectives is None:
                    mine = distinct_best(self._island_members(top_n), top_n)
                else:
                    mine = sorted(pareto_front(self.population), key=loss_vector)
            told = self._world.allgather((self.island_idx, mine))
            lists = {island: best for island, best in told if best is not None}
            gathered = [list(lists[island]) for island, _ in told]
        gathered = self._worker.bcast(gathered, root=0)
        assert gathered is not None
        if debug >= 1 and self.is_worker_root and self._world.rank == 0:
            for island, first in enumerate(self.island_displs):
                lines = "\n".join(f"  {i + 1}. {ind}" for i, ind in enumerate(gathered[first]))
                if self.objectives is not None:
                    count = len(gathered[first])
                    log.info(f"Pareto front of island {island}, {count} individual(s):\n{lines}")
                else:
                    log.info(f"Top {len(gathered[first])} result(s) on island {island}:\n{lines}")
        return gathered


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
