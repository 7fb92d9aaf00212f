"""Crash-consistent checkpoints in HDF5: append-only, one file per writer and session, plain serial h5py.

Every worker root (a *writer*) appends what it decides to its own file, so no two processes ever write the
same file and no parallel HDF5 build is needed. A *session* is one run of the job on a checkpoint directory;
each session starts new files, so a file is written by one process in one session only:

``<checkpoint_path>/propulate-s<session:04d>-w<writer:06d>.h5``

Files are written in HDF5's single-writer/multiple-reader (SWMR) mode, which orders its flushes so that the
file on disk is always readable, even after ``kill -9``. Records are buffered in memory and a background
thread appends and flushes them every ``flush_interval`` seconds, so the loop never waits for the disk and
every evaluation that finished more than ``flush_interval`` seconds before a crash is on disk.

Layout of one file (format version :data:`FORMAT_VERSION`), declared here and nowhere else:

- attributes: ``format_version``, ``session``, ``writer`` (rank among worker roots), ``island``,
  ``island_rank``, ``generation_start`` (the writer's generation counter when the session began),
  ``config`` (JSON: search space and its fingerprint, islands, island sizes, ranks per worker, topology,
  migration probability, pollination, propagator description, world size, library version);
- ``records``: one row per event, :func:`record_dtype` — a worker started or finished evaluating an
  individual it bred, an immigrant arrived, an emigrant left, an individual was deactivated. Each row holds
  the whole individual (parameters as the ``position`` embedding, loss, status, generation, worker, birth
  island, island of residence, migration state, start/end time and period); its metrics and migration history
  are JSON in ``blobs``;
- ``states``: one row per flush pointing into ``blobs`` at a pickled snapshot of the writer's RNG state,
  the state of its propagator (``Propagator.state_dict()``) and its counters;
- ``blobs``: a byte heap for the variable-length parts;
- ``resume``: (first writer only, when resuming) the island, responsible worker and activity of every
  individual at the start of the session — where an elastic resume put them.

Writing costs O(1) per evaluation: rows are appended, the population is never rewritten.
"""

from __future__ import annotations

import json
import logging
import math
import pickle
import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .errors import PropulateError
from .individual import Individual, Status, loss_order
from .space import SearchSpace

__all__ = [
    "FORMAT_VERSION",
    "Checkpoint",
    "CheckpointError",
    "CheckpointWriter",
    "Record",
    "load_checkpoint",
]

log = logging.getLogger("propulate")

FORMAT_VERSION = 1

# A uid packs (session, writer, counter) into 63 bits: unique across the sessions of a checkpoint.
_SESSION_BITS, _WRITER_BITS, _COUNTER_BITS = 12, 20, 31
FILE_PATTERN = "propulate-s{session:04d}-w{writer:06d}.h5"
_FILE_RE = re.compile(r"^propulate-s(\d{4})-w(\d{6})\.h5$")

STATE_DTYPE = np.dtype([("generation", "i8"), ("time", "f8"), ("offset", "i8"), ("length", "i8")])
RESUME_DTYPE = np.dtype([("uid", "i8"), ("island", "i4"), ("current", "i4"), ("active", "u1")])


class CheckpointError(PropulateError, RuntimeError):
    """A checkpoint cannot be used: unreadable, of another format, or of another search space."""


class Record(IntEnum):
    """Kinds of rows in a writer's ``records``. Zero is never used, so a zeroed row is recognized as torn."""

    #: The writer bred the individual and started evaluating it.
    STARTED = 1
    #: The writer finished evaluating an individual it bred.
    EVALUATED = 2
    #: An immigrant joined the writer's island.
    ARRIVED = 3
    #: An emigrant (or pollinator) left the writer's island for island ``home``.
    DEPARTED = 4
    #: The writer deactivated individual ``uid`` (it emigrated, or a pollinator replaced it).
    DEACTIVATED = 5


