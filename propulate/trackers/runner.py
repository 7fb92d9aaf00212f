"""Trackers run beside the loop, never in its way: one background thread per tracker, a bounded queue.

The loop hands each finished evaluation to :meth:`Tracking.evaluated`, which puts an immutable record into
each tracker's queue and returns at once. A tracker's thread calls the tracker: :meth:`Tracker.start`, then
:meth:`Tracker.log_evaluation` for each record in order, then :meth:`Tracker.finish` when the session ends.

Fail-safe. Nothing a tracker does reaches the loop. The first failure of a tracker is logged as a warning
with its error; later ones are counted. A tracker whose ``start`` failed, or whose ``log_evaluation``
failed :data:`MAX_FAILURES` times in a row, is called no more in the session (a server that is gone would
otherwise cost its timeout per evaluation). A full queue (a tracker slower than the search) drops the
record. At the end of the session the worker waits for the trackers' threads at most their
``flush_timeout``, together, and logs how many evaluations each did not log, if any; a thread still busy
then is left behind (a daemon: it does not keep the process alive).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .base import EvaluationRecord, SearchInfo, Tracker

__all__ = ["MAX_FAILURES", "QUEUE_CAPACITY", "TrackerThread", "Tracking"]

log = logging.getLogger("propulate")

#: Failures of ``log_evaluation`` in a row after which a tracker is called no more in the session.
MAX_FAILURES = 3
#: Records that may wait for a tracker; more are dropped (a record is a few hundred bytes).
QUEUE_CAPACITY = 10_000

_END = object()  # the queue's last item: finish the session


class TrackerThread:
    """One tracker's background thread and queue, for one session.

    Parameters
    ----------
    tracker : Tracker
        The tracker called from the thread.
    search : SearchInfo
        Handed to :meth:`Tracker.start`.
    capacity : int >= 1
        Records that may wait; more are dropped.
    """

    def __init__(self, tracker: Tracker, search: SearchInfo, capacity: int = QUEUE_CAPACITY) -> None:
        self.tracker, self.search = tracker, search
        self.name = type(tracker).__name__
        self.handed = 0  # records handed to the tracker's queue (or dropped)
        self.logged = 0  # records the tracker took
        self.first_error: str | None = None
        self._failures = 0  # in a row
        self._disabled = threading.Event()
        self._queue: queue.Queue[object] = queue.Queue(capacity)
        self._dropping = False
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=f"propulate-{self.name}", daemon=True)
        self._thread.start()

    def put(self, record: EvaluationRecord) -> None:
        """Queue ``record``; never blocks: a record that finds the queue full, or the tracker off, is lost."""
        self.handed += 1
        if self._disabled.is_set():
            return
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            if not self._dropping:
                self._dropping = True
                log.warning(
                    f"Tracker {self.name}: it is slower than the search; {self._queue.maxsize} evaluations "
                    "wait for it, further ones are not logged"
                )

    def close(self, stop_reason: str | None) -> None:
        """Queue the end of the session (the thread then calls :meth:`Tracker.finish`); never blocks."""
        if self._closed:
            return
        self._closed = True
        try:
            self._queue.put_nowait((_END, stop_reason))
        except queue.Full:  # the tracker lags by a whole queue: it is left behind
            self._disabled.set()

    def join(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the thread to end; whether it ended."""
        self._thread.join(max(0.0, timeout))
        return not self._thread.is_alive()

    @property
    def lost(self) -> int:
        """Records the tracker has not logged (yet): failed, dropped, or still queued."""
        return self.handed - self.logged

    def abandon(self) -> None:
        """Stop calling the tracker (it finishes the call under way, if any)."""
        self._disabled.set()

    def _serve(self) -> None:
        if not self._call(self.tracker.start, self.search):
            self._disabled.set()
        while True:
            item = self._queue.get()
            if isinstance(item, tuple) and item[0] is _END:
                reason = item[1]
                if not self._disabled.is_set():
                    self._call(self.tracker.finish, reason)
                return
            if self._disabled.is_set():
                continue
            assert isinstance(item, EvaluationRecord)
            if self._call(self.tracker.log_evaluation, item):
                self.logged += 1  # written by this thread only
                self._failures = 0
            else:
                self._failures += 1
                if self._failures >= MAX_FAILURES:
                    log.warning(
                        f"Tracker {self.name}: {MAX_FAILURES} failures in a row; it is called no more in "
                        "this session"
                    )
                    self._disabled.set()

    def _call(self, method: Callable[[Any], None], argument: Any) -> bool:
        """Call one of the tracker's methods; whether it returned. The first failure is logged."""
        name = method.__name__
        try:
            method(argument)
        except Exception as err:
            text = f"{type(err).__name__}: {err}"
            if self.first_error is None:
                self.first_error = text
                off = " it is called no more in this session;" if name == "start" else ""
                log.warning(
                    f"Tracker {self.name} failed in {name}() on worker {self.search.worker} of island "
                    f"{self.search.island};{off} the search goes on without it: {text}"
                )
            else:
                log.debug(f"Tracker {self.name} failed in {name}(): {text}")
            return False
        return True


class Tracking:
    """The trackers of one worker's first rank (none on the worker's other ranks: an empty tracking).

    Parameters
    ----------
    trackers : sequence of Tracker
        The trackers; none makes every method return at once.
    """

    def __init__(self, trackers: Sequence[Tracker] = ()) -> None:
        self.trackers = tuple(trackers)
        self.threads: list[TrackerThread] = []
        self._unrecorded = 0  # evaluations whose record could not be made

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def start(self, search: SearchInfo) -> None:
        """Begin a session: start each tracker's thread (which calls its :meth:`Tracker.start`)."""
        self.close(None)  # a session not closed (a failed run) leaves its threads behind
        self.threads = [TrackerThread(tracker, search) for tracker in self.trackers]

    def evaluated(self, record: Callable[[], EvaluationRecord]) -> None:
        """Queue an evaluation for every tracker; ``record`` makes its record (called if there are any)."""
        if not self.threads:
            return
        try:
            made = record()
        except Exception as err:  # a bug of this library's own must not end the search either
            if not self._unrecorded:
                log.warning(f"Trackers: an evaluation could not be recorded, nor will similar ones: {err!r}")
            self._unrecorded += 1
            return
        for thread in self.threads:
            thread.put(made)

    def close(self, stop_reason: str | None) -> None:
        """End the session: let every tracker finish within its ``flush_timeout``; log what was not logged."""
        if not self.threads:
            return
        for thread in self.threads:
            thread.close(stop_reason)
        began = time.monotonic()
        for thread in self.threads:
            waited = time.monotonic() - began
            if not thread.join(thread.tracker.flush_timeout - waited):
                thread.abandon()
                log.warning(
                    f"Tracker {thread.name}: not done {thread.tracker.flush_timeout:g} s after the end of "
                    "the session; left behind"
                )
            if thread.lost:
                first = f" (first error: {thread.first_error})" if thread.first_error else ""
                log.warning(
                    f"Tracker {thread.name}: {thread.lost} evaluation(s) of worker {thread.search.worker} of "
                    f"island {thread.search.island} not logged, {thread.logged} logged{first}"
                )
        self.threads = []
