"""Parameter types ``propulate.Float``, ``Integer`` and ``Categorical`` on one process.

Contract (STYLE habit 13): every propagator family that accepts a parameter type, driven as the loop drives
it for a few hundred breedings, only breeds individuals whose decoded values are of the declared Python type
(``True`` stays ``True``, never ``1``), inside ``[low, high]``, on the step grid, one of the choices, and
whose embedding lies inside ``[space.lower, space.upper]`` (``ln(value)`` on a log scale). Then: log-uniform
sampling (Kolmogorov–Smirnov), validation messages, and round trips through pickle, JSON, the results frame
and a checkpoint written by a real one-rank run, including the format written before parameter types.
"""

from __future__ import annotations

import json
import math
import pickle
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from propulate import Categorical, Float, Individual, Integer, Propulator
from propulate.errors import SearchSpaceError
from propulate.individual import Status, loss_order
from propulate.propagators import (
    Compose,
    CrossoverMultiple,
    CrossoverSigmoid,
    CrossoverUniform,
    Gaussian,
    InitUniform,
    IntervalMutationNormal,
    PointMutation,
    Propagator,
    RandomPointMutation,
    SelectUniform,
)
from propulate.propagators.cmaes import ActiveCMA, BasicCMA, CMAPropagator
from propulate.propagators.nm import ParallelNelderMead
from propulate.propagators.pso import (
    BasicPSO,
    CanonicalPSO,
    ConstrictionPSO,
    InitUniformPSO,
    StatelessPSO,
    VelocityClampingPSO,
)
from propulate.report.frame import load_dataframe, read_checkpoint, to_dataframe
from propulate.space import SearchSpace
from propulate.utils import get_default_propagator

REPO = Path(__file__).resolve().parents[2]

# One parameter of each type; the names double as test ids.
PARAMETERS: dict[str, Any] = {
    "float": Float(-2.0, 3.0),
    "float_log": Float(1e-5, 1e-1, log=True),
    "float_step": Float(-0.5, 0.7, step=0.1),
    "int": Integer(-3, 7),
    "int_log": Integer(1, 1000, log=True),
    "int_step": Integer(-6, 18, step=4),
    "choice_str": Categorical(("relu", "tanh", "gelu")),
    # 1, 1.0 and True (and 0 and False) are equal in Python but five different choices.
    "choice_mixed": Categorical((True, False, None, 16, 2.5, "a", 1, 1.0, 0)),
}
# Every type in one space, with a 1.2.2 tuple of each kind beside them.
EVERYTHING: dict[str, Any] = {
    **PARAMETERS,
    "tuple_float": (0.0, 1.0),
    "tuple_int": (1, 8),
    "tuple_choice": ("sgd", "adam"),
}
# The value of each parameter in EVERYTHING that a test sets by hand.
VALUES: dict[str, Any] = {
    "float": -0.25,
    "float_log": 1e-3,
    "float_step": 0.3,
    "int": 5,
    "int_log": 64,
    "int_step": 14,
    "choice_str": "tanh",
    "choice_mixed": True,
    "tuple_float": 0.5,
    "tuple_int": 3,
    "tuple_choice": "adam",
}
SPACES: dict[str, dict[str, Any]] = {
    # A linear float beside each type, so that every operator on floats applies.
    **{name: {"p": domain, "y": (0.0, 1.0)} for name, domain in PARAMETERS.items()},
    "everything": EVERYTHING,
}
BREEDINGS = 300

Factory = Callable[[dict[str, Any], random.Random], Propagator]


def floats_of(limits: dict[str, Any]) -> int:
    return sum(p.kind.name == "FLOAT" for p in SearchSpace.of(limits).parameters)


def ga(limits: dict[str, Any], rng: random.Random) -> Propagator:
    return Compose(
        [
            SelectUniform(2, rng=rng),
            CrossoverUniform(probability=0.9, rng=rng),
            PointMutation(limits, probability=0.5, rng=rng),
            IntervalMutationNormal(limits, sigma_factor=0.3, points=floats_of(limits), rng=rng),
        ]
    )