def record_dtype(ndim: int) -> np.dtype:
    """Return the row type of ``records`` for a search space whose embedding has ``ndim`` slots."""
    return np.dtype(
        [
            ("kind", "u1"),
            ("status", "u1"),
            ("active", "u1"),
            ("uid", "i8"),
            ("island", "i4"),  # birth island
            ("home", "i4"),  # island of residence; target island for DEPARTED
            ("rank", "i4"),
            ("current", "i4"),
            ("generation", "i8"),
            ("migration_steps", "i4"),
            ("loss", "f8"),
            ("start", "f8"),
            ("evaltime", "f8"),
            ("evalperiod", "f8"),
            ("extra_offset", "i8"),
            ("extra_length", "i8"),
            ("position", "f8", (ndim,)),
            ("velocity", "f8", (ndim,)),
        ]
    )


def make_uid(session: int, writer: int, counter: int) -> int:
    """Return the uid of the ``counter``-th individual introduced by ``writer`` in ``session``.

    Raises
    ------
    ValueError
        For a negative argument.
    OverflowError
        Beyond 4,096 sessions, 2**20 writers or 2**31 individuals per writer and session.
    """
    if min(session, writer, counter) < 0:
        raise ValueError(f"make_uid: arguments must be >= 0, got {session}, {writer}, {counter}")
    if session >= 1 << _SESSION_BITS or writer >= 1 << _WRITER_BITS or counter >= 1 << _COUNTER_BITS:
        raise OverflowError(f"uid space exhausted: session {session}, writer {writer}, counter {counter}")
    return (session << (_WRITER_BITS + _COUNTER_BITS)) | (writer << _COUNTER_BITS) | counter


def uid_origin(uid: int) -> tuple[int, int]:
    """Return the ``(session, writer)`` that made ``uid``."""
    return uid >> (_WRITER_BITS + _COUNTER_BITS), (uid >> _COUNTER_BITS) & ((1 << _WRITER_BITS) - 1)


def checkpoint_files(directory: Path) -> dict[int, dict[int, Path]]:
    """Return the checkpoint files in ``directory`` as ``{session: {writer: path}}``."""
    found: dict[int, dict[int, Path]] = defaultdict(dict)
    if directory.is_dir():
        for path in directory.iterdir():
            match = _FILE_RE.match(path.name)
            if match:
                found[int(match.group(1))][int(match.group(2))] = path
    return dict(found)


# ------------------------------------------------------------------------------------------------- writing


def _row(kind: Record, ind: Individual, home: int, start: float, pending: bool = False) -> tuple[Any, ...]:
    """One queued record of ``ind`` on island ``home``, in the order ``CheckpointWriter._write`` reads.

    With ``pending``, the result fields are those of an individual not yet evaluated, whatever ``ind``
    holds now. The position and velocity are copied.
    """
    return (
        int(kind),
        int(Status.PENDING) if pending else int(ind.status),
        int(ind.active),
        ind.uid,
        ind.island,
        home,
        ind.rank,
        ind.current,
        ind.generation,
        ind.migration_steps,
        math.inf if pending else ind.loss,
        start,
        math.inf if pending else ind.evaltime,
        0.0 if pending else ind.evalperiod,
        ind.position.copy(),
        None if ind.velocity is None else ind.velocity.copy(),
        {} if pending else ind.metrics,
        ind.migration_history,
        0 if pending else ind.steps,
        None if pending else ind.surrogate_data,
    )


