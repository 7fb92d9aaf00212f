"""Propagators: contract tests run against every propagator, then operator-specific behaviour.

The contract (SPEC §3, STYLE habits 3, 4 and 13): a propagator returns a list, keeps every offspring inside
the limits with the right types, never modifies its parents, returns new objects (selections excepted: they
return the chosen parents themselves) and draws randomness only from the ``rng`` it was given.
"""

from __future__ import annotations

import math
import pickle
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from propulate import Individual
from propulate.propagators import (
    Compose,
    Conditional,
    CrossoverMultiple,
    CrossoverSigmoid,
    CrossoverUniform,
    InitUniform,
    IntervalMutationNormal,
    PointMutation,
    Propagator,
    RandomPointMutation,
    SelectMax,
    SelectMin,
    SelectUniform,
    pso,
)
from propulate.propagators.cmaes import ActiveCMA, BasicCMA, CMAPropagator
from propulate.propagators.nm import ParallelNelderMead
from propulate.space import Kind, SearchSpace
from propulate.utils import get_default_propagator

SPACES: dict[str, dict[str, tuple[Any, ...]]] = {
    "mixed": {
        "activation": ("relu", "tanh", "sigmoid"),
        "lr": (1e-4, 1e-1),
        "optimizer": ("sgd", "adam"),
        "layers": (1, 8),
        "dropout": (0.0, 0.5),
        "norm": ("batch", "layer", "none", "group"),
    },
    "ints only": {"a": (0, 3), "b": (-5, 5), "fixed": (7, 7)},
    "categoricals only": {"c1": ("a", "b"), "single": ("only",), "c3": ("p", "q", "r")},
    "one float": {"x": (-2.0, 3.0)},
    "floats": {"x": (-2.0, 3.0), "y": (0.0, 1.0), "z": (-100.0, 100.0)},
}

POP_SIZE = 4  # breeding pool of Conditional and the default propagator

Factory = Callable[[dict[str, tuple[Any, ...]], "random.Random | None"], Propagator]


def _breed(limits: dict[str, tuple[Any, ...]], rng: random.Random | None) -> Propagator:
    return Compose(
        [
            SelectUniform(2, rng=rng),
            CrossoverUniform(probability=0.9, rng=rng),
            PointMutation(limits, probability=0.5, rng=rng),
        ]
    )


BREEDERS: dict[str, Factory] = {
    "InitUniform": lambda limits, rng: InitUniform(limits, rng=rng),
    "InitUniform(parents=1)": lambda limits, rng: InitUniform(limits, parents=1, probability=0.5, rng=rng),
    "PointMutation": lambda limits, rng: PointMutation(limits, probability=0.9, rng=rng),
    "PointMutation(all points)": lambda limits, rng: PointMutation(limits, points=len(limits), rng=rng),
    "RandomPointMutation": lambda limits, rng: RandomPointMutation(limits, 1, len(limits), 0.9, rng=rng),
    "IntervalMutationNormal": lambda limits, rng: IntervalMutationNormal(limits, sigma_factor=0.5, rng=rng),
    "CrossoverUniform": lambda limits, rng: CrossoverUniform(0.3, probability=0.9, rng=rng),
    "CrossoverMultiple": lambda limits, rng: CrossoverMultiple(probability=0.9, rng=rng),
    "CrossoverMultiple(parents=3)": lambda limits, rng: CrossoverMultiple(3, probability=0.9, rng=rng),
    "CrossoverSigmoid": lambda limits, rng: CrossoverSigmoid(temperature=0.5, probability=0.9, rng=rng),
    "Compose": _breed,
    "Conditional": lambda limits, rng: Conditional(
        POP_SIZE, _breed(limits, rng), InitUniform(limits, rng=rng)
    ),
    "get_default_propagator": lambda limits, rng: get_default_propagator(POP_SIZE, limits, rng=rng),
}
SELECTORS: dict[str, Factory] = {
    "SelectMin": lambda limits, rng: SelectMin(3),
    "SelectMax": lambda limits, rng: SelectMax(3),
    "SelectUniform": lambda limits, rng: SelectUniform(3, rng=rng),
}
# Families for continuous search spaces: particle swarms move through the embedding, Nelder–Mead needs floats.
CONTINUOUS: dict[str, Factory] = {
    "InitUniformPSO": lambda limits, rng: pso.InitUniformPSO(limits, rank=1, rng=rng),
    "BasicPSO": lambda limits, rng: pso.BasicPSO(0.729, 1.49445, 1.49445, 1, limits, rng),
    "VelocityClampingPSO": lambda limits, rng: pso.VelocityClampingPSO(
        0.729, 1.49, 1.49, 1, limits, rng, 0.6
    ),
    "ConstrictionPSO": lambda limits, rng: pso.ConstrictionPSO(2.05, 2.05, 1, limits, rng),
    "CanonicalPSO": lambda limits, rng: pso.CanonicalPSO(2.05, 2.05, 1, limits, rng),
    "StatelessPSO": lambda limits, rng: pso.StatelessPSO(0.729, 1.49445, 1.49445, 1, limits, rng),
    "ParallelNelderMead": lambda limits, rng: ParallelNelderMead(limits, rng),
    "CMAPropagator(BasicCMA)": lambda limits, rng: CMAPropagator(BasicCMA(), limits, pop_size=4, rng=rng),
    "CMAPropagator(ActiveCMA)": lambda limits, rng: CMAPropagator(ActiveCMA(), limits, pop_size=4, rng=rng),
}
PROPAGATORS = {**BREEDERS, **SELECTORS, **CONTINUOUS}


