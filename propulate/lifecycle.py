"""The end of a run as one rank sees it: stop signals, the deadline, interrupting a running evaluation.

:class:`StopCoordinator` holds one rank's part in stopping: it asks the conditions below between evaluations,
relays a stop to every worker (:mod:`propulate.mpi.alarm`) and agrees with them on why the run stopped.

SLURM warns a job before its time limit with a signal (``--signal``), ``scancel`` and preemption send
SIGTERM, a user presses Ctrl-C: each of SIGTERM, SIGINT and SIGUSR1 asks the run to stop. The loop checks
:meth:`StopConditions.stop_reason` between evaluations and starts no new one. An evaluation that is running
then gets ``grace_period`` seconds; a time limit interrupts a running evaluation :attr:`margin
<StopConditions.margin>` seconds before it runs out, so that the run can still write its checkpoint and
return in time. At that moment :class:`Watchdog`, a thread of every rank, raises
:class:`~propulate.errors.EvaluationInterrupted` inside the loss function (by a SIGALRM to the main thread,
which also ends a ``time.sleep``), and, if the loss function is still running a moment later because it
waits in C code (a collective operation of a torch process group whose partner left), it calls a release
function that aborts that collective.

With a time limit (``time_limit``, ``PROPULATE_TIME_LIMIT`` or SLURM's ``SLURM_JOB_END_TIME``) no evaluation
starts that would not end, at its running mean duration, before the margin (:func:`time_limit_margin`), and
one still running when the margin begins is interrupted and evaluated again on resume. An evaluation that
commits its state (:func:`propulate.evaluation_checkpoint`) starts whenever there is time left and stops at
the commit whose next step would not end before the margin (:meth:`StopCoordinator.stop_soon`); it continues
from that state on resume. A second SIGINT interrupts at once.

All ranks of a multi-rank worker act together: a rank that receives a stop signal tells the others (see
:mod:`propulate.mpi.alarm`), so they share one moment of interruption up to the time a message takes.

The caller's signal handling is left intact: the handlers that were installed before ``propulate()`` still
run after the library's (a requeue handler of submitit, say), they are restored afterwards, and no interval
timer is touched: a SIGALRM that the library did not send goes to the caller's handler.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeGuard

from mpi4py import MPI

from .errors import EvaluationInterrupted, WorkerFailedError
from .mpi.alarm import Alarm, FailureReport, threads_may_poll
from .validation import check_seconds

__all__ = [
    "FAILURE_GRACE",
    "STEP_MARGIN",
    "StopConditions",
    "StopCoordinator",
    "Watchdog",
    "on_release",
    "release_evaluation",
    "seconds_from_environment",
    "stop_settings",
    "time_limit_margin",
]

log = logging.getLogger("propulate")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)

#: Seconds between two looks of the watchdog at messages and deadlines while nothing is due sooner.
TICK = 0.05

#: Seconds after the moment of interruption at which a loss function still running is released (see
#: :class:`Watchdog`): long enough for an interruption raised in Python code to have ended it.
RELEASE_AFTER = 1.0

#: Seconds a running evaluation may go on after another rank failed (at most; a shorter grace period
#: applies): every rank then raises within about this time plus what its finishing takes.
FAILURE_GRACE = 20.0

#: How much longer than expected a step or an evaluation may take before the time limit: a committing
#: evaluation stops at its commit if the next step, this many times as long as the last, would not end in
#: time, and a worker starts no evaluation that would not end in time if it took this many times the mean
#: (one slowed by a loaded node would otherwise run into the interruption, its work lost or trained again).
STEP_MARGIN = 1.5

# What frees a main thread blocked in C code inside the loss function (see on_release).
_RELEASES: list[Callable[[], None]] = []


def on_release(release: Callable[[], None]) -> None:
    """Register ``release``, called by :func:`release_evaluation`; e.g. aborting a torch process group.

    A helper that creates something a loss function may block in (:mod:`propulate.utils.distributed`)
    registers how to abort it when it is imported; nothing else knows of it.
    """
    if release not in _RELEASES:
        _RELEASES.append(release)


def release_evaluation() -> None:
    """Free a loss function blocked in C code (from any thread): call every registered release."""
    for release in _RELEASES:
        release()


def seconds_from_environment(name: str, default: float | None) -> float | None:
    """Read a number of seconds from environment variable ``name``; ``default`` when it is unset or empty.

    Raises
    ------
    ValueError
        Naming the variable, when it holds no number.
    """
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{name}: expected a number of seconds, got {value!r}") from None


def stop_settings(
    grace_period: float | None, time_limit: float | None, failure_timeout: float
) -> tuple[float, float | None]:
    """Return ``(grace_period, time_limit)``, checked, from the arguments or the environment.

    Batch scripts set ``PROPULATE_GRACE_PERIOD`` (default 20) and ``PROPULATE_TIME_LIMIT`` (default none)
    without touching the Python script; an argument given wins.

    Raises
    ------
    ValueError
        Naming the argument or variable, for a negative number of seconds, or a time limit that is not
        positive.
    """
    if grace_period is None:
        grace_period = seconds_from_environment("PROPULATE_GRACE_PERIOD", 20.0) or 0.0
    if time_limit is None:
        time_limit = seconds_from_environment("PROPULATE_TIME_LIMIT", None)
    check_seconds("grace_period", grace_period)
    check_seconds("failure_timeout", failure_timeout)
    if time_limit is not None:
        check_seconds("time_limit", time_limit, positive=True)
    return float(grace_period), time_limit


def time_limit_margin(budget: float) -> float:
    """Seconds before a deadline ``budget`` seconds away at which running evaluations are interrupted.

    10 % of the budget, at least 0.5 s and at most 60 s: the time the ranks need after an interruption to
    finish the loss function, receive every message still in flight and write the checkpoint.
    """
    return min(60.0, max(0.5, 0.1 * budget))


def _chainable(handler: Any) -> TypeGuard[Callable[[int, Any], Any]]:
    """Whether a handler found installed is the caller's own function (not a default of Python or the OS)."""
    return callable(handler) and handler is not signal.default_int_handler


