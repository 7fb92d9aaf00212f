"""Island updates on the wire: what a worker queues, sends and its peers read back (no MPI)."""

from __future__ import annotations

import pickle

import numpy as np

from propulate import Individual
from propulate.individual import Status
from propulate.mpi.news import IslandNews
from propulate.space import SearchSpace

LIMITS = {"x": (0.0, 1.0), "n": (1, 4), "act": ("relu", "tanh")}


def evaluated(uid: int, x: float) -> Individual:
    ind = Individual({"x": x, "n": 2, "act": "tanh"}, LIMITS)
    ind.uid, ind.loss, ind.status = uid, x * x, Status.COMPLETED
    return ind


def wire(update: object) -> object:
    """What the peer receives: the update pickled and unpickled, as the mailbox does."""
    return pickle.loads(pickle.dumps(update))


def test_nothing_to_say_sends_nothing() -> None:
    news = IslandNews(has_peers=True)
    assert news.update() is None
    alone = IslandNews(has_peers=False)
    alone.queue([evaluated(0, 0.5)], [3])
    assert alone.update(announce=evaluated(1, 0.1), started=1) is None


def test_a_first_message_reads_back_whether_it_carries_individuals_an_announcement_or_both() -> None:
    space = SearchSpace.of(LIMITS)
    for with_news, with_announcement in [(True, False), (False, True), (True, True)]:
        sender, receiver = IslandNews(True), IslandNews(True)
        if with_news:
            sender.queue([evaluated(0, 0.25), evaluated(1, 0.75)], [7])
        announce = Individual({"x": 0.5, "n": 3, "act": "relu"}, LIMITS) if with_announcement else None
        runs, deactivated, said = receiver.read(5, wire(sender.update(announce, started=4, period=0.1)))
        if with_news:
            assert [[ind.uid for ind in run] for run in runs] == [[0, 1]]
            assert runs[0][0].equals(evaluated(0, 0.25))
            assert runs[0][0].space is space
            assert deactivated == [7]
        if with_announcement:
            assert said is not None
            assert (said.key, said.started, said.period) == (space.key(announce.position), 4, 0.1)
            assert said.configuration is not None
            np.testing.assert_array_equal(space.from_canonical(said.configuration), announce.position)
        else:
            assert said is None


def test_later_messages_do_not_name_the_space_again_and_news_is_sent_once() -> None:
    sender, receiver = IslandNews(True), IslandNews(True)
    first = sender.update(evaluated(9, 0.1), started=1)
    assert first is not None and first[0] == []  # an announcement alone names no space: peers need none
    receiver.read(2, wire(first))
    sender.queue([evaluated(10, 0.3)], [])
    receiver.read(2, wire(sender.update(evaluated(11, 0.2), started=2)))  # its chunk names the space
    sender.queue([evaluated(12, 0.4)], [])
    update = sender.update(evaluated(13, 0.5), started=3)
    assert update is not None
    chunks, _, announcement = update
    assert chunks[0][0] is None  # named before
    assert announcement[0] == evaluated(13, 0.5).space.canonical(evaluated(13, 0.5).position)
    runs, _, said = receiver.read(2, wire(update))
    assert runs[0][0].uid == 12 and said is not None and said.started == 3
    assert sender.update() is None  # everything queued went out


def test_retiring_says_so_without_a_configuration() -> None:
    sender, receiver = IslandNews(True), IslandNews(True)
    sender.queue([evaluated(0, 0.4)], [])
    runs, _, said = receiver.read(1, wire(sender.update(retire=True, started=3, period=2.0)))
    assert len(runs[0]) == 1
    assert said is not None and said.key is None and said.started == 3 and said.retired
    assert np.isclose(runs[0][0]["x"], 0.4)


def test_withdrawing_says_nothing_is_evaluated_without_retiring() -> None:
    sender, receiver = IslandNews(True), IslandNews(True)
    _, _, said = receiver.read(1, wire(sender.update(withdraw=True, started=4, period=1.0)))
    assert said is not None and said.key is None and said.configuration is None
    assert said.started == 4 and not said.retired
