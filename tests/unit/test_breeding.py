"""Breeding without repeats: the duplicate-freedom contract for every propagator, exhaustion, freshness.

The contract (issue 17): no evaluation repeats a configuration the island knows, whether evaluated or being
evaluated by a peer that announced it; a finite search space ends the search once every configuration is
known. It is checked by a serial model of an island: several workers, each with its own propagator,
population and :class:`Breeder`, evaluations that overlap in time (each worker announces what it starts,
results reach every worker when they end), driven by a seeded generator.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

import numpy as np
import pytest

from propulate import Individual
from propulate.breeding import DUE, MAX_ATTEMPTS, MAX_LAG, Breeder
from propulate.individual import Status
from propulate.mpi.news import Announcement
from propulate.population import Population
from propulate.propagators import Conditional, InitUniform, Propagator, SelectMin
from propulate.space import SearchSpace
from propulate.utils import get_default_propagator

from .test_propagators import PROPAGATORS, SPACES, cases


def loss_of(ind: Individual) -> float:
    """A deterministic loss with distinct values: the sum of the position's slots."""
    return float(np.sum(ind.position * np.arange(1, ind.position.size + 1)))


class Island:
    """A serial model of one island: ``workers`` loops whose evaluations overlap, in random order.

    Each worker has its own propagator, population and breeder, as under MPI. A worker breeds, announces
    what it evaluates to the others, and later (when the model picks it) ends the evaluation: the result
    enters every worker's population at once, and the worker breeds its next individual.
    """

    def __init__(self, factory: Any, limits: dict[str, Any], workers: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.workers = workers
        self.populations = [Population() for _ in range(workers)]
        self.propagators: list[Propagator] = []
        self.breeders = []
        for rank in range(workers):
            propagator = factory(limits, random.Random(seed * 1000 + rank))
            propagator.bind(rank, workers)
            self.propagators.append(propagator)
            breeder = Breeder(propagator, self.populations[rank], random.Random(seed * 1000 + 500 + rank))
            breeder.expect([r for r in range(workers) if r != rank], 0.0)
            self.breeders.append(breeder)
        self.running: dict[int, Individual] = {}
        self.generation = [0] * workers
        self.evaluated: list[Individual] = []
        self.exhausted = False
        self._uid = 0

    def start(self, rank: int) -> bool:
        """Breed and announce worker ``rank``'s next individual; False if the search space is exhausted."""
        ind = self.breeders[rank].breed()
        if ind is None:
            self.exhausted = True
            return False
        ind.generation = self.generation[rank]
        ind.rank = rank
        ind.island = 0
        ind.current = rank
        ind.uid = self._uid
        self._uid += 1
        self.generation[rank] += 1
        key = ind.space.key(ind.position)
        for peer, breeder in enumerate(self.breeders):
            if peer != rank:
                breeder.announce(rank, key, self.generation[rank], 0.0, 0.0)
        self.running[rank] = ind
        return True

    def finish(self, rank: int) -> None:
        """End worker ``rank``'s evaluation: every worker stores and observes the result."""
        ind = self.running.pop(rank)
        ind.loss = loss_of(ind)
        ind.status = Status.COMPLETED
        self.evaluated.append(ind)
        for population, propagator in zip(self.populations, self.propagators, strict=True):
            population.add(ind.copy())
            propagator.observe(ind)

    def run(self, evaluations: int) -> list[Individual]:
        for rank in range(self.workers):
            if not self.start(rank):
                break
        while self.running and len(self.evaluated) < evaluations:
            rank = self.rng.choice(sorted(self.running))
            self.finish(rank)
            if len(self.evaluated) + len(self.running) < evaluations:
                self.start(rank)
        return self.evaluated


def keys(individuals: list[Individual]) -> list[int]:
    return [ind.space.key(ind.position) for ind in individuals]


# ---------------------------------------------------------------------------------------------------------
# The contract: every propagator, every search space, several workers
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 4])
@pytest.mark.parametrize(("name", "space"), cases(PROPAGATORS))
def test_no_evaluation_repeats_a_known_configuration(name: str, space: str, workers: int) -> None:
    limits = SPACES[space]
    size = SearchSpace.of(limits).size

    def factory(limits: dict[str, Any], rng: random.Random) -> Propagator:
        # As in real use, operators that need parents breed once a few individuals exist.
        return Conditional(4, PROPAGATORS[name](limits, rng), InitUniform(limits, rng=rng))

    island = Island(factory, limits, workers, seed=workers)
    evaluated = island.run(120)
    assert len(set(keys(evaluated))) == len(evaluated)  # no duplicate
    if size is not None and size <= 120:
        # A finite space is searched exhaustively, then the search ends: every configuration once.
        assert island.exhausted
        assert len(evaluated) == size
    else:
        assert len(evaluated) == 120
    for population in island.populations:
        assert population.n_distinct == len(population) == len(evaluated)


