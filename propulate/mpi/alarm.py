"""Out-of-band notices between ranks: a stop that one rank of a worker saw, and a failure anywhere in a run.

The loop's messages (:mod:`propulate.mpi.messaging`) are taken in between evaluations, by worker roots only.
Three things cannot wait that long: a stop signal that reached one rank of a multi-rank worker must reach
the worker's other ranks while they evaluate, so that all of them are interrupted at the same moment; a
loss function that raised on one rank of a worker must release the others from the collective operation
in which they wait for it; and an exception that ends one rank (a propagator, a surrogate or the checkpoint
writer raised) must reach every rank of the run, which would otherwise wait for that rank forever. Such
notices travel on duplicates of the worker communicator and of the communicator of the worker roots, made
for each run, and are taken in by :meth:`Alarm.poll`, which the rank's
:class:`~propulate.lifecycle.Watchdog` thread calls several times a second and the main thread calls
wherever it waits.

A failure spreads in two hops: the failing rank tells its worker's other ranks and, when it is a worker root,
every other worker root; a worker root that hears of a failure from its worker passes it on to the other
worker roots, and one that hears of it from another root passes it on to its worker's other ranks. Each rank
then stops as it would for a stop signal (a running evaluation gets the grace period, at most
``failure_grace`` seconds), writes its checkpoint and raises :class:`~propulate.errors.WorkerFailedError`
naming the failing rank, its host and its traceback.

Notices are sent with ``Isend`` (small, so they leave at once) and need MPI's ``MPI_THREAD_MULTIPLE``, which
mpi4py asks for by default; with a lower thread level only the main thread polls, between evaluations.

Outside a run, where every rank is in the same collective step anyway (building a
:class:`~propulate.Propulator`), :func:`agree` shares a failure at one point instead.
"""

from __future__ import annotations

import socket
import threading
import traceback
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from mpi4py import MPI

from ..errors import WorkerFailedError
from ..lifecycle import StopConditions

__all__ = ["Alarm", "FailureReport", "agree", "threads_may_poll"]


class Notice(IntEnum):
    """Tags of alarm messages (on the alarm's own communicators)."""

    #: A rank of this worker received a stop signal; the payload is the grace period left, in seconds.
    STOP = 1
    #: A rank of the run failed; the payload is a :class:`FailureReport`.
    FAILURE = 2
    #: The loss function raised on a rank of this worker; the payload is the worker's evaluation number.
    LEFT = 3


@dataclass(frozen=True)
class FailureReport:
    """What failed, where.

    Attributes
    ----------
    rank : int
        The failing rank in ``MPI.COMM_WORLD``.
    host : str
        Its host name.
    where : str
        What it was doing, e.g. ``"propulate()"``.
    error : str
        The exception with its traceback.
    """

    rank: int
    host: str
    where: str
    error: str

    @classmethod
    def of(cls, err: BaseException, where: str) -> FailureReport:
        """Describe ``err``, raised on this rank."""
        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        return cls(MPI.COMM_WORLD.rank, socket.gethostname(), where, text)

    def describe(self) -> str:
        """One paragraph for the error message of the other ranks."""
        return f"rank {self.rank} on {self.host} failed in {self.where}:\n{self.error}"


def agree(failure: Exception | None, worker: MPI.Comm, roots: MPI.Comm | None, where: str) -> None:
    """Raise on every rank if ``failure`` happened on any; collective over all ranks of all workers.

    For steps that every rank takes together, outside a run: the failing rank raises ``failure``, every
    other rank :class:`~propulate.errors.WorkerFailedError` naming it, instead of waiting for it in the next
    collective operation.

    Parameters
    ----------
    failure : Exception or None
        What this rank raised in the step, if anything.
    worker : MPI.Comm
        This rank's worker.
    roots : MPI.Comm or None
        The worker roots, on a worker's root; ``None`` on its other ranks.
    where : str
        The step, for the others' error message (e.g. ``"building the Propulator"``).
    """
    report = None if failure is None else FailureReport.of(failure, where)
    if worker.size > 1:
        report = next((r for r in worker.allgather(report) if r is not None), None)
    if roots is not None:
        report = next((r for r in roots.allgather(report) if r is not None), None)
    if worker.size > 1:
        report = worker.bcast(report, root=0)
    if failure is not None:
        raise failure
    if report is not None:
        raise WorkerFailedError(report.describe())