FAMILIES: dict[str, Factory] = {
    "get_default_propagator": lambda limits, rng: get_default_propagator(4, limits, rng=rng),
    "InitUniform": lambda limits, rng: InitUniform(limits, rng=rng),
    "InitUniform(parents=1)": lambda limits, rng: InitUniform(limits, parents=1, probability=0.3, rng=rng),
    "PointMutation": lambda limits, rng: PointMutation(limits, points=2, probability=0.9, rng=rng),
    "RandomPointMutation": lambda limits, rng: RandomPointMutation(limits, 1, len(limits), rng=rng),
    "IntervalMutationNormal": lambda limits, rng: IntervalMutationNormal(
        limits, sigma_factor=0.5, points=floats_of(limits), rng=rng
    ),
    "Gaussian": lambda limits, rng: Gaussian(limits, scale=0.7, rng=rng),
    "CrossoverUniform": lambda limits, rng: CrossoverUniform(0.4, probability=0.9, rng=rng),
    "CrossoverMultiple": lambda limits, rng: CrossoverMultiple(probability=0.9, rng=rng),
    "CrossoverSigmoid": lambda limits, rng: CrossoverSigmoid(temperature=0.5, rng=rng),
    "Compose(select, crossover, mutations)": ga,
    "InitUniformPSO": lambda limits, rng: InitUniformPSO(limits, rank=0, rng=rng),
    "BasicPSO": lambda limits, rng: BasicPSO(0.729, 1.49445, 1.49445, 0, limits, rng),
    "VelocityClampingPSO": lambda limits, rng: VelocityClampingPSO(0.729, 1.49, 1.49, 0, limits, rng, 0.6),
    "ConstrictionPSO": lambda limits, rng: ConstrictionPSO(2.05, 2.05, 0, limits, rng),
    "CanonicalPSO": lambda limits, rng: CanonicalPSO(2.05, 2.05, 0, limits, rng),
    "StatelessPSO": lambda limits, rng: StatelessPSO(0.729, 1.49445, 1.49445, 0, limits, rng),
    "CMAPropagator(BasicCMA)": lambda limits, rng: CMAPropagator(BasicCMA(), limits, pop_size=4, rng=rng),
    "CMAPropagator(ActiveCMA)": lambda limits, rng: CMAPropagator(ActiveCMA(), limits, rng=rng),
    "ParallelNelderMead": lambda limits, rng: ParallelNelderMead(limits, rng),
    "ParallelNelderMead.adaptive": lambda limits, rng: ParallelNelderMead.adaptive(limits, rng, scale=0.5),
}
FLOATS_ONLY = {"CMAPropagator(BasicCMA)", "CMAPropagator(ActiveCMA)", "ParallelNelderMead"}
FLOATS_ONLY |= {"ParallelNelderMead.adaptive"}
# Families that keep drawing new values (swarms and crossovers settle against the walls or on their parents).
DRAWING = {"get_default_propagator", "InitUniform", "PointMutation", "RandomPointMutation", "InitUniformPSO"}
DRAWING |= {"IntervalMutationNormal", "Gaussian", "Compose(select, crossover, mutations)"}


def declared(bounds: Any) -> Float | Integer | Categorical:
    """The parameter type a 1.2.2 tuple stands for (the type itself otherwise)."""
    if isinstance(bounds, (Float, Integer, Categorical)):
        return bounds
    if all(isinstance(b, str) for b in bounds):
        return Categorical(bounds)
    if all(type(b) is int for b in bounds):
        return Integer(*bounds)
    return Float(*bounds)


def accepts(family: str, limits: dict[str, Any]) -> bool:
    return family not in FLOATS_ONLY or all(isinstance(declared(b), Float) for b in limits.values())


def contract_cases() -> list[Any]:
    return [
        pytest.param(family, space, id=f"{family}-{space}")
        for family in FAMILIES
        for space in SPACES
        if accepts(family, SPACES[space])
    ]


def typed(values: dict[str, Any]) -> list[tuple[str, type, Any]]:
    """Values keyed by type as well: ``[("x", bool, True)] != [("x", int, 1)]`` though ``True == 1``."""
    return [(name, type(value), value) for name, value in values.items()]


def assert_value_declared(name: str, bounds: Any, value: Any) -> None:
    """``value`` is one the declaration of ``bounds`` allows, of its declared Python type."""
    domain = declared(bounds)
    if isinstance(domain, Categorical):
        assert any(type(value) is type(c) and value == c for c in domain.choices), (name, value, type(value))
        return
    kind = float if isinstance(domain, Float) else int
    assert type(value) is kind, (name, value, type(value))
    assert domain.low <= value <= domain.high, (name, value)
    if domain.step is not None:
        k = (value - domain.low) / domain.step
        assert abs(k - round(k)) < 1e-9, (name, value, "off the grid")


def assert_slot_holds(name: str, bounds: Any, slot: float, value: Any) -> None:
    """A numeric parameter's slot holds its value (``ln(value)`` on a log scale), up to snapping."""
    domain = declared(bounds)
    if isinstance(domain, Categorical):
        return
    x = math.exp(slot) if domain.log else slot
    if isinstance(domain, Float) and domain.step is None:
        # Read back to 12 significant digits: within half a unit of the 12th.
        assert math.isclose(x, value, rel_tol=5e-12, abs_tol=0.0), (name, slot, value)
    else:
        # Snapped to the nearest grid point (integers: a grid of spacing 1).
        assert abs(x - value) <= domain.step / 2 + 1e-9 * max(1.0, abs(value)), (name, slot, value)


