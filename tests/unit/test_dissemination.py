"""The island relay tree (``propulate.mpi.dissemination``): delivery once, order per sender, bounds."""

from __future__ import annotations

import math
import random
from collections import deque

import pytest

from propulate.mpi.dissemination import RADIX, Relay, children, fingers
from propulate.mpi.messaging import Tag


def levels(size: int, radix: int) -> int:
    """ceil(log_radix size), computed without floating point."""
    count, span = 0, 1
    while span < size:
        span *= radix
        count += 1
    return count


@pytest.mark.parametrize("radix", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("size", [*range(1, 40), 63, 64, 65, 100, 128, 257, 1000])
def test_the_tree_reaches_every_worker_once_within_the_depth_bound(size, radix):
    reached = {0: 0}  # offset -> hops
    frontier = [0]
    while frontier:
        following = []
        for offset in frontier:
            for child in children(offset, size, radix):
                assert child not in reached, f"offset {child} reached twice"
                assert offset < child < size
                reached[child] = reached[offset] + 1
                following.append(child)
        frontier = following
    assert sorted(reached) == list(range(size))
    assert max(reached.values()) <= levels(size, radix)
    assert len(fingers(size, radix)) <= (radix - 1) * levels(size, radix)


def test_small_islands_are_direct_with_the_default_radix():
    for size in range(1, RADIX + 1):
        assert fingers(size) == list(range(1, size))


def test_fingers_grow_logarithmically():
    assert len(fingers(128)) <= (RADIX - 1) * math.ceil(math.log(128, RADIX))
    assert len(fingers(10_000)) <= (RADIX - 1) * 5
    assert len(fingers(10_000, 2)) == 14


@pytest.mark.parametrize(("offset", "size", "radix"), [(-1, 4, 2), (4, 4, 2), (0, 4, 1)])
def test_bad_arguments_are_named(offset, size, radix):
    with pytest.raises(ValueError, match=r"offset|radix"):
        children(offset, size, radix)


class FakeMailbox:
    """Delivers what a relay flushes into per-(source, destination) FIFO queues, as MPI orders them."""

    def __init__(self, rank: int, network: dict[tuple[int, int], deque]) -> None:
        self.rank = rank
        self.network = network
        self.sent = 0

    def send(self, obj, dests, tag):
        assert tag == Tag.ISLAND_UPDATE
        for dest in dests:
            self.network.setdefault((self.rank, dest), deque()).append(list(obj))
            self.sent += 1


def by_sender(received: list[tuple[int, int]]) -> dict[int, list[int]]:
    """The numbers a worker received, per sender, in the order received."""
    got: dict[int, list[int]] = {}
    for sender, number in received:
        got.setdefault(sender, []).append(number)
    return got


@pytest.mark.parametrize("radix", [2, 3, 8])
@pytest.mark.parametrize(("first", "size"), [(0, 1), (0, 2), (3, 7), (0, 16), (5, 33)])
def test_relays_deliver_each_item_once_in_order_per_sender_whatever_the_interleaving(first, size, radix):
    rng = random.Random(size * 100 + radix)
    network: dict[tuple[int, int], deque] = {}
    relays = [Relay(first, size, rank, radix) for rank in range(size)]
    boxes = [FakeMailbox(first + rank, network) for rank in range(size)]
    received: list[list[tuple[int, int]]] = [[] for _ in range(size)]
    per_sender = 20
    sent_by = [0] * size
    polls = [0] * size
    while any(n < per_sender for n in sent_by) or any(network.values()):
        rank = rng.randrange(size)
        action = rng.random()
        if action < 0.3 and sent_by[rank] < per_sender:
            relays[rank].originate(Tag.ISLAND_UPDATE, (first + rank, sent_by[rank]))
            sent_by[rank] += 1
        elif action < 0.8:
            # Take in the oldest message from some sender (MPI keeps the order per pair, not across pairs).
            sources = [key for key, queue in network.items() if key[1] == first + rank and queue]
            if sources:
                items = network[rng.choice(sources)].popleft()
                for sender, tag, obj in relays[rank].take(items):
                    assert tag == Tag.ISLAND_UPDATE and obj[0] == sender
                    received[rank].append(obj)
        if rng.random() < 0.5 or sent_by[rank] == per_sender:
            relays[rank].flush(boxes[rank])
            polls[rank] += 1
    for rank in range(size):
        expected = {first + other: list(range(per_sender)) for other in range(size) if other != rank}
        assert by_sender(received[rank]) == ({} if size == 1 else expected)
        assert relays[rank].idle
    # Messages: one per destination and flush; destinations are the worker's fingers.
    for rank in range(size):
        destinations = {dest for (source, dest) in network if source == first + rank}
        allowed = {first + (rank + offset) % size for offset in fingers(size, radix)}
        assert destinations <= allowed


def test_only_islands_larger_than_the_radix_relay():
    assert not any(Relay(0, size, rank).relays for size in range(1, RADIX + 1) for rank in range(size))
    assert any(Relay(0, RADIX + 2, rank).relays for rank in range(RADIX + 2))  # RADIX + 1: one more finger
    # Every worker of a large island relays for some sender; a worker's fingers are its own destinations.
    island = [Relay(10, 64, rank, 4) for rank in range(64)]
    assert all(relay.relays for relay in island)
    assert all(len(relay._fingers) == len(fingers(64, 4)) for relay in island)


@pytest.mark.parametrize("radix", [2, 8])
@pytest.mark.parametrize(("first", "size"), [(0, 16), (5, 33), (0, 64)])
def test_retired_relays_hold_back_only_what_reaches_no_breeding_worker(first, size, radix):
    """Workers retire one by one and then flush with ``hold``; the end of the run (flushes without) still
    delivers every item once, in order per sender, and what a holding worker sent led to a breeding one."""
    rng = random.Random(size * 7 + radix)
    network: dict[tuple[int, int], deque] = {}
    relays = [Relay(first, size, rank, radix) for rank in range(size)]
    boxes = [FakeMailbox(first + rank, network) for rank in range(size)]
    received: list[list[tuple[int, int]]] = [[] for _ in range(size)]
    per_sender = 12
    sent_by = [0] * size
    retired = [False] * size  # as every worker knows it: retirement news is instant in this model
    held_sends = 0

    def subtree(sender: int, dest: int) -> set[int]:
        """Island ranks in the subtree of ``dest`` in the tree of ``sender``."""
        found, frontier = set(), [(dest - sender) % size]
        while frontier:
            offset = frontier.pop()
            found.add((sender + offset) % size)
            frontier.extend(children(offset, size, radix))
        return found

    def take_all(rank: int) -> None:
        """Worker ``rank`` takes in every message waiting for it."""
        for key in [key for key, queue in network.items() if key[1] == first + rank]:
            while network[key]:
                received[rank].extend(obj for _, _, obj in relays[rank].take(network[key].popleft()))

    while any(n < per_sender for n in sent_by):
        rank = rng.randrange(size)
        if retired[rank]:
            sources = [key for key, queue in network.items() if key[1] == first + rank and queue]
            if sources:
                items = network[rng.choice(sources)].popleft()
                received[rank].extend(obj for _, _, obj in relays[rank].take(items))
            before = {key: len(queue) for key, queue in network.items()}
            relays[rank].flush(boxes[rank], hold=True)
            for (source, dest), queue in network.items():
                for message in list(queue)[before.get((source, dest), 0) :]:
                    held_sends += 1
                    reached = set().union(*(subtree(sender, dest - first) for sender, _, _ in message))
                    assert any(not retired[r] for r in reached), "sent to a subtree of retired workers"
            continue
        relays[rank].originate(Tag.ISLAND_UPDATE, (first + rank, sent_by[rank]))
        sent_by[rank] += 1
        take_all(rank)
        relays[rank].flush(boxes[rank])
        if sent_by[rank] == per_sender:
            retired[rank] = True
            for relay in relays:
                relay.retire(first + rank)
    # The end of the run: every worker flushes all it holds until nothing is in flight.
    while any(network.values()) or not all(relay.idle for relay in relays):
        for rank in range(size):
            take_all(rank)
            relays[rank].flush(boxes[rank])
    for rank in range(size):
        expected = {first + other: list(range(per_sender)) for other in range(size) if other != rank}
        assert by_sender(received[rank]) == expected
    assert held_sends > 0  # holding workers still passed news on to the breeding ones


def test_a_holding_relay_sends_to_the_subtree_of_the_last_breeding_worker_only():
    size = 64
    relays = [Relay(0, size, rank) for rank in range(size)]
    network: dict[tuple[int, int], deque] = {}
    for rank in range(size):
        if rank != 17:
            for relay in relays:
                relay.retire(rank)
    # Worker 0's own news, with hold: of its fingers 1..7, 8..56, only 16 leads to 17 (16's subtree: 16..23).
    relays[0].originate(Tag.ISLAND_UPDATE, "news")
    box = FakeMailbox(0, network)
    relays[0].flush(box, hold=True)
    assert {dest for (_, dest), queue in network.items() if queue} == {16}
    assert not relays[0].idle
    relays[0].flush(box)  # the end of the run: the rest goes out
    assert {dest for (_, dest), queue in network.items() if queue} == set(range(1, 8)) | set(range(8, 57, 8))
    assert relays[0].idle and box.sent == len(fingers(size))
