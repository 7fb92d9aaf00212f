"""Out-of-band notices between ranks: stops and failures, relayed over a binomial tree of the worker roots.

The loop's messages (:mod:`propulate.mpi.messaging`) are taken in between evaluations, by worker roots only.
Four things cannot wait that long: a stop signal that reached one rank of a multi-rank worker must reach
the worker's other ranks while they evaluate, so that all of them are interrupted at the same moment; a
loss function that raised on one rank of a worker must release the others from the collective operation
in which they wait for it; a worker's request that the run stop (a stop signal or the time limit it saw, a
failed evaluation with ``on_failure="stop"``, the search space exhausted) must be passed on by every worker,
also by one in the middle of an hour-long evaluation; and an exception that ends one rank (a propagator, a
surrogate or the checkpoint writer raised) must reach every rank of the run, which would otherwise wait for
that rank forever. Such notices travel on duplicates of the worker communicator and of the communicator of
the worker roots, made for each run, and are taken in by :meth:`Alarm.poll`, which the rank's
:class:`~propulate.lifecycle.Watchdog` thread calls several times a second and the main thread calls
wherever it waits.

Between the ``N`` worker roots, notices travel over one fixed binomial tree of their communicator, rooted at
rank 0: the parent of rank ``r`` is ``r`` with its lowest set bit cleared, its children are ``r + 2**j`` for
every ``2**j`` below that bit (below ``N`` for rank 0), as in MPICH's binomial broadcast (Thakur,
Rabenseifner & Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 19(1), 2005).
Each rank has at most ``ceil(log2 N)`` neighbours in it and any two ranks are at most ``2 ceil(log2 N)``
hops apart. A notice floods the tree: a rank that learns something new (that the run stops, that the stop is
an abort, that a rank failed) sends it at once to every neighbour but the one it came from, and sends
nothing else. Every rank learns it: a rank that never did would have a nearest rank that did on the tree path
from an originator; that rank learned it from a neighbour off the path (its neighbour on the path did not
know it), so it sent it along the path, to a rank that would then know it. This holds for any number of
originators (every worker reaching the time limit together only makes the floods meet sooner), so no rank
has to tell whose message to forward. A stop costs each rank at most ``ceil(log2 N)`` messages, once more if
it is upgraded to an abort; each tree edge carries it at most twice (when both ends learned it first from
elsewhere), at most ``2 (N - 1)`` messages in all instead of ``N - 1`` from every originator; it needs at
most ``2 ceil(log2 N)`` hops of a watchdog tick each. Within a worker nothing changes: the failing rank
tells the worker's other ranks, and a worker root passes what it hears from one side to the other.

A peer's stop request is what :attr:`Alarm.stop_request` holds, ``(reason, abort)``; the loop takes it in
between evaluations and starts no new one, while the running one finishes (a stop signal or a failure
instead makes the rank's :class:`~propulate.lifecycle.StopConditions` stop, which interrupts it after a
grace period). The first reason a rank hears is the one it keeps, an abort only adds to it. The run's
outcome is exact nonetheless: at the end the worker roots agree on it in one collective step
(:meth:`Alarm.settle`), which counts also a stop that reached a worker only after it had finished its
generations.

After a failure each rank stops as it would for a stop signal (a running evaluation gets the grace period,
at most ``failure_grace`` seconds), writes its checkpoint and raises
:class:`~propulate.errors.WorkerFailedError` naming the failing rank, its host and its traceback.

Notices are sent with ``Isend`` and need MPI's ``MPI_THREAD_MULTIPLE``, which mpi4py asks for by default;
with a lower thread level only the main thread polls, between evaluations, so each hop of the tree may wait
for its rank's running evaluation to end. No rank ends its run, and with it its alarm, before every worker
root has left its loop (:meth:`Alarm.settle` is collective) or before it passed on the failure that ends it,
so no rank waits for a stop or a failure that a closed alarm did not pass on. A message still in flight to a
rank that ended its run is never received; its send is kept alive, so that MPI never touches freed memory
(:func:`~propulate.mpi.messaging.abandon`), and the next run duplicates the communicators anew.

Outside a run, where every rank is in the same collective step anyway (building a
:class:`~propulate.Propulator`), :func:`agree` shares a failure at one point instead.
"""