def assert_declared(ind: Individual, limits: dict[str, Any]) -> None:
    """Everything the contract asks of an individual of ``limits``."""
    space = SearchSpace.of(limits)
    assert ind.space is space
    assert ind.position.shape == (space.ndim,)
    assert np.all(np.isfinite(ind.position)), ind.position
    assert np.all(ind.position >= space.lower) and np.all(ind.position <= space.upper), ind.position
    values = ind.params()
    assert list(values) == list(limits)
    for name, bounds in limits.items():
        assert_value_declared(name, bounds, values[name])
        assert_slot_holds(name, bounds, float(ind.position[space.index[name].offset]), values[name])
        assert type(ind[name]) is type(values[name])
    # Encoded again, the values read back equal, of the same types (a log scale too: see
    # test_a_log_value_set_again_reads_back_unchanged).
    again = space.decode(space.encode(values))
    assert [(name, type(v)) for name, v in again.items()] == [(name, type(v)) for name, v in values.items()]
    assert again == values


def synthetic_loss(ind: Individual, target: np.ndarray) -> float:
    """Distance in the embedding to a point beyond the upper walls, so that optimizers press against them."""
    return float(np.sum((ind.position - target) ** 2))


def drive(propagator: Propagator, limits: dict[str, Any], breedings: int, seed: int) -> list[Individual]:
    """Breed ``breedings`` times as the loop does; return every offspring (evaluated after it was checked).

    The loop binds the propagator to its worker, passes the best ``breeding_pool`` usable individuals (all
    of them for ``None``; operators taking a fixed number of parents get that many, drawn at random, for
    variety), and observes every evaluated individual. Six individuals of another worker start the island;
    one evaluation in 23 fails.
    """
    space = SearchSpace.of(limits)
    rng = random.Random(seed)
    target = space.upper + 0.1 * (space.upper - space.lower)
    propagator.bind(0, 1)
    population: list[Individual] = []

    def evaluated(ind: Individual, rank: int, generation: int) -> Individual:
        ind.uid, ind.rank, ind.generation, ind.island = len(population), rank, generation, 0
        ind.evaltime, ind.evalperiod = 1.0 + len(population), 1.0
        if ind.uid % 23 == 22:
            ind.status, ind.loss = Status.FAILED, math.nan
        else:
            ind.status, ind.loss = Status.COMPLETED, synthetic_loss(ind, target) + rng.uniform(0.0, 1e-3)
        population.append(ind)
        if propagator.observes:
            propagator.observe(ind)
        return ind

    for generation in range(6):
        evaluated(Individual(space.sample(rng), space), 1, generation)
    offspring = []
    for generation in range(breedings):
        usable = sorted((ind for ind in population if ind.status is Status.COMPLETED), key=loss_order)
        pool_size = propagator.breeding_pool
        if propagator.parents > 0:
            pool = rng.sample(usable, propagator.parents)
        else:
            pool = usable if pool_size is None else usable[:pool_size]
        children = propagator(pool)
        assert isinstance(children, list) and len(children) >= 1
        for child in children:
            assert isinstance(child, Individual)
            assert_declared(child, limits)
            offspring.append(evaluated(child, 0, generation))
    return offspring


# ---------------------------------------------------------------------------------------------------------
# Contract: every propagator family, every parameter type it accepts
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("family", "space"), contract_cases())
def test_offspring_are_of_the_declared_types_and_ranges(family: str, space: str) -> None:
    limits = SPACES[space]
    offspring = drive(FAMILIES[family](limits, random.Random(1)), limits, BREEDINGS, seed=2)
    assert len(offspring) >= BREEDINGS
    if family in DRAWING:
        # Operators that draw values reach more than a handful of them (the contract is not vacuous).
        seen = {tuple(typed(ind.params())) for ind in offspring}
        assert len(seen) > 10, (family, space, len(seen))


@pytest.mark.parametrize(
    ("family", "space"),
    [
        ("BasicPSO", "float_log"),
        ("BasicPSO", "int_log"),
        ("Gaussian", "float_log"),
        ("Gaussian", "int_log"),
        ("IntervalMutationNormal", "float_log"),  # it moves floats only
    ],
)
def test_moves_on_a_log_scale_reach_both_ends(family: str, space: str) -> None:
    """Operators moving a log-scale slot keep it in ``[ln low, ln high]`` and reach both ends."""
    limits = SPACES[space]
    domain = PARAMETERS[space]
    values = {ind["p"] for ind in drive(FAMILIES[family](limits, random.Random(3)), limits, 400, seed=4)}
    assert max(values) == domain.high
    if family != "BasicPSO":  # the synthetic optimum lies beyond the upper wall: the swarm stays up there
        assert min(values) == domain.low


