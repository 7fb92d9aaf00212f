"""How island news reaches every worker of an island: relayed along a k-nomial tree rooted at its sender.

Sending every result straight to every other worker of an island of ``m`` workers costs each worker ``m - 1``
sends per evaluation: at ``m = 10,000``, ten thousand. Instead each piece of news travels along the k-nomial
tree of the island rooted at its sender (the tree of MPICH's and Open MPI's k-nomial broadcasts; with radix 2
the binomial tree, Thakur, Rabenseifner & Gropp, "Optimization of collective communication operations in
MPICH", IJHPCA 2005): numbering the workers relative to the sender, ``v = (rank - sender) mod m``, worker
``v`` passes the news on to ``v + j k^i`` for every ``j`` in ``1 .. k-1`` and every ``k^i`` below the lowest
non-zero base-``k`` digit of ``v`` (every ``k^i < m`` for the sender itself), as long as that is below ``m``.
Every worker receives each piece of news exactly once, from one parent, after at most
``ceil(log_k m)`` hops; since a sender's news always takes the same path to a given worker, and every hop
keeps the order, news from one sender arrives in the order it was sent.

Whatever a worker has to pass on when it polls goes out as one message per destination: news of many senders
travels together. A worker's destinations are its *fingers*, ``rank + j k^i`` (mod ``m``), the same whoever
sent the news: at most ``(k - 1) ceil(log_k m)`` of them. So a worker sends at most that many messages per
poll, however large its island, instead of ``m - 1``. The news itself (the bytes) still reaches every worker:
each worker receives, and passes on in total, one copy per evaluation of the island.

A relayed piece of news waits at each hop until the relaying worker takes it in: between its evaluations,
and during one from the worker's watchdog thread, every 50 ms (see
:class:`Relaying`); :data:`RADIX` trades hops for sends per poll. With
``m <= RADIX`` every worker is a finger of every other: news goes straight to everyone, as it did before
relaying, and nobody relays.

A worker that has finished its generations relays for the others until the last one ends. What it passes on
is urgent only where it reaches a worker that still breeds: a destination whose subtree, in the tree of the
news' sender, holds only workers that have retired gets its news at the end of the run instead (the drain
of :mod:`propulate.mpi.messaging` sends everything held); otherwise every finished worker would keep sending
as often as it did while it evaluated, to no one who needs it yet.
"""

from __future__ import annotations

import math
import pickle
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .messaging import Mailbox, Tag, threads_may_poll

__all__ = [
    "LINGER",
    "LINGER_CAP",
    "RADIX",
    "Relay",
    "Relaying",
    "children",
    "fingers",
    "linger",
    "tree_neighbours",
]

#: Radix of the relay tree. 8 keeps islands of up to 8 workers direct (each worker is a finger of every
#: other), reaches 64 workers in 2 hops, 512 in 3 and 10,000 in 5, with at most 7 sends per level and
#: poll: 15 at 128 workers, 35 at 10,000. Each hop a piece of news waits for the relaying worker to poll,
#: and announcements that arrive late let two workers evaluate the same configuration, so hops cost more
#: than sends (measurements: :doc:`/design/architecture`).
RADIX = 8

#: Seconds at least that a worker that has finished its generations lets news to pass on gather before
#: it sends them (at most once per its mean generation time, if that is longer: as often as it did while
#: it evaluated). It relays for its island until the last worker ends; sending at every arrival would cost
#: many messages per own evaluation at large islands.
LINGER = 0.002

#: Seconds at most that news waits at a worker that has finished its generations, or a quarter of its mean
#: generation time where that is longer: its peers that still evaluate, for hours maybe, get through it what
#: their island finds meanwhile (the watchdog's tick), and where generations are long it does not send many
#: times per generation.
LINGER_CAP = 0.05


def linger(pace: float) -> float:
    """Seconds a worker that has finished its generations lets news to pass on gather before it sends it.

    Parameters
    ----------
    pace : float >= 0
        The worker's mean generation time, seconds.

    Returns
    -------
    float
        ``pace``, at least :data:`LINGER` and at most ``max(LINGER_CAP, pace / 4)``.
    """
    return min(max(LINGER, pace), max(LINGER_CAP, pace / 4))


# One piece of news on the wire: (sender's rank in the island, tag, pickled object).
_Item = tuple[int, int, bytes]


def children(offset: int, size: int, radix: int = RADIX) -> list[int]:
    """Offsets, relative to the sender, that the worker at ``offset`` passes news on to.

    Parameters
    ----------
    offset : int in [0, size)
        The worker's rank relative to the sender, ``(rank - sender) mod size``; 0 is the sender.
    size : int >= 1
        Workers in the island.
    radix : int >= 2
        The tree's radix ``k``.

    Returns
    -------
    list of int
        Ascending offsets ``offset + j k^i`` (see the module docstring); empty for a leaf.

    Raises
    ------
    ValueError
        If ``offset`` is outside ``[0, size)`` or ``radix`` is below 2.
    """
    if not 0 <= offset < size:
        raise ValueError(f"offset: expected an int in [0, {size}), got {offset!r}")
    if radix < 2:
        raise ValueError(f"radix: expected an int >= 2, got {radix!r}")
    found: list[int] = []
    span = 1
    while span < size and offset % (span * radix) == 0:
        for j in range(1, radix):
            child = offset + j * span
            if child >= size:
                break
            found.append(child)
        span *= radix
    return sorted(found)