def test_a_space_of_12_configurations_costs_12_evaluations() -> None:
    """Issue 17: a space of 12 configurations and a budget of 100 must not spend 88 on repeats."""
    limits = {"layers": (1, 3), "activation": ("relu", "tanh", "gelu", "silu")}
    for workers in (1, 3, 8):
        island = Island(lambda lim, rng: get_default_propagator(4, lim, rng=rng), limits, workers, seed=5)
        evaluated = island.run(100)
        assert island.exhausted
        assert sorted(keys(evaluated)) == sorted(keys(list_configurations(limits)))


def list_configurations(limits: dict[str, Any]) -> list[Individual]:
    space = SearchSpace.of(limits)
    return [Individual(position, space) for position in space.configurations()]


def test_announced_configurations_are_not_bred() -> None:
    """A configuration a peer evaluates is as known as one evaluated: on a space of 8, 8 workers that
    start at once get different ones, and a ninth finds nothing left, though nothing has been evaluated."""
    limits = {"a": (0, 7)}
    island = Island(lambda lim, rng: InitUniform(lim, rng=rng), limits, 9, seed=1)
    for rank in range(8):
        assert island.start(rank)
    assert sorted(ind["a"] for ind in island.running.values()) == list(range(8))
    assert not island.start(8)
    assert island.exhausted


# ---------------------------------------------------------------------------------------------------------
# How a breeding that repeats goes on
# ---------------------------------------------------------------------------------------------------------


class Repeating(Propagator):
    """Returns a copy of the best parent (or of a fixed point), counting calls and rejections."""

    def __init__(self, limits: dict[str, Any]) -> None:
        super().__init__(-1, 1)
        self.space = SearchSpace.of(limits)
        self.calls = 0
        self.rejected: list[Individual] = []

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        self.calls += 1
        if inds:
            return [min(inds, key=lambda ind: ind.loss).child()]
        return [Individual(self.space.lower.copy(), self.space)]

    def reject(self, ind: Individual) -> None:
        self.rejected.append(ind)


def evaluated_population(limits: dict[str, Any], positions: list[np.ndarray]) -> Population:
    space = SearchSpace.of(limits)
    population = Population()
    for uid, position in enumerate(positions):
        ind = Individual(position, space)
        ind.loss = float(uid)
        ind.status = Status.COMPLETED
        ind.uid = uid
        population.add(ind)
    return population


def test_a_propagator_that_only_repeats_is_rejected_then_replaced_by_a_uniform_draw() -> None:
    limits = {"x": (0.0, 1.0), "y": (-1.0, 1.0)}
    space = SearchSpace.of(limits)
    population = evaluated_population(limits, [np.array([0.5, 0.5])])
    propagator = Repeating(limits)
    breeder = Breeder(propagator, population, random.Random(3))
    ind = breeder.breed()
    assert ind is not None
    assert not population.knows(space.key(ind.position))
    assert propagator.calls == MAX_ATTEMPTS
    assert len(propagator.rejected) == MAX_ATTEMPTS
    assert all(np.array_equal(r.position, [0.5, 0.5]) for r in propagator.rejected)
    assert (breeder.repeats, breeder.draws) == (MAX_ATTEMPTS, 1)


def test_a_swarm_at_rest_gets_a_drawn_particle_with_a_velocity() -> None:
    """A PSO propagator moves particles and reads their velocity: the uniform draw that replaces a swarm
    repeating itself is a particle at rest, not an individual without velocity."""
    limits = {"x": (0.0, 1.0), "y": (-1.0, 1.0)}
    space = SearchSpace.of(limits)
    population = evaluated_population(limits, [np.array([0.5, 0.5])])
    for ind in population:
        ind.velocity = np.zeros(2)
    breeder = Breeder(Repeating(limits), population, random.Random(3))
    ind = breeder.breed()
    assert ind is not None and breeder.draws == 1
    assert not population.knows(space.key(ind.position))
    assert ind.velocity is not None and np.array_equal(ind.velocity, np.zeros(2))


