"""One worker's view of its island: the one place where an individual enters it.

Whatever enters a worker's view — its own evaluation, its island peers' evaluations, immigrants,
deactivations, a restored population — goes through :class:`IslandState`, which applies it everywhere it
counts at once: the population store, the propagator's :meth:`~propulate.propagators.Propagator.observe`, the
surrogate's :meth:`~propulate.surrogate.Surrogate.merge` (what other workers' surrogates learned), the
progress counts, the checkpoint record, and memory: where releasing is exact (*Memory* below), the individuals
breeding no longer needs are released once the worker holds its memory limit. No MPI here: the loop hands over
what arrived and tells its island what was stored.

Memory. A worker holds what breeding needs, not the run's history, where that is exact: on an island that
exchanges nothing with others (no migration, no pollination), with one loss and no surrogate, a propagator
that declares a finite :attr:`~propulate.propagators.Propagator.breeding_pool` ``P`` breeds from the best
``P`` active individuals, and none of the others can ever be among them again. Once the worker holds
:func:`propulate.population.memory_limit` individuals (4,096 unless ``PROPULATE_MEMORY_LIMIT`` says
otherwise; at least twice what it keeps), it keeps the best ``2 max(P, 100, keep_best_folders)`` in memory
and releases the rest (:meth:`propulate.population.Population.release`); they stay in the checkpoint, and
:attr:`propulate.Propulator.population` reads them back from it. The no-repeat rule keeps a key of each (a
64-bit hash: 8 to 16 bytes per evaluation past 65,536, :class:`propulate.population.KeySet`). On resume a
worker takes in its island's whole population from the checkpoint and releases it at once. Elsewhere
(migration, pollination, a propagator that takes the whole population, several objectives, a surrogate)
every individual stays in memory, as in Propulate 1.2.2 (:func:`retention`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from .checkpoint.format import Record
from .individual import Individual
from .population import Population, memory_limit
from .surrogate.base import NullSurrogate, Surrogate

__all__ = ["IslandState", "Recorder", "retention"]


class Recorder(Protocol):
    """What the state records in the checkpoint (:class:`propulate.checkpoint.worker.WorkerSession`)."""

    def record(self, kind: Record, ind: Individual, home: int | None = None) -> None:
        """Record ``ind``, of ``kind``."""

    def deactivated(self, uid: int) -> None:
        """Record the deactivation of ``uid`` on this worker's island."""


class _Progress(Protocol):
    def count(self, individuals: Iterable[Individual]) -> None: ...


class _NoRecord:
    """The recorder of a worker that writes no checkpoint (the other ranks of a multi-rank worker)."""

    def record(self, kind: Record, ind: Individual, home: int | None = None) -> None:
        return None

    def deactivated(self, uid: int) -> None:
        return None


class _NoProgress:
    def count(self, individuals: Iterable[Individual]) -> None:
        return None


def retention(pool: int | None, exact: bool, keep_best: int, kept: int) -> int | None:
    """How many individuals stay in memory when the rest is released; ``None`` where all must stay.

    Releasing is exact only where nothing deactivates an individual and nothing reads more than the best
    few (``exact``: one island that exchanges nothing, one loss, no surrogate) and the propagator breeds
    from a finite pool of the best ``pool``: then the best ``2 max(pool, kept, keep_best)`` stay, ``kept``
    being how many best individuals the run's results hold.
    """
    if pool is None or not exact:
        return None
    return 2 * max(pool, kept, keep_best)


