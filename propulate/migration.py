"""Migration and pollination between islands: who leaves, who is replaced, and the topology.

With **migration** an emigrant leaves its island: it is deactivated there and becomes active on the target
island. With **pollination** a copy is sent and the original stays; on arrival each immigrant replaces (the
replaced individual is deactivated) one individual chosen by the immigration propagator.

To keep the islands' populations consistent without any waiting, responsibilities are split: an individual
may only be sent away by the worker named in its ``current`` attribute, and all immigrants of an island
arrive at its first worker, which alone decides on replacements and tells the island.

The migration topology says how many individuals each island sends to each other one per migration event:
an array, or a name of :data:`TOPOLOGIES` (:func:`check_topology`). The default, ``"hypercube"``, sends to
``ceil(log2 I)`` of ``I`` islands; Propulate 1.2.2's default, ``"complete"``, to all ``I - 1`` others.
"""

from __future__ import annotations

import inspect
import logging
import random
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import LayoutError
from .individual import Individual
from .population import Population
from .propagators.base import Propagator, SelectMax, SelectMin

__all__ = [
    "DEFAULT_TOPOLOGY",
    "TOPOLOGIES",
    "IsolatedIslands",
    "MigrationPolicy",
    "check_topology",
    "complete_topology",
    "hypercube_topology",
    "messages_per_round",
    "ring_topology",
]

log = logging.getLogger("propulate")


def complete_topology(num_islands: int) -> np.ndarray:
    """One individual from every island to every other island: Propulate 1.2.2's default.

    Each island has ``I - 1`` targets; the model exchanges ``I (I - 1) p`` messages per round of generations
    at migration probability ``p`` (899,100 at ``I = 1000``, ``p = 0.9``).

    Parameters
    ----------
    num_islands : int >= 0
        ``I``, the number of islands.

    Returns
    -------
    numpy.ndarray
        Shape ``(num_islands, num_islands)``: ones off the diagonal, zeros on it.
    """
    topology = np.ones((num_islands, num_islands), dtype=int)
    np.fill_diagonal(topology, 0)
    return topology


def ring_topology(num_islands: int) -> np.ndarray:
    """One individual from island ``i`` to island ``(i + 1) mod I``.

    Each island has one target (none with one island); ``I p`` messages per round of generations, but an
    individual needs up to ``I - 1`` migration steps to reach every island.

    Parameters
    ----------
    num_islands : int >= 0
        ``I``, the number of islands.

    Returns
    -------
    numpy.ndarray
        Shape ``(num_islands, num_islands)``.
    """
    topology = np.zeros((num_islands, num_islands), dtype=int)
    if num_islands > 1:
        islands = np.arange(num_islands)
        topology[islands, (islands + 1) % num_islands] = 1
    return topology


def hypercube_topology(num_islands: int) -> np.ndarray:
    """One individual from island ``i`` to each island ``(i + 2**j) mod I``, ``j = 0 .. ceil(log2 I) - 1``.

    The default topology: the partners of the dissemination barrier (Hensgen, Finkel & Manber, "Two
    algorithms for barrier synchronization", Int. J. Parallel Programming 17(1), 1988), a circulant graph
    with power-of-two jumps. As in the hypercube, whose name it takes, each island has ``ceil(log2 I)``
    targets (distinct and never itself, as every ``2**j < I``), and an individual reaches any island in at
    most ``ceil(log2 I)`` migration steps, one jump per set bit of ``(target - i) mod I`` (the diameter is
    ``log2 I`` when ``I`` is a power of two, and may be less otherwise: 9 at ``I = 1000``). Unlike the
    hypercube's links (``i XOR 2**j``) these are one-way and exist for any number of islands. Up to 3
    islands it is :func:`complete_topology`.

    Per round of generations at migration probability ``p`` the model sends ``I p ceil(log2 I)`` messages
    instead of the complete topology's ``I p (I - 1)``: at ``p = 0.9``, 21.6 instead of 50.4 for 8 islands,
    57.6 instead of 216 for 16, 806.4 instead of 14,630.4 for 128, 9,000 instead of 899,100 for 1,000.

    Parameters
    ----------
    num_islands : int >= 0
        ``I``, the number of islands.

    Returns
    -------
    numpy.ndarray
        Shape ``(num_islands, num_islands)``, ``ceil(log2 I)`` ones in every row.
    """
    topology = np.zeros((num_islands, num_islands), dtype=int)
    # ceil(log2 I) jumps 1, 2, 4, ...: every jump is below I.
    jumps = 1 << np.arange(max(num_islands - 1, 0).bit_length())
    islands = np.arange(num_islands)[:, np.newaxis]
    topology[islands, (islands + jumps) % max(num_islands, 1)] = 1
    return topology


#: The topologies ``migration_topology`` accepts by name, each a function of the number of islands.
TOPOLOGIES: dict[str, Callable[[int], np.ndarray]] = {
    "complete": complete_topology,
    "ring": ring_topology,
    "hypercube": hypercube_topology,
}

#: The topology ``migration_topology=None`` stands for (Propulate 1.2.2's was ``"complete"``).
DEFAULT_TOPOLOGY = "hypercube"


def check_topology(topology: Any, num_islands: int) -> np.ndarray:
    """Return ``topology`` as an int array of shape ``(num_islands, num_islands)``, checked.

    Entry ``(i, j)`` is how many individuals island ``i`` sends to island ``j`` per migration event; each
    non-zero entry is one message. Diagonal entries are ignored (with a warning).

    Parameters
    ----------
    topology : {"hypercube", "complete", "ring"}, array_like of int, or None
        A name of :data:`TOPOLOGIES`, built for ``num_islands`` islands; an array of shape
        ``(num_islands, num_islands)`` of whole numbers >= 0; or ``None``, the default
        (:data:`DEFAULT_TOPOLOGY`, :func:`hypercube_topology`).
    num_islands : int >= 1
        The number of islands.

    Returns
    -------
    numpy.ndarray
        Shape ``(num_islands, num_islands)``, dtype int, zero diagonal.

    Raises
    ------
    LayoutError
        (a ``ValueError``) for an unknown name, a wrong shape, non-integer or negative entries.
    """
    if topology is None:
        topology = DEFAULT_TOPOLOGY
    if isinstance(topology, str):
        if topology not in TOPOLOGIES:
            names = ", ".join(repr(name) for name in TOPOLOGIES)
            raise LayoutError(
                f"migration_topology: unknown topology {topology!r}; expected one of {names}, an integer "
                f"array of shape ({num_islands}, {num_islands}), or None (the default, {DEFAULT_TOPOLOGY!r})"
            )
        return TOPOLOGIES[topology](num_islands)
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


def messages_per_round(topology: np.ndarray, probability: float) -> float:
    """Return the expected number of migration messages the island model sends per round of generations.

    Each island starts a migration event with probability ``probability`` per round of its workers'
    generations and sends one message to each island its row names, so ``probability`` times the number of
    non-zero entries off the diagonal: ``I p ceil(log2 I)`` for the hypercube, ``I p (I - 1)`` for the
    complete topology.

    Parameters
    ----------
    topology : numpy.ndarray
        Checked topology, shape ``(num_islands, num_islands)`` (see :func:`check_topology`).
    probability : float in [0, 1]
        ``migration_probability``: per island and round.
    """
    return probability * float(np.count_nonzero(topology) - np.count_nonzero(np.diag(topology)))


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
        row = topology[island_index]
        self._targets = [(int(j), int(row[j])) for j in np.flatnonzero(row) if j != island_index]
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
        return list(self._targets)

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