class CheckpointWriter:
    """Appends one writer's records to its file for this session; flushes from a background thread.

    Parameters
    ----------
    directory : pathlib.Path
        The checkpoint directory.
    session, writer : int
        This session's number and the writer's rank among the worker roots.
    space : SearchSpace
        The search space (fixes the row type).
    attrs : Mapping[str, Any]
        File attributes (see the module docstring); dicts are stored as JSON.
    resume_table : numpy.ndarray, optional
        Rows of :data:`RESUME_DTYPE`, written by the first writer of a resumed session.
    flush_interval : float
        Seconds between flushes, > 0.
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
    ) -> None:
        self.path = directory / FILE_PATTERN.format(session=session, writer=writer)
        self._dtype = record_dtype(space.ndim)
        self._nan = np.full(space.ndim, np.nan)
        self._file = h5py.File(self.path, "w", libver="latest")
        for key, value in attrs.items():
            self._file.attrs[key] = json.dumps(value) if isinstance(value, Mapping) else value
        self._file.attrs["format_version"] = FORMAT_VERSION
        self._records = self._file.create_dataset(
            "records", shape=(0,), maxshape=(None,), chunks=(256,), dtype=self._dtype
        )
        self._states = self._file.create_dataset(
            "states", shape=(0,), maxshape=(None,), chunks=(64,), dtype=STATE_DTYPE
        )
        self._blobs = self._file.create_dataset(
            "blobs", shape=(0,), maxshape=(None,), chunks=(1 << 16,), dtype="u1"
        )
        if resume_table is not None:
            self._file.create_dataset("resume", data=resume_table, dtype=RESUME_DTYPE)
        self._file.flush()
        self._file.swmr_mode = True
        self._lock = threading.Lock()  # guards the queue
        self._flushing = threading.Lock()  # one flush at a time
        self._last_complaint = -math.inf
        self._pending: list[tuple[Any, ...]] = []
        # The individual being evaluated, its island and start time, and whether its row was queued.
        self._running: tuple[Individual, int, float] | None = None
        self._running_queued = False
        self._plain_extras: dict[str, bytes] = {}
        self._state: tuple[int, float, bytes] | None = None
        self.seconds = 0.0  # CPU seconds spent flushing, in the background thread
        self.bytes_written = 0  # bytes appended to the datasets
        self.n_records = 0
        self._stop = threading.Event()
        self._closed = False  # set by close(), under the flushing lock
        self._interval = flush_interval
        self._thread = threading.Thread(target=self._run, name=f"propulate-checkpoint-{writer}", daemon=True)
        self._thread.start()

    def record(self, kind: Record, ind: Individual, home: int) -> None:
        """Queue one row describing ``ind`` (cheap: copies the position, no I/O)."""
        start = time.time() if kind is Record.STARTED else ind.evaltime - ind.evalperiod
        row = _row(kind, ind, home, start)
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
        self._pending.append(_row(Record.STARTED, ind, home, start, pending=True))

    def deactivated(self, uid: int, home: int) -> None:
        """Queue a deactivation of individual ``uid`` on island ``home``."""
        with self._lock:
            self._pending.append((int(Record.DEACTIVATED), 0, 0, uid, -1, home))

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
        base = self._blobs.shape[0]
        records = []
        for entry in pending:
            if entry[0] == Record.DEACTIVATED:
                records.append((*entry[:6], 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0, 0, self._nan, self._nan))
                continue
            metrics, history, steps, surrogate = entry[16:20]
            if not metrics and not steps and surrogate is None:
                extra = self._plain_extras.get(history)
                if extra is None:  # the common case: one encoding per migration history
                    extra = json.dumps({"metrics": {}, "history": history}).encode()
                    self._plain_extras[history] = extra
            else:
                extra_fields = {"metrics": metrics, "history": history}
                if steps:
                    extra_fields["steps"] = steps
                if surrogate is not None:
                    extra_fields["surrogate"] = surrogate
                extra = json.dumps(extra_fields).encode()
            velocity = self._nan if entry[15] is None else entry[15]
            records.append((*entry[:14], base + len(heap), len(extra), entry[14], velocity))
            heap += extra
        # One conversion in C instead of assigning the fields of each row from Python.
        rows = np.array(records, dtype=self._dtype) if records else np.zeros(0, dtype=self._dtype)
        state_row = None
        if state is not None:
            state_row = np.array([(state[0], state[1], base + len(heap), len(state[2]))], dtype=STATE_DTYPE)
            heap += state[2]
        # Bytes first, then the rows that point at them: a torn flush leaves rows that point past the heap
        # or zeroed rows, and the reader drops both.
        if heap:
            self._append(self._blobs, np.frombuffer(bytes(heap), dtype="u1"))
        if len(rows):
            self._append(self._records, rows)
        if state_row is not None:
            self._append(self._states, state_row)
        self._file.flush()
        self.bytes_written += len(heap) + rows.nbytes + (0 if state_row is None else state_row.nbytes)
        self.n_records += len(rows)
        self.seconds += time.thread_time() - start

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


# ------------------------------------------------------------------------------------------------- reading


@dataclass
class WriterInfo:
    """What one writer of one session recorded about itself."""

    session: int
    writer: int
    island: int
    island_rank: int
    generation_start: int
    generation_end: int = 0
    state: dict[str, Any] | None = None


@dataclass
class Checkpoint:
    """A checkpoint directory, read back.

    Attributes
    ----------
    directory : pathlib.Path
        Where it was read from.
    config : dict
        The run configuration of the latest session (search space, islands, sizes, ranks per worker,
        topology, propagator, ...).
    space : SearchSpace
        The search space.
    populations : dict[int, list[Individual]]
        For each island (numbered as in the latest session), its evaluated individuals, active or not.
    pending : dict[int, list[Individual]]
        For each island, the individuals whose evaluation never finished, with status ``INTERRUPTED``; they
        were bred by worker ``rank`` and are evaluated again by worker ``current``.
    in_transit : dict[int, list[Individual]]
        Emigrants that left an island but never arrived, by target island.
    writers : dict[tuple[int, int], WriterInfo]
        Per ``(island, island_rank)`` worker of the latest session: its generation counter at the end of the
        session and its latest state.
    sessions : int
        How many sessions wrote to the directory.
    """

    directory: Path
    config: dict[str, Any]
    space: SearchSpace
    populations: dict[int, list[Individual]] = field(default_factory=dict)
    pending: dict[int, list[Individual]] = field(default_factory=dict)
    in_transit: dict[int, list[Individual]] = field(default_factory=dict)
    writers: dict[tuple[int, int], WriterInfo] = field(default_factory=dict)
    sessions: int = 0

    @property
    def population(self) -> list[Individual]:
        """Every evaluated individual of every island (one that migrated appears once per island)."""
        return [ind for island in sorted(self.populations) for ind in self.populations[island]]

    @property
    def generations_done(self) -> int:
        """Sum over the latest session's workers of their generation counters."""
        return sum(info.generation_end for info in self.writers.values())


