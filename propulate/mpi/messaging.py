"""How messages travel: tags, non-blocking sends and their buffers, coalescing, receiving, the final drain.

This is the library's one message plane: every tag is a member of :class:`Tag`; every send keeps its buffer
until it completes (:class:`Mailbox` for the loop's messages, :class:`Sends` for the alarm's notices); the
trees that messages travel along are :mod:`propulate.mpi.dissemination`'s.

Every message is serialized once and sent to all its destinations with ``Issend`` (non-blocking,
synchronous mode); the buffer is kept until the send completes. A synchronous send completes only once the
receiver has matched it, which makes the end of a run exact: a worker that has no incomplete sends knows
every message it sent has been received, and after a non-blocking barrier that every worker enters only in
that state, nothing is left in flight (the NBX algorithm of Hoefler, Siebert & Lumsdaine, "Scalable
communication protocols for dynamic sparse data exchange", PPoPP 2010).

A destination that has not yet matched the last :data:`WINDOW` messages sent to it (it is busy, or the
transport lags, as with more ranks than cores) gets the next messages coalesced into one batch, sent as soon
as it catches up or after a short delay at most: the number of messages in flight to a rank stays bounded
however fast results come, and a slow receiver costs one message per batch, not one per result (the idea of
Nagle's algorithm, RFC 896). The receiver sees the same objects in the same order either way. The window is
wide enough that a receiver that was not scheduled for a while (more ranks than cores, a cheap loss
function) finds its peers' news delivered when it runs again, not waiting in the outboxes of peers that
are not scheduled now: what a worker breeds from, and which configurations it knows are being evaluated,
depend on it.
"""

from __future__ import annotations

import ctypes
import math
import os
import pickle
import time
from collections import deque
from collections.abc import Callable, Collection
from enum import IntEnum
from typing import Any

from mpi4py import MPI

__all__ = [
    "WINDOW",
    "Backoff",
    "Mailbox",
    "Sends",
    "Tag",
    "abandon",
    "bcast",
    "drain",
    "threads_may_poll",
    "wait",
]

# Give the processor to another runnable process, if there is one (not available on every platform).
_yield: Callable[[], None] = getattr(os, "sched_yield", lambda: time.sleep(0))


#: Messages in flight to one rank before further ones are coalesced: wide enough that announcements do not
#: sit in the outboxes of descheduled senders (:doc:`/design/architecture`).
WINDOW = 64

#: Rounds in a row that took in nothing visible before :meth:`Mailbox.receive` stops (see there): a poll
#: can take in a packet for another tag or communicator, so one is not enough; each further poll costs
#: well under a microsecond when nothing is queued.
IDLE_POLLS = 2

#: Seconds between two tests of the sends in flight when nothing suggests that one completed. A receive
#: tests them anyway when a probe finds nothing, and notes any completion; a full window or a waiting
#: outbox then re-tests at once if one was noted, else at most this often: each test is a call into MPI
#: over all of them.
RETEST_INTERVAL = 1e-3


#: Requests given up on, with their buffers, for inspection; see :func:`abandon`.
_ABANDONED: list[tuple[Any, ...]] = []


def abandon(request: MPI.Request, *buffers: Any) -> None:
    """Give up on ``request``; keep it and ``buffers`` alive, so that MPI never writes into freed memory.

    MPI may still complete the request (a partner that joins late) and write into its buffers, as late as
    ``MPI_Finalize``, which mpi4py calls after the interpreter has cleared the modules' globals. So they are
    given an extra reference that nothing releases: their memory is the process's until it ends.
    """
    for obj in (request, *buffers):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
    _ABANDONED.append((request, *buffers))


def threads_may_poll() -> bool:
    """Whether MPI allows a second thread to take in messages while the main thread uses MPI."""
    return MPI.Query_thread() >= MPI.THREAD_MULTIPLE


