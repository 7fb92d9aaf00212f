"""The one place that calls the user's loss function: one rank or a multi-rank worker.

A loss function returns a number, or a mapping with a ``"loss"`` entry and further numbers (metrics such as
accuracy), or is a generator that yields interim losses (the last one counts). With a multi-rank worker the
worker's root broadcasts each individual to its other ranks, every rank calls ``loss_fn(params, comm)`` with
the same individual and the worker's communicator, and the value returned on the root counts.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
import pickle
import socket
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from .errors import EvaluationInterrupted
from .individual import Individual, Status
from .mpi.messaging import Backoff

log = logging.getLogger("propulate")

__all__ = ["Evaluation", "Evaluator", "WorkerChannel"]

_STOP = 0
_TASK = 1


@dataclass(frozen=True)
class Evaluation:
    """The outcome of one evaluation.

    Attributes
    ----------
    loss : float
        The loss (NaN when the loss function raised or returned no number).
    status : Status
        Completed, failed or interrupted.
    metrics : dict[str, float]
        Further numbers the loss function returned.
    period : float
        Wall-clock seconds the evaluation took.
    error : str
        What went wrong, with the traceback, for a failed evaluation; empty otherwise.
    """

    loss: float
    status: Status = Status.COMPLETED
    metrics: dict[str, float] = field(default_factory=dict)
    period: float = 0.0
    error: str = ""


def _as_float(value: Any, what: str) -> float:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    item = getattr(value, "item", None)  # numpy and torch scalars
    if callable(item):
        number = item()
        if isinstance(number, numbers.Real) and not isinstance(number, bool):
            return float(number)
    raise TypeError(f"loss_fn returned {type(value).__name__} for {what}; expected a real number")


def interpret(result: Any) -> tuple[float, dict[str, float]]:
    """Turn what a loss function returned into ``(loss, metrics)``.

    Raises
    ------
    TypeError
        If the result is neither a number, nor a mapping with a numeric ``"loss"``, nor a generator of those.
    """
    if isinstance(result, Iterator) and not isinstance(result, np.ndarray):
        last = None
        for interim in result:
            last = interim
        if last is None:
            raise TypeError("loss_fn is a generator that yielded nothing; expected interim losses")
        result = last
    if isinstance(result, Mapping):
        if "loss" not in result:
            raise TypeError(f"loss_fn returned a mapping without a 'loss' entry: keys {list(result)}")
        metrics = {str(k): _as_float(v, repr(k)) for k, v in result.items() if k != "loss"}
        return _as_float(result["loss"], "'loss'"), metrics
    return _as_float(result, "the loss"), {}


def _takes_communicator(loss_fn: Callable[..., Any]) -> bool:
    try:
        signature = inspect.signature(loss_fn)
    except (TypeError, ValueError):
        return True
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in positional)


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

    def _post(self, kind: int, payload: bytes) -> None:
        self._header[:] = (kind, len(payload))
        # Non-blocking on both sides: a non-blocking collective only matches a non-blocking one.
        self.comm.Ibcast(self._header, root=0).Wait()
        if payload:
            self.comm.Bcast([payload, MPI.BYTE], root=0)

    def send_task(self, ind: Individual) -> None:
        """Root: start the evaluation of ``ind`` on every rank of the worker."""
        self._post(_TASK, pickle.dumps(ind, protocol=pickle.HIGHEST_PROTOCOL))

    def send_stop(self) -> None:
        """Root: release the other ranks; the run is over for this worker."""
        self._post(_STOP, b"")

    def next_task(self) -> Individual | None:
        """Other ranks: wait for the next individual; ``None`` when the worker is done."""
        request = self.comm.Ibcast(self._header, root=0)
        backoff = Backoff(cap=2e-3)
        while not request.Test():
            backoff.wait()
        kind, size = (int(x) for x in self._header)
        if kind == _STOP:
            return None
        payload = bytearray(size)
        self.comm.Bcast([payload, MPI.BYTE], root=0)
        return pickle.loads(payload)


class Evaluator:
    """Calls the loss function for one worker and turns whatever happens into an :class:`Evaluation`.

    A loss function that raises, returns NaN, returns an infinite loss (unless ``accept_inf``) or returns no
    number gives a failed evaluation; the run goes on. With a multi-rank worker every rank calls the loss
    function, and afterwards the worker's ranks agree over the worker's communicator whether all of them
    succeeded: a failure on any rank fails the evaluation. A rank that failed waits at most
    ``failure_timeout`` seconds for the others to reach the agreement; if they do not (they are stuck in a
    collective operation with the failed rank) it aborts the job with a message instead of hanging.

    Parameters
    ----------
    loss_fn : callable
        ``loss_fn(params)`` for one-rank workers, ``loss_fn(params, comm)`` for multi-rank workers.
    user_comm : MPI.Comm
        The worker communicator handed to ``loss_fn`` (the user's).
    worker_comm : MPI.Comm
        The library's duplicate of it, for the agreement.
    accept_inf : bool
        Whether an infinite loss counts as a result (default: it fails the evaluation).
    failure_timeout : float
        Seconds a failed rank waits for the agreement before aborting the job.
    """

    def __init__(
        self,
        loss_fn: Callable[..., Any],
        user_comm: MPI.Comm,
        worker_comm: MPI.Comm | None = None,
        accept_inf: bool = False,
        failure_timeout: float = 300.0,
    ) -> None:
        if not callable(loss_fn):
            raise TypeError(f"loss_fn: expected a callable, got {type(loss_fn).__name__}")
        self.loss_fn = loss_fn
        self.user_comm = user_comm
        self.worker_comm = worker_comm
        self.multi_rank = user_comm.size > 1
        self.accept_inf = bool(accept_inf)
        self.failure_timeout = float(failure_timeout)
        self.evaluating = False  # read by the stop-signal handler
        if self.multi_rank and not _takes_communicator(loss_fn):
            raise TypeError(
                "loss_fn: with several ranks per worker it is called as loss_fn(params, comm), "
                "but it takes a single positional argument"
            )

    def __call__(self, ind: Individual) -> Evaluation:
        """Evaluate ``ind`` on this rank (and agree with the worker's other ranks); never raises."""
        start = time.perf_counter()
        status, loss, error = Status.COMPLETED, math.nan, ""
        metrics: dict[str, float] = {}
        self.evaluating = True
        try:
            result = self.loss_fn(ind, self.user_comm) if self.multi_rank else self.loss_fn(ind)
            loss, metrics = interpret(result)
        except EvaluationInterrupted:
            status = Status.INTERRUPTED
        except Exception:
            status, error = Status.FAILED, traceback.format_exc()
        finally:
            self.evaluating = False
        if status is Status.COMPLETED and (math.isnan(loss) or (math.isinf(loss) and not self.accept_inf)):
            status, error = Status.FAILED, f"loss_fn returned a loss of {loss}"
        if self.multi_rank:
            status = self.agree(status)
        return Evaluation(loss, status, metrics, time.perf_counter() - start, error)

    def agree(self, status: Status) -> Status:
        """Combine this rank's status with the other ranks' of the worker; collective over the worker.

        Failed on any rank gives failed, else interrupted on any rank gives interrupted, else completed.
        """
        assert self.worker_comm is not None
        mine = np.array([1 << int(status)], dtype=np.int64)
        seen = np.zeros(1, dtype=np.int64)
        request = self.worker_comm.Iallreduce(mine, seen, op=MPI.BOR)
        backoff = Backoff()
        deadline = time.monotonic() + self.failure_timeout
        while not request.Test():
            if status is not Status.COMPLETED and time.monotonic() > deadline:
                log.critical(
                    f"rank {MPI.COMM_WORLD.rank} on {socket.gethostname()}: the loss function failed here "
                    f"and the worker's other ranks did not finish within {self.failure_timeout:.0f} s (stuck "
                    "in a collective operation with this rank?); aborting the job instead of hanging."
                )
                MPI.COMM_WORLD.Abort(1)
            backoff.wait()
        for outcome in (Status.FAILED, Status.INTERRUPTED):
            if int(seen[0]) & (1 << int(outcome)):
                return outcome
        return Status.COMPLETED

    def run_only(self, ind: Individual) -> Status:
        """Sub-ranks: take part in the evaluation of ``ind``; only whether it failed here counts."""
        status = Status.COMPLETED
        self.evaluating = True
        try:
            result = self.loss_fn(ind, self.user_comm)
            if isinstance(result, Iterator):
                for _ in result:
                    pass
        except EvaluationInterrupted:
            status = Status.INTERRUPTED
        except Exception:
            status = Status.FAILED
            log.error(
                f"rank {MPI.COMM_WORLD.rank} on {socket.gethostname()}, a sub-rank of its worker: the loss "
                f"function failed for {ind.params()}:\n{traceback.format_exc()}"
            )
        finally:
            self.evaluating = False
        return self.agree(status)
