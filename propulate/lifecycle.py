"""The end of a job as one rank sees it: stop signals, their grace period, and the wall-clock deadline.

SLURM warns a job before its time limit with a signal (``--signal``), ``scancel`` and preemption send
SIGTERM, a user presses Ctrl-C: each of SIGTERM, SIGINT and SIGUSR1 asks the run to stop. The loop checks
:attr:`StopConditions.signalled` between evaluations; an evaluation that is running when the signal arrives
gets ``grace_period`` seconds, then :class:`~propulate.errors.EvaluationInterrupted` is raised inside it.
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
from typing import Any

from mpi4py import MPI

from .errors import EvaluationInterrupted

__all__ = ["StopConditions", "seconds_from_environment"]

log = logging.getLogger("propulate")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


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


class StopConditions:
    """Stop signals and the deadline of one rank during ``propulate()``.

    Parameters
    ----------
    evaluating : callable
        Returns whether the loss function is running now (only then may the grace period interrupt it).
    grace_period : float
        Seconds a running evaluation may go on after a stop signal.
    time_limit : float, optional
        Seconds the run may take; SLURM's job end time (``SLURM_JOB_END_TIME``) is a limit too.
    """

    def __init__(self, evaluating: Callable[[], bool], grace_period: float, time_limit: float | None) -> None:
        self._evaluating = evaluating
        self.grace_period = grace_period
        self.time_limit = time_limit
        self.signalled: int | None = None
        self.deadline = math.inf
        self._reserve = 0.0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopConditions:
        now = time.monotonic()
        deadlines = [math.inf]
        if self.time_limit is not None:
            deadlines.append(now + self.time_limit)
        slurm_end = os.environ.get("SLURM_JOB_END_TIME", "")
        if slurm_end.isdigit():
            deadlines.append(now + float(slurm_end) - time.time())
        self.deadline = min(deadlines)
        # Time kept back for the last evaluation's end, the drain and the final checkpoint.
        self._reserve = min(self.grace_period, 0.1 * max(self.deadline - now, 0.0))
        if threading.current_thread() is threading.main_thread():
            for signum in _STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_stop_signal)
            self._previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._on_grace_over)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def out_of_time(self, expected_evaluation: float) -> bool:
        """Whether an evaluation of ``expected_evaluation`` seconds would end too close to the deadline."""
        return time.monotonic() + expected_evaluation + self._reserve >= self.deadline

    @property
    def signal_name(self) -> str:
        """The name of the stop signal received."""
        return "" if self.signalled is None else signal.Signals(self.signalled).name

    def _on_stop_signal(self, signum: int, frame: object) -> None:
        if self.signalled is not None:
            # A second Ctrl-C interrupts at once; launchers may deliver SIGTERM twice (mpiexec and srun
            # forward it to every rank), so only SIGINT counts twice.
            if signum == signal.SIGINT and self._evaluating():
                raise EvaluationInterrupted("a second SIGINT")
            return
        self.signalled = signum
        log.warning(
            f"rank {MPI.COMM_WORLD.rank} on {socket.gethostname()}: {self.signal_name} received; stopping: "
            f"no new evaluations, a running one has {self.grace_period:.0f} s to finish, then the checkpoint "
            "is written."
        )
        if self._evaluating():
            signal.setitimer(signal.ITIMER_REAL, max(self.grace_period, 1e-3))

    def _on_grace_over(self, signum: int, frame: object) -> None:
        if self._evaluating():
            raise EvaluationInterrupted("the grace period after a stop signal is over")
