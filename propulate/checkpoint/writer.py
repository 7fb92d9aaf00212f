"""Writing one writer's checkpoint file: records queued by the loop, appended by a background thread."""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import pickle
import threading
import time
import weakref
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..individual import Individual
from ..space import SearchSpace
from .format import (
    CHUNK_BYTES,
    FILE_PATTERN,
    FORMAT_VERSION,
    PART_SUFFIX,
    PLAN_DTYPE,
    POSITION_ATTRIBUTES,
    RESUME_DTYPE,
    SNAPSHOT_DTYPE,
    CheckpointError,
    Record,
    RowEncoder,
    chunk_rows,
    deactivation_entry,
    entry,
)

__all__ = ["CheckpointWriter"]

log = logging.getLogger("propulate")

#: Seconds the interpreter's exit waits for a writer's background thread to end (a flush in progress).
EXIT_JOIN_TIMEOUT = 30.0

# The writers of this process still referenced (to close those left open at exit), and the background
# threads that may still run, referenced apart: a thread can outlive its writer (see _end_writers()).
_WRITERS: weakref.WeakSet[CheckpointWriter] = weakref.WeakSet()
_THREADS: list[threading.Thread] = []


def _end_writers() -> None:
    """At the interpreter's exit: close the writers still open, and wait until their threads ended.

    A background thread still running when the interpreter finalizes is stopped wherever it is; inside
    an h5py call it keeps h5py's global lock for good, and the main thread's next h5py object to be freed
    waits for that lock forever, while every other rank waits in ``MPI_Finalize`` (seen with gdb after an
    injected failure, 8 ranks on 2 cores). ``close()`` does not wait for the thread (see there), and the
    thread, ending, drops the last reference to a writer the loop let go: the writer, its file and its
    datasets are then freed in that thread, under h5py's lock, while the main thread may already be
    finalizing (caught: the thread alive in ``Thread.run``'s cleanup, the writer gone, the lock taken).
    So the threads are kept apart from the writers and joined here. Python runs this before it
    finalizes, while the threads can still finish, and before mpi4py's ``MPI_Finalize``.
    """
    for writer in list(_WRITERS):
        if not writer._closed:
            try:
                writer.close()
            except Exception as err:
                log.error(f"Checkpoint: closing {writer.path} at exit failed: {err}")
        writer._stop.set()
    for thread in _THREADS:
        thread.join(EXIT_JOIN_TIMEOUT)


atexit.register(_end_writers)