_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _unreadable(path: Path, why: str) -> CheckpointError:
    return CheckpointError(
        f"checkpoint file {path} cannot be read ({why}); it is truncated or corrupted. Move it away to "
        "resume without its records, or start fresh (resume=False or PROPULATE_RESUME=0)."
    )


def _check_length(path: Path) -> None:
    """Refuse a file shorter than the end-of-file address its superblock records.

    HDF5 only checks this when a file is opened without SWMR; a SWMR reader instead retries a torn read for
    minutes, so the check is made here, from the version 2/3 superblock (HDF5 file format specification,
    section II.A: signature, version, size of offsets, size of lengths, flags, then four addresses).
    """
    with open(path, "rb") as handle:
        head = handle.read(48)
    if len(head) < 12 or not head.startswith(_HDF5_SIGNATURE):
        raise _unreadable(path, "no HDF5 signature")
    version, offset_size = head[8], head[9]
    if version in (2, 3):
        start = 12 + 2 * offset_size
        if len(head) < start + offset_size:
            raise _unreadable(path, "superblock cut off")
        end_of_file = int.from_bytes(head[start : start + offset_size], "little")
        size = path.stat().st_size
        if size < end_of_file:
            raise _unreadable(path, f"{size} bytes, but its superblock says {end_of_file}")