class StopConditions:
    """Stop signals, the deadline and the moment a running evaluation is interrupted, for one rank.

    Used as a context manager around a run: entering installs the signal handlers (in the main thread only),
    leaving restores the caller's.

    Parameters
    ----------
    evaluating : callable
        Returns whether the loss function is running now (only then is it interrupted).
    grace_period : float >= 0
        Seconds a running evaluation may go on after a stop signal.
    time_limit : float > 0, optional
        Seconds the run may take; SLURM's job end time (``SLURM_JOB_END_TIME``) is a limit too.
    on_signal : callable, optional
        Called with the seconds of grace left when this rank receives a stop signal (to tell the worker's
        other ranks).
    """

    def __init__(
        self,
        evaluating: Callable[[], bool],
        grace_period: float,
        time_limit: float | None,
        on_signal: Callable[[float], None] | None = None,
    ) -> None:
        self._evaluating = evaluating
        self.grace_period = grace_period
        self.time_limit = time_limit
        self._on_signal = on_signal
        self.signalled: int | None = None
        self.reason: str | None = None  # why this rank stops, once it does
        self.deadline = math.inf  # time.monotonic() by which propulate() must have returned
        self.margin = 0.0
        self.interrupt_at = math.inf  # time.monotonic() at which a running evaluation is interrupted
        self._interrupting = False  # set right before the watchdog sends SIGALRM
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopConditions:
        now = time.monotonic()
        self.signalled = None
        self.reason = None
        self._interrupting = False
        deadlines = [math.inf]
        if self.time_limit is not None:
            deadlines.append(now + self.time_limit)
        slurm_end = os.environ.get("SLURM_JOB_END_TIME", "")
        if slurm_end.isdigit():
            deadlines.append(now + float(slurm_end) - time.time())
        self.deadline = min(deadlines)
        self.margin = time_limit_margin(self.deadline - now) if math.isfinite(self.deadline) else 0.0
        self.interrupt_at = self.deadline - self.margin
        if threading.current_thread() is threading.main_thread():
            for signum in (*_STOP_SIGNALS, signal.SIGALRM):
                handler = self._on_alarm if signum == signal.SIGALRM else self._on_stop_signal
                self._previous[signum] = signal.signal(signum, handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    # ----------------------------------------------------------------------------------- the loop's view

    def out_of_time(self, expected_evaluation: float) -> bool:
        """Whether an evaluation of ``expected_evaluation`` seconds would run into the interruption."""
        return time.monotonic() + expected_evaluation >= self.interrupt_at

    @property
    def signal_name(self) -> str:
        """The name of the stop signal received."""
        return "" if self.signalled is None else signal.Signals(self.signalled).name

    def stop(self, reason: str, grace: float) -> None:
        """Stop this rank for ``reason``: no new evaluation; a running one ends within ``grace`` seconds."""
        if self.reason is None:
            self.reason = reason
        self.interrupt_at = min(self.interrupt_at, time.monotonic() + max(grace, 0.0))

    # ------------------------------------------------------------------------------------ the watchdog's

    def interrupt_due(self, now: float) -> bool:
        """Whether the loss function runs past the moment of interruption."""
        return now >= self.interrupt_at and self._evaluating()

    def interrupt_main_thread(self) -> None:
        """Raise :class:`EvaluationInterrupted` in the main thread's loss function (from another thread)."""
        self._interrupting = True
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)

    # ------------------------------------------------------------------------------------------ handlers

    def _on_stop_signal(self, signum: int, frame: object) -> None:
        if self.signalled is None:
            self.signalled = signum
            self.stop(f"{self.signal_name} received", self.grace_period)
            # Launchers (mpiexec, srun) deliver a signal to every rank: the first rank says it for the job,
            # the others only at debug level (a thousand ranks, a thousand lines otherwise).
            log.log(
                logging.WARNING if MPI.COMM_WORLD.rank == 0 else logging.DEBUG,
                f"rank {MPI.COMM_WORLD.rank} on {socket.gethostname()}: {self.signal_name} received; "
                f"stopping: no new evaluations, a running one has {self.grace_period:.0f} s to finish, then "
                "the checkpoint is written.",
            )
            if self._on_signal is not None:
                self._on_signal(self.grace_period)
        elif signum == signal.SIGINT:
            # A second Ctrl-C interrupts at once; launchers may deliver SIGTERM twice (mpiexec and srun
            # forward it to every rank), so only SIGINT counts twice.
            self.interrupt_at = time.monotonic()
            if self._evaluating():
                raise EvaluationInterrupted("a second SIGINT")
        previous = self._previous.get(signum)
        if _chainable(previous):
            previous(signum, frame)

    def _on_alarm(self, signum: int, frame: object) -> None:
        if self._interrupting:
            self._interrupting = False
            if self._evaluating():
                raise EvaluationInterrupted(self.reason or "the run is stopping")
            return
        # Not the watchdog's: the caller's own timer went off.
        previous = self._previous.get(signum)
        if _chainable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            # What the alarm would have done without the library: end the process.
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)


