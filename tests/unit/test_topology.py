"""Migration topologies: shapes, targets, reachability (BFS), messages per round, bad names; the cost of a
named topology per island at 10,000 islands; the checkpoint's setting and how a resume logs its change."""

from __future__ import annotations

import logging
import math
import random
import tracemalloc
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from propulate.checkpoint.format import PLAN_DTYPE
from propulate.checkpoint.session import SessionPlan, describe_session
from propulate.errors import LayoutError
from propulate.migration import (
    DEFAULT_TOPOLOGY,
    TOPOLOGIES,
    MigrationPolicy,
    Topology,
    check_topology,
    complete_topology,
    hypercube_topology,
    messages_per_round,
    ring_topology,
    same_topology_setting,
    topology_setting_words,
)
from propulate.propagators.base import SelectMax, SelectMin

SIZES = [1, 2, 3, 4, 5, 8, 16, 1000]


def ceil_log2(num_islands: int) -> int:
    return math.ceil(math.log2(num_islands)) if num_islands > 1 else 0


def distances_from(topology: np.ndarray, source: int) -> np.ndarray:
    """Migration steps from island ``source`` to every island by breadth-first search; -1 if unreachable."""
    targets = [np.flatnonzero(row) for row in topology]
    distance = np.full(len(topology), -1)
    distance[source] = 0
    queue = deque([source])
    while queue:
        island = queue.popleft()
        for target in map(int, targets[island]):
            if distance[target] < 0:
                distance[target] = distance[island] + 1
                queue.append(target)
    return distance


def diameter(topology: np.ndarray) -> int:
    """The most migration steps any island needs to reach any other; -1 if one cannot.

    Every named topology is circulant (row ``i`` is row 0 shifted by ``i``), so every island sees the same
    distances: one search from island 0 gives the diameter (a search from each of 1,000 islands of the
    complete topology would take minutes).
    """
    assert all(np.array_equal(row, np.roll(topology[0], i)) for i, row in enumerate(topology))
    distances = distances_from(topology, 0)
    return -1 if (distances < 0).any() else int(distances.max())


@pytest.mark.parametrize("num_islands", SIZES)
@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_every_named_topology_is_a_checked_array(name, num_islands):
    topology = check_topology(name, num_islands)
    assert topology.shape == (num_islands, num_islands)
    assert np.issubdtype(topology.dtype, np.integer)
    assert not np.diag(topology).any()
    assert set(np.unique(topology)) <= {0, 1}
    # Checking it again (as Propulator does with what Islands hands it) changes nothing.
    assert np.array_equal(check_topology(topology, num_islands), topology)


@pytest.mark.parametrize("num_islands", SIZES)
def test_hypercube_sends_to_the_power_of_two_jumps(num_islands):
    topology = hypercube_topology(num_islands)
    k = ceil_log2(num_islands)
    for island, row in enumerate(topology):
        expected = {(island + 2**j) % num_islands for j in range(k)}
        assert set(np.flatnonzero(row)) == expected
    assert (topology.sum(axis=1) == k).all(), "out-degree ceil(log2 I)"
    assert (topology.sum(axis=0) == k).all(), "as many sources as targets (a circulant graph)"


@pytest.mark.parametrize("num_islands", SIZES)
def test_hypercube_reaches_every_island_within_ceil_log2_steps(num_islands):
    k = ceil_log2(num_islands)
    steps = diameter(hypercube_topology(num_islands))
    assert 0 <= steps <= k
    if num_islands & (num_islands - 1) == 0:  # a power of two: exactly log2 I
        assert steps == k
    if num_islands <= 16:  # the search from every island agrees with the circulant shortcut
        topology = hypercube_topology(num_islands)
        assert max(max(distances_from(topology, island)) for island in range(num_islands)) == steps


def test_hypercube_diameter_below_ceil_log2_when_not_a_power_of_two():
    assert {n: diameter(hypercube_topology(n)) for n in (3, 5, 12, 1000)} == {3: 1, 5: 2, 12: 3, 1000: 9}


