"""A worker root's link to the other workers: what it sends, and what arrived, returned as data.

:class:`IslandLink` holds the worker's mailbox over the communicator of all worker roots and its side of the
island's relay (:mod:`.dissemination`) and news (:mod:`.news`). The loop hands it what to tell (:meth:`tell`,
:meth:`queue`, :meth:`emigrate`, :meth:`share`) and takes what arrived from :meth:`receive`, a list of
:data:`Arrival`; the link never touches the population. Its two waits return arrivals as they come, for
the loop to apply: :meth:`pace` gives island peers whose news is late a bounded time to deliver it before
breeding, and a :class:`Claim` makes sure that no peer announced a configuration before this worker evaluates
it (the protocol of :mod:`propulate.breeding`). Both wait by sleeping, never by spinning: with more ranks
than cores the peer waited for needs the processor (:class:`~.messaging.Backoff`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from ..individual import Individual
from .dissemination import Relay, Relaying, linger
from .messaging import Backoff, Mailbox, Tag, drain
from .news import Announcement, IslandNews

__all__ = [
    "MAX_WAIT",
    "Arrival",
    "Claim",
    "Immigrants",
    "IslandLink",
    "PeerUpdate",
    "ProgressReport",
    "SurrogateNews",
]

#: Seconds a worker gives late news of its island peers to arrive before it breeds, and, in a finite space,
#: its announcement to reach the peers that may be breeding before it evaluates, at most.
MAX_WAIT = 0.01

#: Seconds of the first pause of a wait (doubling up to :data:`PAUSE_CAP`): a pause sleeps, so that a peer
#: that shares the core runs meanwhile; the cap bounds how late the wait notices the news it waits for.
PAUSE = 5e-5
PAUSE_CAP = 2e-4

#: Seconds a claim's wait (:class:`Claim`) yields the processor between its polls before it pauses: a rank
#: that shares its core with the peer it waits for hands the core over at once, where a rank that slept
#: could leave the core idle while the peer waits for it in turn; yielding for longer takes the core from
#: other jobs on the node (:doc:`/design/architecture`).
YIELDING = 5e-5

#: Seconds between polls, at most, of a worker that has nothing to breed (:meth:`IslandLink.idle`), and how
#: long it waits for news before it checks its stop conditions again.
IDLE_PAUSE_CAP = 0.01
IDLE_SECONDS = 1.0


@dataclass(frozen=True)
class PeerUpdate:
    """What an island peer told: runs of individuals it stored, deactivations, and its announcement.

    Attributes
    ----------
    source : int
        The peer's rank among the worker roots.
    runs : list of list of Individual
        The individuals it stored since it last told (its evaluations, immigrants), in runs of one space.
    deactivated : list of int
        Uids it deactivated.
    said : Announcement or None
        What it evaluates now, or that it retires.
    """

    source: int
    runs: list[list[Individual]]
    deactivated: list[int]
    said: Announcement | None


@dataclass(frozen=True)
class SurrogateNews:
    """What a peer's surrogate learned from a run still under way (e.g. a rung result)."""

    source: int
    data: Any


@dataclass(frozen=True)
class Immigrants:
    """Emigrants of island ``origin`` (to an island's first worker)."""

    origin: int
    travellers: list[Individual]


@dataclass(frozen=True)
class ProgressReport:
    """An island's progress counts, for the first rank of the run (:meth:`.progress.Progress.take`)."""

    report: Any


#: One thing that arrived.
Arrival = PeerUpdate | SurrogateNews | Immigrants | ProgressReport


class Breeding(Protocol):
    """What a :class:`Claim` reads of the worker's breeder (:class:`propulate.breeding.Breeder`)."""

    def may_be_breeding(self, now: float) -> list[int]:
        """Return the peers that may be breeding now."""

    def verdict(self, key: int, me: int, confirmed: bool, late: bool) -> bool | None:
        """Whether the configuration of ``key`` is this worker's, or ``None`` while undecided."""

    def is_known(self, key: int) -> bool:
        """Whether the island evaluated the configuration of ``key`` or a peer announced it."""