class CheckpointWriter:
    """Appends one writer's records to its file for this session; flushes from a background thread.

    The file is created as ``<name>.part`` and renamed once its attributes and datasets are on disk, so a
    kill during the creation leaves no file under a checkpoint name. Each flush appends the queued rows and
    at most one state snapshot, rewriting at most one partly filled chunk (:data:`~.format.CHUNK_BYTES`) of
    each dataset: the bytes a flush writes are those of its new data plus a few kB.

    Parameters
    ----------
    directory : pathlib.Path
        The checkpoint directory.
    session, writer : int
        This session's number and the writer's rank among the worker roots.
    space : SearchSpace
        The search space (fixes the row type).
    attrs : Mapping[str, Any]
        File attributes (see :mod:`propulate.checkpoint.format`); dicts are stored as JSON.
    resume_table : numpy.ndarray, optional
        Rows of :data:`~.format.RESUME_DTYPE`, written by the first writer of a resumed session.
    plan_table : numpy.ndarray, optional
        Rows of :data:`~.format.PLAN_DTYPE`: every worker's generation counter at the start of the session,
        written by the first writer.
    flush_interval : float
        Seconds between flushes, > 0.

    Raises
    ------
    OSError
        If the file cannot be created.
    """

    def __init__(
        self,
        directory: Path,
        session: int,
        writer: int,
        space: SearchSpace,
        attrs: Mapping[str, Any],
        resume_table: np.ndarray | None = None,
        flush_interval: float = 0.25,
        plan_table: np.ndarray | None = None,
    ) -> None:
        self.path = directory / FILE_PATTERN.format(session=session, writer=writer)
        self._encoder = RowEncoder(space.ndim)
        part = self.path.with_name(self.path.name + PART_SUFFIX)
        self._file = h5py.File(part, "w", libver="latest")
        for key, value in attrs.items():
            self._file.attrs[key] = json.dumps(value) if isinstance(value, Mapping) else value
        self._file.attrs["format_version"] = FORMAT_VERSION
        if all(key in attrs for key in POSITION_ATTRIBUTES):
            self._file.attrs["position"] = np.array([attrs[key] for key in POSITION_ATTRIBUTES], dtype="i8")
        dtype = self._encoder.dtype
        self._records = self._file.create_dataset(
            "records", shape=(0,), maxshape=(None,), chunks=(chunk_rows(dtype),), dtype=dtype
        )
        self._blobs = self._file.create_dataset(
            "blobs", shape=(0,), maxshape=(None,), chunks=(CHUNK_BYTES,), dtype="u1"
        )
        self._snapshots = self._file.create_dataset("snapshots", shape=(2,), dtype=SNAPSHOT_DTYPE)
        self._slots = [
            self._file.create_dataset(
                f"snapshot{i}", shape=(0,), maxshape=(None,), chunks=(CHUNK_BYTES,), dtype="u1"
            )
            for i in range(2)
        ]
        if resume_table is not None:
            self._file.create_dataset("resume", data=resume_table, dtype=RESUME_DTYPE)
        if plan_table is not None:
            self._file.create_dataset("plan", data=plan_table, dtype=PLAN_DTYPE)
        self._file.flush()
        self._file.swmr_mode = True
        os.replace(part, self.path)
        self._sequence = 0
        self._lock = threading.Lock()  # guards the queue
        self._flushing = threading.Lock()  # one flush at a time
        self._last_complaint = -math.inf
        self._pending: list[tuple[Any, ...]] = []
        # The individual being evaluated, its island and start time, and whether its row was queued.
        self._running: tuple[Individual, int, float] | None = None
        self._running_queued = False
        self._state: tuple[int, float, bytes] | None = None
        self.seconds = 0.0  # CPU seconds spent flushing, in the background thread
        self.bytes_written = 0  # bytes of new data written to the datasets
        self.n_records = 0
        self.n_flushes = 0  # flushes that wrote something
        self._stop = threading.Event()
        self._closed = False  # set by close(), under the flushing lock
        self._interval = flush_interval
        self._thread = threading.Thread(target=self._run, name=f"propulate-checkpoint-{writer}", daemon=True)
        self._thread.start()
        _WRITERS.add(self)
        _THREADS[:] = [thread for thread in _THREADS if thread.is_alive()] + [self._thread]

    def record(self, kind: Record, ind: Individual, home: int) -> None:
        """Queue one row describing ``ind`` (cheap: copies the position, no I/O)."""
        start = time.time() if kind is Record.STARTED else ind.evaltime - ind.evalperiod
        row = entry(kind, ind, home, start)
        with self._lock:
            if self._running is not None and self._running[0] is ind:
                self._running = None
            self._pending.append(row)

    def started(self, ind: Individual, home: int) -> None:
        """Note that ``ind`` (of island ``home``) is being evaluated now (O(1), no row built).

        Its ``STARTED`` row is queued by the first flush that finds it still running. Rows reach the file
        only by a flush, so this leaves the file as queueing the row at once would, at any moment: a run
        killed during the evaluation finds it there after the next flush, and an evaluation shorter than the
        flush interval costs no row at all. ``ind``'s search position must not change while it runs.
        """
        start = time.time()
        with self._lock:
            self._running = (ind, home, start)
            self._running_queued = False

    def _queue_running(self) -> None:
        """Queue the ``STARTED`` row of the running individual, once (call with the lock held)."""
        if self._running is None or self._running_queued:
            return
        ind, home, start = self._running
        self._running_queued = True
        # Only what does not change during the evaluation is read: the loop may be storing its result.
        self._pending.append(entry(Record.STARTED, ind, home, start, pending=True))

    def deactivated(self, uid: int, home: int) -> None:
        """Queue a deactivation of individual ``uid`` on island ``home``."""
        with self._lock:
            self._pending.append(deactivation_entry(uid, home))

    def snapshot(self, generation: int, state: dict[str, Any]) -> None:
        """Remember the writer's state after ``generation``; the next flush stores the latest one."""
        blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)  # now, not when flushed: a snapshot
        with self._lock:
            self._state = (generation, time.time(), blob)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.flush()
            except Exception as err:
                # Keep the run going (the disk may come back); say so loudly, at most once a minute.
                if time.monotonic() - self._last_complaint > 60:
                    self._last_complaint = time.monotonic()
                    log.error(
                        f"Checkpoint: writing {self.path} failed, will retry: {type(err).__name__}: {err}"
                    )

    def flush(self) -> None:
        """Append what is queued and flush the file (thread-safe; nothing once the writer is closed).

        Raises
        ------
        OSError
            If the file cannot be written; the queued records are kept for the next attempt.
        """
        with self._flushing:
            if self._closed:
                return
            with self._lock:
                self._queue_running()
                pending, self._pending = self._pending, []
                state, self._state = self._state, None
            try:
                self._write(pending, state)
            except Exception:
                with self._lock:
                    self._pending[:0] = pending
                    if self._state is None:
                        self._state = state
                raise

    def _write(self, pending: list[tuple[Any, ...]], state: tuple[int, float, bytes] | None) -> None:
        if not pending and state is None:
            return
        # CPU time of this thread: wall-clock time would also count waiting for the GIL held by the loop.
        start = time.thread_time()
        heap = bytearray()
        rows = self._encoder.encode(pending, self._blobs.shape[0], heap)
        # Bytes first, then the rows that point at them: a torn flush leaves rows that point past the heap
        # or zeroed rows, and the reader drops both.
        if heap:
            self._append(self._blobs, np.frombuffer(bytes(heap), dtype="u1"))
        if len(rows):
            self._append(self._records, rows)
        written = len(heap) + rows.nbytes
        if state is not None:
            written += self._write_snapshot(*state)
        self._file.flush()
        self.bytes_written += written
        self.n_records += len(rows)
        self.n_flushes += 1
        self.seconds += time.thread_time() - start

    def _write_snapshot(self, generation: int, when: float, blob: bytes) -> int:
        """Overwrite the older of the two snapshot slots; return the bytes written."""
        self._sequence += 1
        slot = self._sequence % 2
        data = self._slots[slot]
        if data.shape[0] < len(blob):  # never shrunk: rewriting in place keeps the file's size
            data.resize((len(blob),))
        data[: len(blob)] = np.frombuffer(blob, dtype="u1")
        self._snapshots[slot] = (self._sequence, generation, when, len(blob), zlib.crc32(blob))
        return len(blob) + SNAPSHOT_DTYPE.itemsize

    @staticmethod
    def _append(dataset: h5py.Dataset, values: np.ndarray) -> None:
        n = dataset.shape[0]
        dataset.resize((n + len(values),))
        dataset[n:] = values

    def close(self) -> None:
        """Stop the background thread, flush what is left and close the file.

        Does not wait for the thread to end: woken by the stop, it ends at once, and waiting for it to be
        scheduled took up to 13 ms at the end of a run with 8 ranks on 2 cores. A flush it has begun is
        waited for; one it would begin afterwards finds the file closed and does nothing.

        Raises
        ------
        CheckpointError
            If what is left cannot be written.
        """
        self._stop.set()
        try:
            self.flush()
        except Exception as err:
            raise CheckpointError(f"writing the last records to {self.path} failed: {err}") from err
        finally:
            with self._flushing:
                self._closed = True
                self._file.close()