def applicable(propagator: str, space: str) -> bool:
    """Gaussian interval mutation needs a float parameter; the continuous families need only floats."""
    parameters = SearchSpace.of(SPACES[space]).parameters
    if propagator in CONTINUOUS:
        return all(p.kind is Kind.FLOAT for p in parameters)
    return any(p.kind is Kind.FLOAT for p in parameters) or propagator != "IntervalMutationNormal"


def cases(factories: dict[str, Factory]) -> list[Any]:
    return [
        pytest.param(name, space, id=f"{name}-{space}")
        for name in factories
        for space in SPACES
        if applicable(name, space)
    ]


def random_population(limits: dict[str, tuple[Any, ...]], size: int, seed: int) -> list[Individual]:
    """``size`` individuals drawn uniformly, with varied losses (a NaN and an inf among them)."""
    space = SearchSpace.of(limits)
    rng = random.Random(seed)
    population = []
    for i in range(size):
        ind = Individual(space.sample(rng), space, generation=i, rank=i % 2)
        ind.loss = [math.nan, math.inf][i] if i < 2 and size > 4 else rng.uniform(-10.0, 10.0)
        ind.uid = i
        population.append(ind)
    rng.shuffle(population)
    return population


def snapshot(ind: Individual) -> tuple[Any, ...]:
    """Everything a propagator could change in a parent, NaN-safe."""
    velocity = None if ind.velocity is None else ind.velocity.tobytes()
    return (
        ind.position.tobytes(),
        velocity,
        repr(ind.loss),
        ind.active,
        ind.generation,
        ind.rank,
        ind.island,
        ind.uid,
        ind.migration_history,
    )


def global_rng_state() -> bytes:
    # The legacy global numpy state is exactly what must stay untouched.
    return pickle.dumps((random.getstate(), np.random.get_state()))  # noqa: NPY002


def assert_inside_limits(ind: Individual, limits: dict[str, tuple[Any, ...]]) -> None:
    space = SearchSpace.of(limits)
    assert ind.position.shape == (space.ndim,)
    assert np.all(ind.position >= space.lower) and np.all(ind.position <= space.upper), ind.position
    values = dict(ind)
    assert list(values) == list(limits)
    for p in space.parameters:
        value = values[p.name]
        if p.kind is Kind.CATEGORICAL:
            assert type(value) is str and value in p.categories
            block = ind.position[p.offset : p.offset + p.width]
            assert sorted(block) == [0.0] * (p.width - 1) + [1.0], (p.name, block)
        else:
            assert type(value) is (float if p.kind is Kind.FLOAT else int), (p.name, value)
            assert p.low <= value <= p.high
            assert p.low <= ind.position[p.offset] <= p.high


