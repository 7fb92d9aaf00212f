"""The population store: best k, deactivation, distinct best, cost of best k (propulate.population)."""

from __future__ import annotations

import math
import random

import pytest

from propulate import Individual, Status
from propulate.population import KeySet, Population

LIMITS = {"x": (0.0, 1.0), "n": (0, 3), "c": ("a", "b")}
TEMPLATE = Individual({"x": 0.5, "n": 1, "c": "a"}, LIMITS)


def member(uid: int, loss: float, x: float = 0.5, active: bool = True) -> Individual:
    ind = TEMPLATE.child()
    ind["x"] = x
    ind.uid = uid
    ind.loss = loss
    ind.active = active
    return ind


def population_of(losses: list[float]) -> Population:
    """A population whose member ``uid`` has ``losses[uid]`` and a distinct ``x``."""
    pop = Population()
    pop.extend(member(uid, loss, x=uid / len(losses)) for uid, loss in enumerate(losses))
    return pop


def uids(inds: list[Individual]) -> list[int]:
    return [ind.uid for ind in inds]


@pytest.fixture
def shuffled() -> Population:
    """Twenty members with losses 0..19 added in random order; uid == loss."""
    order = list(range(20))
    random.Random(3).shuffle(order)
    pop = Population()
    pop.extend(member(uid, float(uid), x=uid / 20) for uid in order)
    return pop


# ---------------------------------------------------------------------------------------------------------
# Bookkeeping
# ---------------------------------------------------------------------------------------------------------


def test_members_in_arrival_order(shuffled: Population) -> None:
    assert len(shuffled) == 20
    assert shuffled.n_active == 20
    assert sorted(uids(list(shuffled))) == list(range(20))
    assert 7 in shuffled and 20 not in shuffled
    assert shuffled.get(7).loss == 7.0
    assert shuffled.get(99) is None


def test_empty_population() -> None:
    pop = Population()
    assert len(pop) == 0
    assert pop.n_active == 0
    assert pop.best(3) == []
    assert pop.distinct_best(3) == []
    assert pop.active() == []


def test_n_active_follows_deactivations(shuffled: Population) -> None:
    for uid in (3, 5, 5, 11):  # deactivating twice counts once
        shuffled.deactivate(uid)
    assert shuffled.n_active == 17
    assert len(shuffled) == 20
    assert sorted(uids(shuffled.active())) == [u for u in range(20) if u not in (3, 5, 11)]
    assert not shuffled.get(5).active


def test_adding_an_inactive_individual_does_not_count_as_active() -> None:
    pop = Population()
    pop.add(member(0, 1.0, active=False))
    pop.add(member(1, 2.0))
    assert pop.n_active == 1
    assert uids(pop.best(2)) == [1]


def test_deactivation_before_arrival_is_applied_on_add() -> None:
    pop = population_of([1.0, 2.0])
    pop.deactivate(7)
    assert pop.n_active == 2
    late = member(7, 0.0)
    pop.add(late)
    assert not late.active
    assert pop.n_active == 2
    assert uids(pop.best(3)) == [0, 1]
    # The pending request is consumed: it does not leak onto anything else.
    pop.add(member(8, -1.0))
    assert uids(pop.best(1)) == [8]


# ---------------------------------------------------------------------------------------------------------
# best(k)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 20])
def test_best_returns_the_k_lowest_sorted(shuffled: Population, k: int) -> None:
    assert uids(shuffled.best(k)) == list(range(k))


def test_best_returns_fewer_when_fewer_exist(shuffled: Population) -> None:
    assert uids(shuffled.best(100)) == list(range(20))
    assert shuffled.best(0) == []


def test_best_skips_deactivated(shuffled: Population) -> None:
    for uid in (0, 2, 3):
        shuffled.deactivate(uid)
    assert uids(shuffled.best(4)) == [1, 4, 5, 6]
    assert uids(shuffled.best(4)) == [1, 4, 5, 6]  # reading does not consume
    shuffled.deactivate(1)
    assert uids(shuffled.best(2)) == [4, 5]


def test_best_with_everything_deactivated(shuffled: Population) -> None:
    for uid in range(20):
        shuffled.deactivate(uid)
    assert shuffled.best(5) == []
    assert shuffled.n_active == 0


def test_best_sees_later_additions(shuffled: Population) -> None:
    shuffled.best(5)
    shuffled.add(member(100, -1.0))
    shuffled.add(member(101, 2.5))
    assert uids(shuffled.best(5)) == [100, 0, 1, 2, 101]


@pytest.mark.parametrize("seed", range(5))
def test_best_agrees_with_sorting_through_adds_and_deactivations(seed: int) -> None:
    """The kept answer of best() follows additions and deactivations (and ``active`` set by hand)."""
    rng = random.Random(seed)
    pop = Population()
    members: list[Individual] = []
    for uid in range(400):
        ind = member(uid, float(rng.randint(0, 60)))  # ties, broken by uid
        pop.add(ind)
        members.append(ind)
        if rng.random() < 0.3:
            victim = rng.choice(members)
            if rng.random() < 0.2:
                victim.active = False  # behind the population's back
            else:
                pop.deactivate(victim.uid)
        k = rng.choice((1, 3, 8, 8, 8, 20))
        expected = sorted((ind for ind in members if ind.active), key=lambda ind: (ind.loss, ind.uid))[:k]
        assert uids(pop.best(k)) == uids(expected)


