"""The end of a run as one rank sees it: stop signals, the deadline, and interrupting a running evaluation.

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
from collections.abc import Callable
from typing import Any, TypeGuard

from mpi4py import MPI

from .errors import EvaluationInterrupted

__all__ = ["StopConditions", "Watchdog", "seconds_from_environment", "time_limit_margin"]

log = logging.getLogger("propulate")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)

#: Seconds between two looks of the watchdog at messages and deadlines while nothing is due sooner.
TICK = 0.05

#: Seconds after the moment of interruption at which a loss function still running is released (see
#: :class:`Watchdog`): long enough for an interruption raised in Python code to have ended it.
RELEASE_AFTER = 1.0


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