# ---------------------------------------------------------------------------------------------------------
# Contract tests: every propagator, every search space
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [3, 8])
@pytest.mark.parametrize(("name", "space"), cases(PROPAGATORS))
def test_offspring_inside_limits_and_parents_untouched(name: str, space: str, size: int) -> None:
    limits = SPACES[space]
    propagator = PROPAGATORS[name](limits, random.Random(size))
    for seed in range(25):
        parents = random_population(limits, size, seed)
        before = [snapshot(p) for p in parents]
        offspring = propagator(parents)

        assert isinstance(offspring, list)
        assert len(offspring) >= 1
        if propagator.offspring != -1:
            assert len(offspring) == propagator.offspring
        for child in offspring:
            assert isinstance(child, Individual)
            assert_inside_limits(child, limits)
        assert [snapshot(p) for p in parents] == before


@pytest.mark.parametrize(("name", "space"), cases(BREEDERS))
def test_offspring_are_new_unevaluated_objects(name: str, space: str) -> None:
    limits = SPACES[space]
    propagator = BREEDERS[name](limits, random.Random(0))
    for seed in range(25):
        parents = random_population(limits, 8, seed)
        offspring = propagator(parents)
        assert len({id(child) for child in offspring}) == len(offspring)
        for child in offspring:
            assert all(child is not parent for parent in parents)
            assert all(not np.shares_memory(child.position, parent.position) for parent in parents)
            assert child.loss == math.inf
            assert child.active
        before = [snapshot(p) for p in parents]
        offspring[0].position[:] = 0.5  # writing into a child cannot reach a parent
        assert [snapshot(p) for p in parents] == before


@pytest.mark.parametrize(("name", "space"), cases(SELECTORS))
def test_selections_return_members_of_the_input(name: str, space: str) -> None:
    parents = random_population(SPACES[space], 8, seed=1)
    chosen = SELECTORS[name](SPACES[space], random.Random(0))(parents)
    assert len({id(ind) for ind in chosen}) == len(chosen) == 3
    assert all(any(ind is parent for parent in parents) for ind in chosen)


@pytest.mark.parametrize("seeded", [True, False], ids=["seeded rng", "rng=None"])
@pytest.mark.parametrize(("name", "space"), cases(PROPAGATORS))
def test_global_random_states_untouched(name: str, space: str, seeded: bool) -> None:
    limits = SPACES[space]
    populations = [random_population(limits, size, seed) for seed, size in enumerate([3, 8] * 10)]
    before = global_rng_state()
    propagator = PROPAGATORS[name](limits, random.Random(5) if seeded else None)
    for parents in populations:
        propagator(parents)
    assert global_rng_state() == before


@pytest.mark.parametrize(("name", "space"), cases(PROPAGATORS))
def test_same_seed_same_offspring(name: str, space: str) -> None:
    limits = SPACES[space]

    def run() -> list[bytes]:
        propagator = PROPAGATORS[name](limits, random.Random(11))
        return [
            child.position.tobytes()
            for seed in range(10)
            for child in propagator(random_population(limits, 8, seed))
        ]

    assert run() == run()


# ---------------------------------------------------------------------------------------------------------
# Selection
# ---------------------------------------------------------------------------------------------------------


def with_losses(losses: list[float]) -> list[Individual]:
    limits = SPACES["one float"]
    population = [Individual({"x": 0.0}, limits) for _ in losses]
    for uid, (ind, loss) in enumerate(zip(population, losses, strict=True)):
        ind.loss, ind.uid = loss, uid
    return population


LOSSES = [3.0, -1.0, 7.5, 0.0, 2.0]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [(SelectMin, [-1.0, 0.0, 2.0]), (SelectMax, [7.5, 3.0, 2.0])],
    ids=["SelectMin", "SelectMax"],
)
def test_selection_order(selector: type[Propagator], expected: list[float]) -> None:
    chosen = selector(3)(with_losses(LOSSES))
    assert [ind.loss for ind in chosen] == expected


