"""How messages travel: tags, non-blocking synchronous sends, receiving, and the end-of-run drain.

Every message is serialized once and sent to all its destinations with ``Issend`` (non-blocking,
synchronous mode); the buffer is kept until the send completes. A synchronous send completes only once the
receiver has matched it, which makes the end of a run exact: a worker that has no incomplete sends knows
every message it sent has been received, and after a non-blocking barrier that every worker enters only in
that state, nothing is left in flight (the NBX algorithm of Hoefler, Siebert & Lumsdaine, "Scalable
communication protocols for dynamic sparse data exchange", PPoPP 2010).
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import Any

from mpi4py import MPI

__all__ = ["Backoff", "Mailbox", "Tag", "drain"]


class Tag(IntEnum):
    """Message tags. Each communicator the library uses is a ``Dup()``, so they cannot meet user traffic."""

    #: Intra-island news: newly evaluated individuals, immigrants, deactivations (island communicator).
    ISLAND_UPDATE = 1
    #: Emigrants on their way to another island (propulate communicator).
    EMIGRANTS = 2
    #: A request to stop the run early, with its reason (propulate communicator).
    STOP = 3
    #: An island's progress counts for the run's progress line (propulate communicator, to rank 0).
    PROGRESS = 4


class Backoff:
    """Sleep between polls: starts at ``start`` seconds and doubles up to ``cap`` seconds."""

    def __init__(self, start: float = 1e-5, cap: float = 1e-3) -> None:
        self.start = start
        self.cap = cap
        self.delay = start

    def reset(self) -> None:
        """Poll quickly again (something happened)."""
        self.delay = self.start

    def wait(self) -> None:
        """Sleep once, then lengthen the next sleep."""
        time.sleep(self.delay)
        self.delay = min(2 * self.delay, self.cap)


class Mailbox:
    """Sends and receives pickled objects on one communicator without ever blocking.

    Parameters
    ----------
    comm : MPI.Comm
        The communicator (the library's own duplicate).
    """

    def __init__(self, comm: MPI.Comm) -> None:
        self.comm = comm
        self._pending: list[tuple[MPI.Request, bytes]] = []
        self._status = MPI.Status()
        self.bytes_sent = 0
        self.messages_sent = 0

    def send(self, obj: Any, dests: Iterable[int], tag: Tag) -> None:
        """Serialize ``obj`` once and start a synchronous non-blocking send to each rank of ``dests``."""
        dests = list(dests)
        if not dests:
            return
        buffer = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        for dest in dests:
            request = self.comm.Issend([buffer, MPI.BYTE], dest=dest, tag=tag)
            self._pending.append((request, buffer))
        self.bytes_sent += len(buffer) * len(dests)
        self.messages_sent += len(dests)
        self.progress()

    def receive(self, tag: Tag) -> list[tuple[int, Any]]:
        """Return ``(source, object)`` for every message with ``tag`` that has arrived, in arrival order."""
        received = []
        status = self._status
        while True:
            message = self.comm.improbe(source=MPI.ANY_SOURCE, tag=tag, status=status)
            if message is None:
                break
            received.append((status.Get_source(), message.recv()))
        return received

    def progress(self) -> None:
        """Release the buffers of completed sends."""
        if self._pending:
            self._pending = [(req, buf) for req, buf in self._pending if not req.Test()]

    @property
    def n_pending(self) -> int:
        """Number of sends not yet matched by their receiver."""
        self.progress()
        return len(self._pending)


def drain(mailbox: Mailbox, handle: Callable[[], bool]) -> None:
    """End the exchange on ``mailbox.comm``: return once every message sent on it has been received.

    Collective over ``mailbox.comm``. The caller must not start new sends on this mailbox afterwards.

    Parameters
    ----------
    mailbox : Mailbox
        The mailbox whose sends must complete.
    handle : callable
        Receives and processes whatever arrived; returns whether anything did. Called while waiting.
    """
    backoff = Backoff()
    while mailbox.n_pending:
        if handle():
            backoff.reset()
        else:
            backoff.wait()
    barrier = mailbox.comm.Ibarrier()
    while not barrier.Test():
        if handle():
            backoff.reset()
        else:
            backoff.wait()
    handle()
