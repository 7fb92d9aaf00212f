"""The one place that calls the user's loss function: one rank or a multi-rank worker, plain or generator.

A loss function returns a number, or a mapping with a ``"loss"`` entry and further numbers (metrics such as
accuracy), or is a generator that yields interim losses (each a number or such a mapping; the last one
counts). After each interim loss the worker's surrogate may cancel the evaluation: the individual is then
pruned and keeps that interim loss. A loss function may keep its state in a folder of its own
(:func:`propulate.evaluation_checkpoint`): each interim loss then commits what it saved, and an evaluation
interrupted by the end of a job continues from it in the next (:mod:`propulate.checkpoint.evaluations`).
With a multi-rank worker the worker's root broadcasts each individual to its other ranks, every rank calls
``loss_fn(params, comm)`` with the same individual and the worker's communicator, and the value returned on
the root counts; after each interim loss (and at each explicit commit) the ranks agree, in one non-blocking
all-reduce, whether to go on, so all of them leave the training loop together.

Failures. An evaluation fails when the loss function raises, or returns NaN, an infinite loss (unless the
run accepts it) or no number. It is marked failed, never selected, and logged with rank, host and
parameters, its traceback the first time the worker meets that failure and its repeats in one line each
(:class:`FailureLog`). With ``on_failure="continue"`` the run goes on; with ``"stop"`` every rank stops,
writes the checkpoint and raises :class:`propulate.errors.RunAbortedError`. A run in which evaluations failed
and none completed raises :class:`propulate.errors.RunFailedError` at its end, also with ``"continue"``. An
evaluation that failed because a helper of this library refused the setup inside the loss function (a
:class:`~propulate.errors.PropulateError`, e.g. two ranks of a worker on one GPU) stops the run as ``"stop"``
does, whatever it says: every later evaluation would fail the same way (:attr:`Evaluation.refusal`).
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from .checkpoint.evaluations import EvaluationFolders, Resume
from .errors import EvaluationInterrupted, PropulateError
from .individual import ERROR_CHARS, Individual, Status
from .mpi.messaging import Backoff, abandon
from .mpi.worker_comm import WorkerComm
from .objectives import Objectives, as_real
from .surrogate.base import NullSurrogate, Surrogate

log = logging.getLogger("propulate")

__all__ = [
    "NO_HOOKS",
    "Evaluation",
    "EvaluationHooks",
    "Evaluator",
    "FailureLog",
    "is_generator",
    "make_surrogate",
]


@dataclass(slots=True)
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
    steps : int
        Interim losses a generator loss function yielded (0 for a plain loss function).
    misconfigured : bool
        The loss function raised a :class:`~propulate.errors.PropulateError` on this rank: a helper of this
        library refused its setup (e.g. two ranks of a worker on one GPU), which every evaluation would hit.
    losses : tuple of float or None
        With several objectives, one minimized loss each (``loss`` is the first); ``None`` otherwise.
    interim : list of (float, dict[str, float])
        On the worker's root, for a generator loss function: the loss and metrics of each step, step ``k``
        at index ``k - 1`` (those of an earlier attempt too, when the evaluation continued from one).
    """

    loss: float
    status: Status = Status.COMPLETED
    metrics: dict[str, float] = field(default_factory=dict)
    period: float = 0.0
    error: str = ""
    steps: int = 0
    misconfigured: bool = False
    losses: tuple[float, ...] | None = None
    interim: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def apply_to(self, ind: Individual) -> None:
        """Note the outcome on the individual evaluated: loss, losses, status, metrics, times, error."""
        ind.loss, ind.losses, ind.status, ind.metrics = self.loss, self.losses, self.status, self.metrics
        ind.evalperiod, ind.evaltime, ind.steps = self.period, time.time(), self.steps
        ind.error = self.error.strip()[-ERROR_CHARS:] if self.status is Status.FAILED else None

    @property
    def refusal(self) -> str:
        """The error's last line (type, message) when a helper of this library refused the setup, else ``""``.

        Every evaluation would fail the same way: the run stops.
        """
        return self.error.strip().splitlines()[-1] if self.misconfigured else ""


