"""Migration and pollination between islands: who leaves, who is replaced, and the topology.

With **migration** an emigrant leaves its island: it is deactivated there and becomes active on the target
island. With **pollination** a copy is sent and the original stays; on arrival each immigrant replaces (the
replaced individual is deactivated) one individual chosen by the immigration propagator.

To keep the islands' populations consistent without any waiting, responsibilities are split: an individual
may only be sent away by the worker named in its ``current`` attribute, and all immigrants of an island
arrive at its first worker, which alone decides on replacements and tells the island.
"""

from __future__ import annotations

import inspect
import logging
import random
from typing import Any

import numpy as np

from .errors import LayoutError
from .individual import Individual
from .population import Population
from .propagators.base import Propagator, SelectMax, SelectMin

__all__ = ["IsolatedIslands", "MigrationPolicy", "check_topology"]

log = logging.getLogger("propulate")


def check_topology(topology: Any, num_islands: int) -> np.ndarray:
    """Return ``topology`` as an int array of shape ``(num_islands, num_islands)``, checked.

    Entry ``(i, j)`` is how many individuals island ``i`` sends to island ``j`` per migration event. The
    default (``None``) sends one individual to every other island. Diagonal entries are ignored.

    Raises
    ------
    LayoutError
        (a ``ValueError``) for a wrong shape, non-integer or negative entries.
    """
    if topology is None:
        topology = np.ones((num_islands, num_islands), dtype=int)
        np.fill_diagonal(topology, 0)
        return topology
    array = np.asarray(topology)
    if array.shape != (num_islands, num_islands):
        raise LayoutError(
            f"migration_topology: expected shape ({num_islands}, {num_islands}) for {num_islands} island(s), "
            f"got {array.shape}"
        )
    if array.size and not (np.issubdtype(array.dtype, np.integer) or np.all(np.mod(array, 1) == 0)):
        raise LayoutError(f"migration_topology: entries must be whole numbers, got {array.tolist()}")
    if (array < 0).any():
        raise LayoutError(f"migration_topology: entries must be >= 0, got {array.tolist()}")
    array = array.astype(int)
    if np.any(np.diag(array)):
        log.warning("migration_topology: an island does not send migrants to itself; diagonal ignored.")
        array = array.copy()
        np.fill_diagonal(array, 0)
    return array


def _make_selector(propagator: type[Propagator] | Propagator, count: int, rng: random.Random) -> Propagator:
    """Instantiate a selection propagator class for ``count`` individuals (or use an instance as is)."""
    if isinstance(propagator, Propagator):
        return propagator
    if "rng" in inspect.signature(propagator).parameters:
        return propagator(count, rng=rng)  # type: ignore[call-arg]
    return propagator(count)  # type: ignore[call-arg]


def _is_selection(propagator: type[Propagator] | Propagator, kind: type[Propagator]) -> bool:
    """Whether ``propagator`` is the class ``kind`` itself (instances and subclasses may select otherwise)."""
    return propagator is kind


class IsolatedIslands:
    """The migration policy of islands that never exchange individuals."""

    pollination = False

    def wants_to_emigrate(self) -> bool:
        """Never."""
        return False

    def targets(self) -> list[tuple[int, int]]:
        """None."""
        return []


class MigrationPolicy:
    """Decides when to emigrate, whom to send where, and whom immigrants replace.

    Parameters
    ----------
    island_index : int
        This worker's island.
    topology : numpy.ndarray
        Checked topology, shape ``(num_islands, num_islands)`` (see :func:`check_topology`).
    probability : float in [0, 1]
        Probability that this worker starts a migration event after one of its generations.
    emigration_propagator, immigration_propagator : Propagator class or instance
        Select the emigrants (default best, :class:`SelectMin`) and, for pollination, the individuals that
        immigrants replace (default worst, :class:`SelectMax`). A class is instantiated with the number of
        individuals to select.
    pollination : bool
        Send copies (pollination) instead of moving individuals (migration).
    rng : random.Random
        The worker's generator.
    """

    def __init__(
        self,
        island_index: int,
        topology: np.ndarray,
        probability: float,
        emigration_propagator: type[Propagator] | Propagator,
        immigration_propagator: type[Propagator] | Propagator,
        pollination: bool,
        rng: random.Random,
    ) -> None:
        self.island_index = island_index
        self.topology = topology
        self.probability = probability
        self.emigration_propagator = emigration_propagator
        self.immigration_propagator = immigration_propagator
        self.pollination = bool(pollination)
        self.rng = rng

    def wants_to_emigrate(self) -> bool:
        """Draw whether a migration event starts now."""
        return self.probability > 0 and self.rng.random() < self.probability

    def targets(self) -> list[tuple[int, int]]:
        """Return ``(target island, number of emigrants)`` for every island this one sends to."""
        row = self.topology[self.island_index]
        return [(int(j), int(n)) for j, n in enumerate(row) if n > 0 and j != self.island_index]

    def choose_emigrants(self, population: Population, count: int, owner: int | None) -> list[Individual]:
        """Choose up to ``count`` emigrants among the active individuals of ``population``.

        With migration only the individuals ``owner`` is responsible for (``current == owner``) may leave;
        ``None`` (pollination) allows every one. The default selection (the best, :class:`SelectMin`) reads
        them off the population's heap in O((count + skipped) log n), ``skipped`` being the better ones
        another worker is responsible for (about ``count`` times the island size at most, on average);
        other selections see every candidate (O(n)).
        """
        where = None if owner is None else (lambda ind: ind.current == owner)
        if _is_selection(self.emigration_propagator, SelectMin):
            return population.best(count, where)
        candidates = population.active()
        if where is not None:
            candidates = [ind for ind in candidates if where(ind)]
        return self.select_emigrants(candidates, count)

    def choose_replaced(self, population: Population, count: int) -> list[Individual]:
        """Pollination: choose up to ``count`` active individuals of ``population`` that immigrants replace.

        The default selection (the worst, :class:`SelectMax`) costs O(count log n); others O(n).
        """
        if _is_selection(self.immigration_propagator, SelectMax):
            return population.worst(count)
        return self.select_replaced(population.active(), count)

    def select_emigrants(self, candidates: list[Individual], count: int) -> list[Individual]:
        """Choose up to ``count`` emigrants among ``candidates`` (fewer if fewer exist)."""
        count = min(count, len(candidates))
        if count == 0:
            return []
        return _make_selector(self.emigration_propagator, count, self.rng)(candidates)

    def select_replaced(self, candidates: list[Individual], count: int) -> list[Individual]:
        """Pollination: choose up to ``count`` individuals that immigrants replace."""
        count = min(count, len(candidates))
        if count == 0:
            return []
        return _make_selector(self.immigration_propagator, count, self.rng)(candidates)