class Tag(IntEnum):
    """Message tags. Each communicator the library uses is a ``Dup()``, so they cannot meet user traffic.

    The loop's messages travel on the communicator of all worker roots; the alarm's notices
    (:mod:`propulate.mpi.alarm`) on duplicates of the worker communicator and of the worker roots' made for
    each run; a multi-rank worker's tasks (:class:`propulate.mpi.worker_comm.WorkerChannel`) in broadcasts
    over the worker's communicator, whose header names the kind.
    """

    #: Intra-island news, relayed (:mod:`propulate.mpi.dissemination`): newly evaluated individuals,
    #: immigrants, deactivations, and :data:`SURROGATE` news, of one or more senders (to a relay finger).
    ISLAND_UPDATE = 1
    #: Emigrants on their way to another island (to its first worker).
    EMIGRANTS = 2
    # 3 was a request to stop the run early; the alarm relays those now (propulate.mpi.alarm).
    #: An island's progress counts for the run's progress line (to the first worker of the run).
    PROGRESS = 4
    #: What a surrogate learned from a run still under way, e.g. a rung result: relayed with the island
    #: news, under this tag inside an :data:`ISLAND_UPDATE` message.
    SURROGATE = 5
    #: Alarm: a rank of this worker received a stop signal; the payload is the grace period left, seconds.
    STOP_WORKER = 11
    #: Alarm: a rank of the run failed; the payload is a :class:`propulate.mpi.alarm.FailureReport`.
    FAILURE = 12
    #: Alarm: the loss function raised on a rank of this worker; the payload is the evaluation's number.
    LEFT = 13
    #: Alarm: a worker asked the run to stop; the payload is a :class:`propulate.mpi.alarm.StopRequest`.
    STOP_RUN = 14
    #: Worker channel: an individual to evaluate on every rank of the worker.
    TASK = 21
    #: Worker channel: the worker's run is over; its other ranks return.
    RELEASE = 22


class Backoff:
    """Wait between polls: yield the processor for a while, then sleep for longer and longer.

    For ``patience`` seconds after the last reset each wait yields the processor; then it sleeps, from
    ``start`` seconds doubling up to ``cap`` seconds. Yielding lets another process on the same core run at
    once (on an oversubscribed node, typically the rank whose message is awaited) and costs a system call
    when none is waiting; sleeping keeps a rank that waits long, e.g. for a peer's hour-long evaluation,
    from taking processor time away from it.
    """

    def __init__(self, start: float = 1e-5, cap: float = 1e-3, patience: float = 2e-3) -> None:
        self.start = start
        self.cap = cap
        self.patience = patience
        self.delay = start
        self._since = time.monotonic()

    def reset(self) -> None:
        """Poll quickly again (something happened)."""
        self.delay = self.start
        self._since = time.monotonic()

    def wait(self) -> None:
        """Yield or sleep once, then lengthen the next wait."""
        if time.monotonic() - self._since < self.patience:
            _yield()
            return
        time.sleep(self.delay)
        self.delay = min(2 * self.delay, self.cap)


class Sends:
    """Non-blocking sends in flight, each with the buffer it reads, kept until the send completes.

    Buffers must outlive their sends: MPI reads them until the request completes. :meth:`prune` drops the
    completed ones; :meth:`close` gives up on the others (:func:`abandon`), for a rank whose partners may
    never receive them (they ended their run).
    """

    def __init__(self) -> None:
        self._sends: list[tuple[MPI.Request, Any]] = []

    def __len__(self) -> int:
        return len(self._sends)

    def add(self, request: MPI.Request, buffer: Any) -> None:
        """Keep ``buffer`` until ``request`` (a send that reads it) completes."""
        self._sends.append((request, buffer))

    def prune(self) -> None:
        """Forget the sends that completed (one test each)."""
        self._sends = [(request, buffer) for request, buffer in self._sends if not request.Test()]

    def close(self) -> None:
        """Give up on the sends still in flight, keeping them and their buffers alive (:func:`abandon`)."""
        for request, buffer in self._sends:
            if not request.Test():
                abandon(request, buffer)
        self._sends = []


class _Batch(tuple):  # type: ignore[type-arg]
    """Several pickled messages sent as one; the receiver unpickles each in turn."""

    __slots__ = ()