def _open(path: Path) -> h5py.File:
    """Open a checkpoint file for reading; a file whose writer died is opened in SWMR mode."""
    _check_length(path)
    try:
        return h5py.File(path, "r", libver="latest")
    except OSError as err:
        if "already open for write" not in str(err):
            raise _unreadable(path, str(err)) from None
    # The writer did not close the file (killed): SWMR keeps it consistent for a SWMR reader.
    try:
        return h5py.File(path, "r", libver="latest", swmr=True)
    except OSError as err:
        raise _unreadable(path, str(err)) from None


def _read(path: Path) -> dict[str, Any]:
    """Read everything of one file; any failure becomes a :class:`CheckpointError` naming the file."""
    handle = _open(path)
    try:
        with handle:
            version = int(handle.attrs.get("format_version", -1))
            if version != FORMAT_VERSION:
                raise CheckpointError(
                    f"checkpoint file {path} has format version {version}; this propulate reads version "
                    f"{FORMAT_VERSION}"
                )
            return {
                "config": json.loads(handle.attrs["config"]),
                "position": (
                    int(handle.attrs["island"]),
                    int(handle.attrs["island_rank"]),
                    int(handle.attrs["generation_start"]),
                ),
                "resume": handle["resume"][()] if "resume" in handle else None,
                "records": handle["records"][()],
                "states": handle["states"][()],
                "blobs": handle["blobs"][()],
            }
    except (OSError, KeyError, ValueError) as err:
        raise _unreadable(path, f"{type(err).__name__}: {err}") from None


class _Rows:
    """The rows of one file as Python columns, read once: indexing numpy records field by field is slow."""

    _SCALARS = (
        "kind", "uid", "status", "active", "island", "home", "rank", "current", "generation",
        "migration_steps", "loss", "evaltime", "evalperiod", "extra_offset", "extra_length",
    )  # fmt: skip

    def __init__(self, rows: np.ndarray, blobs: np.ndarray, space: SearchSpace) -> None:
        self.space = space
        self.columns = {name: rows[name].tolist() for name in self._SCALARS}
        self.positions = rows["position"]
        self.velocities = rows["velocity"]
        self.moving = (~np.isnan(self.velocities).all(axis=1)).tolist() if len(rows) else []
        self.heap = blobs.tobytes()
        self._extras: dict[bytes, dict[str, Any]] = {}  # most rows share a few distinct extras

    def __len__(self) -> int:
        return len(self.columns["kind"])

    def individual(self, i: int) -> Individual | None:
        """Rebuild the individual of row ``i``; ``None`` for a torn row (pointing past the heap)."""
        col = self.columns
        offset, length = col["extra_offset"][i], col["extra_length"][i]
        if length <= 0 or offset + length > len(self.heap):
            return None
        raw = self.heap[offset : offset + length]
        extra = self._extras.get(raw)
        if extra is None:
            try:
                extra = json.loads(raw)
            except ValueError:
                return None
            self._extras[raw] = extra
        ind = Individual(self.positions[i], self.space, generation=col["generation"][i], rank=col["rank"][i])
        ind.velocity = np.array(self.velocities[i]) if self.moving[i] else None
        ind.uid = col["uid"][i]
        ind.status = Status(col["status"][i])
        ind.active = bool(col["active"][i])
        ind.island = col["island"][i]
        ind.current = col["current"][i]
        ind.migration_steps = col["migration_steps"][i]
        ind.loss = col["loss"][i]
        ind.evaltime = col["evaltime"][i]
        ind.evalperiod = col["evalperiod"][i]
        ind.metrics = {str(k): float(v) for k, v in extra.get("metrics", {}).items()}
        ind.migration_history = str(extra.get("history", ""))
        ind.steps = int(extra.get("steps", 0))
        ind.surrogate_data = extra.get("surrogate")
        return ind