def threads_may_poll() -> bool:
    """Whether MPI allows a second thread to take in alarm messages while the main thread uses MPI."""
    return MPI.Query_thread() >= MPI.THREAD_MULTIPLE


class Alarm:
    """The alarm messages of one rank for one run; collective to create (duplicates two communicators).

    Parameters
    ----------
    conditions : StopConditions
        This rank's stop conditions, told of stops and failures.
    worker : MPI.Comm
        The worker's communicator (``MPI.COMM_SELF`` for one-rank workers).
    roots : MPI.Comm or None
        The worker roots' communicator, on worker roots; ``None`` on other ranks.
    failure_grace : float >= 0
        Seconds a running evaluation may go on after a failure elsewhere (at most; the grace period applies
        if shorter).
    """

    def __init__(
        self, conditions: StopConditions, worker: MPI.Comm, roots: MPI.Comm | None, failure_grace: float
    ) -> None:
        self.conditions = conditions
        self.failure_grace = failure_grace
        self._worker = worker.Dup()
        self._roots = roots.Dup() if roots is not None else None
        self._lock = threading.Lock()
        self._status = MPI.Status()
        self._sends: list[tuple[MPI.Request, bytes]] = []
        #: The first failure this rank heard of, or its own.
        self.failure: FailureReport | None = None
        #: The latest evaluation of this worker in which the loss function raised on another rank.
        self.left = -1
        self.closed = False

    def _send(self, comm: MPI.Comm, notice: Notice, payload: Any) -> None:
        """Send ``payload`` to every other rank of ``comm`` (call with the lock held)."""
        if comm.size == 1:
            return
        self._sends = [(request, buffer) for request, buffer in self._sends if not request.Test()]
        buffer = MPI.pickle.dumps(payload)
        for rank in range(comm.size):
            if rank != comm.rank:
                self._sends.append((comm.Isend([buffer, MPI.BYTE], dest=rank, tag=int(notice)), buffer))

    def stop_worker(self, grace_left: float) -> None:
        """Tell the worker's other ranks that this rank received a stop signal."""
        with self._lock:
            if not self.closed:
                self._send(self._worker, Notice.STOP, grace_left)

    def leave(self, evaluation: int) -> None:
        """Tell the worker's other ranks that the loss function raised here in evaluation ``evaluation``.

        They may be waiting for this rank in a collective operation of the loss function: see
        :mod:`propulate.mpi.worker_comm`.
        """
        with self._lock:
            if not self.closed:
                self._send(self._worker, Notice.LEFT, evaluation)

    def fail(self, report: FailureReport) -> None:
        """Tell every rank of the run that this rank failed (once)."""
        with self._lock:
            if self.failure is not None or self.closed:
                return
            self.failure = report
            self._send(self._worker, Notice.FAILURE, report)
            if self._roots is not None:
                self._send(self._roots, Notice.FAILURE, report)

    def poll(self) -> None:
        """Take in every alarm message that has arrived and act on it (thread-safe)."""
        with self._lock:
            if self.closed:
                return
            for comm in (self._worker, self._roots):
                if comm is None or comm.size == 1:
                    continue
                while (message := comm.improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, self._status)) is not None:
                    tag = self._status.Get_tag()
                    payload = message.recv()
                    if tag == Notice.STOP:
                        self.conditions.stop("a rank of this worker received a stop signal", payload)
                    elif tag == Notice.FAILURE:
                        self._take_failure(payload, from_worker=comm is self._worker)
                    elif tag == Notice.LEFT:
                        self.left = max(self.left, payload)

    def _take_failure(self, report: FailureReport, from_worker: bool) -> None:
        if self.failure is not None:
            return
        self.failure = report
        if from_worker and self._roots is not None:
            self._send(self._roots, Notice.FAILURE, report)
        elif not from_worker:
            self._send(self._worker, Notice.FAILURE, report)
        grace = min(self.conditions.grace_period, self.failure_grace)
        self.conditions.stop(f"rank {report.rank} on {report.host} failed", grace)

    def check(self) -> None:
        """Raise if another rank failed.

        Raises
        ------
        WorkerFailedError
            Naming the failing rank, its host and its traceback.
        """
        failure = self.failure
        if failure is not None and failure.rank != MPI.COMM_WORLD.rank:
            raise WorkerFailedError(failure.describe())

    def close(self) -> None:
        """Stop taking in notices; this rank's run is over."""
        with self._lock:
            self.closed = True
