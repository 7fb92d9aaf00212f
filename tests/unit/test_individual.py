"""Individual: construction, mapping access, categorical encoding, copies, pickling (propulate.individual)."""

from __future__ import annotations

import math
import pickle
from typing import Any

import numpy as np
import pytest

from propulate import Individual
from propulate.space import Kind, SearchSpace

# Categoricals first, in the middle and last (SPEC §4 defect 1 hit every categorical but the first).
LIMITS = {
    "first": ("a", "b", "c"),
    "lr": (1e-4, 1e-1),
    "middle": ("p", "q", "r", "s"),
    "layers": (1, 8),
    "last": ("u", "v", "w"),
}
VALUES = {"first": "a", "lr": 0.01, "middle": "p", "layers": 3, "last": "u"}
CATEGORICALS = [name for name, bounds in LIMITS.items() if isinstance(bounds[0], str)]

PROVENANCE = {
    "loss": 0.25,
    "active": False,
    "generation": 7,
    "rank": 2,
    "island": 1,
    "current": 3,
    "migration_steps": 2,
    "migration_history": "1-0-1",
    "evaltime": 1_700_000_000.5,
    "evalperiod": 12.5,
    "uid": 42,
}


@pytest.fixture
def ind() -> Individual:
    return Individual(dict(VALUES), LIMITS, generation=4, rank=1)


def evaluated(ind: Individual) -> Individual:
    """Give ``ind`` a loss, provenance, metrics and a velocity."""
    for attribute, value in PROVENANCE.items():
        setattr(ind, attribute, value)
    ind.metrics = {"accuracy": 0.9}
    ind.velocity = np.linspace(-1.0, 1.0, ind.space.ndim)
    return ind


def assert_same_record(a: Individual, b: Individual) -> None:
    assert a.params() == b.params()
    np.testing.assert_array_equal(a.position, b.position)
    np.testing.assert_array_equal(a.velocity, b.velocity)
    assert a.metrics == b.metrics
    for attribute in PROVENANCE:
        assert getattr(a, attribute) == getattr(b, attribute), attribute


# ---------------------------------------------------------------------------------------------------------
# Construction
# ---------------------------------------------------------------------------------------------------------


def test_construct_from_dict(ind: Individual) -> None:
    assert dict(ind) == VALUES
    assert ind.position.shape == (SearchSpace.of(LIMITS).ndim,)
    assert ind.generation == 4
    assert ind.rank == 1
    assert ind.loss == math.inf
    assert ind.active
    assert ind.velocity is None
    assert ind.space is SearchSpace.of(LIMITS)
    assert ind.limits == SearchSpace.of(LIMITS).limits


def test_construct_from_position_array(ind: Individual) -> None:
    velocity = np.ones_like(ind.position)
    twin = Individual(ind.position, LIMITS, velocity=velocity)
    assert dict(twin) == VALUES
    np.testing.assert_array_equal(twin.velocity, velocity)
    # The array is copied: changing the source does not change the individual.
    source = ind.position.copy()
    other = Individual(source, LIMITS)
    source[:] = 0.0
    assert dict(other) == VALUES


def test_construct_from_list_position(ind: Individual) -> None:
    assert dict(Individual(list(ind.position), LIMITS)) == VALUES


@pytest.mark.parametrize(
    "shape_of",
    [lambda n: (n + 1,), lambda n: (n - 1,), lambda n: (1, n), lambda n: (n, 1), lambda n: ()],
    ids=["too long", "too short", "row", "column", "scalar"],
)
def test_position_of_wrong_shape_raises(shape_of: Any) -> None:
    ndim = SearchSpace.of(LIMITS).ndim
    with pytest.raises(ValueError, match="position"):
        Individual(np.zeros(shape_of(ndim)), LIMITS)