def test_select_min_never_picks_nan_first() -> None:
    chosen = SelectMin(2)(with_losses([math.nan, 4.0, math.nan, 1.0]))
    assert [ind.loss for ind in chosen] == [1.0, 4.0]


def test_select_uniform_picks_distinct_individuals_uniformly() -> None:
    population = with_losses(LOSSES)
    selector = SelectUniform(2, rng=random.Random(0))
    counts = dict.fromkeys(range(len(LOSSES)), 0)
    for _ in range(2_000):
        first, second = selector(population)
        assert first is not second
        counts[first.uid] += 1
        counts[second.uid] += 1
    assert all(700 < n < 900 for n in counts.values()), counts  # expected 800 each


@pytest.mark.parametrize("selector", [SelectMin, SelectMax, SelectUniform])
@pytest.mark.parametrize("available", [0, 2])
def test_selection_raises_when_too_few(selector: type[Propagator], available: int) -> None:
    with pytest.raises(ValueError):
        selector(3)(with_losses(LOSSES[:available]))


@pytest.mark.parametrize("selector", [SelectMin, SelectMax, SelectUniform])
@pytest.mark.parametrize("offspring", [0, -2])
def test_selection_of_nothing_is_rejected(selector: type[Propagator], offspring: int) -> None:
    with pytest.raises(ValueError, match="offspring"):
        selector(offspring)


# ---------------------------------------------------------------------------------------------------------
# Crossover
# ---------------------------------------------------------------------------------------------------------

MIXED = SPACES["mixed"]
# Two parents that differ in every parameter, so each child parameter shows which parent it came from.
PARENT_A = {
    "activation": "relu",
    "lr": 0.001,
    "optimizer": "sgd",
    "layers": 2,
    "dropout": 0.1,
    "norm": "batch",
}
PARENT_B = {
    "activation": "tanh",
    "lr": 0.05,
    "optimizer": "adam",
    "layers": 7,
    "dropout": 0.4,
    "norm": "group",
}


def parents_with_losses(loss_a: float, loss_b: float) -> tuple[Individual, Individual]:
    a, b = Individual(PARENT_A, MIXED), Individual(PARENT_B, MIXED)
    a.loss, b.loss = loss_a, loss_b
    return a, b


def share_from(better: Individual, offspring: list[Individual]) -> float:
    """Fraction of all child parameters equal to ``better``'s."""
    hits = sum(child[name] == better[name] for child in offspring for name in MIXED)
    return hits / (len(offspring) * len(MIXED))


@pytest.mark.parametrize("better_first", [True, False], ids=["better first", "better second"])
def test_crossover_sigmoid_prefers_the_better_parent(better_first: bool) -> None:
    better, worse = parents_with_losses(0.0, 50.0)
    crossover = CrossoverSigmoid(temperature=0.1, rng=random.Random(0))
    pair = [better, worse] if better_first else [worse, better]
    offspring = [crossover(pair)[0] for _ in range(500)]
    assert share_from(better, offspring) > 0.99
    assert sum(dict(child) == PARENT_A for child in offspring) > 490


@pytest.mark.parametrize(
    ("gap", "temperature"),
    [(1.0, 1.0), (2.0, 1.0), (1.0, 4.0), (10.0, 1e6)],
)
def test_crossover_sigmoid_keeps_better_with_sigmoid_probability(gap: float, temperature: float) -> None:
    better, worse = parents_with_losses(-3.0, -3.0 + gap)
    crossover = CrossoverSigmoid(temperature=temperature, rng=random.Random(1))
    offspring = [crossover([worse, better])[0] for _ in range(2_000)]
    expected = 1.0 / (1.0 + math.exp(-gap / temperature))
    assert share_from(better, offspring) == pytest.approx(expected, abs=0.02)


def test_crossover_sigmoid_without_crossing_copies_the_better_parent() -> None:
    better, worse = parents_with_losses(1.0, 2.0)
    child = CrossoverSigmoid(temperature=100.0, probability=0.0, rng=random.Random(0))([worse, better])[0]
    assert dict(child) == PARENT_A


