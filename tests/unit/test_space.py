"""Search space: parsing and validation of limits, encode/decode, sampling (propulate.space)."""

from __future__ import annotations

import logging
import math
import pickle
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from propulate import Categorical, Float, Integer
from propulate.errors import SearchSpaceError
from propulate.space import Kind, SearchSpace

MIXED = {
    "lr": (1e-4, 1e-1),
    "layers": (1, 8),
    "activation": ("relu", "tanh", "sigmoid"),
    "dropout": (0.0, 0.5),
    "optimizer": ("sgd", "adam"),
}

# Both ways to build a space; they must agree on what is valid.
BUILDERS: dict[str, Callable[[Any], SearchSpace]] = {
    "SearchSpace": SearchSpace,
    "SearchSpace.of": SearchSpace.of,
}


def global_rng_state() -> bytes:
    # The legacy global numpy state is exactly what must stay untouched.
    return pickle.dumps((random.getstate(), np.random.get_state()))  # noqa: NPY002


@pytest.fixture
def propulate_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Capture the "propulate" logger even when it does not propagate to the root logger."""
    logger = logging.getLogger("propulate")
    old_level, old_propagate = logger.level, logger.propagate
    logger.addHandler(caplog.handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False  # caplog's handler also sits on the root logger: capture each record once
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(old_level)
        logger.propagate = old_propagate


# ---------------------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bounds", "kind", "normalized"),
    [
        ((0.0, 1.0), Kind.FLOAT, (0.0, 1.0)),
        ((-5.12, 5.12), Kind.FLOAT, (-5.12, 5.12)),
        ((0, 1.0), Kind.FLOAT, (0.0, 1.0)),
        ((0.0, 1), Kind.FLOAT, (0.0, 1.0)),
        ((0, 1), Kind.INT, (0, 1)),
        ((-3, 7), Kind.INT, (-3, 7)),
        ((4, 4), Kind.INT, (4, 4)),
        ((np.int64(2), np.int64(9)), Kind.INT, (2, 9)),
        ((np.float32(0.5), np.float64(2.0)), Kind.FLOAT, (0.5, 2.0)),
        (("relu",), Kind.CATEGORICAL, ("relu",)),
        (("relu", "tanh", "sigmoid"), Kind.CATEGORICAL, ("relu", "tanh", "sigmoid")),
        ([0.0, 1.0], Kind.FLOAT, (0.0, 1.0)),
    ],
)
@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_parameter_kind_and_normalized_limits(
    build: Callable[[Any], SearchSpace], bounds: tuple[Any, ...], kind: Kind, normalized: tuple[Any, ...]
) -> None:
    space = build({"p": bounds})
    (param,) = space.parameters
    assert param.name == "p"
    assert param.kind is kind
    assert space.limits == {"p": normalized}
    assert [type(b) for b in space.limits["p"]] == [type(b) for b in normalized]


def test_int_range_is_inclusive() -> None:
    space = SearchSpace({"n": (2, 4)})
    rng = random.Random(0)
    drawn = {space.decode(space.sample(rng))["n"] for _ in range(500)}
    assert drawn == {2, 3, 4}


def test_layout_of_the_embedding() -> None:
    space = SearchSpace(MIXED)
    assert space.names == tuple(MIXED)
    assert [(p.offset, p.width) for p in space.parameters] == [(0, 1), (1, 1), (2, 3), (5, 1), (6, 2)]
    assert space.ndim == 8
    assert space.has_float
    assert not SearchSpace({"n": (0, 3), "c": ("a", "b")}).has_float
    # Categorical slots live in [0, 1], numeric slots in their range.
    np.testing.assert_array_equal(space.lower, [1e-4, 1, 0, 0, 0, 0.0, 0, 0])
    np.testing.assert_array_equal(space.upper, [1e-1, 8, 1, 1, 1, 0.5, 1, 1])


def test_int_and_float_ranges_are_different_cached_spaces() -> None:
    int_space = SearchSpace.of({"x": (0, 1)})
    float_space = SearchSpace.of({"x": (0, 1.0)})
    assert int_space is not float_space
    assert int_space.parameters[0].kind is Kind.INT
    assert float_space.parameters[0].kind is Kind.FLOAT
    # Asking again returns the cached objects.
    assert SearchSpace.of({"x": (0, 1)}) is int_space
    assert SearchSpace.of({"x": (0, 1.0)}) is float_space
    assert SearchSpace.of(int_space) is int_space


def test_space_pickles_to_the_shared_object() -> None:
    space = SearchSpace.of(MIXED)
    assert pickle.loads(pickle.dumps(space)) is space


# ---------------------------------------------------------------------------------------------------------
# High-to-low ranges
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bounds", "normalized", "kind"),
    [((0.01, 0.0001), (0.0001, 0.01), Kind.FLOAT), ((10, -2), (-2, 10), Kind.INT)],
    ids=["float", "int"],
)
def test_high_to_low_range_is_normalized_and_warned_once(
    propulate_log: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
    bounds: tuple[float, float],
    normalized: tuple[float, float],
    kind: Kind,
) -> None:
    # A name used by no other test, so that no earlier warning for it exists in this process.
    name = f"reversed_{request.node.callspec.id}"
    for _ in range(3):
        space = SearchSpace({name: bounds})
        assert space.limits == {name: normalized}
        assert space.parameters[0].kind is kind
        assert space.parameters[0].low <= space.parameters[0].high
    SearchSpace.of({name: bounds})

    warnings = [r for r in propulate_log.records if r.levelno == logging.WARNING and name in r.getMessage()]
    assert len(warnings) == 1


def test_high_to_low_range_samples_inside_the_range() -> None:
    space = SearchSpace({"lr_reversed_sampling": (0.01, 0.0001)})
    rng = random.Random(1)
    values = [space.decode(space.sample(rng))["lr_reversed_sampling"] for _ in range(200)]
    assert all(0.0001 <= v <= 0.01 for v in values)


# ---------------------------------------------------------------------------------------------------------
# Invalid limits
# ---------------------------------------------------------------------------------------------------------

BAD_BOUNDS = {
    "empty tuple": (),
    "1-tuple of numbers": (1.0,),
    "1-tuple of int": (3,),
    "3-tuple of numbers": (0.0, 1.0, 2.0),
    "mixed str and number": ("a", 1.0),
    "number then str": (1, "a"),
    "None category": (None,),
    "None in categories": ("a", None),
    "duplicate categories": ("a", "b", "a"),
    "NaN low": (math.nan, 1.0),
    "NaN high": (0.0, math.nan),
    "inf high": (0.0, math.inf),
    "-inf low": (-math.inf, 0.0),
    "bool bounds": (False, True),
    "bool and int": (0, True),
    # ("relu") is a string, not a 1-tuple: it must not become the categories "r", "e", "l", "u".
    "bare string": "relu",
    "number": 5,
    "None": None,
}


@pytest.mark.parametrize("bounds", BAD_BOUNDS.values(), ids=BAD_BOUNDS.keys())
@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_bad_bounds_raise_value_error_naming_the_parameter(
    build: Callable[[Any], SearchSpace], bounds: object
) -> None:
    limits = {"fine": (0.0, 1.0), "culprit_param": bounds}
    with pytest.raises(ValueError, match="culprit_param") as info:
        build(limits)
    assert isinstance(info.value, SearchSpaceError)


@pytest.mark.parametrize("limits", [{}, [("x", (0.0, 1.0))], None, "x", (0.0, 1.0)], ids=repr)
@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_empty_or_non_dict_limits_raise(build: Callable[[Any], SearchSpace], limits: object) -> None:
    with pytest.raises(SearchSpaceError, match="limits"):
        build(limits)


@pytest.mark.parametrize("name", ["_reserved", "__x"])
@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_reserved_names_raise(build: Callable[[Any], SearchSpace], name: str) -> None:
    with pytest.raises(SearchSpaceError, match=name):
        build({"ok": (0, 1), name: (0.0, 1.0)})


@pytest.mark.parametrize("name", ["", 3, None])
def test_non_string_or_empty_names_raise(name: object) -> None:
    with pytest.raises(SearchSpaceError):
        SearchSpace({name: (0.0, 1.0)})


def test_search_space_error_is_a_value_error() -> None:
    assert issubclass(SearchSpaceError, ValueError)


# ---------------------------------------------------------------------------------------------------------
# Encode / decode
# ---------------------------------------------------------------------------------------------------------

ROUND_TRIP_VALUES = [
    {"lr": 1e-4, "layers": 1, "activation": "relu", "dropout": 0.0, "optimizer": "sgd"},
    {"lr": 0.05, "layers": 4, "activation": "tanh", "dropout": 0.25, "optimizer": "adam"},
    {"lr": 0.1, "layers": 8, "activation": "sigmoid", "dropout": 0.5, "optimizer": "adam"},
]


@pytest.mark.parametrize("values", ROUND_TRIP_VALUES)
def test_encode_decode_round_trip(values: dict[str, Any]) -> None:
    space = SearchSpace.of(MIXED)
    position = space.encode(values)
    assert position.shape == (space.ndim,)
    assert position.dtype == np.float64
    decoded = space.decode(position)
    assert decoded == values
    assert [type(v) for v in decoded.values()] == [type(v) for v in values.values()]
    np.testing.assert_array_equal(space.encode(decoded), position)


def test_encode_one_hot_blocks() -> None:
    space = SearchSpace.of(MIXED)
    position = space.encode(ROUND_TRIP_VALUES[1])
    np.testing.assert_array_equal(position[2:5], [0, 1, 0])
    np.testing.assert_array_equal(position[6:8], [0, 1])


@pytest.mark.parametrize(
    ("slot", "expected"), [(2.4, 2), (2.6, 3), (-7.0, 1), (100.0, 8)], ids=["down", "up", "below", "above"]
)
def test_decode_int_rounds_and_clips(slot: float, expected: int) -> None:
    space = SearchSpace.of(MIXED)
    position = space.encode(ROUND_TRIP_VALUES[0])
    position[space.index["layers"].offset] = slot
    value = space.decode(position)["layers"]
    assert type(value) is int
    assert value == expected


@pytest.mark.parametrize(
    "values",
    [
        {"lr": 0.01, "layers": 2, "activation": "relu", "dropout": 0.1},
        {**ROUND_TRIP_VALUES[0], "unknown": 1.0},
        {**ROUND_TRIP_VALUES[0], "activation": "gelu"},
        {**ROUND_TRIP_VALUES[0], "lr": "fast"},
    ],
    ids=["missing", "unknown", "bad category", "non-number"],
)
def test_encode_rejects_values_that_do_not_fit(values: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SearchSpace.of(MIXED).encode(values)


# ---------------------------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------------------------


def test_samples_stay_in_bounds_with_the_right_types() -> None:
    space = SearchSpace.of(MIXED)
    rng = random.Random(42)
    for _ in range(300):
        position = space.sample(rng)
        assert np.all(position >= space.lower) and np.all(position <= space.upper)
        values = space.decode(position)
        for p in space.parameters:
            value = values[p.name]
            if p.kind is Kind.CATEGORICAL:
                assert value in p.categories
                block = position[p.offset : p.offset + p.width]
                assert sorted(block) == [0.0] * (p.width - 1) + [1.0]
            else:
                assert type(value) is (int if p.kind is Kind.INT else float)
                assert p.low <= value <= p.high


def test_sampling_uses_only_the_given_rng() -> None:
    space = SearchSpace.of(MIXED)
    before = global_rng_state()
    first = [space.sample(random.Random(7)) for _ in range(5)]
    second = [space.sample(random.Random(7)) for _ in range(5)]
    assert global_rng_state() == before
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


def test_from_canonical_reads_back_every_parameter_type() -> None:
    """What a worker announces (canonical bytes) reads back as a position of the same configuration:
    log scales (float and int), steps, integers, categories of any type."""
    limits = {
        "lr": Float(1e-5, 1e-1, log=True),
        "units": Integer(8, 512, log=True),
        "dropout": Float(0.0, 0.5, step=0.05),
        "layers": (1, 8),
        "act": ("relu", "tanh"),
        "flag": Categorical((True, None, 3)),
        "x": (-1.0, 1.0),
    }
    space = SearchSpace.of(limits)
    rng = random.Random(5)
    for _ in range(200):
        position = space.sample(rng)
        position += np.random.default_rng(rng.randrange(1 << 30)).normal(0, 0.1, space.ndim) * (
            space.upper - space.lower
        )
        position = space.clip(position)
        back = space.from_canonical(space.canonical(position))
        assert space.decode(back) == space.decode(position)
        assert space.key(back) == space.key(position)
    with pytest.raises(ValueError, match="data: expected"):
        space.from_canonical(b"\0" * 8)


def test_check_inside_names_a_value_outside_its_range() -> None:
    space = SearchSpace.of({"lr": Float(1e-4, 1e-1, log=True), "n": (1, 8), "act": ("relu", "tanh")})
    space.check_inside(space.encode({"lr": 1e-4, "n": 8, "act": "tanh"}))  # the ends are inside
    with pytest.raises(ValueError, match=r"lr: 0\.5 is outside \[0\.0001, 0\.1\]"):
        space.check_inside(space.encode({"lr": 0.5, "n": 2, "act": "relu"}))
    with pytest.raises(ValueError, match=r"n: 0 is outside \[1, 8\]"):
        space.check_inside(space.encode({"lr": 1e-3, "n": 0, "act": "relu"}))