@pytest.mark.parametrize(
    "values",
    [
        {k: v for k, v in VALUES.items() if k != "lr"},
        {**VALUES, "unknown": 1},
        {**VALUES, "middle": "z"},
    ],
    ids=["missing", "unknown", "bad category"],
)
def test_dict_that_does_not_fit_raises(values: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Individual(values, LIMITS)


# ---------------------------------------------------------------------------------------------------------
# Mapping access
# ---------------------------------------------------------------------------------------------------------


def test_mapping_views_follow_the_current_values(ind: Individual) -> None:
    assert len(ind) == len(LIMITS)
    assert list(ind) == list(LIMITS)
    assert list(ind.keys()) == list(LIMITS)
    assert "lr" in ind and "middle" in ind
    assert "nope" not in ind
    keys, values, items = ind.keys(), ind.values(), ind.items()

    ind["lr"] = 0.05
    ind["layers"] = 6
    ind["middle"] = "s"
    ind["last"] = "w"

    expected = {**VALUES, "lr": 0.05, "layers": 6, "middle": "s", "last": "w"}
    assert ind["lr"] == 0.05
    assert list(values) == list(expected.values())
    assert list(items) == list(expected.items())
    assert list(keys) == list(expected)
    assert ind.params() == expected


@pytest.mark.parametrize("key", ["nope", "LR", 0])
def test_unknown_key_raises_key_error(ind: Individual, key: Any) -> None:
    with pytest.raises(KeyError):
        ind[key]
    with pytest.raises(KeyError):
        ind[key] = 1.0
    with pytest.raises(KeyError):
        del ind[key]
    assert key not in ind
    assert dict(ind) == VALUES


def test_underscore_key_is_data_not_a_parameter(ind: Individual) -> None:
    with pytest.raises(KeyError, match="not set on this individual"):
        ind["_loss"]
    assert "_loss" not in ind
    ind["_loss"] = [1, 0.2, 3]
    assert ind["_loss"] == [1, 0.2, 3] and "_loss" in ind and "_loss" in ind.keys()
    assert dict(ind) == VALUES and len(ind) == len(VALUES) and ind.params() == VALUES
    assert ind.mapping == {**VALUES, "_loss": [1, 0.2, 3]}
    with pytest.raises(KeyError, match="parameter"):
        del ind["lr"]
    del ind["_loss"]
    assert "_loss" not in ind and ind.extras == {}


def test_setting_a_category_that_does_not_exist_raises_and_changes_nothing(ind: Individual) -> None:
    before = ind.position.copy()
    with pytest.raises(ValueError, match="middle"):
        ind["middle"] = "z"
    np.testing.assert_array_equal(ind.position, before)


@pytest.mark.parametrize("name", CATEGORICALS)
@pytest.mark.parametrize("order", [1, -1], ids=["forward", "backward"])
def test_every_category_of_every_categorical_round_trips(ind: Individual, name: str, order: int) -> None:
    param = ind.space.index[name]
    others = {k: v for k, v in VALUES.items() if k != name}
    for category in LIMITS[name][::order]:
        ind[name] = category
        assert ind[name] == category
        assert dict(ind)[name] == category
        block = ind.position[param.offset : param.offset + param.width]
        assert sorted(block) == [0.0] * (param.width - 1) + [1.0]
        assert block[LIMITS[name].index(category)] == 1.0
        assert {k: v for k, v in ind.items() if k != name} == others


def test_categorical_survives_setting_the_other_categoricals(ind: Individual) -> None:
    ind["first"], ind["middle"], ind["last"] = "c", "r", "v"
    ind["first"] = "b"
    assert (ind["first"], ind["middle"], ind["last"]) == ("b", "r", "v")
    assert ind.position.sum() == pytest.approx(ind["lr"] + ind["layers"] + 3)


@pytest.mark.parametrize(
    ("slot", "expected"),
    [(1.0, 1), (4.4, 4), (4.6, 5), (8.0, 8), (-3.0, 1), (20.0, 8)],
)
def test_ints_decode_as_python_int_within_bounds(ind: Individual, slot: float, expected: int) -> None:
    ind.position[ind.space.index["layers"].offset] = slot
    assert type(ind["layers"]) is int
    assert ind["layers"] == expected
    assert type(dict(ind)["layers"]) is int


def test_types_of_decoded_values(ind: Individual) -> None:
    for p in ind.space.parameters:
        expected = {Kind.FLOAT: float, Kind.INT: int, Kind.CATEGORICAL: str}[p.kind]
        assert type(ind[p.name]) is expected


# ---------------------------------------------------------------------------------------------------------
# Comparison and copies
# ---------------------------------------------------------------------------------------------------------


def test_equals_compares_parameters_and_loss(ind: Individual) -> None:
    twin = Individual(dict(VALUES), LIMITS, generation=99, rank=5)
    ind.loss = twin.loss = 1.5
    assert ind.equals(twin) and twin.equals(ind)

    twin.loss = 2.0
    assert not ind.equals(twin)

    twin.loss = 1.5
    twin["middle"] = "q"
    assert not ind.equals(twin)

    twin["middle"] = VALUES["middle"]
    ind.loss = twin.loss = math.nan
    assert ind.equals(twin)


def test_individuals_are_distinct_objects_for_equality_and_hashing(ind: Individual) -> None:
    twin = Individual(dict(VALUES), LIMITS)
    assert ind != twin
    assert len({ind, twin}) == 2


def test_child_is_a_fresh_unevaluated_copy(ind: Individual) -> None:
    parent = evaluated(ind)
    child = parent.child()
    assert child is not parent
    assert dict(child) == dict(parent)
    assert child.space is parent.space
    assert child.loss == math.inf
    assert child.active
    assert child.generation == -1
    assert child.island == -1
    assert child.migration_steps == 0
    assert child.migration_history == ""
    assert child.evaltime == math.inf
    assert child.metrics == {}
    assert child.uid == -1
    np.testing.assert_array_equal(child.velocity, parent.velocity)

    child["lr"] = 0.09
    child["middle"] = "s"
    child.velocity[0] = 100.0
    assert dict(parent) == VALUES
    assert parent.velocity[0] == -1.0


def test_copy_keeps_loss_and_provenance_with_independent_arrays(ind: Individual) -> None:
    original = evaluated(ind)
    twin = original.copy()
    assert twin is not original
    assert_same_record(twin, original)

    twin["layers"] = 8
    twin["last"] = "w"
    twin.velocity[:] = 0.0
    twin.metrics["accuracy"] = 0.1
    assert dict(original) == VALUES
    assert original.velocity[0] == -1.0
    assert original.metrics == {"accuracy": 0.9}


# ---------------------------------------------------------------------------------------------------------
# Pickling (individuals travel between ranks and into checkpoints)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL])
def test_pickle_round_trip_keeps_everything(ind: Individual, protocol: int) -> None:
    original = evaluated(ind)
    original["middle"] = "r"
    restored = pickle.loads(pickle.dumps(original, protocol=protocol))
    assert restored is not original
    assert_same_record(restored, original)
    assert restored.equals(original)
    assert dict(restored) == {**VALUES, "middle": "r"}


def test_unpickled_individuals_share_the_space(ind: Individual) -> None:
    other = Individual({**VALUES, "last": "v"}, LIMITS)
    first = pickle.loads(pickle.dumps(ind))
    second = pickle.loads(pickle.dumps(other))
    assert first.space is second.space is SearchSpace.of(LIMITS)
    assert first.space is ind.space


def test_unpickled_individual_without_velocity(ind: Individual) -> None:
    restored = pickle.loads(pickle.dumps(ind))
    assert restored.velocity is None
    assert dict(restored) == VALUES