class _Replay:
    """Applies the records of the sessions in order to rebuild every individual's latest state."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.individuals: dict[int, Individual] = {}
        self.residence: dict[int, int] = {}
        self.in_transit: set[int] = set()
        # Deactivations recorded before the individual they concern (another writer's file, read later).
        self.deactivate_later: set[int] = set()

    def apply_resume_table(self, table: np.ndarray) -> None:
        for uid, island, current, active in table[["uid", "island", "current", "active"]].tolist():
            ind = self.individuals.get(uid)
            if ind is None:
                continue
            self.residence[uid] = island
            ind.current = current
            ind.active = bool(active)
            self.in_transit.discard(uid)

    def apply(self, rows: np.ndarray, blobs: np.ndarray, writer_island: int, origin: tuple[int, int]) -> int:
        """Apply the rows of writer ``origin = (session, writer)``; return its highest generation bred + 1."""
        table = _Rows(rows, blobs, self.space)
        kinds, uids = table.columns["kind"], table.columns["uid"]
        # A start followed by the end of the same evaluation in this file changes nothing the end does not.
        finished_here = {uid for kind, uid in zip(kinds, uids, strict=True) if kind == Record.EVALUATED}
        generation_end = 0
        deactivations: list[int] = []
        for i, kind in enumerate(kinds):
            if kind == Record.DEACTIVATED:
                deactivations.append(uids[i])
                continue
            if kind not in (Record.STARTED, Record.EVALUATED, Record.ARRIVED, Record.DEPARTED):
                continue  # a zeroed, torn row
            if kind == Record.STARTED and uids[i] in finished_here:
                continue
            ind = table.individual(i)
            if ind is None:
                continue
            if kind == Record.DEPARTED:
                if ind.uid not in self.individuals:
                    self.individuals[ind.uid] = ind
                    self.residence[ind.uid] = table.columns["home"][i]
                    self.in_transit.add(ind.uid)
                continue
            if kind in (Record.STARTED, Record.EVALUATED) and uid_origin(ind.uid) == origin:
                # Bred by this writer in this session (not an interrupted one it evaluated again).
                generation_end = max(generation_end, ind.generation + 1)
            known = self.individuals.get(ind.uid)
            if known is not None and kind == Record.STARTED and known.status is not Status.PENDING:
                continue  # a re-evaluation started: keep the finished result until it finishes again
            if (known is not None and not known.active) or ind.uid in self.deactivate_later:
                ind.active = False
                self.deactivate_later.discard(ind.uid)
            self.individuals[ind.uid] = ind
            self.residence[ind.uid] = writer_island
            self.in_transit.discard(ind.uid)
        for uid in deactivations:
            ind = self.individuals.get(uid)
            if ind is not None:
                ind.active = False
            else:
                self.deactivate_later.add(uid)
        return generation_end


def load_checkpoint(checkpoint_path: str | Path) -> Checkpoint | None:
    """Read a checkpoint directory without MPI, e.g. for analysis in a notebook.

    Parameters
    ----------
    checkpoint_path : str or pathlib.Path
        The ``checkpoint_path`` of the run.

    Returns
    -------
    Checkpoint or None
        The populations, interrupted evaluations, run configuration and worker states; ``None`` if the
        directory holds no checkpoint.

    Raises
    ------
    CheckpointError
        If a file cannot be read (truncated, corrupted), has another format version, or the files
        disagree on the search space. Torn rows at the end of a file (a crash during a write) are skipped.
    """
    directory = Path(checkpoint_path)
    files = checkpoint_files(directory)
    if not files:
        return None
    replay: _Replay | None = None
    config: dict[str, Any] = {}
    writers: dict[tuple[int, int], WriterInfo] = {}
    for session in sorted(files):
        session_writers: dict[tuple[int, int], WriterInfo] = {}
        for writer in sorted(files[session]):
            path = files[session][writer]
            contents = _read(path)
            file_config = contents["config"]
            space = SearchSpace.of({k: tuple(v) for k, v in file_config["limits"].items()})
            if replay is None:
                replay = _Replay(space)
            elif space.fingerprint != replay.space.fingerprint:
                raise CheckpointError(f"checkpoint file {path} holds another search space than the others")
            if contents["resume"] is not None:
                replay.apply_resume_table(contents["resume"])
            info = WriterInfo(session, writer, *contents["position"])
            bred_end = replay.apply(contents["records"], contents["blobs"], info.island, (session, writer))
            info.generation_end = max(info.generation_start, bred_end)
            info.state = _latest_state(contents["states"], contents["blobs"])
            session_writers[(info.island, info.island_rank)] = info
            if writer == 0 or not config:
                config = file_config
        writers = session_writers
    assert replay is not None
    checkpoint = Checkpoint(directory, config, replay.space, writers=writers, sessions=len(files))
    for uid, ind in replay.individuals.items():
        island = replay.residence[uid]
        if uid in replay.in_transit:
            checkpoint.in_transit.setdefault(island, []).append(ind)
        elif ind.status in (Status.PENDING, Status.INTERRUPTED):
            ind.status = Status.INTERRUPTED
            checkpoint.pending.setdefault(island, []).append(ind)
        else:
            checkpoint.populations.setdefault(island, []).append(ind)
    return checkpoint


def _latest_state(states: np.ndarray, blobs: np.ndarray) -> dict[str, Any] | None:
    for generation, _, offset, length in reversed(states.tolist()):
        if length > 0 and offset + length <= len(blobs):
            try:
                state = pickle.loads(bytes(blobs[offset : offset + length]))
            except Exception:  # a torn blob: fall back to the previous snapshot
                continue
            state["generation"] = generation
            return state
    return None


# ------------------------------------------------------------------------------------------- redistribution


@dataclass
class ResumePlan:
    """Where the individuals of a checkpoint go in a new layout, and what each new worker starts with.

    Attributes
    ----------
    populations : dict[int, list[Individual]]
        The population of each new island.
    requeue : dict[tuple[int, int], list[Individual]]
        Interrupted individuals each new worker ``(island, island_rank)`` evaluates again first.
    counters : dict[tuple[int, int], int]
        Each new worker's generation counter.
    states : dict[tuple[int, int], dict]
        Writer states carried over (same layout only).
    same_layout : bool
        Whether the islands and their sizes are unchanged.
    description : str
        What happened, for the log.
    """

    populations: dict[int, list[Individual]]
    requeue: dict[tuple[int, int], list[Individual]]
    counters: dict[tuple[int, int], int]
    states: dict[tuple[int, int], dict[str, Any]]
    same_layout: bool
    description: str

    def resume_table(self) -> np.ndarray:
        """Return the island, responsible worker and activity of every individual at the session's start."""
        everyone = [(ind, island) for island, inds in self.populations.items() for ind in inds]
        everyone += [(ind, island) for (island, _), inds in self.requeue.items() for ind in inds]
        table = np.zeros(len(everyone), dtype=RESUME_DTYPE)
        for i, (ind, island) in enumerate(everyone):
            table[i] = (ind.uid, island, ind.current, ind.active)
        return table