@pytest.mark.parametrize("num_islands", [1, 2, 3])
def test_hypercube_is_complete_up_to_three_islands(num_islands):
    assert np.array_equal(hypercube_topology(num_islands), complete_topology(num_islands))


@pytest.mark.parametrize("num_islands", SIZES)
def test_complete_and_ring(num_islands):
    complete = complete_topology(num_islands)
    assert (complete.sum(axis=1) == num_islands - 1).all()
    assert diameter(complete) == min(num_islands - 1, 1)
    ring = ring_topology(num_islands)
    assert (ring.sum(axis=1) == min(num_islands - 1, 1)).all()
    assert all(ring[i, (i + 1) % num_islands] == 1 for i in range(num_islands) if num_islands > 1)
    assert diameter(ring) == num_islands - 1


@pytest.mark.parametrize("num_islands", SIZES)
def test_messages_per_round(num_islands):
    p = 0.9
    k = ceil_log2(num_islands)
    assert messages_per_round(hypercube_topology(num_islands), p) == pytest.approx(num_islands * p * k)
    assert messages_per_round(complete_topology(num_islands), p) == pytest.approx(
        num_islands * p * (num_islands - 1)
    )
    assert messages_per_round(ring_topology(num_islands), p) == pytest.approx(
        num_islands * p if num_islands > 1 else 0
    )


def test_messages_per_round_figures_of_the_docs():
    figures = {
        n: (messages_per_round(complete_topology(n), 0.9), messages_per_round(hypercube_topology(n), 0.9))
        for n in (8, 16, 128, 1000)
    }
    expected = {8: (50.4, 21.6), 16: (216, 57.6), 128: (14630.4, 806.4), 1000: (899100, 9000)}
    for n, (complete, hypercube) in expected.items():
        assert figures[n] == (pytest.approx(complete), pytest.approx(hypercube))


def test_messages_per_round_counts_messages_not_individuals():
    topology = np.array([[0, 2, 0], [0, 0, 3], [1, 0, 0]])
    assert messages_per_round(topology, 0.5) == pytest.approx(1.5)


@pytest.mark.parametrize("num_islands", SIZES)
def test_none_is_the_default(num_islands):
    assert DEFAULT_TOPOLOGY == "hypercube"
    assert np.array_equal(check_topology(None, num_islands), hypercube_topology(num_islands))


def test_one_island_sends_nothing_whatever_the_name():
    for name in TOPOLOGIES:
        assert not check_topology(name, 1).any()


@pytest.mark.parametrize("bad", ["star", "Hypercube", "", "complete "])
def test_unknown_names_are_refused_with_the_allowed_ones(bad):
    with pytest.raises(LayoutError) as raised:
        check_topology(bad, 4)
    assert isinstance(raised.value, ValueError)
    message = str(raised.value)
    assert message.startswith("migration_topology: ")
    assert repr(bad) in message
    assert all(repr(name) in message for name in TOPOLOGIES)


def test_arrays_are_checked_as_before():
    given = [[0, 2], [1, 0]]
    assert check_topology(given, 2).tolist() == given
    with pytest.raises(LayoutError, match="migration_topology: expected shape"):
        check_topology(np.ones((3, 3), dtype=int), 2)
    with pytest.raises(LayoutError, match="whole numbers"):
        check_topology([[0, 0.5], [1, 0]], 2)
    with pytest.raises(LayoutError, match=">= 0"):
        check_topology([[0, -1], [1, 0]], 2)
    assert check_topology([[1, 1], [1, 1]], 2).tolist() == [[0, 1], [1, 0]]  # the diagonal is ignored


@pytest.mark.parametrize("num_islands", [2, 5, 16])
def test_the_policy_sends_to_its_row(num_islands):
    topology = hypercube_topology(num_islands)
    for island in range(num_islands):
        policy = MigrationPolicy(island, topology, 0.9, SelectMin, SelectMax, True, random.Random(island))
        assert policy.targets() == [(int(j), 1) for j in np.flatnonzero(topology[island])]