class Mailbox:
    """Sends and receives pickled objects on one communicator without ever blocking.

    A message to several ranks is pickled once; its buffer is shared by the sends to each of them and kept
    until they complete. While ``window`` messages to a rank are unmatched, further messages to it wait in
    its outbox and go out together, as one batch, once fewer are in flight or the oldest has waited
    ``max_delay`` seconds. Sends are tested for completion all at once, in one call into MPI, when a receive
    finds nothing more, and when a destination reaches the window or an outbox waits (then at most every
    :data:`RETEST_INTERVAL` seconds unless a receive saw a completion). All of this costs O(1) per
    destination of a message, plus O(window x destinations) per such test, however many messages a run
    sends.

    Parameters
    ----------
    comm : MPI.Comm
        The communicator (the library's own duplicate).
    window : int >= 1
        Messages in flight to one rank before further ones are coalesced.
    max_delay : float >= 0
        Seconds a message may wait in an outbox at most (checked whenever the mailbox is used).
    """

    def __init__(self, comm: MPI.Comm, window: int = WINDOW, max_delay: float = 0.05) -> None:
        self.comm = comm
        self.window = window
        self.max_delay = max_delay
        # Per destination, oldest first: unmatched sends, the buffers they read from, messages in each.
        self._in_flight: dict[int, deque[tuple[MPI.Request, bytes, int]]] = {}
        # Per destination: messages handed to send() so far, and how many of them the receiver matched.
        self._handed: dict[int, int] = {}
        self._matched: dict[int, int] = {}
        # The same requests in one list, for testing them all in one call; completed ones are null.
        self._requests: list[MPI.Request] = []
        # Whether a test in receive() completed sends whose buffers are not yet released.
        self._completed = False
        self._tested = -math.inf  # when _release() last tested the sends (time.monotonic())
        # Per (destination, tag): pickled messages waiting, and when the oldest of them started waiting.
        self._outbox: dict[tuple[int, int], tuple[float, list[bytes]]] = {}
        self._status = MPI.Status()
        self.bytes_sent = 0
        self.messages_sent = 0
        #: Messages handed to :meth:`send`, one per destination, whether sent yet or waiting in an outbox.
        self.messages_posted = 0

    def send(self, obj: Any, dests: Collection[int], tag: Tag) -> None:
        """Serialize ``obj`` once and send it to each rank of ``dests`` (now, or batched shortly)."""
        if not dests:
            return  # e.g. a stop request on a run of one worker: nothing to pickle
        frame = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        self.messages_posted += len(dests)
        handed = self._handed
        in_flight = self._in_flight
        outbox = self._outbox
        window = self.window
        for dest in dests:
            handed[dest] = handed.get(dest, 0) + 1
            key = (dest, int(tag))
            if outbox and key in outbox:
                outbox[key][1].append(frame)  # behind earlier waiting messages: the order is kept
                continue
            sends = in_flight.get(dest)
            if sends is not None and len(sends) >= window:
                if self._test_due(time.monotonic()):
                    self._release()
                    sends = in_flight[dest]
                if len(sends) >= window:
                    outbox[key] = (time.monotonic(), [frame])
                    continue
            self._start(dest, tag, frame)
        self.progress()

    def mark(self, dests: Collection[int]) -> dict[int, int]:
        """Note how many messages have been handed to :meth:`send` for each of ``dests`` so far.

        :meth:`matched` then tells whether every one of them (the last included) has been matched by its
        receiver, i.e. taken in by one of its receives. O(len(dests)).
        """
        return {dest: self._handed.get(dest, 0) for dest in dests}

    def matched(self, mark: dict[int, int]) -> bool:
        """Whether every message counted in ``mark`` (see :meth:`mark`) has been matched by its receiver.

        Sends waiting in an outbox go out first if their destination caught up, and the sends in flight
        are tested (one call into MPI for all of them). A synchronous send completes only once its receiver
        matched it, and messages between two ranks are matched in the order they were sent (MPI's
        non-overtaking rule, for receives of any tag), so counting completions per destination is enough
        while nothing more is sent to those destinations; a later message that a receiver takes in first,
        receiving by tag, would count too.
        """
        self.progress()
        self._completed = True  # test now, whatever the retest interval says
        self._release()
        got = self._matched
        return all(got.get(dest, 0) >= count for dest, count in mark.items())

    def _start(self, dest: int, tag: int, buffer: bytes, count: int = 1) -> None:
        request = self.comm.Issend([buffer, MPI.BYTE], dest=dest, tag=tag)
        sends = self._in_flight.get(dest)
        if sends is None:
            sends = self._in_flight[dest] = deque()
        sends.append((request, buffer, count))
        self._requests.append(request)
        self.bytes_sent += len(buffer)
        self.messages_sent += 1

    def _test_due(self, now: float) -> bool:
        """Whether a full window or waiting outbox should test the sends now (see :data:`RETEST_INTERVAL`)."""
        return self._completed or now - self._tested >= RETEST_INTERVAL

    def _release(self) -> None:
        """Test every send in flight at once and release the buffers of the completed ones.

        One call into MPI for all destinations: each test of an incomplete request runs MPI's progress
        engine (several microseconds with many ranks), so testing them one by one would cost that many
        times over. Called when a destination reaches the window or the outboxes wait (see
        :data:`RETEST_INTERVAL`), and at the end of the run.
        """
        self._tested = time.monotonic()
        requests = self._requests
        completed = self._completed
        # One test takes in at most one acknowledgement (see receive()): test again while it finds any.
        while requests and MPI.Request.Testsome(requests):
            completed = True
        if completed:
            self._requests = [request for request in requests if request]  # completed ones are now null
            matched = self._matched
            for dest, sends in self._in_flight.items():
                done = sum(entry[2] for entry in sends if not entry[0])
                if done:
                    matched[dest] = matched.get(dest, 0) + done
                    self._in_flight[dest] = deque(entry for entry in sends if entry[0])
            self._completed = False

    def waiting(self) -> bool:
        """Whether a message of any tag has arrived: one probe, nothing received (a cheap poll in a wait)."""
        return bool(self.comm.iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG))

    def receive(self, tag: Tag) -> list[tuple[int, Any]]:
        """Return ``(source, object)`` for every message with ``tag`` that has arrived, in arrival order.

        As :meth:`receive_any`, for one tag; messages with other tags stay queued.
        """
        return [(source, obj) for source, _, obj in self._take_in(tag)]

    def receive_any(self) -> list[tuple[int, int, Any]]:
        """Return ``(source, tag, object)`` for every message that has arrived, in arrival order.

        A worker polls once per generation for all its traffic; messages from one source arrive in the order
        they were sent, whatever their tags. Each call into MPI's progress engine takes in at most one
        incoming packet (MPICH's shared-memory transport, for one): a message, or a receiver's acknowledgement
        of one of this mailbox's synchronous sends. Stopping at the first probe that finds nothing leaves the
        rest queued for the next call, and a rank that takes in fewer packets per generation than arrive falls
        behind: results reach its peers late, and every send window stays full of acknowledged but unprocessed
        sends (:doc:`/design/architecture`). So after a probe that finds nothing the mailbox tests its sends
        in flight (one more poll, which also shows whether the probe's poll took in an acknowledgement), and
        it stops only after :data:`IDLE_POLLS` such rounds in a row took in nothing it can see.
        """
        return self._take_in(MPI.ANY_TAG)

    def _take_in(self, tag: int) -> list[tuple[int, int, Any]]:
        self.progress()
        received: list[tuple[int, int, Any]] = []
        status = self._status
        idle = 0
        while idle < IDLE_POLLS:
            message = self.comm.improbe(MPI.ANY_SOURCE, tag, status)
            if message is None:
                if self._requests and MPI.Request.Testsome(self._requests):
                    self._completed = True  # the buffers are released at the next _release()
                    # Completed requests are null now: drop them, so that each test costs O(sends in flight)
                    # rather than O(sends since the last release), up to a window per destination.
                    self._requests = [request for request in self._requests if request]
                    idle = 0
                else:
                    idle += 1
                continue
            idle = 0
            source = status.Get_source()
            kind = status.Get_tag()
            obj = message.recv()
            if type(obj) is _Batch:
                received.extend((source, kind, pickle.loads(frame)) for frame in obj)
            else:
                received.append((source, kind, obj))
        return received

    def progress(self, flush: bool = False) -> None:
        """Send the outboxes whose destination caught up or whose oldest message waited long enough.

        With ``flush``, send every outbox now (the end of the run: nothing else will come).
        """
        if not self._outbox:
            return
        now = time.monotonic()
        if flush or self._test_due(now):
            self._release()
        for key, (since, frames) in list(self._outbox.items()):
            dest, tag = key
            if flush or now - since >= self.max_delay or len(self._in_flight.get(dest, ())) < self.window:
                del self._outbox[key]
                buffer = (
                    frames[0] if len(frames) == 1 else pickle.dumps(_Batch(frames), pickle.HIGHEST_PROTOCOL)
                )
                self._start(dest, tag, buffer, len(frames))

    @property
    def n_pending(self) -> int:
        """Messages not yet matched by their receiver or still waiting in an outbox; 0 when all arrived.

        O(messages in flight): at most ``window`` per destination.
        """
        self._release()
        waiting = sum(len(frames) for _, frames in self._outbox.values())
        return waiting + sum(len(sends) for sends in self._in_flight.values())