def test_the_first_new_offspring_is_taken_without_drawing() -> None:
    limits = {"x": (0.0, 1.0)}
    population = evaluated_population(limits, [np.array([0.25])])
    breeder = Breeder(get_default_propagator(2, limits, rng=random.Random(1)), population, random.Random(2))
    for _ in range(50):
        assert breeder.breed() is not None
    assert (breeder.repeats, breeder.draws) == (0, 0)


def test_a_nearly_exhausted_finite_space_is_listed_and_drawn_from() -> None:
    """When uniform draws keep hitting known configurations, the unknown ones are listed: the last
    configurations of a space are found without luck."""
    limits = {"a": (0, 99), "b": ("p", "q")}  # 200 configurations
    space = SearchSpace.of(limits)
    everything = list(space.configurations())
    missing = {3, 150}
    population = evaluated_population(limits, [p for i, p in enumerate(everything) if i not in missing])
    breeder = Breeder(Repeating(limits), population, random.Random(4))
    found = []
    for uid in range(2):
        ind = breeder.breed()
        assert ind is not None
        found.append(space.decode(ind.position))
        ind.loss, ind.status, ind.uid = 0.0, Status.COMPLETED, 1000 + uid
        population.add(ind)
    assert sorted(found, key=repr) == sorted((space.decode(everything[i]) for i in missing), key=repr)
    assert breeder.breed() is None


def test_exhaustion_counts_announced_configurations_once() -> None:
    limits = {"a": (0, 2)}
    space = SearchSpace.of(limits)
    configurations = list(space.configurations())
    population = evaluated_population(limits, configurations[:1])
    breeder = Breeder(Repeating(limits), population, random.Random(0))
    breeder.expect([1, 2], 0.0)
    key = space.key(configurations[0])  # already evaluated: announcing it again adds nothing
    breeder.announce(1, key, 1, 0.0, 0.0)
    breeder.announce(2, space.key(configurations[1]), 1, 0.0, 0.0)
    ind = breeder.breed()
    assert ind is not None and space.decode(ind.position) == {"a": 2}


# ---------------------------------------------------------------------------------------------------------
# Announcements and the peers' progress
# ---------------------------------------------------------------------------------------------------------


def test_a_peers_next_announcement_releases_its_previous_configuration() -> None:
    limits = {"a": (0, 9)}
    space = SearchSpace.of(limits)
    breeder = Breeder(SelectMin(1), Population(), random.Random(0))
    breeder.expect([1, 2], 0.0)
    k0, k1 = (space.key(np.array([float(v)])) for v in (0, 1))
    breeder.announce(1, k0, 1, 0.0, 0.0)
    breeder.announce(2, k0, 1, 0.0, 0.0)
    assert breeder.is_known(k0)
    breeder.announce(1, k1, 2, 0.0, 0.0)
    assert breeder.is_known(k0) and breeder.is_known(k1)  # peer 2 still evaluates k0
    breeder.retire(2)
    assert not breeder.is_known(k0) and breeder.is_known(k1)
    breeder.retire(1)
    assert not breeder.is_known(k1)


def test_a_withdrawn_announcement_frees_its_configuration_and_the_peer_may_breed_again() -> None:
    limits = {"a": (0, 1)}
    space = SearchSpace.of(limits)
    population = Population()
    breeder = Breeder(InitUniform(limits, rng=random.Random(0)), population, random.Random(0))
    breeder.expect([1], 0.0)
    k0, k1 = (space.key(np.array([float(v)])) for v in (0, 1))
    breeder.hear(1, Announcement(k0, 1, 0.0, b"0"), 0.0)
    evaluated = breeder.breed()
    assert evaluated is not None and space.key(evaluated.position) == k1
    evaluated.uid, evaluated.loss, evaluated.status = 0, 1.0, Status.COMPLETED
    population.add(evaluated)
    assert breeder.breed() is None and not breeder.exhausted()  # peer 1 evaluates the last one
    breeder.hear(1, Announcement(None, 1, 0.0), 0.0)  # it gave it up: it is this worker's to breed
    assert 1 in breeder.may_be_breeding(1.0)
    last = breeder.breed()
    assert last is not None and space.key(last.position) == k0
    last.uid, last.loss, last.status = 1, 0.0, Status.COMPLETED
    population.add(last)
    assert breeder.breed() is None and breeder.exhausted()