def _place(offset: int, radix: int) -> int:
    """Return the place value of the lowest non-zero base-``radix`` digit of ``offset`` >= 1."""
    place = 1
    while offset % (place * radix) == 0:
        place *= radix
    return place


def fingers(size: int, radix: int = RADIX) -> list[int]:
    """Offsets every worker may send to (the sender's children): ``(radix - 1) ceil(log_radix size)``."""
    return children(0, size, radix)


def tree_neighbours(rank: int, size: int) -> list[int]:
    """Return the neighbours of ``rank`` in the binomial tree of ``size`` ranks rooted at 0, parent first.

    The radix-2 tree above rooted at 0 (MPICH's binomial broadcast): the parent of ``rank`` is ``rank``
    with its lowest set bit cleared; its children are ``rank + 2**j`` for every ``2**j`` below that bit
    (below ``size`` for rank 0) that is a rank. At most ``ceil(log2 size)`` neighbours; the tree is
    ``ceil(log2 size)`` levels deep. The alarm floods its notices over it (:mod:`propulate.mpi.alarm`).
    """
    return ([rank - (rank & -rank)] if rank else []) + children(rank, size, 2)


class Relay:
    """One worker's side of the island's relay: what it sends, passes on, and takes in.

    Parameters
    ----------
    first : int
        The rank, in the mailbox's communicator, of the island's first worker; the island's workers have
        the consecutive ranks ``first .. first + size - 1``.
    size : int >= 1
        Workers in the island.
    rank : int in [0, size)
        This worker's rank in the island.
    radix : int >= 2, optional
        The tree's radix; default :data:`RADIX` (read when the relay is made).

    Attributes
    ----------
    flushed : float
        ``time.monotonic()`` when :meth:`flush` last sent something, or held it back (``hold``).
    """

    def __init__(self, first: int, size: int, rank: int, radix: int | None = None) -> None:
        self.first = first
        self.size = size
        self.rank = rank
        self.radix = RADIX if radix is None else radix
        # Per sender (rank in the island): the ranks, in the mailbox's communicator, its news goes on to.
        self._destinations = [self._children_of(origin) for origin in range(size)]
        #: Whether this worker passes anybody's news on (never in an island of up to ``radix`` workers).
        self.relays = any(self._destinations[origin] for origin in range(size) if origin != rank)
        self._fingers = self._destinations[rank]
        # This worker's own news, for all its fingers, and what it passes on, per destination.
        self._own: list[_Item] = []
        self._outgoing: dict[int, list[_Item]] = {}
        self._held: dict[int, list[_Item]] = {}  # what waits for the end of the run (see flush)
        self.flushed = -math.inf  # time.monotonic() of the last flush that sent or held news
        # Which workers of the island still breed (by rank in the island), and per offset from a sender the
        # number of workers in the subtree of the worker at that offset: its lowest non-zero base-radix
        # digit's place value, clipped at the island's end (the whole island for the sender).
        self._breeding = np.ones(size, dtype=bool)
        self._subtree = [size] + [min(_place(offset, self.radix), size - offset) for offset in range(1, size)]

    def _children_of(self, origin: int) -> list[int]:
        offsets = children((self.rank - origin) % self.size, self.size, self.radix)
        return [self.first + (origin + child) % self.size for child in offsets]

    def originate(self, tag: Tag, obj: Any) -> None:
        """Queue ``obj`` (pickled once) for every other worker of the island; it leaves at :meth:`flush`."""
        if self._fingers:
            self._own.append((self.rank, int(tag), pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)))

    def take(self, items: list[_Item]) -> list[tuple[int, int, Any]]:
        """Queue ``items`` (one received message) to be passed on; return them as ``(sender, tag, object)``.

        ``sender`` is the sending worker's rank in the mailbox's communicator, not the rank that passed
        the message on.
        """
        first = self.first
        if not self.relays:
            return [(first + origin, tag, pickle.loads(payload)) for origin, tag, payload in items]
        taken = []
        outgoing = self._outgoing
        destinations = self._destinations
        for item in items:
            origin, tag, payload = item
            for dest in destinations[origin]:
                queue = outgoing.get(dest)
                if queue is None:
                    outgoing[dest] = [item]
                else:
                    queue.append(item)
            taken.append((first + origin, tag, pickle.loads(payload)))
        return taken

    def retire(self, rank: int) -> None:
        """Note that the worker of rank ``rank`` (in the mailbox's communicator) breeds no more."""
        self._breeding[rank - self.first] = False

    def _urgent(self, dest: int, items: list[_Item]) -> bool:
        """Return whether ``items`` queued for ``dest`` reach a worker that still breeds.

        That is a worker in the subtree of ``dest`` in the tree of some item's sender: the island's ranks
        ``dest .. dest + n - 1`` modulo its size, ``n`` the subtree's size.
        """
        size, breeding = self.size, self._breeding
        start = dest - self.first
        for origin in {item[0] for item in items}:
            stop = start + self._subtree[(start - origin) % size]
            if breeding[start:stop].any() or (stop > size and breeding[: stop - size].any()):
                return True
        return False

    def flush(self, mailbox: Mailbox, hold: bool = False) -> None:
        """Send what is queued: one message per destination, pickled once for all that get the same.

        A worker's own news goes to all its fingers alike: while it has nothing to pass on (always, in an
        island of up to :data:`RADIX` workers), one pickle and one send call, as before relaying. With
        ``hold`` (a worker that breeds no more), news that reaches only retired workers is held back until
        the next flush without ``hold``; a destination that gets news again gets what was held with it.
        """
        own, outgoing, held = self._own, self._outgoing, self._held
        if not own and not outgoing and (hold or not held):
            return
        self.flushed = time.monotonic()
        self._own, self._outgoing = [], {}
        if not outgoing and not held and not hold:
            mailbox.send(own, self._fingers, Tag.ISLAND_UPDATE)
            return
        if own:
            for dest in self._fingers:
                passed = outgoing.get(dest)
                outgoing[dest] = own if passed is None else passed + own  # each sender's news in order
        # Held news is never urgent later (workers only retire): only what came since is looked at.
        for dest in list(outgoing):
            if hold and not self._urgent(dest, outgoing[dest]):
                held.setdefault(dest, []).extend(outgoing.pop(dest))
            elif dest in held:
                outgoing[dest] = held.pop(dest) + outgoing[dest]
        if not hold:
            for dest, items in held.items():
                outgoing[dest] = items
            held.clear()
        if not outgoing:
            return
        alike: dict[tuple[int, ...], tuple[list[_Item], list[int]]] = {}
        for dest, items in outgoing.items():
            alike.setdefault(tuple(map(id, items)), (items, []))[1].append(dest)
        for items, dests in alike.values():
            mailbox.send(items, dests, Tag.ISLAND_UPDATE)

    @property
    def idle(self) -> bool:
        """Whether nothing waits to be sent."""
        return not self._own and not self._outgoing and not self._held


