"""The exceptions propulate raises.

Every error derives from :class:`PropulateError` and also from the builtin that matches its meaning, so
``except ValueError`` in user code keeps working.
"""

from __future__ import annotations

__all__ = [
    "EvaluationInterrupted",
    "LayoutError",
    "PropulateError",
    "RunAbortedError",
    "RunFailedError",
    "SearchSpaceError",
    "WorkerFailedError",
]


class PropulateError(Exception):
    """Root of every error raised by propulate."""


class SearchSpaceError(PropulateError, ValueError):
    """Invalid search-space limits; the message names the offending parameter."""


class LayoutError(PropulateError, ValueError):
    """Ranks, workers and islands do not fit together (sizes, divisibility, topology shape)."""


class RunAbortedError(PropulateError, RuntimeError):
    """The run stopped on the first failed evaluation (``on_failure="stop"``); raised on every rank."""


class RunFailedError(PropulateError, RuntimeError):
    """Every evaluation of the run failed (none completed); raised on every rank by ``propulate()``.

    Whatever ``on_failure`` says: ``"continue"`` goes on past failed evaluations, but a run without a single
    result ends as a failure, as Optuna's ``optimize`` re-raises a failing objective unless told to catch
    it. The checkpoint is written first; the failures and their tracebacks are in the log.
    """


class WorkerFailedError(PropulateError, RuntimeError):
    """Another rank of the run failed outside the loss function; raised on every other rank.

    The message names the failing rank, its host and its traceback. What was evaluated is in the checkpoint.
    """


class EvaluationInterrupted(BaseException):
    """Raised inside a running loss function when it must end now: a stop's grace period or the time is up.

    Derives from ``BaseException``, like ``KeyboardInterrupt``, so that ``except Exception`` in user code does
    not swallow it.
    """