@pytest.mark.parametrize(
    ("own", "peer", "told", "period", "now", "expected"),
    [
        (0, 0, 0.0, 0.0, 1.0, False),  # in step
        (MAX_LAG, 0, 0.0, 0.0, 1.0, False),  # behind by MAX_LAG: normal asynchrony
        (MAX_LAG + 1, 0, 0.0, 0.0, 1.0, True),  # further behind, and its result is due
        (MAX_LAG + 1, 0, 0.0, 5.0, 1.0, False),  # further behind, but busy with a long evaluation
        (MAX_LAG + 1, 0, 0.0, 5.0, 5.0 * DUE - 0.01, False),  # ... not due yet: its loop, its scheduling
        (MAX_LAG + 1, 0, 0.0, 5.0, 5.0 * DUE, True),  # ... due now
    ],
)
def test_a_peer_is_waited_for_only_when_behind_and_due(
    own: int, peer: int, told: float, period: float, now: float, expected: bool
) -> None:
    breeder = Breeder(SelectMin(1), Population(), random.Random(0))
    breeder.expect([7], 0.0)
    breeder.announce(7, 12345, peer, period, told)
    assert breeder.behind(own, now) is expected
    breeder.retire(7)
    assert breeder.behind(own, now) is False  # a peer that stopped breeding is never waited for


def test_peers_that_may_be_breeding_are_those_not_busy_with_an_evaluation_not_yet_due() -> None:
    # The peers whose receipt of an announcement a worker awaits in a finite space (Propulator._claim).
    breeder = Breeder(SelectMin(1), Population(), random.Random(0))
    breeder.expect([1, 2, 3], 0.0)
    assert breeder.may_be_breeding(0.0) == [1, 2, 3]  # nobody told of an evaluation yet
    breeder.announce(1, 11, 1, 5.0, 0.0)  # a 5-s evaluation started at 0
    breeder.announce(2, 12, 1, 0.0, 0.0)  # no mean yet: due at once
    assert breeder.may_be_breeding(5.0 * DUE - 0.01) == [2, 3]
    assert breeder.may_be_breeding(5.0 * DUE) == [1, 2, 3]
    breeder.retire(3)
    assert breeder.may_be_breeding(5.0 * DUE) == [1, 2]


def test_peers_not_heard_of_count_as_having_started_nothing() -> None:
    breeder = Breeder(SelectMin(1), Population(), random.Random(0))
    breeder.expect([1], 0.0)
    assert not breeder.behind(MAX_LAG, 1e-6)
    assert breeder.behind(MAX_LAG + 1, 1e-6)


def test_the_model_island_spreads_work_over_workers() -> None:
    """Sanity check of the model itself: with random completion order every worker evaluates."""
    island = Island(lambda lim, rng: InitUniform(lim, rng=rng), SPACES["floats"], 4, seed=2)
    evaluated = island.run(200)
    counts = Counter(ind.rank for ind in evaluated)
    assert len(evaluated) == 200 and min(counts.values()) > 20
    assert not any(math.isnan(ind.loss) for ind in evaluated)


class PendingRecorder(Propagator):
    """Records what the loop tells it is being evaluated, and proposes uniform draws."""

    def __init__(self, limits: dict[str, Any], rng: random.Random) -> None:
        super().__init__(-1, 1, rng)
        self.init = InitUniform(limits, rng=rng)
        self.told: list[np.ndarray] = []

    def pending(self, positions: np.ndarray) -> None:
        self.told.append(positions)

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        return self.init(inds)


def test_a_propagator_that_takes_pending_evaluations_is_told_the_peers_announced_configurations() -> None:
    limits = {"lr": (1e-4, 1e-1), "layers": (1, 8), "act": ("relu", "tanh")}
    space = SearchSpace.of(limits)
    population = Population()
    propagator = PendingRecorder(limits, random.Random(1))
    assert propagator.uses_pending and not Propagator(-1, 1).uses_pending
    breeder = Breeder(propagator, population, random.Random(2), space=space)
    breeder.expect([1, 2, 3], 0.0)
    rng = random.Random(3)
    announced = {peer: space.sample(rng) for peer in (1, 2, 3)}
    for peer, position in announced.items():
        configuration = space.canonical(position)
        breeder.announce(peer, hash(configuration), 1, 0.0, 0.0, configuration)
    breeder.breed()
    assert len(propagator.told) == 1
    told = {space.key(row) for row in propagator.told[0]}
    assert told == {space.key(p) for p in announced.values()}
    # A peer that retired, and one whose result this worker already holds, evaluate nothing now.
    breeder.retire(1)
    done = Individual(announced[2].copy(), limits)
    done.uid, done.loss, done.status = 0, 1.0, Status.COMPLETED
    population.add(done)
    breeder.breed()
    assert [space.key(row) for row in propagator.told[1]] == [space.key(announced[3])]
    assert propagator.told[1].shape == (1, space.ndim)
