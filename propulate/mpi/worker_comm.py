"""A multi-rank worker's ranks: the channel its root hands tasks over, and the communicator its loss gets.

:class:`WorkerChannel` hands each individual from the worker's root to its other ranks.

The communicator a multi-rank worker's loss function gets: collective operations a stop can interrupt.

A rank blocked in a collective operation of MPI cannot be interrupted: its signal handlers run only when the
call returns, and it returns only once every rank of the communicator has joined. When a stop interrupts one
rank of a worker in its Python code while another waits for it in ``comm.allreduce``, the second would wait
forever. So ``loss_fn(params, comm)`` receives a :class:`WorkerComm`: an ``MPI.Intracomm`` of the worker's
ranks (a duplicate of the worker communicator, made for each run) whose blocking collective operations are
carried out as their non-blocking counterparts, tested with a short back-off until they complete or the
evaluation is due to be interrupted; then :class:`~propulate.errors.EvaluationInterrupted` is raised there,
as in Python code. Every rank is thus interrupted within moments of the same time, wherever it is, and the
collective left unfinished stays behind on a communicator that is never used again.

The contract for loss functions of multi-rank workers: run MPI collective operations on ``comm`` (the
blocking ones listed in :class:`WorkerComm`, or non-blocking ones completed with ``Test`` in a Python loop),
not on other communicators and not with blocking point-to-point calls between the worker's ranks, or a stop
may have to wait for the evaluation to end. torch collectives need nothing: their process group is aborted
at the moment of interruption (see :mod:`propulate.lifecycle`).
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from ..errors import EvaluationInterrupted
from .messaging import Backoff, Tag, abandon

__all__ = ["WorkerChannel", "WorkerComm", "in_collective"]

#: What the pickle-based reductions accept: an MPI operation, or a function of two objects.
Reduction = MPI.Op | Callable[[Any, Any], Any]


def _never() -> bool:
    return False


# Collective operations of a WorkerComm under way in this process (the main thread's loss function).
_in_progress = 0


def in_collective() -> bool:
    """Whether the loss function is inside a collective operation of a :class:`WorkerComm`.

    A stop's SIGALRM must not raise there: an exception between the start of the non-blocking operation and
    its completion would drop the request and free its buffers while a partner may still write into them.
    The operation raises :class:`~propulate.errors.EvaluationInterrupted` itself when it is due.
    """
    return _in_progress > 0


class WorkerComm(MPI.Intracomm):
    """An intracommunicator whose blocking collectives end early when the evaluation is interrupted.

    Interruptible: ``Barrier``, ``Bcast``, ``Allreduce``, ``Reduce``, ``Allgather``, ``Gather``, ``Scatter``,
    ``Alltoall``, their ``v`` variants, and the pickle-based ``barrier``, ``bcast``, ``allreduce``,
    ``reduce``, ``allgather``, ``gather``, ``scatter``. Everything else is MPI's own. Communicators made
    from it (``Dup``, ``Split``) are plain.

    Built with :meth:`of`.
    """

    _due: Callable[[], bool] = staticmethod(_never)
    _source: MPI.Comm = MPI.COMM_NULL

    @classmethod
    def of(cls, comm: MPI.Comm, due: Callable[[], bool]) -> WorkerComm:
        """Duplicate ``comm`` (collective over it); ``due()`` says whether to interrupt now."""
        worker = cls(comm.Dup())
        worker._due = due
        worker._source = comm
        return worker

    def renewed(self) -> WorkerComm:
        """Return a fresh duplicate of the same ranks; collective over them.

        After an interrupted or failed evaluation a collective operation may have been left unfinished on
        this communicator, and the next one would match it: every rank of the worker goes on with a new
        one. This one is kept, not freed, since MPI frees a communicator only once its operations end.
        """
        return WorkerComm.of(self._source, self._due)

    def _wait(self, start: Callable[[], MPI.Request], *buffers: Any) -> None:
        """Start a non-blocking operation and test it until it completes or the evaluation is due to end.

        An operation given up on keeps its request and ``buffers`` alive (a late partner may still complete
        it), whatever interrupts it: the due moment, or any exception once the request exists.
        """
        global _in_progress
        _in_progress += 1
        try:
            request = start()
            try:
                backoff = Backoff(cap=5e-4)
                while not request.Test():
                    if self._due():
                        raise EvaluationInterrupted("interrupted in a collective operation")
                    backoff.wait()
            except BaseException:
                abandon(request, *buffers)
                raise
        finally:
            _in_progress -= 1

    # ------------------------------------------------------------------------------------ buffer-based

    def Barrier(self) -> None:  # noqa: D102, N802 - MPI's names and documentation
        self._wait(self.Ibarrier)

    def Bcast(self, buf: Any, root: int = 0) -> None:  # noqa: D102, N802
        self._wait(lambda: self.Ibcast(buf, root), buf)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM) -> None:  # noqa: D102, N802
        self._wait(lambda: self.Iallreduce(sendbuf, recvbuf, op), sendbuf, recvbuf)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, root: int = 0) -> None:  # noqa: D102, N802
        self._wait(lambda: self.Ireduce(sendbuf, recvbuf, op, root), sendbuf, recvbuf)

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:  # noqa: D102, N802
        self._wait(lambda: self.Iallgather(sendbuf, recvbuf), sendbuf, recvbuf)

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:  # noqa: D102, N802
        self._wait(lambda: self.Iallgatherv(sendbuf, recvbuf), sendbuf, recvbuf)

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:  # noqa: D102, N802
        self._wait(lambda: self.Igather(sendbuf, recvbuf, root), sendbuf, recvbuf)

    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:  # noqa: D102, N802
        self._wait(lambda: self.Igatherv(sendbuf, recvbuf, root), sendbuf, recvbuf)

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:  # noqa: D102, N802
        self._wait(lambda: self.Iscatter(sendbuf, recvbuf, root), sendbuf, recvbuf)

    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:  # noqa: D102, N802
        self._wait(lambda: self.Iscatterv(sendbuf, recvbuf, root), sendbuf, recvbuf)

    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:  # noqa: D102, N802
        self._wait(lambda: self.Ialltoall(sendbuf, recvbuf), sendbuf, recvbuf)

    # ------------------------------------------------------------------------------------ pickle-based

    def barrier(self) -> None:  # noqa: D102
        self.Barrier()

    def bcast(self, obj: Any, root: int = 0) -> Any:  # noqa: D102
        data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL) if self.rank == root else b""
        size = np.array([len(data)], dtype=np.int64)
        self.Bcast(size, root)
        buffer = bytearray(data) if self.rank == root else bytearray(int(size[0]))
        self.Bcast([buffer, MPI.BYTE], root)
        return obj if self.rank == root else pickle.loads(buffer)

    def _exchange(self, data: bytes, root: int | None) -> list[bytes] | None:
        """Gather ``data`` of every rank on ``root``, or on every rank when ``root`` is ``None``."""
        sizes = np.zeros(self.size, dtype=np.int64)
        mine = np.array([len(data)], dtype=np.int64)
        if root is None:
            self.Allgather(mine, sizes)
        else:
            self.Gather(mine, sizes, root)
        receiving = root is None or self.rank == root
        displacements = np.concatenate(([0], np.cumsum(sizes)[:-1])) if receiving else None
        buffer = bytearray(int(sizes.sum())) if receiving else None
        target = [buffer, sizes, displacements, MPI.BYTE] if receiving else None
        if root is None:
            self.Allgatherv([data, MPI.BYTE], target)
        else:
            self.Gatherv([data, MPI.BYTE], target, root)
        if not receiving:
            return None
        assert buffer is not None and displacements is not None
        return [bytes(buffer[start : start + n]) for start, n in zip(displacements, sizes, strict=True)]

    def allgather(self, sendobj: Any) -> list[Any]:  # noqa: D102
        parts = self._exchange(pickle.dumps(sendobj, pickle.HIGHEST_PROTOCOL), None)
        assert parts is not None
        return [pickle.loads(part) for part in parts]

    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:  # noqa: D102
        parts = self._exchange(pickle.dumps(sendobj, pickle.HIGHEST_PROTOCOL), root)
        return None if parts is None else [pickle.loads(part) for part in parts]

    def allreduce(self, sendobj: Any, op: Reduction = MPI.SUM) -> Any:  # noqa: D102
        return functools.reduce(op, self.allgather(sendobj))

    def reduce(self, sendobj: Any, op: Reduction = MPI.SUM, root: int = 0) -> Any:  # noqa: D102
        values = self.gather(sendobj, root)
        return None if values is None else functools.reduce(op, values)

    def scatter(self, sendobj: Sequence[Any] | None = None, root: int = 0) -> Any:  # noqa: D102
        if self.rank == root:
            if sendobj is None or len(sendobj) != self.size:
                raise ValueError(f"scatter: sendobj must hold one object per rank ({self.size})")
            parts = [pickle.dumps(obj, pickle.HIGHEST_PROTOCOL) for obj in sendobj]
            sizes = np.array([len(part) for part in parts], dtype=np.int64)
        else:
            parts, sizes = [], np.zeros(self.size, dtype=np.int64)
        self.Bcast(sizes, root)
        displacements = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        buffer = bytearray(int(sizes[self.rank]))
        source = [b"".join(parts), sizes, displacements, MPI.BYTE] if self.rank == root else None
        self.Scatterv(source, [buffer, MPI.BYTE], root)
        return pickle.loads(buffer)


class WorkerChannel:
    """Hands individuals from a worker's root to its other ranks.

    The other ranks wait in a non-blocking broadcast polled with a short back-off, so idle sub-ranks do not
    steal CPU time from the root on an oversubscribed node.

    Parameters
    ----------
    comm : MPI.Comm
        The library's duplicate of the worker communicator; the root is rank 0.
    """

    def __init__(self, comm: MPI.Comm) -> None:
        self.comm = comm
        self._header = np.zeros(2, dtype=np.int64)

    def _post(self, kind: Tag, payload: bytes) -> None:
        self._header[:] = (kind, len(payload))
        # Non-blocking on both sides: a non-blocking collective only matches a non-blocking one.
        self.comm.Ibcast(self._header, root=0).Wait()
        if payload:
            self.comm.Bcast([payload, MPI.BYTE], root=0)

    def send_task(self, ind: Any, resume: Any = None) -> None:
        """Root: start the evaluation of ``ind`` on every rank of the worker, resuming from ``resume``."""
        self._post(Tag.TASK, pickle.dumps((ind, resume), protocol=pickle.HIGHEST_PROTOCOL))

    def send_stop(self) -> None:
        """Root: release the other ranks; the run is over for this worker."""
        self._post(Tag.RELEASE, b"")

    def next_task(self, check: Callable[[], None]) -> tuple[Any, Any] | None:
        """Other ranks: wait for the next individual and what it resumes from; ``None``: the worker is done.

        ``check`` is called while waiting; what it raises (another rank failed) ends the wait.
        """
        request = self.comm.Ibcast(self._header, root=0)
        backoff = Backoff(cap=2e-3)
        while not request.Test():
            check()
            backoff.wait()
        kind, size = (int(x) for x in self._header)
        if kind == Tag.RELEASE:
            return None
        payload = bytearray(size)
        self.comm.Bcast([payload, MPI.BYTE], root=0)
        task: tuple[Any, Any] = pickle.loads(payload)
        return task
