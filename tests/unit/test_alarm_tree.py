"""The binomial tree of the alarm and the flooding of stop requests over it, simulated without MPI.

Messages are delivered in a random order (any interleaving MPI may produce), originators start at random
moments, and every rank applies :func:`join_stop` and forwards as :class:`propulate.mpi.alarm.Alarm` does:
to every tree neighbour but the sender, only when it learned something new.
"""

from __future__ import annotations

import math
import random

import pytest

from propulate.mpi.alarm import StopRequest, join_stop, tree_neighbours

SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 16, 31, 100, 1000, 1023, 1024, 1025, 10_000]


def ceil_log2(n: int) -> int:
    return math.ceil(math.log2(n)) if n > 1 else 0


@pytest.mark.parametrize("size", SIZES)
def test_the_tree_is_a_binomial_tree_of_logarithmic_degree_and_depth(size):
    neighbours = [tree_neighbours(rank, size) for rank in range(size)]
    bound = ceil_log2(size)
    for rank, mine in enumerate(neighbours):
        assert len(mine) <= bound
        assert len(set(mine)) == len(mine) and rank not in mine
        assert all(0 <= other < size and rank in neighbours[other] for other in mine), "symmetric"
    assert sum(len(mine) for mine in neighbours) == 2 * (size - 1), "a tree: N - 1 edges"
    # The parent comes first and is lower; following parents reaches rank 0 within ceil(log2 N) steps.
    for rank in range(1, size):
        hops, at = 0, rank
        while at:
            parent = tree_neighbours(at, size)[0]
            assert parent < at
            at, hops = parent, hops + 1
        assert hops <= bound
    assert tree_neighbours(0, size) == [2**j for j in range(bound)]


def test_the_tree_is_mpichs_binomial_broadcast_tree():
    # MPICH's MPIR_Bcast_intra_binomial with root 0 on 8 ranks: 0 -> 4, 2, 1; 4 -> 6, 5; 2 -> 3; 6 -> 7.
    assert [sorted(tree_neighbours(rank, 8)) for rank in range(8)] == [
        [1, 2, 4], [0], [0, 3], [2], [0, 5, 6], [4], [4, 7], [6],
    ]  # fmt: skip


def test_join_keeps_the_first_reason_and_upgrades_to_an_abort_once():
    stop, abort = StopRequest("a", False), StopRequest("a", True)
    assert join_stop(None, ("a", False)) == stop
    assert join_stop(stop, ("b", False)) is None
    assert join_stop(stop, ("b", True)) == abort
    assert join_stop(abort, ("b", True)) is None
    assert join_stop(abort, ("b", False)) is None


def flood(
    size: int, requests: list[tuple[int, tuple[str, bool]]], rng: random.Random
) -> tuple[list, list[int]]:
    """Run the alarm's protocol; return what every rank knows at the end and the messages each sent.

    ``requests`` are (rank, request) pairs, injected at random moments among the deliveries.
    """
    known: list[StopRequest | None] = [None] * size
    sent = [0] * size
    in_flight: list[tuple[int, int, tuple[str, bool]]] = []  # (source, destination, request)
    pending = list(requests)
    rng.shuffle(pending)

    def take(rank: int, request: tuple[str, bool], source: int | None) -> None:
        new = join_stop(known[rank], request)
        if new is not None:
            known[rank] = new
            for other in tree_neighbours(rank, size):
                if other != source:
                    in_flight.append((rank, other, new))
                    sent[rank] += 1

    while pending or in_flight:
        if pending and (not in_flight or rng.random() < 0.1):
            rank, request = pending.pop()
            take(rank, request, None)
            continue
        index = rng.randrange(len(in_flight))
        in_flight[index], in_flight[-1] = in_flight[-1], in_flight[index]
        source, destination, request = in_flight.pop()
        take(destination, request, source)
    return known, sent


@pytest.mark.parametrize("size", [1, 2, 3, 4, 8, 13, 64, 1000, 10_000])
@pytest.mark.parametrize("originators", ["one", "few", "all"])
def test_a_stop_reaches_every_rank_with_at_most_log_n_messages_per_rank(size, originators):
    rng = random.Random(f"{size}-{originators}")
    count = {"one": 1, "few": min(size, 5), "all": size}[originators]
    ranks = rng.sample(range(size), count)
    known, sent = flood(size, [(rank, (f"stop from {rank}", False)) for rank in ranks], rng)
    assert all(k is not None and k[0].startswith("stop from") and not k[1] for k in known)
    assert max(sent) <= ceil_log2(size)
    # Each tree edge carries the stop at most once in each direction.
    assert sum(sent) <= 2 * (size - 1)
    if count == 1:
        assert sum(sent) == size - 1, "one originator: once over every edge"


@pytest.mark.parametrize("size", [2, 5, 8, 100, 10_000])
@pytest.mark.parametrize("seed", range(3))
def test_an_abort_upgrades_every_rank_and_costs_one_more_round(size, seed):
    rng = random.Random(seed * 7919 + size)
    stops = [(rank, ("time limit", False)) for rank in rng.sample(range(size), min(size, 3))]
    aborts = [(rank, (f"worker {rank} failed", True)) for rank in rng.sample(range(size), min(size, 2))]
    known, sent = flood(size, stops + aborts, rng)
    assert all(k is not None and k[1] for k in known), "every rank knows of the abort"
    assert max(sent) <= 2 * ceil_log2(size)


def test_a_lone_worker_sends_nothing():
    known, sent = flood(1, [(0, ("done", True))], random.Random(0))
    assert known == [("done", True)] and sent == [0]