def test_best_of_none_then_additions() -> None:
    pop = population_of([3.0, 1.0])
    assert pop.best(0) == []
    pop.add(member(2, 0.5, x=0.9))
    assert uids(pop.best(2)) == [2, 1]


def test_nan_losses_never_come_first() -> None:
    pop = population_of([math.nan, 3.0, math.nan, math.inf, 1.0])
    best = pop.best(5)
    assert uids(best[:2]) == [4, 1]
    assert all(math.isnan(ind.loss) or ind.loss == math.inf for ind in best[2:])
    assert len(best) == 5
    assert uids(pop.best(1)) == [4]


def test_only_nan_losses() -> None:
    pop = population_of([math.nan, math.nan])
    assert sorted(uids(pop.best(5))) == [0, 1]


def test_ties_are_all_returned() -> None:
    pop = population_of([1.0, 1.0, 1.0, 0.5])
    assert uids(pop.best(4))[0] == 3
    assert sorted(uids(pop.best(4))[1:]) == [0, 1, 2]


# ---------------------------------------------------------------------------------------------------------
# distinct_best(k)
# ---------------------------------------------------------------------------------------------------------


def test_distinct_best_dedupes_equal_parameters_and_loss() -> None:
    pop = Population()
    pop.extend(
        [
            member(0, 1.0, x=0.1),
            member(1, 1.0, x=0.1),  # duplicate of 0
            member(2, 1.0, x=0.2),  # same loss, other parameters
            member(3, 0.5, x=0.1),  # same parameters, other loss
            member(4, 2.0, x=0.3),
        ]
    )
    best = pop.distinct_best(10)
    assert [ind.loss for ind in best] == [0.5, 1.0, 1.0, 2.0]
    assert {ind["x"] for ind in best if ind.loss == 1.0} == {0.1, 0.2}
    assert uids(pop.distinct_best(2))[0] == 3
    assert len(pop.distinct_best(2)) == 2


def test_distinct_best_includes_inactive(shuffled: Population) -> None:
    shuffled.deactivate(0)
    shuffled.deactivate(1)
    assert uids(shuffled.distinct_best(3)) == [0, 1, 2]
    assert uids(shuffled.best(3)) == [2, 3, 4]


def test_distinct_best_returns_fewer_when_fewer_exist() -> None:
    pop = population_of([2.0, 1.0])
    assert uids(pop.distinct_best(5)) == [1, 0]


def test_distinct_best_puts_nan_last() -> None:
    pop = population_of([math.nan, 2.0, 1.0])
    assert uids(pop.distinct_best(3))[:2] == [2, 1]


# ---------------------------------------------------------------------------------------------------------
# Cost of best(k): breeding must not get slower as the population grows
# ---------------------------------------------------------------------------------------------------------


class CountingLoss(float):
    """A loss that counts how often it is compared."""

    comparisons = 0

    def _count(self) -> None:
        CountingLoss.comparisons += 1

    def __lt__(self, other: object) -> bool:
        self._count()
        return float(self) < other

    def __gt__(self, other: object) -> bool:
        self._count()
        return float(self) > other

    def __le__(self, other: object) -> bool:
        self._count()
        return float(self) <= other

    def __ge__(self, other: object) -> bool:
        self._count()
        return float(self) >= other

    def __eq__(self, other: object) -> bool:
        self._count()
        return float(self) == other

    __hash__ = float.__hash__


