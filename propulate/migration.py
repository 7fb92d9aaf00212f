"""Migration and pollination between islands: who leaves, who is replaced, and the topology.

With **migration** an emigrant leaves its island: it is deactivated there and becomes active on the target
island. With **pollination** a copy is sent and the original stays; on arrival each immigrant replaces (the
replaced individual is deactivated) one individual chosen by the immigration propagator.

To keep the islands' populations consistent without any waiting, responsibilities are split: an individual
may only be sent away by the worker named in its ``current`` attribute, and all immigrants of an island
arrive at its first worker, which alone decides on replacements and tells the island.

The migration topology says how many individuals each island sends to each other one per migration event:
an array, or a name of :data:`TOPOLOGIES` (:class:`Topology`). The default, ``"hypercube"``, sends to
``ceil(log2 I)`` of ``I`` islands; Propulate 1.2.2's default, ``"complete"``, to all ``I - 1`` others. A
topology given by name costs each island only its own targets, never the ``I x I`` matrix.
"""

from __future__ import annotations

import inspect
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import LayoutError
from .individual import Individual
from .population import Population
from .propagators.base import Propagator, SelectMax, SelectMin

__all__ = [
    "DEFAULT_TOPOLOGY",
    "TOPOLOGIES",
    "Emigration",
    "IsolatedIslands",
    "MigrationPolicy",
    "Topology",
    "check_topology",
    "complete_topology",
    "hypercube_topology",
    "messages_per_round",
    "ring_topology",
    "same_topology_setting",
    "topology_setting_words",
    "warn_owed_replacements",
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


def _complete_targets(island: int, num_islands: int) -> list[int]:
    return [target for target in range(num_islands) if target != island]


def _ring_targets(island: int, num_islands: int) -> list[int]:
    return [(island + 1) % num_islands] if num_islands > 1 else []


def _hypercube_targets(island: int, num_islands: int) -> list[int]:
    # ceil(log2 I) jumps 1, 2, 4, ...: every jump is below I, so the targets are distinct and not the island.
    jumps = (1 << j for j in range((num_islands - 1).bit_length()))
    return sorted((island + jump) % num_islands for jump in jumps)


#: Island ``i``'s targets in the topology of each name, ascending, as a function of ``(i, I)``: the
#: non-zero columns of row ``i`` of :data:`TOPOLOGIES`' array, without building it.
_TARGETS: dict[str, Callable[[int, int], list[int]]] = {
    "complete": _complete_targets,
    "ring": _ring_targets,
    "hypercube": _hypercube_targets,
}


def _check_name(name: str, num_islands: int) -> None:
    if name not in TOPOLOGIES:
        names = ", ".join(repr(known) for known in TOPOLOGIES)
        raise LayoutError(
            f"migration_topology: unknown topology {name!r}; expected one of {names}, an integer "
            f"array of shape ({num_islands}, {num_islands}), or None (the default, {DEFAULT_TOPOLOGY!r})"
        )


def check_topology(topology: Any, num_islands: int) -> np.ndarray:
    """Return ``topology`` as an int array of shape ``(num_islands, num_islands)``, checked.

    Entry ``(i, j)`` is how many individuals island ``i`` sends to island ``j`` per migration event; each
    non-zero entry is one message. Diagonal entries are ignored (with a warning). A name is built into its
    array, ``num_islands ** 2`` integers (800 MB at 10,000 islands): the library itself keeps names as a
    :class:`Topology`, which computes each island's targets when asked.

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
        _check_name(topology, num_islands)
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


class Topology:
    """A checked migration topology of ``num_islands`` islands, read one island's targets at a time.

    Entry ``(i, j)`` of the topology is how many individuals island ``i`` sends to island ``j`` per migration
    event. A topology given by name keeps only the name and computes island ``i``'s targets when asked
    (:meth:`targets`: ``ceil(log2 I)`` of them for the hypercube, one for the ring, ``I - 1`` for the
    complete topology), so that each rank pays for its own island's targets, never for the ``I x I`` matrix
    (800 MB of 64-bit integers at 10,000 islands). An array given by the user is kept as
    :func:`check_topology` checked it. Build one with :meth:`of`.

    Parameters
    ----------
    num_islands : int >= 1
        ``I``, the number of islands.
    name : str, optional
        A name of :data:`TOPOLOGIES`; for a topology given by name.
    array : numpy.ndarray, optional
        A checked topology, shape ``(num_islands, num_islands)``; for a topology given as an array.

    Attributes
    ----------
    name : str or None
        The name, ``None`` for an array.
    array : numpy.ndarray or None
        The checked array, ``None`` for a name.
    """

    def __init__(self, num_islands: int, name: str | None = None, array: np.ndarray | None = None) -> None:
        assert (name is None) != (array is None), "a topology is a name or an array"
        self.num_islands = int(num_islands)
        self.name = name
        self.array = array

    @classmethod
    def of(cls, topology: Any, num_islands: int) -> Topology:
        """Check ``topology`` for ``num_islands`` islands.

        Parameters
        ----------
        topology : {"hypercube", "complete", "ring"}, array_like of int, Topology, or None
            As ``migration_topology`` (:func:`check_topology`); ``None`` is :data:`DEFAULT_TOPOLOGY`. A
            :class:`Topology` is returned as it is.
        num_islands : int >= 1
            The number of islands.

        Raises
        ------
        LayoutError
            (a ``ValueError``) as :func:`check_topology`, or for a :class:`Topology` of another number of
            islands.
        """
        if isinstance(topology, Topology):
            if topology.num_islands != num_islands:
                raise LayoutError(
                    f"migration_topology: a topology of {topology.num_islands} island(s) given for "
                    f"{num_islands} island(s)"
                )
            return topology
        if topology is None:
            topology = DEFAULT_TOPOLOGY
        if isinstance(topology, str):
            _check_name(topology, num_islands)
            return cls(num_islands, name=topology)
        return cls(num_islands, array=check_topology(topology, num_islands))

    def targets(self, island: int) -> list[tuple[int, int]]:
        """Return ``(target island, number of individuals)`` for every island ``island`` sends to, ascending.

        O(targets) time and memory for a name, O(I) for an array.
        """
        if self.name is not None:
            return [(target, 1) for target in _TARGETS[self.name](island, self.num_islands)]
        assert self.array is not None
        row = self.array[island]
        return [(int(j), int(row[j])) for j in np.flatnonzero(row) if j != island]

    def target_counts(self) -> np.ndarray:
        """Return how many islands each island sends to, shape ``(num_islands,)``."""
        if self.name is not None:
            # Every named topology is circulant: each island has as many targets as island 0.
            return np.full(self.num_islands, len(_TARGETS[self.name](0, self.num_islands)))
        assert self.array is not None
        return np.count_nonzero(self.array, axis=1)

    def any(self) -> bool:
        """Whether any island sends any individual (``False``: isolated islands)."""
        if self.name is not None:
            return self.num_islands > 1
        assert self.array is not None
        return bool(self.array.any())

    def to_json(self) -> str | list[list[int]]:
        """Return the topology as the checkpoint's settings store it: the name, or the array as lists."""
        if self.name is not None:
            return self.name
        assert self.array is not None
        return self.array.tolist()

    def __repr__(self) -> str:
        given = repr(self.name) if self.name is not None else "array"
        return f"Topology({given}, num_islands={self.num_islands})"


def messages_per_round(topology: Topology | np.ndarray, probability: float) -> float:
    """Return the expected number of migration messages the island model sends per round of generations.

    Each island starts a migration event with probability ``probability`` per round of its workers'
    generations and sends one message to each island its row names, so ``probability`` times the number of
    non-zero entries off the diagonal: ``I p ceil(log2 I)`` for the hypercube, ``I p (I - 1)`` for the
    complete topology.

    Parameters
    ----------
    topology : Topology or numpy.ndarray
        Checked topology (:class:`Topology`, or an array of shape ``(num_islands, num_islands)`` from
        :func:`check_topology`).
    probability : float in [0, 1]
        ``migration_probability``: per island and round.
    """
    if isinstance(topology, Topology):
        return probability * float(topology.target_counts().sum())
    return probability * float(np.count_nonzero(topology) - np.count_nonzero(np.diag(topology)))


def same_topology_setting(old: Any, new: Any) -> bool:
    """Whether two ``migration_topology`` settings of checkpoints (:meth:`Topology.to_json`) are the same.

    A name and an array are the same when the array is the one the name builds for as many islands, as in
    checkpoints written before topologies had names, which stored every topology as an array (Propulate
    1.2.2's default is ``"complete"``). The array is compared one row at a time: O(I) memory besides it.
    """
    if isinstance(old, str) == isinstance(new, str):
        return bool(old == new)
    name, rows = (old, new) if isinstance(old, str) else (new, old)
    if name not in _TARGETS or not isinstance(rows, list) or not rows:
        return False
    named = Topology(len(rows), name=name)
    for island, row in enumerate(rows):
        try:
            given = np.asarray(row)
        except (TypeError, ValueError):
            return False
        if given.shape != (len(rows),) or not np.issubdtype(given.dtype, np.number):
            return False
        # A stored array was checked: its diagonal is zero.
        if [(int(j), int(given[j])) for j in np.flatnonzero(given)] != named.targets(island):
            return False
    return True


def topology_setting_words(setting: Any) -> str:
    """Return a ``migration_topology`` setting of a checkpoint as the log shows it: short for large arrays.

    A name as ``'hypercube'``; an array of up to 8 islands as its rows; a larger one as ``an array of shape
    (I, I)``.
    """
    if isinstance(setting, list) and len(setting) > 8:
        return f"an array of shape ({len(setting)}, {len(setting)})"
    return repr(setting)


def _make_selector(propagator: type[Propagator] | Propagator, count: int, rng: random.Random) -> Propagator:
    """Instantiate a selection propagator class for ``count`` individuals (or use an instance as is)."""
    if isinstance(propagator, Propagator):
        return propagator
    if "rng" in inspect.signature(propagator).parameters:
        return propagator(count, rng=rng)  # type: ignore[call-arg]
    return propagator(count)  # type: ignore[call-arg]


def _where(
    owner: int | None, eligible: Callable[[Individual], bool] | None
) -> Callable[[Individual], bool] | None:
    """Return the filter of candidate emigrants: of ``owner`` (unless ``None``) and ``eligible`` ones."""
    if eligible is None:
        return None if owner is None else (lambda ind: ind.current == owner)
    if owner is None:
        return eligible
    return lambda ind: ind.current == owner and eligible(ind)


def _is_selection(propagator: type[Propagator] | Propagator, kind: type[Propagator]) -> bool:
    """Whether ``propagator`` is the class ``kind`` itself (instances and subclasses may select otherwise)."""
    return propagator is kind


@dataclass(frozen=True)
class Emigration:
    """What one migration event sends to one island.

    Attributes
    ----------
    target : int
        The island sent to.
    travellers : list of Individual
        Copies of the emigrants, each with a uid of its own and the step recorded in its history.
    departed : list of int
        Uids of the emigrants deactivated on this island (migration; none for pollination).
    emigrants : list of Individual
        The individuals of this island that ``travellers`` copy, in the same order.
    """

    target: int
    travellers: list[Individual]
    departed: list[int]
    emigrants: list[Individual] = field(default_factory=list)


class IsolatedIslands:
    """The migration policy of islands that never exchange individuals: nothing leaves, nothing arrives.

    Attributes
    ----------
    owed_replacements, next_owner : int
        Always 0 (see :class:`MigrationPolicy`).
    """

    pollination = False

    def __init__(self) -> None:
        self.owed_replacements = 0
        self.next_owner = 0

    def wants_to_emigrate(self) -> bool:
        """Never."""
        return False

    def targets(self) -> list[tuple[int, int]]:
        """None."""
        return []

    def emigrate(
        self, population: Population, owner: int, mint_uid: Callable[[], int], loud: bool = False
    ) -> list[Emigration]:
        """Nothing."""
        return []

    def immigrate(
        self, travellers: list[Individual], population: Population, origin: int = -1, loud: bool = False
    ) -> list[int]:
        """Nothing is replaced."""
        return []

    def replacements(self, population: Population) -> list[int]:
        """Nothing is owed."""
        return []


class MigrationPolicy:
    """Decides when to emigrate, whom to send where, and whom immigrants replace.

    Parameters
    ----------
    island_index : int
        This worker's island.
    topology : Topology or numpy.ndarray
        Checked topology (:class:`Topology`, or an array of shape ``(num_islands, num_islands)`` from
        :func:`check_topology`); the policy keeps its island's targets only.
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
    island_size : int >= 1
        Workers of this island: immigrants are dealt to them in turn (each is responsible for sending on
        those it was dealt).
    eligible : callable, optional
        Whether an active individual may emigrate (:meth:`propulate.propagators.Propagator.emigrates`);
        default: every one.

    Attributes
    ----------
    owed_replacements : int
        Pollination: immigrants that arrived while the island had too few active individuals to replace;
        the island pays its debt as soon as it has them (:meth:`replacements`).
    next_owner : int
        The island rank responsible for the next immigrant.
    """

    def __init__(
        self,
        island_index: int,
        topology: Topology | np.ndarray,
        probability: float,
        emigration_propagator: type[Propagator] | Propagator,
        immigration_propagator: type[Propagator] | Propagator,
        pollination: bool,
        rng: random.Random,
        island_size: int = 1,
        eligible: Callable[[Individual], bool] | None = None,
    ) -> None:
        self.island_index = island_index
        self.eligible = eligible
        self.island_size = int(island_size)
        self.owed_replacements = 0
        self.next_owner = 0
        if not isinstance(topology, Topology):
            topology = Topology.of(topology, len(topology))
        self.topology = topology
        self._targets = topology.targets(island_index)
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

    def emigrate(
        self, population: Population, owner: int, mint_uid: Callable[[], int], loud: bool = False
    ) -> list[Emigration]:
        """Return what a migration event sends to each target island; migration deactivates the emigrants.

        A migrant leaves only from the worker responsible for it (``owner``, this worker's island rank); a
        pollinator may be sent by any worker. Each traveller is a copy with a uid of ``mint_uid()``. With
        ``loud``, each message is logged.
        """
        sent = []
        for target, count in self.targets():
            emigrants = self.choose_emigrants(population, count, None if self.pollination else owner)
            if not emigrants:
                continue
            travellers, departed = [], []
            for emigrant in emigrants:
                traveller = emigrant.copy()
                traveller.uid = mint_uid()
                traveller.active = True
                traveller.migration_steps += 1
                traveller.migration_history += f"-{target}"
                travellers.append(traveller)
                if not self.pollination:
                    population.deactivate(emigrant.uid)  # not chosen again for the next target
                    departed.append(emigrant.uid)
            sent.append(Emigration(target, travellers, departed, emigrants))
            if loud:
                kind = "pollinators" if self.pollination else "emigrants"
                where = f"Island {self.island_index}, worker {owner}"
                log.info(f"{where}: sent {len(travellers)} {kind} to island {target}.")
        return sent

    def immigrate(
        self, travellers: list[Individual], population: Population, origin: int = -1, loud: bool = False
    ) -> list[int]:
        """Take in immigrants: deal them to the island's workers; return the uids they replace (pollination).

        An island with too few active individuals pays the rest of its debt as soon as it has them. With
        ``loud``, the arrival from island ``origin`` is logged.
        """
        replaced: list[int] = []
        if self.pollination:
            self.owed_replacements += len(travellers)
            replaced = self.replacements(population)
        for traveller in travellers:
            traveller.current = self.next_owner
            self.next_owner = (self.next_owner + 1) % self.island_size
        if loud:
            log.info(
                f"Island {self.island_index}: {len(travellers)} immigrant(s) from island {origin}, "
                f"{len(replaced)} individual(s) replaced."
            )
        return replaced

    def replacements(self, population: Population) -> list[int]:
        """Pollination: return the uids of the individuals owed immigrants replace now, and pay the debt."""
        victims = self.choose_replaced(population, self.owed_replacements)
        self.owed_replacements -= len(victims)
        return [victim.uid for victim in victims]

    def choose_emigrants(self, population: Population, count: int, owner: int | None) -> list[Individual]:
        """Choose up to ``count`` emigrants among the active individuals of ``population``.

        With migration only the individuals ``owner`` is responsible for (``current == owner``) may leave;
        ``None`` (pollination) allows every one. The default selection (the best, :class:`SelectMin`) reads
        them off the population's heap in O((count + skipped) log n), ``skipped`` being the better ones
        another worker is responsible for (about ``count`` times the island size at most, on average);
        other selections see every candidate (O(n)).
        Individuals that :attr:`eligible` refuses are skipped like those of another worker.
        """
        where = _where(owner, self.eligible)
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


def warn_owed_replacements(policy: IsolatedIslands | MigrationPolicy, island: int) -> None:
    """At the end of a run: warn if pollinators of ``island`` found no active individual to replace.

    They were added without replacement (:attr:`MigrationPolicy.owed_replacements`).
    """
    if policy.owed_replacements:
        log.warning(
            f"Island {island}: {policy.owed_replacements} pollinator(s) found no active individual to "
            "replace and were added without replacement."
        )