@pytest.mark.parametrize(("contribution", "expected"), [(1.0, 1.0), (0.0, 0.0), (0.3, 0.3)])
def test_crossover_uniform_relative_parent_contribution(contribution: float, expected: float) -> None:
    first, second = parents_with_losses(5.0, 1.0)
    crossover = CrossoverUniform(contribution, rng=random.Random(2))
    offspring = [crossover([first, second])[0] for _ in range(2_000)]
    assert share_from(first, offspring) == pytest.approx(expected, abs=0.02)


def test_crossover_multiple_uses_every_parent() -> None:
    limits = SPACES["one float"]
    parents = [Individual({"x": float(x)}, limits) for x in (-2, -1, 0, 1, 2)]
    crossover = CrossoverMultiple(rng=random.Random(3))
    seen = {crossover(parents)[0]["x"] for _ in range(300)}
    assert seen == {-2.0, -1.0, 0.0, 1.0, 2.0}


# ---------------------------------------------------------------------------------------------------------
# Mutation
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("at", ["low", "high"])
def test_interval_mutation_normal_clips_to_the_range(at: str) -> None:
    start = dict(PARENT_A, dropout=0.0 if at == "low" else 0.5)
    parent = Individual(start, MIXED)
    mutation = IntervalMutationNormal(MIXED, sigma_factor=10.0, points=2, rng=random.Random(4))
    lr, dropout = [], []
    for _ in range(500):
        child = mutation([parent])[0]
        assert_inside_limits(child, MIXED)
        # Only float parameters move.
        assert {k: v for k, v in child.items() if k not in ("lr", "dropout")} == {
            k: v for k, v in start.items() if k not in ("lr", "dropout")
        }
        lr.append(child["lr"])
        dropout.append(child["dropout"])
    # With a huge step, most draws land exactly on a bound: the step is clipped, not redrawn.
    assert sum(v in (0.0, 0.5) for v in dropout) > 400
    assert sum(v in (1e-4, 1e-1) for v in lr) > 400


@pytest.mark.parametrize("space", [s for s in SPACES if not SearchSpace.of(SPACES[s]).has_float])
def test_interval_mutation_normal_needs_a_float(space: str) -> None:
    with pytest.raises(ValueError, match="float"):
        IntervalMutationNormal(SPACES[space])


@pytest.mark.parametrize(
    ("make", "max_changed"),
    [
        (lambda rng: PointMutation(MIXED, points=2, rng=rng), 2),
        (lambda rng: RandomPointMutation(MIXED, min_points=1, max_points=3, rng=rng), 3),
    ],
    ids=["PointMutation", "RandomPointMutation"],
)
def test_point_mutation_changes_at_most_points_parameters(make: Any, max_changed: int) -> None:
    parent = Individual(PARENT_A, MIXED)
    mutation = make(random.Random(6))
    changed = [
        sum(child[k] != parent[k] for k in MIXED) for child in (mutation([parent])[0] for _ in range(500))
    ]
    assert max(changed) == max_changed


# ---------------------------------------------------------------------------------------------------------
# Argument validation
# ---------------------------------------------------------------------------------------------------------

STOCHASTIC: dict[str, Callable[[float], Propagator]] = {
    "InitUniform": lambda probability: InitUniform(MIXED, parents=1, probability=probability),
    "PointMutation": lambda probability: PointMutation(MIXED, probability=probability),
    "RandomPointMutation": lambda probability: RandomPointMutation(MIXED, 1, 2, probability=probability),
    "IntervalMutationNormal": lambda probability: IntervalMutationNormal(MIXED, probability=probability),
    "CrossoverUniform": lambda probability: CrossoverUniform(probability=probability),
    "CrossoverMultiple": lambda probability: CrossoverMultiple(probability=probability),
    "CrossoverSigmoid": lambda probability: CrossoverSigmoid(probability=probability),
}
BAD_PROBABILITIES = [-0.1, 1.5, math.nan, math.inf]


@pytest.mark.parametrize("probability", BAD_PROBABILITIES)
@pytest.mark.parametrize("make", STOCHASTIC.values(), ids=STOCHASTIC.keys())
def test_probability_outside_unit_interval_raises(
    make: Callable[[float], Propagator], probability: float
) -> None:
    with pytest.raises(ValueError, match="probability"):
        make(probability)


