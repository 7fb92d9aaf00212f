"""The results of a whole run in one place: its best individual and its best distinct individuals.

After :meth:`Propulator.propulate` every rank holds them, whatever its island and whichever rank of its
worker it is (:attr:`Propulator.best`, :attr:`~Propulator.best_params`, :attr:`~Propulator.best_loss`,
:meth:`~Propulator.top`), so that user code reads them without a collective call of its own — on the
first rank only, if it likes.

They are gathered once at the end of ``propulate()`` by a reduction over the workers' roots whose operation
merges two lists of distinct best individuals (:func:`propulate.population.distinct_best`): each island's
first worker contributes the :data:`KEPT` best distinct individuals of its island, every other worker
nothing. A binomial-tree reduction moves O(:data:`KEPT` log P) individuals per rank for P workers, not a
list per island to every rank.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mpi4py import MPI

from .errors import PropulateError
from .individual import Individual
from .population import distinct_best

__all__ = ["KEPT", "NoResultError", "RunResults", "gather_results"]

#: How many distinct best individuals of the run every rank holds after ``propulate()``.
KEPT = 100


class NoResultError(PropulateError, RuntimeError):
    """No result to report: ``propulate()`` has not run, or no evaluation of the run completed."""


class RunResults:
    """The run's best distinct individuals, best first (at most :data:`KEPT`), the same on every rank.

    Parameters
    ----------
    top : sequence of Individual
        Completed individuals with pairwise different parameters or loss, best first.
    counted : int
        How many individuals the islands held when the results were gathered (every status).
    """

    def __init__(self, top: Sequence[Individual], counted: int) -> None:
        self._top = list(top)
        self.counted = counted

    @property
    def best(self) -> Individual:
        """The individual of lowest loss of the whole run (a copy).

        Raises
        ------
        NoResultError
            If no evaluation completed.
        """
        if not self._top:
            raise NoResultError(
                f"no evaluation of the run completed ({self.counted} individual(s) evaluated, none with a "
                "loss); see the log for the failures"
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
        """
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= KEPT:
            raise ValueError(
                f"n: expected an int in [1, {KEPT}], got {n!r}; for more, read the checkpoint with "
                "propulate.results.load_dataframe(checkpoint_path)"
            )
        return [ind.copy() for ind in self._top[:n]]


def gather_results(
    island_members: Sequence[Individual] | None, comm: MPI.Comm, wait: Callable[[MPI.Request], None]
) -> RunResults:
    """Merge the islands' best distinct individuals over ``comm``; collective over ``comm``.

    Parameters
    ----------
    island_members : sequence of Individual or None
        Everything the island holds, on one worker per island (its first); ``None`` on every other.
    comm : MPI.Comm
        The roots of all workers.
    wait : callable
        Waits for a request without blocking in MPI (checking for failures of other ranks meanwhile): the
        reduction starts once every worker has arrived, so that no rank spins in it while a slower one
        still evaluates.
    """
    wait(comm.Ibarrier())
    mine = ([], 0) if island_members is None else (distinct_best(island_members, KEPT), len(island_members))
    top, counted = comm.allreduce(mine, op=_MERGE)
    return RunResults(top, counted)


def _merge(a: tuple[list[Individual], int], b: tuple[list[Individual], int], _datatype: Any = None) -> Any:
    return distinct_best([*a[0], *b[0]], KEPT), a[1] + b[1]


# mpi4py calls a user operation on the objects themselves in a reduction of Python objects (its stubs only
# describe reductions of buffers).
_MERGE = MPI.Op.Create(_merge, commute=True)  # type: ignore[arg-type]