class IslandState:
    """What one worker knows of its island, and the one way in.

    Parameters
    ----------
    observe : callable, optional
        Shown every individual that enters the population (a propagator that learns from them,
        :attr:`Propagator.observes`); ``None`` if nobody looks.
    surrogate : Surrogate
        Takes in what other workers' surrogates learned (:class:`~propulate.surrogate.base.NullSurrogate`
        where there is none: nothing is read for it then).
    recorder : Recorder, optional
        The checkpoint of this worker; none on the other ranks of a multi-rank worker.
    progress : object with ``count(individuals)``, optional
        Counts the island's evaluations for the progress line.

    Attributes
    ----------
    population : Population
        The island's individuals as this worker knows them.
    retained : int or None
        How many stay in memory once the rest is released (:func:`retention`); ``None``: all stay.
    """

    def __init__(
        self,
        observe: Callable[[Individual], None] | None = None,
        surrogate: Surrogate | None = None,
        recorder: Recorder | None = None,
        progress: _Progress | None = None,
    ) -> None:
        self.population = Population()
        self.retained: int | None = None
        self._observe = observe
        self._surrogate = surrogate if surrogate is not None else NullSurrogate()
        self._learns = not isinstance(self._surrogate, NullSurrogate)
        self._recorder: Recorder = recorder if recorder is not None else _NoRecord()
        self._progress: _Progress = progress if progress is not None else _NoProgress()
        self._memory_limit = memory_limit()

    def restore(self, individuals: Iterable[Individual], retained: int | None) -> None:
        """Start a session from the island's population as the checkpoint holds it.

        The surrogate learns the restored population first, then the propagator sees it (a saved state of
        the propagator replaces what it rebuilt from it, see :meth:`Propagator.observe`); a population past
        the memory limit is released at once.
        """
        self.population = Population()
        self.population.extend(individuals)
        self.retained = retained
        self._merge(self.population)
        self._show(self.population)
        self._release()

    def evaluated(self, ind: Individual, replaced: list[int]) -> None:
        """Store this worker's own evaluation, and deactivate the individuals ``replaced`` (pollination)."""
        self.population.add(ind)
        self._recorder.record(Record.EVALUATED, ind)
        self._release()
        self._show((ind,))
        self._progress.count((ind,))
        self.deactivate(replaced)

    def arrived(self, travellers: list[Individual], replaced: list[int]) -> None:
        """Store immigrants from another island, and deactivate those they replace (pollination)."""
        for ind in travellers:
            self.population.add(ind)
            self._recorder.record(Record.ARRIVED, ind)
        self._release()
        self._show(travellers)
        self._merge(travellers)
        self.deactivate(replaced)

    def departed(self, travellers: list[Individual], target: int) -> None:
        """Record emigrants (copies with their own uid) sent to island ``target``."""
        for traveller in travellers:
            self._recorder.record(Record.DEPARTED, traveller, home=target)

    def deactivate(self, uids: list[int]) -> None:
        """Deactivate this worker's decisions: emigrants that left, individuals pollinators replaced."""
        for uid in uids:
            self.population.deactivate(uid)
            self._recorder.deactivated(uid)

    def told(self, runs: list[list[Individual]], deactivated: list[int]) -> None:
        """Store what an island peer told: its evaluations and immigrants, and its deactivations."""
        population = self.population
        for added in runs:
            population.extend(added)
            self._show(added)
            self._merge(added)
            self._progress.count(added)
        for uid in deactivated:
            population.deactivate(uid)
        self._release()

    def merge(self, data: object) -> None:
        """Let the surrogate take in what another worker's surrogate learned (e.g. a rung result)."""
        self._surrogate.merge(data)

    def _show(self, individuals: Iterable[Individual]) -> None:
        if self._observe is not None:
            for ind in individuals:
                self._observe(ind)

    def _merge(self, individuals: Iterable[Individual]) -> None:
        if self._learns:  # nothing to merge into otherwise, and nothing to walk through
            for ind in individuals:
                if ind.surrogate_data is not None:
                    self._surrogate.merge(ind.surrogate_data)

    def _release(self) -> None:
        """Release the individuals breeding no longer needs once the worker holds its memory limit."""
        retained = self.retained
        if retained is not None and len(self.population) >= max(self._memory_limit, 2 * retained):
            self.population.release(retained)