# ------------------------------------------------------------------------- Topology: one island at a time


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_named_targets_are_the_rows_of_the_built_array(name):
    for num_islands in range(1, 65):
        topology = Topology.of(name, num_islands)
        built = TOPOLOGIES[name](num_islands)
        assert topology.array is None and topology.name == name
        for island in range(num_islands):
            assert topology.targets(island) == [(int(j), 1) for j in np.flatnonzero(built[island])]
        assert np.array_equal(topology.target_counts(), np.count_nonzero(built, axis=1))
        assert topology.any() == bool(built.any())
        assert messages_per_round(topology, 0.9) == pytest.approx(messages_per_round(built, 0.9))


def test_none_is_the_default_by_name():
    assert Topology.of(None, 5).name == DEFAULT_TOPOLOGY


def test_an_array_is_kept_checked():
    given = np.array([[1, 2, 0], [0, 0, 3], [1, 0, 0]])
    topology = Topology.of(given, 3)
    assert topology.name is None
    assert topology.array is not None and topology.array.tolist() == [[0, 2, 0], [0, 0, 3], [1, 0, 0]]
    assert [topology.targets(i) for i in range(3)] == [[(1, 2)], [(2, 3)], [(0, 1)]]
    assert topology.target_counts().tolist() == [1, 1, 1]
    assert messages_per_round(topology, 0.5) == pytest.approx(1.5)
    assert not Topology.of(np.zeros((3, 3), dtype=int), 3).any()
    with pytest.raises(LayoutError, match="expected shape"):
        Topology.of(np.ones((3, 3), dtype=int), 2)


def test_a_topology_is_taken_as_it_is_for_as_many_islands():
    topology = Topology.of("ring", 4)
    assert Topology.of(topology, 4) is topology
    with pytest.raises(LayoutError, match="a topology of 4 island"):
        Topology.of(topology, 5)
    with pytest.raises(LayoutError, match="unknown topology 'star'"):
        Topology.of("star", 4)


@pytest.mark.parametrize("num_islands", [2, 5, 16])
def test_the_policy_of_a_name_sends_to_the_row_of_its_array(num_islands):
    for island in range(num_islands):
        policy = MigrationPolicy(
            island, Topology.of(None, num_islands), 0.9, SelectMin, SelectMax, True, random.Random(island)
        )
        built = hypercube_topology(num_islands)[island]
        assert policy.targets() == [(int(j), 1) for j in np.flatnonzero(built)]


def _no_matrix(name):
    def refuse(num_islands):
        raise AssertionError(f"the {name!r} matrix of {num_islands} islands was built")

    return refuse


@pytest.mark.parametrize(("name", "most_bytes"), [(None, 1 << 20), ("ring", 1 << 20), ("complete", 4 << 20)])
def test_ten_thousand_islands_by_name_cost_an_island_its_targets(monkeypatch, name, most_bytes):
    # What a worker of 10,000 islands does with the topology: Islands checks it and logs targets and messages
    # (first rank), the Propulator checks it again, builds its island's policy and stores the setting.
    # The dense matrix would be 10,000 ** 2 int64: 800 MB.
    num_islands, island = 10_000, 9_999
    for known in TOPOLOGIES:
        monkeypatch.setitem(TOPOLOGIES, known, _no_matrix(known))
    tracemalloc.start()
    try:
        topology = Topology.of(name, num_islands)
        counts = topology.target_counts()
        messages = messages_per_round(topology, 0.9)
        topology = Topology.of(topology, num_islands)
        policy = MigrationPolicy(island, topology, 0.9, SelectMin, SelectMax, True, random.Random(0))
        targets = policy.targets()
        setting = topology.to_json()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < most_bytes, f"{peak} bytes"
    assert not any(isinstance(value, np.ndarray) for value in vars(topology).values())
    assert setting == (name or DEFAULT_TOPOLOGY)
    expected = {None: [(island + 2**j) % num_islands for j in range(14)], "ring": [0]}
    if name is None or name == "ring":
        assert [target for target, _ in targets] == sorted(expected[name])
        assert counts.tolist() == [len(expected[name])] * num_islands
        assert messages == pytest.approx(0.9 * num_islands * len(expected[name]))
    else:
        assert len(targets) == num_islands - 1 and messages == pytest.approx(0.9 * num_islands * 9_999)