class Watchdog:
    """A thread of one rank that looks at the alarm messages and interrupts an evaluation when it is due.

    Every :data:`TICK` seconds (sooner when the moment of interruption comes first) it calls ``poll``; once
    the loss function runs past :attr:`StopConditions.interrupt_at` it interrupts it (again every
    :data:`TICK` seconds while it runs, since one SIGALRM may land while the main thread is in C code that
    ignores it), and :data:`RELEASE_AFTER` seconds later, if it still runs, it calls ``release`` once per
    evaluation (to abort a collective of a torch process group that blocks the main thread).

    Parameters
    ----------
    conditions : StopConditions
        This rank's stop conditions.
    poll : callable
        Takes in alarm messages (thread-safe); called from the thread.
    release : callable
        Frees a main thread blocked in C code inside the loss function.
    evaluation : callable
        Returns a number that changes with every evaluation (to release each at most once).
    """

    def __init__(
        self,
        conditions: StopConditions,
        poll: Callable[[], None],
        release: Callable[[], None],
        evaluation: Callable[[], int],
    ) -> None:
        self.conditions = conditions
        self._poll = poll
        self._release = release
        self._evaluation = evaluation
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="propulate-watchdog", daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        released = -1
        while True:
            remaining = self.conditions.interrupt_at - time.monotonic()
            if self._stop.wait(TICK if remaining <= 0 else min(TICK, remaining)):
                return
            try:
                self._poll()
                now = time.monotonic()
                if self.conditions.interrupt_due(now):
                    self.conditions.interrupt_main_thread()
                    evaluation = self._evaluation()
                    if now >= self.conditions.interrupt_at + RELEASE_AFTER and released != evaluation:
                        released = evaluation
                        self._release()
            except Exception:  # the watchdog must outlive anything it calls
                log.exception("propulate's watchdog thread")