def test_propagators_for_floats_refuse_other_types() -> None:
    for name in ("int", "int_log", "int_step", "choice_str", "choice_mixed"):
        for family in FLOATS_ONLY:
            with pytest.raises(ValueError, match=r"limits.*'p'"):
                FAMILIES[family](SPACES[name], random.Random(0))


# ---------------------------------------------------------------------------------------------------------
# Decoding: ends, grids, choices of every type
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in PARAMETERS if not n.startswith("choice")])
def test_the_ends_of_the_box_decode_to_low_and_high_exactly(name: str) -> None:
    space = SearchSpace.of(SPACES[name])
    domain = PARAMETERS[name]
    p = space.index["p"]
    kind = float if isinstance(domain, Float) else int
    for slot, expected in ((space.lower[p.offset], domain.low), (space.upper[p.offset], domain.high)):
        position = np.array([slot, 0.5])
        value = space.decode(position)["p"]
        assert type(value) is kind and value == expected, (slot, value, expected)


def test_a_stepped_float_reads_back_as_written_in_decimals() -> None:
    """``Float(0, 1, step=0.1)`` gives ``0.3``, not ``0.30000000000000004``."""
    space = SearchSpace.of({"d": Float(0.0, 1.0, step=0.1)})
    got = [space.decode(np.array([k * 0.1 + 0.01]))["d"] for k in range(11)]
    assert got == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


@pytest.mark.parametrize("choice", PARAMETERS["choice_mixed"].choices, ids=repr)
def test_every_choice_reads_back_with_its_type(choice: Any) -> None:
    limits = SPACES["choice_mixed"]
    ind = Individual({"p": choice, "y": 0.5}, limits)
    assert type(ind["p"]) is type(choice) and ind["p"] == choice
    ind["p"] = "a"
    ind["p"] = choice
    assert type(ind["p"]) is type(choice) and ind["p"] == choice


@pytest.mark.parametrize(
    ("given", "expected"),
    [(np.int64(16), 16), (np.int64(1), 1), (np.float64(1.0), 1.0), (np.bool_(True), True), (np.int64(0), 0)],
    ids=repr,
)
def test_numpy_scalars_are_taken_as_the_choice_of_their_kind(given: Any, expected: Any) -> None:
    ind = Individual({"p": given, "y": 0.5}, SPACES["choice_mixed"])
    assert type(ind["p"]) is type(expected) and ind["p"] == expected


def test_numpy_scalars_as_choices_become_python_values() -> None:
    """As ``Categorical``'s docstring says; ``numpy.float64`` and ``numpy.str_`` subclass float and str."""
    domain = Categorical((np.int64(16), np.float64(2.5), np.bool_(True), np.str_("a")))
    assert [type(c) for c in domain.choices] == [int, float, bool, str]
    assert SearchSpace.of({"c": domain}) is SearchSpace.of({"c": Categorical((16, 2.5, True, "a"))})


def test_a_log_value_set_again_reads_back_unchanged() -> None:
    """A value read from a log-scale slot, given back (``ind[name] = ind[name]``, ``Individual(best_params)``)
    reads back as itself: the 12 significant digits it is read with are a fixed point of log and exp.

    Slots found failing with 15 digits (about 1 in 4,000 uniform slots): the value read back changed in
    its 15th digit.
    """
    space = SearchSpace.of({"lr": Float(1e-5, 1e-1, log=True)})
    rng = random.Random(0)
    slots = [-4.612422562278485, -6.9087647365088385, -9.6185007253324]
    slots += [rng.uniform(space.lower[0], space.upper[0]) for _ in range(20_000)]
    changed = []
    for slot in slots:
        ind = Individual(np.array([slot]), space)
        value = ind["lr"]
        ind["lr"] = value
        if ind["lr"] != value:
            changed.append((slot, value, ind["lr"]))
    assert not changed, f"{len(changed)} of {len(slots)} values changed when set again, e.g. {changed[:3]}"


# ---------------------------------------------------------------------------------------------------------
# Log-uniform sampling
# ---------------------------------------------------------------------------------------------------------

SAMPLERS: dict[str, Callable[[SearchSpace, random.Random], np.ndarray]] = {
    "SearchSpace.sample": lambda space, rng: space.sample(rng),
    "InitUniform": lambda space, rng: InitUniform(space, rng=rng)([])[0].position,
    "InitUniformPSO": lambda space, rng: InitUniformPSO(space, 0, rng=rng)([])[0].position,
}