# ---------------------------------------------------------------- the checkpoint's setting and a resume


def test_the_setting_is_the_name_or_the_array():
    assert Topology.of(None, 10_000).to_json() == "hypercube"
    assert Topology.of("complete", 3).to_json() == "complete"
    assert Topology.of([[0, 2], [1, 0]], 2).to_json() == [[0, 2], [1, 0]]


def test_a_name_and_the_array_it_builds_are_the_same_setting():
    for num_islands in (1, 2, 4, 13):
        for name, build in TOPOLOGIES.items():
            dense = build(num_islands).tolist()
            assert same_topology_setting(dense, name) and same_topology_setting(name, dense)
    assert same_topology_setting("hypercube", "hypercube")
    assert not same_topology_setting("complete", "hypercube")
    assert not same_topology_setting(complete_topology(16).tolist(), "hypercube")
    assert not same_topology_setting([[0, 2], [1, 0]], "complete")
    assert same_topology_setting([[0, 2], [1, 0]], [[0, 2], [1, 0]])
    # Whatever a file holds, the comparison says "differs" rather than raising.
    for odd in (
        [],
        [[0, 1]],
        [[0, 1], [1]],
        [["a", 1], [1, 0]],
        [[1, 1], [1, 0]],
        [[0, None], [1, 0]],
        "star",
        3,
    ):
        assert not same_topology_setting(odd, "complete")


def test_a_setting_is_shown_short():
    assert topology_setting_words("hypercube") == "'hypercube'"
    assert topology_setting_words(complete_topology(8).tolist()) == repr(complete_topology(8).tolist())
    assert topology_setting_words(complete_topology(1000).tolist()) == "an array of shape (1000, 1000)"


def _settings(num_islands, topology):
    return {
        "generations": 10,
        "island_counts": [1] * num_islands,
        "ranks_per_worker": 1,
        "propagator": "p",
        "migration_prob": 0.9,
        "pollination": True,
        "migration_topology": topology,
    }


def _warnings(num_islands, old, new):
    plan_table = np.zeros(num_islands, dtype=PLAN_DTYPE)
    plan_table["island"] = np.arange(num_islands)
    plan_table["generation_start"] = 5
    plan = SessionPlan(0, None, [], None, plan_table, holds="resuming", previous=_settings(num_islands, old))
    lines = describe_session(plan, _settings(num_islands, new), Path("."))
    return [line for level, line in lines if level == logging.WARNING]


def test_a_resume_from_the_array_of_the_default_logs_no_change():
    assert _warnings(1000, hypercube_topology(1000).tolist(), "hypercube") == []


def test_a_resume_onto_another_topology_logs_it_in_a_few_words():
    (line,) = _warnings(1000, complete_topology(1000).tolist(), "hypercube")
    assert (
        "settings differ from the checkpoint's: migration topology an array of shape (1000, 1000) -> " in line
    )
    assert "'hypercube'. This run uses its own" in line and len(line) < 400, line
    (line,) = _warnings(1000, "complete", "hypercube")
    assert "migration topology 'complete' -> 'hypercube'." in line
    old, new = complete_topology(4).tolist(), [[0, 2, 0, 0], [0, 0, 2, 0], [0, 0, 0, 2], [2, 0, 0, 0]]
    (line,) = _warnings(4, old, new)
    assert f"migration topology {old!r} -> {new!r}." in line