from __future__ import annotations

import socket
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from mpi4py import MPI

from ..errors import WorkerFailedError
from .dissemination import tree_neighbours
from .messaging import Sends, Tag, bcast, threads_may_poll, wait

if TYPE_CHECKING:  # the stop conditions sit above the message plane: the alarm only calls them
    from ..lifecycle import StopConditions

__all__ = [
    "Alarm",
    "FailureReport",
    "StopRequest",
    "agree",
    "join_stop",
    "threads_may_poll",
    "tree_neighbours",
]


class StopRequest(NamedTuple):
    """A request that the run stop.

    Attributes
    ----------
    reason : str
        Why, for the log and :class:`~propulate.errors.RunAbortedError`.
    abort : bool
        Whether the run ends as failed (a failed evaluation with ``on_failure="stop"``).
    """

    reason: str
    abort: bool


def join_stop(known: StopRequest | None, request: tuple[str, bool]) -> StopRequest | None:
    """Return what a rank that knew of ``known`` knows after hearing ``request``; ``None`` if nothing new.

    The first reason heard is kept; an abort upgrades a plain stop.
    """
    if known is None:
        return StopRequest(*request)
    if request[1] and not known.abort:
        return StopRequest(known.reason, True)
    return None


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


class Alarm:
    """The alarm messages of one rank for one run; collective to create (duplicates two communicators).

    Parameters
    ----------
    conditions : StopConditions
        This rank's stop conditions, told of stop signals of the worker's other ranks and of failures.
    worker : MPI.Comm
        The worker's communicator (``MPI.COMM_SELF`` for one-rank workers).
    roots : MPI.Comm or None
        The worker roots' communicator, on worker roots; ``None`` on other ranks.
    failure_grace : float >= 0
        Seconds a running evaluation may go on after a failure elsewhere (at most; the grace period applies
        if shorter).

    Attributes
    ----------
    stop_request : StopRequest or None
        The stop of the run this rank asked for or heard of, if any (on worker roots).
    failure : FailureReport or None
        The first failure this rank heard of, or its own.
    left : int
        The latest evaluation of this worker in which the loss function raised on another rank.
    messages_sent : int
        The messages this rank sent to other worker roots (over the tree), for the record.
    """

    def __init__(
        self, conditions: StopConditions, worker: MPI.Comm, roots: MPI.Comm | None, failure_grace: float
    ) -> None:
        self.conditions = conditions
        self.failure_grace = failure_grace
        self._worker = worker.Dup()
        self._roots = roots.Dup() if roots is not None else None
        self._tree = tree_neighbours(roots.rank, roots.size) if roots is not None else []
        self._lock = threading.Lock()
        self._status = MPI.Status()
        self._sends = Sends()
        self.stop_request: StopRequest | None = None
        self.failure: FailureReport | None = None
        self.left = -1
        self.messages_sent = 0
        self.closed = False

    def _send(self, comm: MPI.Comm, notice: Tag, payload: Any, dests: list[int] | None = None) -> None:
        """Send ``payload`` to ``dests``, by default to all other ranks of ``comm`` (hold the lock)."""
        if dests is None:
            dests = [rank for rank in range(comm.size) if rank != comm.rank]
        if not dests:
            return
        self._sends.prune()
        buffer = MPI.pickle.dumps(payload)
        for rank in dests:
            self._sends.add(comm.Isend([buffer, MPI.BYTE], dest=rank, tag=int(notice)), buffer)
        if comm is self._roots:
            self.messages_sent += len(dests)

    def _flood(self, notice: Tag, payload: Any, source: int | None) -> None:
        """Send ``payload`` to this rank's tree neighbours but ``source`` (call with the lock held)."""
        if self._roots is not None:
            self._send(self._roots, notice, payload, [rank for rank in self._tree if rank != source])

    def stop_worker(self, grace_left: float) -> None:
        """Tell the worker's other ranks that this rank received a stop signal."""
        with self._lock:
            if not self.closed:
                self._send(self._worker, Tag.STOP_WORKER, grace_left)

    def leave(self, evaluation: int) -> None:
        """Tell the worker's other ranks that the loss function raised here in evaluation ``evaluation``.

        They may be waiting for this rank in a collective operation of the loss function: see
        :mod:`propulate.mpi.worker_comm`.
        """
        with self._lock:
            if not self.closed:
                self._send(self._worker, Tag.LEFT, evaluation)

    def request_stop(self, reason: str, abort: bool = False) -> None:
        """Ask every worker to stop the run (on a worker root); what this rank knew is not sent again."""
        with self._lock:
            if not self.closed:
                self._take_stop(StopRequest(reason, abort), source=None)

    def _take_stop(self, request: StopRequest, source: int | None) -> None:
        known = join_stop(self.stop_request, request)
        if known is not None:
            self.stop_request = known
            self._flood(Tag.STOP_RUN, known, source)

    def fail(self, report: FailureReport) -> None:
        """Tell every rank of the run that this rank failed (unless it heard of a failure before)."""
        with self._lock:
            if self.failure is None and not self.closed:
                self.failure = report
                self._send(self._worker, Tag.FAILURE, report)
                self._flood(Tag.FAILURE, report, source=None)

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
                    source = self._status.Get_source()
                    payload = message.recv()
                    if tag == Tag.STOP_WORKER:
                        self.conditions.stop("a rank of this worker received a stop signal", payload)
                    elif tag == Tag.FAILURE:
                        self._take_failure(payload, None if comm is self._worker else source)
                    elif tag == Tag.LEFT:
                        self.left = max(self.left, payload)
                    elif tag == Tag.STOP_RUN:
                        self._take_stop(payload, source)

    def _take_failure(self, report: FailureReport, root: int | None) -> None:
        """Take in a failure from worker root ``root`` (``None``: from this worker's failing rank)."""
        if self.failure is not None:
            return
        self.failure = report
        if root is None:
            self._flood(Tag.FAILURE, report, source=None)
        else:
            self._send(self._worker, Tag.FAILURE, report)
            self._flood(Tag.FAILURE, report, source=root)
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

    def settle(self, reason: str | None, abort: bool, check: Callable[[], None]) -> StopRequest | None:
        """Agree on how the run ended; collective over the worker roots, at the end of a run.

        Relayed stop requests are not part of the end-of-run drain: one may reach a worker only after it
        finished its generations, or not before it returns. So every worker root brings the stop it took,
        and all of them return the same: ``None`` if none stopped, else the reason of the lowest-ranked
        one that did, aborted if any aborted. One ``Iallreduce`` and, after a stop, one broadcast:
        ``O(log N)`` steps.

        Parameters
        ----------
        reason : str or None
            Why this worker stopped early; ``None`` if it did not.
        abort : bool
            Whether its stop is an abort.
        check : callable
            Called while waiting; what it raises (another rank failed and will never join) ends the wait.
        """
        roots = self._roots
        assert roots is not None, "settle() is for worker roots"
        if roots.size == 1:
            return None if reason is None else StopRequest(reason, abort)
        # Minimum over ranks: the lowest rank that stopped (size: none) and 0 if any aborted.
        mine = np.array([roots.size if reason is None else roots.rank, 0 if abort else 1], dtype=np.int64)
        agreed = np.empty_like(mine)
        wait(roots.Iallreduce(mine, agreed, op=MPI.MIN), check, mine, agreed)
        first = int(agreed[0])
        if first == roots.size:
            return None
        return StopRequest(bcast(roots, reason, check, root=first), not agreed[1])

    def close(self) -> None:
        """Stop taking in notices; this rank's run is over.

        Sends still in flight (to a rank that ended its run before it took them in) are given up on and
        kept alive, see :func:`~propulate.mpi.messaging.abandon`.
        """
        with self._lock:
            self.closed = True
            self._sends.close()
