"""The island link on one process: what it sends, and what it returns as data (a fake mailbox, no mpiexec)."""

from __future__ import annotations

import pickle
import random
from collections import defaultdict
from typing import Any

from mpi4py import MPI

from propulate import Individual
from propulate.breeding import Breeder
from propulate.individual import Status
from propulate.mpi.link import Claim, Immigrants, IslandLink, PeerUpdate, ProgressReport, SurrogateNews
from propulate.mpi.messaging import Mailbox, Tag
from propulate.population import Population
from propulate.propagators import InitUniform
from propulate.space import SearchSpace

LIMITS = {"x": (0.0, 1.0), "n": (1, 4)}


class Wire:
    """Queues between fake mailboxes: what one sends, another receives (pickled, as MPI carries it)."""

    def __init__(self) -> None:
        self.queues: dict[int, list[tuple[int, int, bytes]]] = defaultdict(list)


class FakeComm:
    def __init__(self, rank: int) -> None:
        self.rank = rank


class FakeMailbox:
    """The part of :class:`Mailbox` the link uses; every message is matched at once."""

    def __init__(self, wire: Wire, rank: int) -> None:
        self.wire = wire
        self.comm = FakeComm(rank)
        self.sent: list[tuple[int, int]] = []

    def send(self, obj: Any, dests: list[int], tag: Tag) -> None:
        for dest in dests:
            self.wire.queues[dest].append((self.comm.rank, int(tag), pickle.dumps(obj)))
            self.sent.append((dest, int(tag)))

    def receive_any(self) -> list[tuple[int, int, Any]]:
        queue = self.wire.queues[self.comm.rank]
        taken = [(source, tag, pickle.loads(data)) for source, tag, data in queue]
        queue.clear()
        return taken

    def receive(self, tag: Tag) -> list[tuple[int, Any]]:
        return [(source, obj) for source, kind, obj in self.receive_any() if kind == tag]

    def waiting(self) -> bool:
        return bool(self.wire.queues[self.comm.rank])

    def mark(self, dests: list[int]) -> dict[int, int]:
        return dict.fromkeys(dests, 0)

    def matched(self, mark: dict[int, int]) -> bool:
        return True


def island(size: int) -> list[IslandLink]:
    wire = Wire()
    return [
        IslandLink(FakeMailbox(wire, rank), 0, size, rank, lambda: None, lambda: False)  # type: ignore[arg-type]
        for rank in range(size)
    ]


def evaluated(uid: int, x: float) -> Individual:
    ind = Individual({"x": x, "n": 2}, LIMITS)
    ind.uid, ind.loss, ind.status = uid, x, Status.COMPLETED
    return ind


def test_an_announcement_and_the_news_queued_reach_every_peer_as_one_update() -> None:
    links = island(3)
    announced = Individual({"x": 0.5, "n": 3}, LIMITS)
    links[0].queue([evaluated(7, 0.25)], [4])
    links[0].tell(announced, started=2, period=0.5)
    for peer in links[1:]:
        (update,) = peer.receive()
        assert isinstance(update, PeerUpdate)
        assert update.source == 0
        assert [[ind.uid for ind in run] for run in update.runs] == [[7]]
        assert update.deactivated == [4]
        assert update.said is not None
        assert update.said.key == SearchSpace.of(LIMITS).key(announced.position)
        assert (update.said.started, update.said.period) == (2, 0.5)
    assert links[0].receive() == []


def test_nothing_queued_sends_nothing_and_a_worker_alone_sends_nothing() -> None:
    links = island(2)
    links[0].tell()
    assert links[1].receive() == []
    (alone,) = island(1)
    alone.queue([evaluated(1, 0.1)], [])
    alone.tell(Individual({"x": 0.5, "n": 3}, LIMITS), started=1)
    assert alone.mailbox.sent == []  # type: ignore[attr-defined]


def test_a_retiring_peer_is_returned_as_such_and_its_relay_notes_it() -> None:
    links = island(2)
    links[1].tell(retire=True)
    (update,) = links[0].receive()
    assert isinstance(update, PeerUpdate) and update.said is not None and update.said.key is None


def test_a_withdrawal_is_said_once_after_an_announcement_and_does_not_retire_the_peer() -> None:
    links = island(2)
    links[1].tell(withdraw=True, started=1)
    assert links[0].receive() == []  # nothing announced: nothing to withdraw
    links[1].tell(Individual({"x": 0.5, "n": 3}, LIMITS), started=1)
    links[1].tell(withdraw=True, started=1)
    links[1].tell(withdraw=True, started=1)  # asked again while idle: not said again
    announced, withdrawn = links[0].receive()
    assert isinstance(announced, PeerUpdate) and announced.said is not None and announced.said.key is not None
    assert isinstance(withdrawn, PeerUpdate) and withdrawn.said is not None and withdrawn.said.key is None
    assert not withdrawn.said.retired and links[0].relay._breeding[1]  # still breeding, for the relay