def plan_resume(checkpoint: Checkpoint, island_counts: Iterable[int], pollination: bool) -> ResumePlan:
    """Redistribute a checkpoint onto a (possibly different) layout of islands and workers.

    With the same islands and sizes every worker gets back its generation counter, its RNG and propagator
    state and its interrupted evaluations. Otherwise the islands are mapped: with ``m`` old and ``n`` new
    islands, old island ``k`` goes to new island ``k mod n`` when ``n <= m`` (islands merge), and when
    ``n > m`` its individuals are dealt in turn to the new islands ``j`` with ``j mod m == k`` (islands
    split). The generations already done are shared as evenly as possible among the new workers, and each
    island's responsibilities (``current``) and interrupted evaluations are dealt in turn to its workers.
    Emigrants caught in flight by the end of the last session are delivered to their target island; with
    pollination each one replaces the worst active individual there.

    Parameters
    ----------
    checkpoint : Checkpoint
        What :func:`load_checkpoint` returned.
    island_counts : iterable of int
        Workers per island of the new layout.
    pollination : bool
        Whether the new run uses pollination.

    Returns
    -------
    ResumePlan
        Where everything goes.
    """
    counts = [int(c) for c in island_counts]
    old_counts = [int(c) for c in checkpoint.config.get("island_counts", [])]
    same = counts == old_counts
    n_new, n_old = len(counts), max(len(old_counts), 1)
    populations: dict[int, list[Individual]] = {j: [] for j in range(n_new)}
    pending: dict[int, list[Individual]] = {j: [] for j in range(n_new)}

    def target(old_island: int, serial: int) -> int:
        if same or n_new <= n_old:
            return old_island % n_new
        choices = list(range(old_island % n_old, n_new, n_old))
        return choices[serial % len(choices)]

    for source, destination in ((checkpoint.populations, populations), (checkpoint.pending, pending)):
        for old_island in sorted(source):
            for serial, ind in enumerate(sorted(source[old_island], key=lambda ind: ind.uid)):
                destination[target(old_island, serial)].append(ind)
    delivered = 0
    for old_island in sorted(checkpoint.in_transit):
        for ind in checkpoint.in_transit[old_island]:
            island = target(old_island, ind.uid)
            if pollination:
                active = [other for other in populations[island] if other.active]
                if active:
                    max(active, key=loss_order).active = False
            populations[island].append(ind)
            delivered += 1

    requeue: dict[tuple[int, int], list[Individual]] = {}
    counters: dict[tuple[int, int], int] = {}
    states: dict[tuple[int, int], dict[str, Any]] = {}
    if same:
        for key, info in checkpoint.writers.items():
            counters[key] = info.generation_end
            if info.state is not None:
                states[key] = info.state
        for island, inds in pending.items():
            for ind in inds:
                requeue.setdefault((island, ind.rank if 0 <= ind.rank < counts[island] else 0), []).append(
                    ind
                )
    else:
        workers = [(island, rank) for island, size in enumerate(counts) for rank in range(size)]
        share, extra = divmod(checkpoint.generations_done, len(workers))
        for i, key in enumerate(workers):
            counters[key] = share + (1 if i < extra else 0)
        for island, inds in populations.items():
            for serial, ind in enumerate(inds):
                ind.current = serial % counts[island]
        for island, inds in pending.items():
            for serial, ind in enumerate(inds):
                requeue.setdefault((island, serial % counts[island]), []).append(ind)
    n_individuals = sum(len(inds) for inds in populations.values())
    n_pending = sum(len(inds) for inds in pending.values())
    if same:
        layout = f"the same layout ({n_new} island(s) of sizes {counts})"
    else:
        how = "merged" if n_new < n_old else "split" if n_new > n_old else "kept"
        layout = (
            f"a new layout: {n_old} island(s) of sizes {old_counts} -> {n_new} island(s) of sizes {counts} "
            f"(islands {how}); {checkpoint.generations_done} generation(s) done are shared among "
            f"{sum(counts)} worker(s), and RNG and propagator states start anew"
        )
    description = (
        f"resuming from {checkpoint.directory} ({checkpoint.sessions} earlier session(s)) onto {layout}: "
        f"{n_individuals} individual(s), {n_pending} interrupted evaluation(s) to redo, "
        f"{delivered} emigrant(s) delivered that were in flight"
    )
    return ResumePlan(populations, requeue, counters, states, same, description)