def log_draws(bounds: Any, sampler: str, n: int, seed: int) -> np.ndarray:
    space = SearchSpace.of({"lr": bounds})
    rng = random.Random(seed)
    draw = SAMPLERS[sampler]
    return np.log([space.decode(draw(space, rng))["lr"] for _ in range(n)])


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_a_float_log_range_is_sampled_log_uniformly(sampler: str) -> None:
    low, high = math.log(1e-5), math.log(1e-1)
    log_lr = log_draws(Float(1e-5, 1e-1, log=True), sampler, 2000, seed=0)
    assert stats.kstest(log_lr, stats.uniform(loc=low, scale=high - low).cdf).pvalue > 0.01
    # The same range without log: ln(value) is far from uniform (nearly all draws lie in the top decade).
    log_linear = log_draws((1e-5, 1e-1), sampler, 2000, seed=0)
    assert stats.kstest(log_linear, stats.uniform(loc=low, scale=high - low).cdf).pvalue < 0.01


def test_an_integer_log_range_draws_1_as_often_as_log_uniform_sampling_says() -> None:
    """``Integer(1, 1000, log=True)``: value ``v`` with probability ``ln((v + 1/2) / (v - 1/2)) / ln(2001)``.

    1 is drawn about 14.5 % of the time, 1000 about 0.013 %: about 1,100 times less often (a linear range
    draws each 0.1 % of the time).
    """
    space = SearchSpace.of({"n": Integer(1, 1000, log=True)})
    rng = random.Random(5)
    n = 100_000
    counts = Counter(space.decode(space.sample(rng))["n"] for _ in range(n))
    total = math.log(1000.5 / 0.5)
    for value in (1, 2, 10, 1000):
        expected = n * math.log((value + 0.5) / (value - 0.5)) / total
        assert abs(counts[value] - expected) < 5 * math.sqrt(expected) + 1, (value, counts[value], expected)
    assert counts[1] > 100 * max(counts[1000], 1)
    assert sum(c for v, c in counts.items() if v <= 10) == pytest.approx(n * math.log(21) / total, rel=0.03)
    assert set(counts) <= set(range(1, 1001))


# ---------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------

BAD_TYPES: dict[str, tuple[Callable[[], Any], str]] = {
    "Float low > high": (lambda: Float(1.0, 0.0), r"low = 1\.0 is greater than high = 0\.0"),
    "Float log with low 0": (lambda: Float(0.0, 1.0, log=True), r"log=True needs low > 0"),
    "Float log with low < 0": (lambda: Float(-1.0, 1.0, log=True), r"log=True needs low > 0"),
    "Float step not dividing": (lambda: Float(0.0, 1.0, step=0.3), r"not a multiple of step = 0\.3"),
    "Float step 0": (lambda: Float(0.0, 1.0, step=0.0), r"step must be positive"),
    "Float step < 0": (lambda: Float(0.0, 1.0, step=-0.5), r"step must be positive"),
    "Float log and step": (lambda: Float(0.1, 1.0, log=True, step=0.1), r"step and log=True"),
    "Float NaN": (lambda: Float(math.nan, 1.0), r"low: expected a finite number"),
    "Float inf": (lambda: Float(0.0, math.inf), r"high: expected a finite number"),
    "Float bool": (lambda: Float(True, 2.0), r"low: expected a number"),
    "Float string": (lambda: Float("0", 1.0), r"low: expected a number"),
    "Integer non-integral low": (lambda: Integer(1.5, 4), r"Integer: low: expected an integer, got 1\.5"),
    "Integer non-integral high": (lambda: Integer(1, 4.2), r"Integer: high: expected an integer"),
    "Integer low > high": (lambda: Integer(5, 1), r"low = 5 is greater than high = 1"),
    "Integer step not dividing": (lambda: Integer(0, 10, step=3), r"not a multiple of step = 3"),
    "Integer non-integral step": (lambda: Integer(0, 10, step=2.5), r"step: expected an integer"),
    "Integer step 0": (lambda: Integer(0, 10, step=0), r"step must be a positive integer"),
    "Integer log with low 0": (lambda: Integer(0, 10, log=True), r"log=True needs low >= 1"),
    "Integer log and step": (lambda: Integer(1, 10, log=True, step=3), r"step and log=True"),
    "Categorical empty": (lambda: Categorical(()), r"at least one choice"),
    "Categorical duplicate": (lambda: Categorical((16, 32, 16)), r"distinct"),
    "Categorical duplicate string": (lambda: Categorical(("a", "a")), r"distinct"),
    "Categorical NaN": (lambda: Categorical((1.0, math.nan)), r"finite, got nan"),
    "Categorical inf": (lambda: Categorical((math.inf,)), r"finite"),
    "Categorical list": (
        lambda: Categorical(([1, 2], 3)),
        r"str, int, float, bool or None, got \[1, 2\] \(list\)",
    ),
    "Categorical dict": (lambda: Categorical(({"a": 1},)), r"\(dict\)"),
    "Categorical of a string": (lambda: Categorical("abc"), r"sequence of values"),
}