@pytest.mark.parametrize("probability", [0.0, 1.0, 0, 1])
@pytest.mark.parametrize("make", STOCHASTIC.values(), ids=STOCHASTIC.keys())
def test_probability_bounds_are_accepted(make: Callable[[float], Propagator], probability: float) -> None:
    assert make(probability).probability == probability


@pytest.mark.parametrize("argument", ["crossover_prob", "mutation_prob", "random_init_prob"])
def test_default_propagator_names_the_bad_probability(argument: str) -> None:
    """STYLE habit 9: the error names the argument the user passed, not an inner operator's."""
    with pytest.raises(ValueError, match=argument):
        get_default_propagator(POP_SIZE, MIXED, **{argument: 1.5})


@pytest.mark.parametrize("pop_size", [1, 0, -3, 2.5, True, None])
def test_default_propagator_rejects_pop_size_below_two(pop_size: Any) -> None:
    with pytest.raises(ValueError, match="pop_size"):
        get_default_propagator(pop_size, MIXED)


@pytest.mark.parametrize("space", ["ints only", "categoricals only"])
def test_default_propagator_without_float_parameters(space: str) -> None:
    """SPEC §4 defect 14: the default propagator crashed for search spaces without floats."""
    limits = SPACES[space]
    propagator = get_default_propagator(POP_SIZE, limits, mutation_prob=1.0, rng=random.Random(8))
    population = random_population(limits, POP_SIZE, seed=8)
    for _ in range(200):
        (child,) = propagator(population)
        assert_inside_limits(child, limits)


def test_compose_rejects_mismatched_parents_and_offspring() -> None:
    with pytest.raises(ValueError, match="propagators"):
        Compose([SelectMin(3), CrossoverUniform()])
    with pytest.raises(ValueError, match="propagators"):
        Compose([InitUniform(MIXED), CrossoverSigmoid()])
    with pytest.raises(ValueError, match="propagators"):
        Compose([])


def test_compose_accepts_matching_chain() -> None:
    chain = Compose([SelectMin(2), CrossoverUniform(), PointMutation(MIXED)])
    assert (chain.parents, chain.offspring) == (-1, 1)


# ---------------------------------------------------------------------------------------------------------
# Breeding pool: how many of the best active individuals the loop passes
# ---------------------------------------------------------------------------------------------------------


class UserPropagator(Propagator):
    """A propagator as a user script would write it."""

    def __init__(self) -> None:
        super().__init__(parents=-1, offspring=1)

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        return [inds[0].child()]


@pytest.mark.parametrize("pop_size", [2, 4, 17])
@pytest.mark.parametrize("space", list(SPACES))
def test_default_propagator_breeding_pool_is_pop_size(pop_size: int, space: str) -> None:
    assert get_default_propagator(pop_size, SPACES[space]).breeding_pool == pop_size


def test_user_propagator_breeding_pool_is_everything() -> None:
    assert UserPropagator().breeding_pool is None
    assert Compose([UserPropagator(), PointMutation(MIXED)]).breeding_pool is None
    assert Conditional(4, UserPropagator(), InitUniform(MIXED)).breeding_pool is None


def test_default_propagator_only_needs_the_best_pop_size() -> None:
    """Given only the best ``pop_size`` individuals, it breeds from them (not from random newcomers).

    Without point mutation and random draws, every parameter comes from a parent, except the one float
    parameter that gets the Gaussian step.
    """
    propagator = get_default_propagator(
        POP_SIZE, MIXED, crossover_prob=1.0, mutation_prob=0.0, random_init_prob=0.0, rng=random.Random(9)
    )
    pool = random_population(MIXED, POP_SIZE, seed=9)
    floats = [p.name for p in SearchSpace.of(MIXED).parameters if p.kind is Kind.FLOAT]
    for _ in range(100):
        (child,) = propagator(pool)
        for name in MIXED:
            if name not in floats:
                assert any(child[name] == parent[name] for parent in pool)
        assert sum(not any(child[name] == parent[name] for parent in pool) for name in floats) <= 1