def test_idle_returns_what_arrives_and_gives_up_after_its_time() -> None:
    links = island(2)
    assert links[0].idle(0.01) == []
    links[1].tell(Individual({"x": 0.5, "n": 3}, LIMITS), started=1)
    (update,) = links[0].idle(10.0)
    assert isinstance(update, PeerUpdate) and update.said is not None and update.said.started == 1


def test_immigrants_surrogate_news_and_progress_reports_come_back_in_arrival_order() -> None:
    links = island(2)
    links[1].emigrate(0, 3, [evaluated(11, 0.3)])
    links[1].share({"rung": 1})
    links[1].mailbox.send((0, 5, 5, 0.1), [0], Tag.PROGRESS)
    arrivals = links[0].receive()
    assert [type(arrival) for arrival in arrivals] == [Immigrants, SurrogateNews, ProgressReport]
    immigrants, news, report = arrivals
    assert isinstance(immigrants, Immigrants) and immigrants.origin == 3
    assert [ind.uid for ind in immigrants.travellers] == [11]
    assert isinstance(news, SurrogateNews) and news.data == {"rung": 1} and news.source == 1
    assert isinstance(report, ProgressReport) and report.report == (0, 5, 5, 0.1)


def test_pace_yields_what_arrives_until_no_peer_is_behind() -> None:
    links = island(2)
    links[1].queue([evaluated(1, 0.1)], [])
    links[1].tell()
    seen: list[object] = []
    for arrivals in links[0].pace(lambda now: not seen):
        seen.extend(arrivals)
    assert len(seen) == 1 and isinstance(seen[0], PeerUpdate)
    assert list(links[0].pace(lambda now: False)) == []


def test_pace_gives_up_after_the_longest_wait() -> None:
    (alone,) = island(1)
    assert list(alone.pace(lambda now: True)) == []  # nothing arrives: the wait ends at MAX_WAIT


def breeder_of(population: Population) -> Breeder:
    breeder = Breeder(InitUniform(LIMITS, rng=random.Random(0)), population, random.Random(0))
    breeder.expect([1], 0.0)
    return breeder


def test_a_claim_is_granted_once_the_peers_matched_and_none_announced_the_configuration() -> None:
    links = island(2)
    ind = Individual({"x": 0.5, "n": 3}, LIMITS)
    key = ind.space.key(ind.position)
    claim = links[0].claim(key, breeder_of(Population()), likely=True)
    assert isinstance(claim, Claim)
    assert list(claim) == []
    assert claim.granted


def test_a_claim_is_lost_to_a_lower_rank_that_announced_the_same_configuration() -> None:
    links = island(2)
    ind = Individual({"x": 0.5, "n": 3}, LIMITS)
    key = ind.space.key(ind.position)
    links[0].tell(ind, started=1)
    breeder = breeder_of(Population())
    claim = links[1].claim(key, breeder, likely=True)
    for arrivals in claim:  # the loop applies what arrived, as the propulator does
        for update in arrivals:
            assert isinstance(update, PeerUpdate) and update.said is not None and update.said.key is not None
            breeder.announce(update.source, update.said.key, update.said.started, 0.0, 0.0)
    assert not claim.granted


def test_where_a_collision_is_unlikely_one_look_decides_and_a_repeat_is_noted() -> None:
    links = island(2)
    ind = Individual({"x": 0.5, "n": 3}, LIMITS)
    key = ind.space.key(ind.position)
    population = Population()
    claim = links[0].claim(key, breeder_of(population), likely=False)
    assert list(claim) == [] and claim.granted and not claim.repeated
    known = evaluated(1, 0.5)
    known.position = ind.position.copy()
    population.add(known)
    claim = links[0].claim(key, breeder_of(population), likely=False)
    assert list(claim) == [] and not claim.granted and claim.repeated


def test_a_verdict_waits_for_the_peers_unless_the_wait_ends() -> None:
    breeder = breeder_of(Population())
    assert breeder.verdict(7, me=0, confirmed=False, ending=False) is None
    assert breeder.verdict(7, me=0, confirmed=True, ending=False) is True
    breeder.announce(1, 7, 1, 0.0, 0.0)
    assert breeder.verdict(7, me=0, confirmed=True, ending=False) is None, "a higher rank's: wait for it"
    assert breeder.verdict(7, me=0, confirmed=True, ending=True) is False
    assert breeder.verdict(7, me=2, confirmed=False, ending=False) is False, "a lower rank keeps it"


def test_a_real_mailbox_on_one_process_delivers_immigrants_to_itself() -> None:
    comm = MPI.COMM_SELF.Dup()
    try:
        link = IslandLink(Mailbox(comm), 0, 1, 0, lambda: None, lambda: False)
        link.emigrate(0, 2, [evaluated(5, 0.5)])
        arrivals = link.receive()
        assert len(arrivals) == 1 and isinstance(arrivals[0], Immigrants)
        assert arrivals[0].travellers[0].equals(evaluated(5, 0.5))
        assert link.mailbox.n_pending == 0
    finally:
        comm.Free()