@pytest.mark.parametrize("case", BAD_TYPES)
def test_a_bad_parameter_type_raises_a_value_error_naming_the_problem(case: str) -> None:
    build, message = BAD_TYPES[case]
    with pytest.raises(ValueError, match=message) as raised:
        build()
    assert isinstance(raised.value, SearchSpaceError)


BAD_LIMITS: dict[str, tuple[dict[str, Any], str]] = {
    "3-tuple of numbers": ({"batch": (16, 32, 64)}, r"limits\['batch'\].*propulate\.Categorical"),
    "3-tuple of floats": ({"lr": (0.1, 0.01, 0.001)}, r"limits\['lr'\].*propulate\.Categorical"),
    "1-tuple of a number": ({"n": (4,)}, r"limits\['n'\].*propulate\.Categorical"),
    "strings and numbers": ({"act": ("relu", 1)}, r"limits\['act'\]: mixes strings.*propulate\.Categorical"),
    "booleans": ({"flag": (True, False)}, r"limits\['flag'\].*propulate\.Categorical"),
    "None in a tuple": ({"norm": ("batch", None)}, r"limits\['norm'\].*propulate\.Categorical"),
    "JSON low > high": ({"lr": {"type": "float", "low": 1.0, "high": 0.0}}, r"limits\['lr'\].*greater than"),
    "JSON log with low 0": (
        {"lr": {"type": "float", "low": 0.0, "high": 1.0, "log": True}},
        r"limits\['lr'\].*low > 0",
    ),
    "JSON unknown type": (
        {"z": {"type": "complex", "low": 0}},
        r"limits\['z'\].*'float', 'int' or 'categorical'",
    ),
    "JSON unknown field": ({"z": {"type": "int", "low": 0, "high": 3, "base": 2}}, r"limits\['z'\].*base"),
    "JSON duplicate choices": ({"c": {"type": "categorical", "choices": [1, 1]}}, r"limits\['c'\].*distinct"),
    "a number": ({"x": 3.0}, r"limits\['x'\]"),
}


@pytest.mark.parametrize("build", [SearchSpace, SearchSpace.of], ids=["SearchSpace", "SearchSpace.of"])
@pytest.mark.parametrize("case", BAD_LIMITS)
def test_bad_limits_name_the_parameter(case: str, build: Callable[[Any], SearchSpace]) -> None:
    limits, message = BAD_LIMITS[case]
    with pytest.raises(ValueError, match=message) as raised:
        build({"ok": (0.0, 1.0), **limits})
    assert isinstance(raised.value, SearchSpaceError)


@pytest.mark.parametrize(
    ("name", "bad"),
    [("float_log", 0.0), ("float_log", -1.0), ("int", "3"), ("choice_mixed", 2), ("choice_mixed", "b")],
)
def test_values_outside_a_declaration_are_refused_when_set(name: str, bad: Any) -> None:
    ind = Individual({"p": VALUES[name], "y": 0.5}, SPACES[name])
    with pytest.raises(ValueError, match="p"):
        ind["p"] = bad
    assert ind["p"] == VALUES[name]


# ---------------------------------------------------------------------------------------------------------
# Normalization: a type that says no more than a tuple is the tuple
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("domain", "bounds"),
    [
        (Float(0, 1), (0.0, 1.0)),
        (Float(-2.0, 3.0), (-2.0, 3.0)),
        (Integer(1, 8), (1, 8)),
        (Integer(1.0, 8.0), (1, 8)),
        (Categorical(("a", "b")), ("a", "b")),
    ],
    ids=repr,
)
def test_a_type_that_says_no_more_than_a_tuple_is_the_tuple(domain: Any, bounds: tuple[Any, ...]) -> None:
    space = SearchSpace.of({"x": domain})
    assert space is SearchSpace.of({"x": bounds})
    assert space.limits == {"x": bounds}
    assert [type(b) for b in space.limits["x"]] == [type(b) for b in bounds]
    assert space.fingerprint == SearchSpace({"x": bounds}).fingerprint


def test_types_that_say_more_stay_types_and_differ_from_the_tuple() -> None:
    assert SearchSpace.of({"x": Float(1e-5, 1e-1, log=True)}) is not SearchSpace.of({"x": (1e-5, 1e-1)})
    assert SearchSpace.of({"x": Integer(0, 8, step=2)}) is not SearchSpace.of({"x": (0, 8)})
    ints = SearchSpace.of({"x": Categorical((1, 2))})
    floats = SearchSpace.of({"x": Categorical((1.0, 2.0))})
    bools = SearchSpace.of({"x": Categorical((True, False))})
    assert len({id(ints), id(floats), id(bools)}) == 3
    assert len({ints.fingerprint, floats.fingerprint, bools.fingerprint}) == 3