def drain(mailbox: Mailbox, handle: Callable[[], bool], flush: Callable[[], None] = lambda: None) -> None:
    """End the exchange on ``mailbox.comm``: return once every message sent on it has been received.

    Collective over ``mailbox.comm``. Messages still waiting in an outbox are sent at once. ``handle`` may
    send while it takes in (a relay passes news on, an island's first worker passes immigrants to its
    island): what it sent once this worker waited in the barrier may still be in flight when the barrier
    completes, so the workers then agree, with a non-blocking all-reduce, whether any of them sent
    something meanwhile, and if one did, all of them drain again. Each further round follows the news one
    hop further; it ends when a round sent nothing.

    Parameters
    ----------
    mailbox : Mailbox
        The mailbox whose sends must complete.
    handle : callable
        Receives and processes whatever arrived; returns whether anything did. Called while waiting.
    flush : callable, optional
        Sends what ``handle`` held back to send together (see :data:`propulate.mpi.dissemination.LINGER`);
        called before this worker enters the barrier and after the barrier, so nothing held back is missed.
    """
    backoff = Backoff()

    def wait_for(request: MPI.Request) -> None:
        while not request.Test():
            if handle():
                backoff.reset()
            else:
                backoff.wait()

    while True:
        while True:
            mailbox.progress(flush=True)  # what still waits in an outbox (handle() may send too) goes out now
            if not mailbox.n_pending:
                flush()  # what handle() held back goes out before this worker enters the barrier
                mailbox.progress(flush=True)
                if not mailbox.n_pending:
                    break
            if handle():
                backoff.reset()
            else:
                backoff.wait()
        posted = mailbox.messages_posted
        wait_for(mailbox.comm.Ibarrier())
        handle()
        flush()
        late = bytearray([mailbox.messages_posted != posted])
        wait_for(mailbox.comm.Iallreduce(MPI.IN_PLACE, [late, MPI.BYTE], op=MPI.BOR))
        if not late[0]:
            return