class FailureLog:
    """Logs a worker's failed evaluations: with the traceback the first time it meets a failure.

    A failure is known by its last line (the exception and its message); its repeats are logged in one line.

    Parameters
    ----------
    where : str
        Who evaluates, for the log (e.g. ``"Island 0, worker 3"``).
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self._seen: set[str] = set()

    def failed(self, ind: Individual, error: str) -> None:
        """Log that the evaluation of ``ind`` failed with ``error`` (a traceback, or empty)."""
        detail = error or "a rank of this worker failed; see its own log line"
        last = detail.strip().splitlines()[-1] if detail.strip() else detail
        if last in self._seen:
            detail = f"{last} (as before; traceback not repeated)"
        self._seen.add(last)
        log.error(
            f"{self.where} (rank {MPI.COMM_WORLD.rank} on {socket.gethostname()}), generation "
            f"{ind.generation}: the evaluation of {ind.params()} failed:\n{detail}"
        )


def interpret(result: Any) -> tuple[float, dict[str, float]]:
    """Turn one value a loss function returned (or yielded) into ``(loss, metrics)``.

    Raises
    ------
    TypeError
        If the value is neither a number nor a mapping with a numeric ``"loss"``.
    """
    if type(result) is float:  # the common case, without the abstract base class checks below
        return result, {}
    if isinstance(result, Mapping):
        if "loss" not in result:
            raise TypeError(f"loss_fn returned a mapping without a 'loss' entry: keys {list(result)}")
        metrics = {str(k): as_real(v, repr(k)) for k, v in result.items() if k != "loss"}
        return as_real(result["loss"], "'loss'"), metrics
    if isinstance(result, (list, tuple, np.ndarray)) and np.size(result) > 1:
        raise TypeError(
            f"loss_fn returned {np.size(result)} values; a run with several objectives declares them, "
            f"e.g. objectives={np.size(result)} (see propulate.objectives)"
        )
    return as_real(result, "the loss"), {}


def is_generator(result: Any) -> bool:
    """Whether a loss function's result is a stream of interim losses rather than one value.

    Decided on what the call returned, not on how the function is declared, so generator functions wrapped
    in :func:`functools.partial`, decorated, or called through an object's ``__call__`` are all recognized.
    """
    return isinstance(result, Iterator) and not isinstance(result, (np.ndarray, str, bytes))


class _Step:
    """What one rank saw at one interim step of a generator loss; the worker's ranks OR theirs together.

    Plain int bits rather than an ``enum.IntFlag``: they are combined on every evaluation, and enum
    arithmetic costs microseconds each time.
    """

    GOING_ON = 0
    EXHAUSTED = 1  # the generator ended (or a plain loss function returned)
    FAILED = 2  # it raised
    INTERRUPTED = 4  # a stop signal arrived during the step
    CANCELLED = 8  # the surrogate cancelled the run (root only)
    STOPPED = 16  # the run stops at a commit of its checkpoint folder, which it continues from (root only)
    #: What ends an evaluation whatever the rest says; at an agreement inside the loss function (a commit),
    #: a rank that raised or was interrupted takes part with its final agreement.
    ENDING = EXHAUSTED | FAILED | INTERRUPTED | STOPPED


class _Agreed(BaseException):
    """Raised in the loss function at a commit whose agreement ends the evaluation; carries the flags.

    A ``BaseException``, so that a loss function's ``except Exception`` does not swallow it.
    """

    def __init__(self, flags: int) -> None:
        super().__init__(flags)
        self.flags = flags


def make_surrogate(factory: Callable[[], Any] | None) -> Surrogate:
    """Return the surrogate ``factory`` makes, or a surrogate that never cancels if it is ``None``.

    Raises
    ------
    TypeError
        If ``factory`` is not callable or does not return a surrogate (an object with a ``cancel`` method).
    """
    if factory is None:
        return NullSurrogate()
    if not callable(factory):
        raise TypeError(
            f"surrogate_factory: expected a callable that returns a Surrogate, got {type(factory).__name__}"
        )
    surrogate = factory()
    if not callable(getattr(surrogate, "cancel", None)):
        raise TypeError(
            f"surrogate_factory: returned {type(surrogate).__name__}, which has no cancel(loss) method; "
            "expected a propulate.surrogate.Surrogate"
        )
    return surrogate


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


def _never() -> bool:
    return False


def _never_within(seconds: float) -> bool:
    return False


def _ignore(value: Any) -> None:
    return None


def _nothing() -> None:
    return None


def _nobody_left() -> int:
    return -1


@dataclass(frozen=True)
class EvaluationHooks:
    """What an :class:`Evaluator` asks of the run around it; each default does nothing.

    Given at construction (:data:`NO_HOOKS` for an evaluator on its own, as in tests). Every hook is called
    in the main thread, during an evaluation.

    Attributes
    ----------
    interrupting : callable () -> bool
        Whether the running evaluation is being interrupted (a stop or the time limit).
    stop_soon : callable (seconds) -> bool
        Whether an evaluation that just committed its state should stop there, given the seconds its last
        step took: a stop is under way, or the next step would run into the time limit.
    check : callable () -> None
        Called while waiting for the worker's other ranks; raises if another rank of the run failed.
    left : callable (int) -> None
        Called with :attr:`Evaluator.count` when the loss function raised on this rank of a multi-rank worker
        (to tell the worker's other ranks).
    others_left : callable () -> int
        The latest evaluation of this worker in which the loss function raised on another of its ranks:
        from then on that evaluation's collective operations are due to end (:mod:`.mpi.worker_comm`).
    release : callable () -> None
        Called when the evaluation was interrupted on this rank of a multi-rank worker, to release the
        worker's other ranks from a collective operation of the loss function.
    take_news : callable () -> None
        Root: take in what the island's peers sent, before the surrogate judges an interim loss.
    share : callable (data) -> None
        Root: send the surrogate's :meth:`~propulate.surrogate.Surrogate.interim_data` to the island's peers.
    """

    interrupting: Callable[[], bool] = _never
    stop_soon: Callable[[float], bool] = _never_within
    check: Callable[[], None] = _nothing
    left: Callable[[int], None] = _ignore
    others_left: Callable[[], int] = _nobody_left
    release: Callable[[], None] = _nothing
    take_news: Callable[[], None] = _nothing
    share: Callable[[Any], None] = _ignore


#: The hooks of an evaluator that runs on its own: nothing interrupts it, nobody else takes part.
NO_HOOKS = EvaluationHooks()


class Evaluator:
    """Calls the loss function for one worker and turns whatever happens into an :class:`Evaluation`.

    A loss function that raises, returns NaN, returns an infinite loss (unless ``accept_inf``) or returns no
    number gives a failed evaluation; the run goes on. A generator loss function is followed one interim loss
    at a time; after each, the worker's root asks the surrogate whether to cancel.

    With a multi-rank worker every rank calls the loss function. The ranks then agree, after each interim loss
    of a generator and once at the end, in a non-blocking all-reduce over the worker's communicator: the
    evaluation goes on while nobody has a reason to stop, and ends for every rank at the same step as soon as
    one rank's generator ended or failed or the root's surrogate cancelled. A failure on any rank fails the
    evaluation. Every rank takes part in the same number of all-reduces whatever happened, so a failure on
    one rank can never leave the others waiting in a mismatched collective. A rank that failed waits at most
    ``failure_timeout`` seconds for the others to reach the agreement; if they do not (they are stuck in a
    collective operation with the failed rank) it aborts the job with a message instead of hanging.

    When the evaluation is interrupted (a stop, see :mod:`propulate.lifecycle`), whatever the loss function
    raises from then on counts as the interruption, not as a failure: a rank released from a collective
    operation whose partner was interrupted sees an error of that collective.

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
    surrogate : Surrogate, optional
        Decides on the worker's root whether to cancel a generator loss early; never cancels if not given
        (:class:`~propulate.surrogate.base.NullSurrogate`). What its methods raise ends the run on every rank
        with an error that names this rank (see :mod:`propulate.mpi.alarm`), rather than a run that goes on
        without the early stopping it was configured for; every evaluation that ended is in the checkpoint.
    objectives : Objectives, optional
        The run's objectives when it has several (:mod:`propulate.objectives`): the loss function returns
        (or yields) one value each, and another number of values fails the evaluation with a message that
        says so. Surrogates judge interim values by the first objective.
    hooks : EvaluationHooks
        What the evaluator asks of the run around it (default :data:`NO_HOOKS`).
    folders : EvaluationFolders, optional
        The evaluation folders; without them :func:`propulate.evaluation_checkpoint` is not available.

    Attributes
    ----------
    loss_comm : MPI.Comm
        The communicator handed to ``loss_fn``: with several ranks, an interruptible duplicate of
        ``user_comm`` (:class:`~propulate.mpi.worker_comm.WorkerComm`; collective to construct), renewed
        after an evaluation that failed or was interrupted.
    """

    def __init__(
        self,
        loss_fn: Callable[..., Any],
        user_comm: MPI.Comm,
        worker_comm: MPI.Comm | None = None,
        accept_inf: bool = False,
        failure_timeout: float = 300.0,
        surrogate: Surrogate | None = None,
        objectives: Objectives | None = None,
        hooks: EvaluationHooks = NO_HOOKS,
        folders: EvaluationFolders | None = None,
    ) -> None:
        if not callable(loss_fn):
            raise TypeError(f"loss_fn: expected a callable, got {type(loss_fn).__name__}")
        self.loss_fn = loss_fn
        self.user_comm = user_comm
        self.worker_comm = worker_comm
        self.multi_rank = user_comm.size > 1
        self.accept_inf = bool(accept_inf)
        self.failure_timeout = float(failure_timeout)
        self.surrogate: Surrogate = surrogate if surrogate is not None else NullSurrogate()
        self.objectives = objectives
        self.evaluating = False  # read by the stop-signal handler
        self.count = 0  # evaluations begun on this rank
        self.hooks = hooks
        self.folders = folders
        self._run: _Run | None = None  # the evaluation under way
        if self.multi_rank and not _takes_communicator(loss_fn):
            raise TypeError(
                "loss_fn: with several ranks per worker it is called as loss_fn(params, comm), "
                "but it takes a single positional argument"
            )
        self.loss_comm: MPI.Comm = (
            WorkerComm.of(user_comm, self._collective_due) if self.multi_rank else user_comm
        )

    def _collective_due(self) -> bool:
        """Whether the loss function's collective operations are due to end: another rank left, or a stop."""
        return self.hooks.others_left() == self.count or self.hooks.interrupting()

    def __call__(self, ind: Individual, resume: Resume | None = None) -> Evaluation:
        """Evaluate ``ind`` on the worker's root (with the worker's other ranks); never raises.

        ``resume`` is what an interrupted earlier attempt left in the individual's folder
        (:meth:`EvaluationFolders.prepare`).
        """
        return self._evaluate(ind, True, resume)

    def run_only(self, ind: Individual, resume: Resume | None = None) -> Status:
        """Sub-ranks: take part in the evaluation of ``ind``; returns the status the worker agreed on."""
        return self._evaluate(ind, False, resume).status

    def _evaluate(self, ind: Individual, root: bool, resume: Resume | None) -> Evaluation:
        start = time.perf_counter()
        run = self._run = _Run(root, self.objectives)
        if self.folders is not None:
            self.folders.begin(ind.uid, resume, self._commit)
            run.folders = self.folders
            run.interim = list(resume.interim) if resume is not None else []
            run.until = resume.until if resume is not None else 0
        try:
            if resume is not None and 0 < resume.until <= (resume.step or 0):
                return self._spent(run, start)
            return self._attempt(ind, run, start)
        finally:
            self._run = None
            if self.folders is not None:
                self.folders.end()

    def _spent(self, run: _Run, start: float) -> Evaluation:
        """Return the evaluation whose step budget an earlier attempt spent (and committed): completed.

        The loss function is not called (it would train past the budget); its last interim loss counts.
        """
        self.count += 1
        run.steps = run.until
        if run.root:
            run.loss, run.metrics = run.interim[run.until - 1]
            run.curve = run.interim[: run.until]
        period = time.perf_counter() - start
        return Evaluation(run.loss, Status.COMPLETED, run.metrics, period, steps=run.steps, interim=run.curve)

    def _attempt(self, ind: Individual, run: _Run, start: float) -> Evaluation:
        root = run.root
        result: Any = None
        flags: int | None = None  # set when an agreement inside the loss function ended the evaluation
        self.count += 1
        self.evaluating = True
        # The flag is cleared before any handler runs: an interruption (SIGALRM) may only land in the loss
        # function or in this inner block, never in the handlers, where it would escape the evaluation.
        try:
            try:
                result = self.loss_fn(ind, self.loss_comm) if self.multi_rank else self.loss_fn(ind)
            finally:
                self.evaluating = False
            if not is_generator(result):
                run.finish(result)
        except _Agreed as agreed:
            flags = agreed.flags
        except EvaluationInterrupted:
            run.flags |= _Step.INTERRUPTED
        except Exception:
            self._failed(run)
        if run.flags & _Step.INTERRUPTED and self.multi_rank:
            self.hooks.release()
        if flags is not None:
            pass
        elif run.flags:
            flags = self._combine(run.flags)
        else:
            flags = self._follow(result, ind, run)
        if not run.flags & _Step.EXHAUSTED:
            _close(result)
        status = _status(flags)
        if isinstance(self.loss_comm, WorkerComm) and status in (Status.FAILED, Status.INTERRUPTED):
            self.loss_comm = self.loss_comm.renewed()
        if root:
            # A pruned run keeps its interim loss, which must be a real loss as much as a final one.
            unusable = [
                v
                for v in run.losses or (run.loss,)
                if math.isnan(v) or (math.isinf(v) and not self.accept_inf)
            ]
            if status in (Status.COMPLETED, Status.PRUNED) and unusable:
                status = Status.FAILED
                if run.losses is None:
                    run.error = run.error or f"loss_fn returned a loss of {run.loss}"
                else:
                    values = self.objectives.values(run.losses) if self.objectives is not None else run.losses
                    run.error = run.error or f"loss_fn returned objective values {values}"
        elif run.flags & _Step.FAILED:
            log.error(
                f"rank {MPI.COMM_WORLD.rank} on {socket.gethostname()}, a sub-rank of its worker: the "
                f"loss function failed for {ind.params()}:\n{run.error}"
            )
        period = time.perf_counter() - start
        return Evaluation(
            run.loss, status, run.metrics, period, run.error, run.steps, run.misconfigured, run.losses,
            run.curve,
        )  # fmt: skip

    def _follow(self, stream: Iterator[Any], ind: Individual, run: _Run) -> int:
        """Take interim losses from ``stream`` until some rank has a reason to stop; the combined flags.

        With an evaluation folder, an interim loss that an earlier attempt reported already is taken as
        known (its first value counts); each new one is recorded in the folder, and after the worker agreed
        on it the root commits the state saved for it (see :mod:`propulate.checkpoint.evaluations`). With a
        step budget (:attr:`Resume.until`), the evaluation ends, completed, once the interim loss of that
        step is committed: the generator is closed there, on every rank at the same step.
        """
        if run.root:
            self.surrogate.start_run(ind)
            for loss, _ in run.interim:
                self.surrogate.replay(loss)
        step_began = time.monotonic()
        while True:
            self.evaluating = True
            try:  # the flag is cleared before any handler runs (see _evaluate)
                try:
                    interim = next(stream)
                finally:
                    self.evaluating = False
                run.take(interim)
            except StopIteration:
                run.end()
            except _Agreed as agreed:
                return agreed.flags
            except EvaluationInterrupted:
                run.flags |= _Step.INTERRUPTED
            except Exception:
                self._failed(run)
            if not run.flags and self.hooks.interrupting():
                run.flags |= _Step.INTERRUPTED  # between two steps: every rank of the worker stops here
            known = run.steps <= len(run.interim)
            if run.root and not run.flags and not known:
                self.hooks.take_news()  # the peers' rung results that arrived meanwhile count here
                if self.surrogate.cancel(run.loss):
                    run.flags |= _Step.CANCELLED
                self._share_interim()
            committing = run.root and not run.flags and self._folders_used()
            if committing and self.hooks.stop_soon(time.monotonic() - step_began):
                run.flags |= _Step.STOPPED
            flags = self._combine(run.flags)
            # Committed unless the step did not end well on some rank, or the run is pruned (no next job).
            if committing and not flags & ((_Step.ENDING & ~_Step.STOPPED) | _Step.CANCELLED):
                if not known:
                    run.interim.append((run.loss, run.metrics))
                    self._folders().record(run.interim)
                self._folders().commit(run.steps)
            step_began = time.monotonic()
            if 0 < run.until <= run.steps and not flags & ((_Step.ENDING & ~_Step.STOPPED) | _Step.CANCELLED):
                return _Step.EXHAUSTED  # the step budget is spent, its last state committed: even at a stop
            if flags:
                return flags

    def _share_interim(self) -> None:
        """Hand what the surrogate has to say now about the run under way to the island's peers."""
        data = self.surrogate.interim_data()
        if data is None:
            return
        try:  # it goes into messages
            json.dumps(data, allow_nan=False)
        except (TypeError, ValueError) as err:
            log.error(
                f"{type(self.surrogate).__name__}.interim_data() is not JSON-serializable ({err}); not shared"
            )
            return
        self.hooks.share(data)

    def _folders(self) -> EvaluationFolders:
        folders = self.folders
        assert folders is not None
        return folders

    def _folders_used(self) -> bool:
        return self.folders is not None and self.folders.used

    def _commit(self) -> None:
        """:meth:`EvaluationCheckpoint.commit`: agree with the worker's other ranks, then commit the state.

        An agreement like those after each interim loss: every rank that saves has saved when all reached
        it, and a rank that failed or was interrupted takes part with its final agreement, which ends the
        evaluation here on every rank (:class:`_Agreed`). The root then commits; at a stop, every rank
        leaves the loss function. Interruptions are held back meanwhile (the renames are not cut in two).
        """
        run = self._run
        if run is None:
            raise RuntimeError("commit(): the evaluation is over")
        evaluating, self.evaluating = self.evaluating, False
        try:
            mine = _Step.GOING_ON
            used = run.root and self._folders_used()
            if used and self.hooks.stop_soon(time.monotonic() - run.committed_at):
                mine |= _Step.STOPPED
            flags = self._combine(mine)
            if used and not flags & (_Step.ENDING & ~_Step.STOPPED):
                # Before the attempt's first interim loss, the state is that of the step it continues from.
                self._folders().commit(run.steps if run.yielded else run.start_step())
            run.committed_at = time.monotonic()
        finally:
            self.evaluating = evaluating
        if flags & _Step.ENDING:
            raise _Agreed(flags)

    def _failed(self, run: _Run) -> None:
        """Record that the loss function raised: a failure, or the end of an interrupted evaluation."""
        if self.hooks.interrupting():
            run.flags |= _Step.INTERRUPTED
        else:
            run.fail(traceback.format_exc())
            run.misconfigured = isinstance(sys.exc_info()[1], PropulateError)
            if self.multi_rank:
                self.hooks.left(self.count)

    def learn(self, evaluation: Evaluation) -> Any:
        """Worker root, after an evaluation: update the surrogate and return its data for the other workers.

        Returns ``None`` for failed and interrupted evaluations, and for a plain (non-generator) loss.
        """
        if evaluation.steps == 0 or evaluation.status not in (Status.COMPLETED, Status.PRUNED):
            return None
        if evaluation.status is Status.COMPLETED:
            self.surrogate.update(evaluation.loss)
        data = self.surrogate.data()
        try:  # it goes into messages and the checkpoint's JSON
            json.dumps(data, allow_nan=False)
        except (TypeError, ValueError) as err:
            log.error(f"{type(self.surrogate).__name__}.data() is not JSON-serializable ({err}); not shared")
            return None
        return data

    def _combine(self, flags: int) -> int:
        """OR this rank's step flags with the worker's other ranks'; collective over the worker.

        A rank with a reason to stop waits at most ``failure_timeout`` seconds for the others.
        """
        if not self.multi_rank:
            return flags
        assert self.worker_comm is not None
        mine = np.array([flags], dtype=np.int64)
        seen = np.zeros(1, dtype=np.int64)
        request = self.worker_comm.Iallreduce(mine, seen, op=MPI.BOR)
        backoff = Backoff()
        deadline = time.monotonic() + self.failure_timeout
        stopping = flags & (_Step.FAILED | _Step.INTERRUPTED)
        try:
            while not request.Test():
                self.hooks.check()
                if stopping and time.monotonic() > deadline:
                    log.critical(
                        f"rank {MPI.COMM_WORLD.rank} on {socket.gethostname()}: the loss function failed "
                        f"here and the worker's other ranks did not finish within "
                        f"{self.failure_timeout:.0f} s (stuck in a collective operation with this rank?); "
                        "aborting the job instead of hanging."
                    )
                    _abort_job()
                backoff.wait()
        except BaseException:  # check()'s error, or one a signal handler raised: the request stays pending
            abandon(request, mine, seen)
            raise
        return int(seen[0])


def _abort_job(pause: float = 1.0) -> None:
    """Take the whole job down with ``MPI_Abort``, once what this rank logged can reach the job's output.

    Launchers (Hydra's proxies, ``srun``) forward a rank's output asynchronously, and the abort kills the
    forwarding processes too: output still in a pipe is lost, and with it the reason for the abort. So the
    log handlers and standard streams are flushed first and the launcher gets ``pause`` seconds to forward
    them. Should ``MPI_Abort`` return (MPICH's may: it asks the launcher to end the job, which takes a
    moment), this rank ends itself at once rather than run on.
    """
    for stream in [*logging.getLogger().handlers, *log.handlers, sys.stdout, sys.stderr]:
        try:
            stream.flush()
        except Exception:  # a closed or broken stream must not keep the job from going down
            pass
    time.sleep(pause)
    MPI.COMM_WORLD.Abort(1)
    os._exit(1)


class _Run:
    """What one rank knows about the evaluation under way."""

    def __init__(self, root: bool, objectives: Objectives | None = None) -> None:
        self.root = root
        self.objectives = objectives
        self.flags = _Step.GOING_ON
        self.loss = math.nan
        self.losses: tuple[float, ...] | None = None  # several objectives: one loss each, minimized
        self.metrics: dict[str, float] = {}
        self.steps = 0
        self.error = ""
        self.misconfigured = False
        self.folders: EvaluationFolders | None = None  # the evaluation folders, when there are any
        #: The interim losses known to the root, with their metrics: an earlier attempt's, then this one's.
        self.interim: list[tuple[float, dict[str, float]]] = []
        #: The root's interim losses with their metrics at steps 1, 2, ... of the evaluation (for trackers).
        self.curve: list[tuple[float, dict[str, float]]] = []
        self.yielded = 0  # interim losses taken in this attempt
        self.until = 0  # the interim loss after which the evaluation ends (Resume.until); 0: at its end
        self.committed_at = time.monotonic()  # when the state was last committed (or the attempt began)

    def take(self, interim: Any) -> None:
        """Record one interim loss (only the root's values count).

        The first one of an attempt that resumes is that of the step after the state the loss function
        continues from; until the steps reported before, the values reported then stand.
        """
        if self.yielded == 0:
            self.steps = self.start_step()
        self.yielded += 1
        self.steps += 1
        if self.root:
            self.interpret(interim)
            if self.steps <= len(self.interim):
                self.loss, self.metrics = self.interim[self.steps - 1]
            if self.yielded == 1:  # the steps before this attempt's first, as an earlier one reported them
                self.curve = self.interim[: self.steps - 1]
            self.curve.append((self.loss, self.metrics))

    def finish(self, result: Any) -> None:
        """Record what a plain loss function returned."""
        if self.root:
            self.interpret(result)
        self.flags |= _Step.EXHAUSTED

    def end(self) -> None:
        """Record that the generator ended."""
        if self.yielded == 0:  # a resumed attempt may have had nothing left to yield
            self.steps = self.start_step()
            if self.root and self.steps > 0:
                self.loss, self.metrics = self.interim[self.steps - 1]
                self.curve = self.interim[: self.steps]
        if self.root and self.steps == 0:
            self.fail("loss_fn is a generator that yielded nothing; expected interim losses")
        self.flags |= _Step.EXHAUSTED

    def interpret(self, value: Any) -> None:
        """Take in one value the loss function returned or yielded: its loss, metrics and losses."""
        if self.objectives is None:
            self.loss, self.metrics = interpret(value)
        else:
            self.losses, self.metrics = self.objectives.interpret(value)
            self.loss = self.losses[0]

    def fail(self, error: str) -> None:
        self.flags |= _Step.FAILED
        self.error = error

    def start_step(self) -> int:
        """Return the step this attempt continues from (see :meth:`EvaluationCheckpoint.start_step`)."""
        return self.folders.start_step() if self.folders is not None else 0


def _status(flags: int) -> Status:
    """Return the worker's status from the ranks' combined step flags."""
    if flags & _Step.FAILED:
        return Status.FAILED
    if flags & (_Step.INTERRUPTED | _Step.STOPPED):
        return Status.INTERRUPTED
    if flags & _Step.CANCELLED:
        return Status.PRUNED
    return Status.COMPLETED


def _close(result: Any) -> None:
    """Let a generator left before its end run its ``finally`` blocks (close files, free GPU memory)."""
    close = getattr(result, "close", None)
    if is_generator(result) and callable(close):
        try:
            close()
        except Exception:
            log.warning(f"closing the loss generator raised:\n{traceback.format_exc()}")