# ---------------------------------------------------------------------------------------------------------
# Round trips: pickle, JSON, the results frame, checkpoints
# ---------------------------------------------------------------------------------------------------------


def test_an_individual_of_every_type_pickles_with_its_values_and_types() -> None:
    ind = Individual(VALUES, EVERYTHING, generation=3, rank=1)
    ind.loss, ind.uid = 0.25, 7
    copy = pickle.loads(pickle.dumps(ind))
    assert copy.space is ind.space
    assert copy.position.tobytes() == ind.position.tobytes()
    assert typed(copy.params()) == typed(ind.params()) == typed(VALUES)
    assert (copy.loss, copy.uid, copy.generation, copy.rank) == (0.25, 7, 3, 1)


def test_individuals_unpickle_in_a_process_that_never_saw_their_space() -> None:
    """What another rank receives: the space is rebuilt from the pickle's signature, choices typed."""
    inds = [Individual({**VALUES, "choice_mixed": c}, EVERYTHING) for c in PARAMETERS["choice_mixed"].choices]
    code = (
        "import pickle, sys\n"
        "for ind in pickle.loads(sys.stdin.buffer.read()):\n"
        "    print(repr([(k, type(v).__name__, v) for k, v in ind.params().items()]))\n"
        "print(repr(ind.space.to_json()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps(inds),
        capture_output=True,
        check=True,
        cwd=REPO,
        timeout=60,
    ).stdout.decode()
    *params, space = out.splitlines()
    assert params == [repr([(k, type(v).__name__, v) for k, v in ind.params().items()]) for ind in inds]
    assert space == repr(SearchSpace.of(EVERYTHING).to_json())


@pytest.mark.parametrize("space", SPACES)
def test_the_json_of_a_space_reads_back_as_the_same_space(space: str) -> None:
    built = SearchSpace.of(SPACES[space])
    text = json.dumps(built.to_json())
    again = SearchSpace.of(json.loads(text))
    assert again is built
    assert again.fingerprint == built.fingerprint
    assert json.dumps(again.to_json()) == text


def test_the_json_of_a_mixed_choice_keeps_every_type() -> None:
    written = json.loads(json.dumps(SearchSpace.of(EVERYTHING).to_json()))
    assert written["choice_mixed"] == {
        "type": "categorical",
        "choices": [True, False, None, 16, 2.5, "a", 1, 1.0, 0],
    }
    assert [type(c) for c in written["choice_mixed"]["choices"]] == [
        bool, bool, type(None), int, float, str, int, float, int,
    ]  # fmt: skip
    assert written["float_log"] == {"type": "float", "low": 1e-5, "high": 0.1, "log": True, "step": None}
    assert written["int_step"] == {"type": "int", "low": -6, "high": 18, "log": False, "step": 4}
    assert written["tuple_float"] == [0.0, 1.0]


def finished(ind: Individual, uid: int, loss: float) -> Individual:
    """``ind`` as a completed evaluation of worker 0 on island 0."""
    ind.uid, ind.island, ind.rank, ind.generation = uid, 0, 0, uid
    ind.status, ind.loss, ind.evaltime, ind.evalperiod = Status.COMPLETED, loss, 1e9 + uid, 0.5
    return ind


CHOICE_COLUMNS: dict[str, Categorical] = {
    "mixed": Categorical((None, True, 16, 2.5, "a", False, 1, 1.0)),
    "ints": Categorical((16, 32, 64)),
    "floats": Categorical((0.5, 2.5)),
    "bools": Categorical((True, False)),
    "strings": Categorical(("relu", "tanh")),
    "none": Categorical((None,)),
}


def test_the_results_frame_holds_the_declared_choices_with_their_types() -> None:
    limits = {**CHOICE_COLUMNS, "lr": Float(1e-5, 1e-1, log=True), "n": Integer(-6, 18, step=4)}
    rng = random.Random(6)
    inds = []
    for uid in range(40):
        values = {name: rng.choice(domain.choices) for name, domain in CHOICE_COLUMNS.items()}
        values["lr"], values["n"] = 10.0 ** rng.choice([-5, -4, -3, -2, -1]), rng.choice(range(-6, 19, 4))
        inds.append(finished(Individual(values, limits), uid, rng.random()))
    # Each choice at least once.
    for name, domain in CHOICE_COLUMNS.items():
        for i, choice in enumerate(domain.choices):
            inds[i][name] = choice
    frame = to_dataframe(inds)
    assert frame["uid"].tolist() == list(range(40))
    for name in limits:
        column = frame[f"params_{name}"].tolist()
        assert [(type(v), v) for v in column] == [(type(ind[name]), ind[name]) for ind in inds], name
    assert frame.attrs["search_space"] == SearchSpace.of(limits).to_json()