def comparisons_per_best(size: int, calls: int = 200, k: int = 8) -> float:
    rng = random.Random(size)
    pop = Population()
    pop.extend(member(uid, CountingLoss(rng.random())) for uid in range(size))
    for uid in rng.sample(range(size), size // 10):
        pop.deactivate(uid)
    CountingLoss.comparisons = 0
    for _ in range(calls):
        assert len(pop.best(k)) == k
    return CountingLoss.comparisons / calls


@pytest.mark.slow
def test_best_k_does_not_sort_the_whole_population() -> None:
    small = comparisons_per_best(1_000)
    large = comparisons_per_best(100_000)
    assert small > 0, "losses were not compared: the counting wrapper is bypassed"
    # O(k log n) grows by log(1e5)/log(1e3) = 5/3; sorting or scanning grows 100-fold.
    assert large / small < 5
    assert large < 2_000


def test_summary_leaves_out_pruned_individuals():
    population = Population()
    limits = {"x": (0.0, 1.0)}
    for uid, (x, loss, status) in enumerate(
        [(0.1, 0.05, Status.PRUNED), (0.2, 0.3, Status.COMPLETED), (0.3, 0.2, Status.COMPLETED)]
    ):
        ind = Individual({"x": x}, limits)
        ind.uid, ind.loss, ind.status = uid, loss, status
        population.add(ind)
    assert [ind.loss for ind in population.distinct_best(3)] == [0.2, 0.3]
    assert [ind.loss for ind in population.best(3)] == [0.05, 0.2, 0.3]  # pruned ones still breed


# ---------------------------------------------------------------------------------------------------------
# Releasing members from memory
# ---------------------------------------------------------------------------------------------------------


def test_release_keeps_the_best_and_remembers_the_rest(shuffled: Population) -> None:
    shuffled.best(3)  # a cached answer must survive the release
    keys = [ind.space.key(ind.position) for ind in shuffled]
    assert shuffled.release(5) == 15
    assert sorted(uids(list(shuffled))) == [0, 1, 2, 3, 4]
    assert len(shuffled) == 5 and shuffled.n_known == 20 and shuffled.released == 15
    assert shuffled.n_active == 5 and shuffled.n_distinct == 20
    assert all(shuffled.knows(key) for key in keys)  # the no-repeat rule still sees every configuration
    assert uids(shuffled.best(3)) == [0, 1, 2] and uids(shuffled.worst(2)) == [4, 3]
    assert sum(shuffled.evaluation_counts().values()) == 20


def test_breeding_after_a_release_reads_what_it_would_have_read(shuffled: Population) -> None:
    whole = Population()
    whole.extend(list(shuffled))
    shuffled.release(8)
    for uid, loss in [(20, 2.5), (21, 30.0), (22, -1.0), (23, 7.5), (24, 0.5)]:
        for pop in (shuffled, whole):
            pop.add(member(uid, loss, x=uid / 40))
        assert uids(shuffled.best(8)) == uids(whole.best(8))
    assert shuffled.release(8) == 5  # the 8 best are kept, the rest released again
    assert uids(shuffled.best(8)) == uids(whole.best(8))
    assert shuffled.n_known == whole.n_known == 25


def test_release_counts_evaluations_by_status_but_not_immigrants() -> None:
    pop = Population()
    statuses = [Status.COMPLETED, Status.FAILED, Status.PRUNED, Status.COMPLETED]
    for uid, status in enumerate(statuses):
        ind = member(uid, float(uid), x=uid / 10)
        ind.status = status
        pop.add(ind)
    immigrant = member(9, 0.1, x=0.9)
    immigrant.migration_steps = 1
    pop.add(immigrant)
    pop.release(1)
    assert pop.evaluation_counts() == {Status.COMPLETED: 2, Status.FAILED: 1, Status.PRUNED: 1}
    assert uids(list(pop)) == [0]  # failed individuals never breed: released first


@pytest.mark.parametrize("seed", range(5))
def test_key_set_agrees_with_a_python_set_across_merges(seed: int) -> None:
    rng = random.Random(seed)
    keys = KeySet(min_batch=16)
    lazy = KeySet(min_batch=16)  # asked for its length now and then only, as a run asks
    reference: set[int] = set()
    # Few distinct values, so that many additions repeat a key held in the set or in the array.
    pool = [rng.randrange(-(2**63), 2**63) for _ in range(600)] + [-(2**63), 2**63 - 1, 0, -1]
    for i in range(3000):
        key = rng.choice(pool)
        keys.add(key)
        lazy.add(key)
        reference.add(key)
        assert len(keys) == len(reference)
        if i % 250 == 0:
            assert len(lazy) == len(reference)
        if i % 97 == 0:
            assert all((k in keys) == (k in reference) for k in pool)
    assert keys._sorted.size > 0 and len(keys._recent) < keys.merge_at
    assert sorted(keys._sorted.tolist()) == keys._sorted.tolist()
    assert set(keys._sorted.tolist()) | keys._recent == reference
    assert len(set(keys._sorted.tolist())) == keys._sorted.size  # a merge adds only keys not there yet


def test_key_set_merges_in_batches_that_grow_with_it() -> None:
    keys = KeySet(min_batch=4)
    for key in range(4):
        keys.add(key)
    assert keys._sorted.tolist() == [0, 1, 2, 3] and not keys._recent
    for key in range(4, 200):
        keys.add(key)
    assert len(keys) == 200 and keys.merge_at == max(4, keys._sorted.size // 8)
    assert keys._sorted.size >= 200 - keys.merge_at


def test_key_set_answers_no_for_what_cannot_be_a_key() -> None:
    keys = KeySet(min_batch=1)
    keys.add(5)
    assert keys._sorted.size == 1
    assert 5 in keys and 6 not in keys and 2**64 not in keys and "5" not in keys and 5.5 not in keys
    with pytest.raises(OverflowError):
        keys.add(2**64)


def test_population_knows_keys_in_the_merged_array() -> None:
    population = Population()
    population._keys = KeySet(min_batch=8)
    inds = [member(uid, float(uid), x=uid / 40) for uid in range(40)]
    population.extend(inds)
    assert population._keys._sorted.size > 0
    assert population.n_distinct == 40
    assert all(population.knows(ind.space.key(ind.position)) for ind in inds)