class Relaying:
    """Island news passed on by the worker's watchdog thread while the worker evaluates.

    A relayed piece of news waits at each hop until the relaying worker takes it in: between evaluations
    only, an island's news would reach the workers one or more hops away an evaluation or more late, and a
    long evaluation would hold up everything behind it. The watchdog thread polls every
    :data:`propulate.lifecycle.TICK` seconds anyway (with ``MPI_THREAD_MULTIPLE``, see
    :func:`propulate.mpi.messaging.threads_may_poll`); during :meth:`meanwhile` it takes in island news,
    passes it on (:meth:`poll`) and keeps it for the loop (:meth:`taken`). Meanwhile the mailbox is used
    only under :attr:`lock`, by both threads.

    Parameters
    ----------
    relay : Relay
        The worker's relay.
    mailbox : Mailbox
        The mailbox of the communicator of all workers.
    """

    def __init__(self, relay: Relay, mailbox: Mailbox) -> None:
        self.relay = relay
        self.mailbox = mailbox
        #: Held by whichever thread uses the mailbox during an evaluation.
        self.lock = threading.Lock()
        self._active = False
        self._taken: list[tuple[int, int, Any]] = []

    @contextmanager
    def meanwhile(self) -> Iterator[None]:
        """Let the watchdog thread pass island news on while the worker evaluates (the ``with`` block).

        Its first poll sends what arrived since the worker's update. Without threads that may poll, that
        goes out now and nothing more until the evaluation ends; an island of up to :data:`RADIX` workers
        has nothing to pass on.
        """
        if not self.relay.relays:
            yield
            return
        if not threads_may_poll():
            self.relay.flush(self.mailbox)
            yield
            return
        with self.lock:
            self._active = True
        try:
            yield
        finally:
            with self.lock:
                self._active = False

    def poll(self) -> None:
        """From the watchdog thread: take in island news and pass it on, while the worker evaluates."""
        if not self._active:
            return
        with self.lock:
            if self._active:
                for _, items in self.mailbox.receive(Tag.ISLAND_UPDATE):
                    self._taken.extend(self.relay.take(items))
                self.relay.flush(self.mailbox)

    def taken(self) -> list[tuple[int, int, Any]]:
        """Return, and forget, the news :meth:`poll` took in, ``(sender, tag, object)`` in arrival order.

        Called by the loop between evaluations, when the watchdog thread does not add to it (no lock, so
        that it may also be called under :attr:`lock`).
        """
        taken, self._taken = self._taken, []
        return taken