def run_serially(limits: dict[str, Any], directory: Path, generations: int) -> tuple[Propulator, list]:
    """A real run on one rank; return the optimizer and the parameters its loss function received."""
    received: list[list[tuple[str, type, Any]]] = []
    target = {**VALUES, "float_log": 1e-3, "int_log": 64}

    def loss(params: dict[str, Any]) -> float:
        received.append(typed(params))
        return float(sum(params[k] != v for k, v in target.items() if k in params) + params.get("float", 0.0))

    rng = random.Random(8)
    propulator = Propulator(
        loss,
        get_default_propagator(4, limits, rng=rng),
        rng,
        generations=generations,
        checkpoint_path=directory,
    )
    propulator.propulate(debug=0)
    return propulator, received


def test_a_checkpoint_of_every_type_reads_back_with_identical_parameters(tmp_path: Path) -> None:
    propulator, received = run_serially(EVERYTHING, tmp_path, 60)
    space = SearchSpace.of(EVERYTHING)
    assert len(received) == 60
    for ind in propulator.population:
        assert_declared(ind, EVERYTHING)

    checkpoint = read_checkpoint(tmp_path)
    assert checkpoint.space is space
    assert checkpoint.config["limits"] == space.to_json()
    assert checkpoint.config["fingerprint"] == space.fingerprint
    live = {ind.uid: typed(ind.params()) for ind in propulator.population}
    stored = {ind.uid: typed(ind.params()) for ind in checkpoint.population}
    assert stored == live
    for ind in checkpoint.population:
        assert_declared(ind, EVERYTHING)

    frame = load_dataframe(tmp_path)
    columns = [frame[f"params_{name}"].tolist() for name in EVERYTHING]
    rows = [
        [(name, type(v), v) for name, v in zip(EVERYTHING, row, strict=True)]
        for row in zip(*columns, strict=True)
    ]
    assert sorted(map(repr, rows)) == sorted(map(repr, received))
    assert frame["value"].min() == propulator.best_loss
    assert typed(propulator.best_params) in rows


# Fingerprints of spaces of tuples as Propulate computed them before parameter types (commit d454520,
# ``SearchSpace.of(limits).fingerprint`` with ``git show d454520:propulate/space.py``): a checkpoint of the
# earlier format names its space by them, and a resumed run refuses a checkpoint of another fingerprint.
OLD_FINGERPRINTS = {
    "x": ({"x": (0.0, 1.0)}, "1aba4722743f31c2"),
    "x, n, act": ({"x": (0.0, 1.0), "n": (1, 8), "act": ("relu", "tanh")}, "944e8d2de9cace68"),
}


@pytest.mark.parametrize("case", OLD_FINGERPRINTS)
def test_a_space_of_tuples_keeps_its_fingerprint_of_the_earlier_format(case: str) -> None:
    limits, fingerprint = OLD_FINGERPRINTS[case]
    assert SearchSpace.of(limits).fingerprint == fingerprint
    assert SearchSpace.of({name: declared(b) for name, b in limits.items()}).fingerprint == fingerprint


def test_a_checkpoint_of_tuples_is_written_and_read_in_the_earlier_format(tmp_path: Path) -> None:
    """Limits as lists only, as every checkpoint was written before parameter types; it reads back."""
    limits, fingerprint = OLD_FINGERPRINTS["x, n, act"]
    _, received = run_serially(limits, tmp_path, 20)
    checkpoint = read_checkpoint(tmp_path)
    assert checkpoint.config["limits"] == {"x": [0.0, 1.0], "n": [1, 8], "act": ["relu", "tanh"]}
    assert checkpoint.config["fingerprint"] == fingerprint
    assert checkpoint.space.fingerprint == fingerprint
    assert checkpoint.space is SearchSpace.of(limits)
    frame = load_dataframe(tmp_path)
    assert len(frame) == len(received) == 20
    assert sorted(frame["params_n"].tolist()) == sorted(dict((k, v) for k, _, v in r)["n"] for r in received)
    # A run over the same space resumes it: its population holds the 20 evaluations read back.
    again, more = run_serially(limits, tmp_path, 30)
    assert len(more) == 10
    assert len(again.population) == 30


def test_a_run_over_numpy_choices_resumes_its_checkpoint(tmp_path: Path) -> None:
    """Choices made with numpy (``tuple(np.linspace(...))``): the checkpoint's JSON reads back as the same
    space, so the same script resumes its own checkpoint instead of refusing it as another search space.
    """
    limits = {"x": Float(0.0, 1.0), "wd": Categorical(tuple(np.linspace(0.1, 0.5, 5)))}
    run_serially(limits, tmp_path, 10)
    _, received = run_serially(limits, tmp_path, 15)
    assert len(received) == 5
    assert {params[1][1] for params in received} == {float}