class StopCoordinator:
    """One rank's part in stopping a run: its stop conditions, its alarm, and why its worker stops.

    Lives as long as its :class:`~propulate.Propulator`; :meth:`begin` makes the alarm of each run
    (collective), :meth:`close` ends it. A worker root asks :meth:`should_stop` between evaluations and
    :meth:`request` s a stop of the whole run (relayed by the alarm, :mod:`propulate.mpi.alarm`); at the end
    of its loop :meth:`settle` makes every worker root agree on the outcome. Its methods :meth:`interrupting`,
    :meth:`stop_soon`, :meth:`check`, :meth:`leave` and :meth:`others_left` are what the evaluator asks
    during an evaluation (:class:`propulate.evaluation.EvaluationHooks`).

    Parameters
    ----------
    evaluating : callable
        Whether a stop may raise in the main thread now (the loss function runs, not in a collective).
    grace_period : float >= 0
        Seconds a running evaluation may go on after a stop signal.
    time_limit : float > 0, optional
        Seconds each run may take.

    Attributes
    ----------
    conditions : StopConditions
        This rank's signals and deadlines.
    reason : str or None
        Why this worker stops before its generations are done; ``None`` while it does not.
    abort : bool
        Whether the stop is a failure (``on_failure="stop"``): the run raises at its end.
    """

    def __init__(self, evaluating: Callable[[], bool], grace_period: float, time_limit: float | None) -> None:
        self.conditions = StopConditions(evaluating, grace_period, time_limit, self._tell_worker)
        self.reason: str | None = None
        self.abort = False
        self._alarm: Alarm | None = None

    @property
    def alarm(self) -> Alarm:
        """The alarm of the run under way."""
        assert self._alarm is not None, "no run under way"
        return self._alarm

    def begin(self, worker: MPI.Comm, roots: MPI.Comm | None) -> None:
        """Start a run: no stop yet, a new alarm; collective over ``worker`` and ``roots`` (worker roots)."""
        self.reason, self.abort = None, False
        self._alarm = Alarm(self.conditions, worker, roots, FAILURE_GRACE)

    def close(self) -> None:
        """End the run's alarm (see :meth:`Alarm.close`)."""
        if self._alarm is not None:
            self._alarm.close()

    @contextmanager
    def run(
        self,
        worker: MPI.Comm,
        roots: MPI.Comm | None,
        poll: Callable[[], None],
        evaluations: Callable[[], int],
        on_failure: Callable[[], None],
    ) -> Iterator[None]:
        """Hold one run of this rank (the ``with`` block); collective to enter (:meth:`begin`).

        Inside, the stop signals are handled and the :class:`Watchdog` polls (``poll``, where MPI lets a
        thread poll) and interrupts. An exception that leaves the block is passed on to every rank
        (:meth:`fail`) after ``on_failure`` (closing the checkpoint); at the end the alarm closes and a loss
        function blocked in C code is released (:func:`release_evaluation`).
        """
        self.begin(worker, roots)
        poll = poll if threads_may_poll() else _nothing
        try:
            with self.conditions, Watchdog(self.conditions, poll, release_evaluation, evaluations):
                yield
        except BaseException as err:
            self.fail(err)
            on_failure()
            raise
        finally:
            self.close()
            release_evaluation()

    def _tell_worker(self, grace_left: float) -> None:
        """Tell the worker's other ranks that a stop signal reached this rank, so that they stop with it."""
        if self._alarm is not None:
            self._alarm.stop_worker(grace_left)

    # ------------------------------------------------------------------------------ between evaluations

    def check(self) -> None:
        """Raise :class:`WorkerFailedError` if another rank failed (taking in notices if no thread does)."""
        alarm = self.alarm
        if not threads_may_poll():
            alarm.poll()
        alarm.check()

    def take(self, reason: str, abort: bool = False) -> None:
        """Note a stop of this worker: the first reason counts; an abort only adds to it."""
        if self.reason is None:
            self.reason = reason
        self.abort = self.abort or abort

    def stopping(self) -> bool:
        """Whether this worker stops (it starts no new evaluation)."""
        return self.reason is not None

    def request(self, reason: str, abort: bool = False) -> None:
        """Stop this worker and ask every other worker to stop (they finish their running evaluation).

        The alarm relays the request over a tree of the worker roots at once, also while this or another
        worker evaluates; an abort after a stop is passed on too.
        """
        self.take(reason, abort)
        self.alarm.request_stop(reason, abort)

    def should_stop(self, expected_evaluation: float) -> bool:
        """Check between two evaluations whether this worker stops; start a stop where a condition holds.

        ``expected_evaluation`` is how long the next evaluation takes, seconds (0 for one that commits its
        state: it starts whenever there is time left and stops at the commit whose next step would not end
        in time); it must end before the moment of interruption with :data:`STEP_MARGIN` times that.
        """
        self.check()
        request = self.alarm.stop_request  # another worker's, relayed by the alarm, or this one's
        if request is not None:
            self.take(*request)
        if self.reason is None:
            if self.conditions.reason is not None:
                self.request(self.conditions.reason)
            elif self.conditions.out_of_time(STEP_MARGIN * expected_evaluation):
                self.request("the time limit is near")
        return self.reason is not None

    def settle(self) -> None:
        """End of the loop: agree with every worker root on whether, why and how the run stopped early.

        A stop relayed by the alarm may reach a worker after it finished its generations: it counts all
        the same, as if it had arrived in time (:meth:`propulate.mpi.alarm.Alarm.settle`).
        """
        settled = self.alarm.settle(self.reason, self.abort, self.check)
        if settled is not None:
            self.reason, self.abort = settled

    def fail(self, err: BaseException) -> None:
        """Tell every rank that this one fails with ``err`` (unless it only passes another's failure on)."""
        if not isinstance(err, WorkerFailedError):
            self.alarm.fail(FailureReport.of(err, "propulate()"))
            log.error(
                f"rank {MPI.COMM_WORLD.rank} on {socket.gethostname()} failed; every rank of the run stops. "
                f"{type(err).__name__}: {err}"
            )

    # ------------------------------------------------------------------------------ during an evaluation

    def interrupting(self) -> bool:
        """Whether the running evaluation is being interrupted: the moment of interruption has passed."""
        return time.monotonic() >= self.conditions.interrupt_at

    def stop_soon(self, seconds: float) -> bool:
        """Whether an evaluation that committed its state stops there, its last step having taken ``seconds``.

        It does once a stop is under way, or when its next step, :data:`STEP_MARGIN` times as long as the
        last, would run into the moment of interruption: it continues from there on resume.
        """
        conditions = self.conditions
        ends = time.monotonic() + STEP_MARGIN * seconds
        return conditions.reason is not None or ends >= conditions.interrupt_at

    def leave(self, evaluation: int) -> None:
        """Tell the worker's other ranks that the loss function raised here in ``evaluation``."""
        self.alarm.leave(evaluation)

    def others_left(self) -> int:
        """Return the latest evaluation of this worker in which the loss function raised on another rank."""
        return self.alarm.left if self._alarm is not None else -1


def _nothing() -> None:
    return None
