"""Migration topologies by name: shapes, targets, reachability (BFS) and messages per round; bad names."""

from __future__ import annotations

import math
import random
from collections import deque

import numpy as np
import pytest

from propulate.errors import LayoutError
from propulate.migration import (
    DEFAULT_TOPOLOGY,
    TOPOLOGIES,
    MigrationPolicy,
    check_topology,
    complete_topology,
    hypercube_topology,
    messages_per_round,
    ring_topology,
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