def bcast(comm: MPI.Comm, obj: Any, check: Callable[[], None], root: int = 0) -> Any:
    """Broadcast ``obj`` from ``root`` over ``comm`` without blocking in MPI; collective over ``comm``.

    ``check`` is called while waiting, so that what it raises (another rank failed and will never join)
    ends the wait instead of hanging in a blocking broadcast.

    Returns
    -------
    object
        ``obj`` of the root, on every rank.
    """
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if comm.rank == root else b""
    header = bytearray(len(data).to_bytes(8, "little"))
    _wait(comm.Ibcast([header, MPI.BYTE], root=root), check, header)
    if comm.rank == root:
        _wait(comm.Ibcast([data, MPI.BYTE], root=root), check, data)
        return obj
    payload = bytearray(int.from_bytes(header, "little"))
    _wait(comm.Ibcast([payload, MPI.BYTE], root=root), check, payload)
    return pickle.loads(payload)


def wait(request: MPI.Request, check: Callable[[], None], *buffers: Any) -> None:
    """Wait for ``request`` without blocking in MPI, calling ``check`` meanwhile (see :func:`bcast`).

    ``buffers``, those the request reads or writes, are kept alive if the wait ends in an exception.
    """
    _wait(request, check, buffers or None)


def _wait(request: MPI.Request, check: Callable[[], None], buffer: Any) -> None:
    backoff = Backoff()
    try:
        while not request.Test():
            check()
            backoff.wait()
    except BaseException:  # check()'s error, or one a signal handler raised: the request stays pending
        abandon(request, buffer)
        raise