class IslandLink:
    """One worker root's messages to and from the other workers (see the module docstring).

    Parameters
    ----------
    mailbox : Mailbox
        Over the communicator of all worker roots.
    first : int
        The mailbox rank of the island's first worker; the island's workers have consecutive ranks.
    size : int
        Workers in the island.
    rank : int
        This worker's rank in the island.
    check : callable
        Called while waiting; raises if another rank of the run failed.
    stopping : callable
        Whether this worker is stopping (a wait for a claim ends then).
    """

    def __init__(
        self,
        mailbox: Mailbox,
        first: int,
        size: int,
        rank: int,
        check: Callable[[], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.mailbox = mailbox
        self.peers = [first + r for r in range(size) if r != rank]
        self.news = IslandNews(bool(self.peers))
        self.relay = Relay(first, size, rank)
        self.relaying = Relaying(self.relay, mailbox)
        self.check = check
        self.stopping = stopping
        #: Seconds per generation of the last session: how often a finished worker passes news on.
        self.pace_seconds = 0.0
        # Whether this worker's last word to the island was an announcement (not a withdrawal).
        self._announcing = False

    @property
    def rank(self) -> int:
        """The rank of this worker among the worker roots."""
        return int(self.mailbox.comm.rank)

    # ------------------------------------------------------------------------------------------ sending

    def queue(self, added: list[Individual], deactivated: list[int]) -> None:
        """Remember what entered this worker's population, for its next message to the island."""
        self.news.queue(added, deactivated)

    def tell(
        self,
        announce: Individual | None = None,
        started: int = 0,
        period: float = 0.0,
        retire: bool = False,
        hold: bool = False,
        withdraw: bool = False,
    ) -> None:
        """Send the island's other workers what this worker stored since it last told them.

        With ``announce``, also the individual this worker starts evaluating (its ``started``-th this session;
        ``period`` its mean evaluation time), so that no peer breeds the same configuration meanwhile; its
        evaluated individual reaches the peers with the next announcement, so one message per generation
        carries both. With ``retire``, that this worker breeds no more; with ``withdraw``, that it evaluates
        nothing for now (said once after an announcement, however often it is asked). With ``hold``, news
        that reaches only workers that breed no more waits (see :meth:`Relay.flush`).
        """
        if retire:
            self.relay.retire(self.rank)
        withdraw = withdraw and self._announcing
        self._announcing = announce is not None or (self._announcing and not (retire or withdraw))
        update = self.news.update(announce, started, period, retire, withdraw)
        if update is not None:
            self.relay.originate(Tag.ISLAND_UPDATE, update)
        self.relay.flush(self.mailbox, hold)  # with what arrived to be passed on since the last flush

    def emigrate(self, dest: int, origin: int, travellers: list[Individual]) -> None:
        """Send ``travellers`` of island ``origin`` to the worker of rank ``dest``, another island's first."""
        self.mailbox.send((origin, travellers), [dest], Tag.EMIGRANTS)

    def share(self, data: Any) -> None:
        """Send the island's peers what the surrogate learned from the run under way (a rung result)."""
        self.relay.originate(Tag.SURROGATE, data)
        self.relay.flush(self.mailbox)

    # ---------------------------------------------------------------------------------------- receiving

    def receive(self) -> list[Arrival]:
        """Take in every message that has arrived; return what they hold, in the order it arrived.

        Island news to pass on along the relay tree leaves with this worker's next message, once per
        generation, or while it evaluates (:class:`Relaying`): one message per finger and generation,
        however often a worker polls.
        """
        arrivals: list[Arrival] = []
        relayed = self.relaying.taken()  # taken in and passed on by the watchdog thread meanwhile
        if relayed:
            self._read(relayed, arrivals)
        for _, tag, obj in self.mailbox.receive_any():
            if tag == Tag.ISLAND_UPDATE:
                self._read(self.relay.take(obj), arrivals)
            elif tag == Tag.EMIGRANTS:
                arrivals.append(Immigrants(*obj))
            else:
                arrivals.append(ProgressReport(obj))
        return arrivals

    def _read(self, news: list[tuple[int, int, Any]], arrivals: list[Arrival]) -> None:
        for origin, kind, obj in news:
            if kind == Tag.ISLAND_UPDATE:
                runs, deactivated, said = self.news.read(origin, obj)
                if said is not None and said.retired:
                    self.relay.retire(origin)
                arrivals.append(PeerUpdate(origin, runs, deactivated, said))
            else:
                arrivals.append(SurrogateNews(origin, obj))

    def receive_while_evaluating(self) -> list[Arrival]:
        """Take in what arrived during an evaluation, while the watchdog thread may use the mailbox."""
        with self.relaying.lock:
            arrivals = self.receive()
            self.relay.flush(self.mailbox)
            return arrivals

    def share_while_evaluating(self, data: Any) -> None:
        """:meth:`share` during an evaluation, while the watchdog thread may use the mailbox."""
        with self.relaying.lock:
            self.share(data)

    # -------------------------------------------------------------------------------------------- waits

    def pace(self, behind: Callable[[float], bool]) -> Iterator[list[Arrival]]:
        """Give peers whose news is late a bounded time to deliver it; yield what arrives meanwhile.

        While ``behind(time.monotonic())`` holds (see :meth:`propulate.breeding.Breeder.behind`), for at most
        :data:`MAX_WAIT` seconds and while this worker is not stopping. A worker far ahead of a peer whose
        evaluation should have ended takes in messages, yielding the processor between polls: with more
        ranks than cores the peer may simply not have been scheduled, and a yield hands it the core at once
        if it shares this one (a sleep would wake this worker again, or leave the core idle while the peer
        waits for another); with a cheap loss function a few milliseconds decide whether the worker breeds
        from its island's results or from its own. A peer busy with an evaluation not yet due is not waited
        for. Waits cannot go round in a circle: a worker only waits for peers that started fewer evaluations
        than it did, so the one furthest behind never waits.
        """
        if not behind(time.monotonic()):
            return
        deadline = time.monotonic() + MAX_WAIT
        backoff = Backoff(patience=MAX_WAIT)  # yields until the deadline: it never sleeps
        while not self.stopping():
            self.check()
            if self.mailbox.waiting():
                arrivals = self.receive()
                if arrivals:
                    backoff.reset()
                    yield arrivals
            now = time.monotonic()
            if now >= deadline or not behind(now):
                return
            backoff.wait()

    def idle(self, seconds: float = IDLE_SECONDS) -> list[Arrival]:
        """Wait for news while this worker has nothing to breed; return what arrived.

        Returns as soon as anything arrived, after ``seconds``, or once this worker is stopping. Polls sleep
        up to :data:`IDLE_PAUSE_CAP` seconds: the news awaited is a peer's result or its change of mind,
        and a peer's evaluation may take hours.
        """
        deadline = time.monotonic() + seconds
        backoff = Backoff(start=PAUSE, cap=IDLE_PAUSE_CAP, patience=0.0)
        while not self.stopping() and time.monotonic() < deadline:
            self.check()
            arrivals = self.receive()
            if arrivals:
                return arrivals
            backoff.wait()
        return []

    def claim(self, key: int, breeder: Breeding, likely: bool) -> Claim:
        """Start the claim of the configuration of ``key``, just announced (see :class:`Claim`).

        ``likely``: whether a collision is likely (a finite space, a replicated propagator, or one that bred
        a known configuration before); only then is it confirmed, and only where news is not relayed.
        """
        return Claim(self, key, breeder, likely and not self.relay.relays)

    # ------------------------------------------------------------------------------------------- the end

    def finish(self, handle: Callable[[], bool]) -> None:
        """Retire and receive every message still in flight; collective over the worker roots.

        ``handle`` takes in and applies what arrives; it returns whether anything did. See
        :func:`~.messaging.drain`.
        """
        drain(self.mailbox, handle, self.flush_held)

    def flush_held(self) -> None:
        """Send everything held back (see :meth:`Relay.flush`)."""
        self.tell()

    def linger_due(self) -> bool:
        """At the end of the run: whether news to pass on has gathered long enough (:func:`linger`)."""
        return time.monotonic() - self.relay.flushed >= linger(self.pace_seconds)


class Claim:
    """The wait of a worker that announced a configuration, until it knows whether it may evaluate it.

    Iterate over it to receive what arrives meanwhile (apply each list of arrivals before the next step);
    then :attr:`granted` says whether the configuration is this worker's. Without ``confirm`` that is one
    look at what arrived: the configuration is the worker's unless the island knows it (:attr:`repeated`
    then). With ``confirm`` (see :mod:`propulate.breeding` for the protocol) the wait ends once every peer
    that may be breeding matched the announcement (its synchronous send completed), after :data:`MAX_WAIT`
    seconds at most, or once this worker is stopping; between its polls it yields the processor for
    :data:`YIELDING` seconds, then sleeps (:data:`PAUSE`, doubling up to :data:`PAUSE_CAP`).

    Parameters
    ----------
    link : IslandLink
        The worker's link.
    key : int
        :meth:`SearchSpace.key` of the announced configuration.
    breeder : Breeding
        Says whether the configuration is this worker's, from what it knows.
    confirm : bool
        Wait for the peers to match the announcement.

    Attributes
    ----------
    granted : bool
        Whether the configuration is this worker's to evaluate (once the iteration ended).
    repeated : bool
        One look found the configuration known: collisions are likely from now on.
    """

    def __init__(self, link: IslandLink, key: int, breeder: Breeding, confirm: bool = True) -> None:
        self.link = link
        self.key = key
        self.breeder = breeder
        self.confirm = confirm
        self.granted = False
        self.repeated = False

    def __iter__(self) -> Iterator[list[Arrival]]:
        link, breeder = self.link, self.breeder
        if not self.confirm:
            arrivals = link.receive()
            if arrivals:
                yield arrivals
            self.granted = not breeder.is_known(self.key)
            self.repeated = not self.granted
            return
        mailbox = link.mailbox
        me = link.rank
        now = time.monotonic()
        mark = mailbox.mark(breeder.may_be_breeding(now))
        deadline = now + MAX_WAIT
        backoff = Backoff(start=PAUSE, cap=PAUSE_CAP, patience=YIELDING)
        while True:
            late = time.monotonic() >= deadline
            confirmed = late or mailbox.matched(mark)
            arrivals = link.receive()
            if arrivals:
                backoff.reset()
                yield arrivals
            verdict = breeder.verdict(self.key, me, confirmed, late or link.stopping())
            if verdict is not None:
                self.granted = verdict
                return
            link.check()
            backoff.wait()
