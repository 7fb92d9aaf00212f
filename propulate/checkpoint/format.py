"""The checkpoint's on-disk format: file names, row types, record kinds and uids, declared here only.

A checkpoint directory holds, for format version :data:`FORMAT_VERSION`:

``propulate-s<session:04d>-w<writer:06d>.h5``
    What one writer (a worker root) recorded in one session; written by that process only, in HDF5's
    single-writer/multiple-reader (SWMR) mode, so the file on disk is readable at any moment, even after
    ``kill -9``. A file is created under the name ``<name>.part`` and renamed once its structure is on disk:
    a file under its final name never lacks its datasets.
``propulate-merged-s<session:04d>.h5``
    Everything sessions up to and including ``session`` recorded, merged into one file
    (:mod:`propulate.checkpoint.compaction`): attributes ``format_version``, ``config`` and ``merged``
    (``[session, number of sessions]``); ``records`` with one row per individual (kind ``KEPT``, or
    ``DEPARTED`` for an emigrant in flight), ``blobs``, and ``writers`` (:data:`WRITER_DTYPE`): each worker's
    counters and latest state.
    Written under ``.part`` and renamed when complete; the sessions' files it covers are deleted afterwards,
    and a reader ignores any left behind by a kill in between.

A session file holds:

- attributes: ``format_version``, ``session``, ``writer`` (rank among worker roots), ``island``,
  ``island_rank``, ``generation_start`` (the writer's generation counter when the session began), and the
  same five again as one integer array ``position`` (one read instead of five on resume),
  ``config`` (JSON: search space and its fingerprint, islands, island sizes, ranks per worker, topology,
  migration probability, pollination, propagator description, world size, library version);
- ``records``: one row per event, :func:`record_dtype`. Each row holds the whole individual (parameters as
  the ``position`` embedding, loss, status, generation, worker, birth island, island of residence, migration
  state, start/end time and period); its metrics, migration history, ``_``-prefixed entries and, with
  several objectives, its losses (``"losses"``, a list; the ``loss`` column holds the first) are JSON
  in ``blobs`` (entries JSON cannot hold exactly are pickled there, base64-encoded);
- ``blobs``: a byte heap for the variable-length parts of rows;
- ``snapshots`` and ``snapshot0``, ``snapshot1``: the writer's latest state (RNG, propagator, counters),
  pickled, in two slots written in turn. A row of ``snapshots`` (:data:`SNAPSHOT_DTYPE`) gives a slot's
  sequence number, length and CRC-32; a reader takes the valid slot with the highest sequence number, so a
  kill while one slot is rewritten leaves the other. The file holds at most two states, whatever the length
  of the run;
- ``plan`` (first writer only): every worker's generation counter at the start of the session
  (:data:`PLAN_DTYPE`), written before any other writer of the session starts, so a worker killed before
  its own file existed still resumes from its counter;
- ``resume`` (first writer only, when resuming): the island, responsible worker and activity of every
  individual at the start of the session — where an elastic resume put them.

Version 1 files (one state row per flush in ``states``, no ``plan``) are still read.
"""

from __future__ import annotations

import base64
import copy
import json
import math
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import PropulateError
from ..individual import Individual, Status

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)

# A uid packs (session, writer, counter) into 63 bits: unique across the sessions of a checkpoint.
_SESSION_BITS, _WRITER_BITS, _COUNTER_BITS = 12, 20, 31
FILE_PATTERN = "propulate-s{session:04d}-w{writer:06d}.h5"
MERGED_PATTERN = "propulate-merged-s{session:04d}.h5"
PART_SUFFIX = ".part"
_FILE_RE = re.compile(r"^propulate-s(\d{4})-w(\d{6})\.h5$")
_MERGED_RE = re.compile(r"^propulate-merged-s(\d{4})\.h5$")
_PART_RE = re.compile(r"^propulate-.*\.h5\.part$")

#: Chunk size in bytes of the appended datasets: a flush rewrites at most one partly filled chunk of each.
CHUNK_BYTES = 4096

#: The attributes of a session file that say where it belongs, in the order of its ``position`` attribute.
POSITION_ATTRIBUTES = ("session", "writer", "island", "island_rank", "generation_start")

STATE_DTYPE = np.dtype([("generation", "i8"), ("time", "f8"), ("offset", "i8"), ("length", "i8")])  # v1
SNAPSHOT_DTYPE = np.dtype(
    [("sequence", "i8"), ("generation", "i8"), ("time", "f8"), ("length", "i8"), ("crc", "u4")]
)
RESUME_DTYPE = np.dtype([("uid", "i8"), ("island", "i4"), ("current", "i4"), ("active", "u1")])
PLAN_DTYPE = np.dtype([("island", "i4"), ("island_rank", "i4"), ("generation_start", "i8")])
#: The writers of a merged file: each worker's position, counters and latest state (in ``blobs``).
WRITER_DTYPE = np.dtype(
    [
        ("session", "i4"),
        ("writer", "i4"),
        ("island", "i4"),
        ("island_rank", "i4"),
        ("generation_start", "i8"),
        ("generation_end", "i8"),
        ("state_offset", "i8"),
        ("state_length", "i8"),
    ]
)


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
    #: Merged files only: the individual as the merged sessions left it, living on island ``home``.
    KEPT = 6


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


def chunk_rows(dtype: np.dtype) -> int:
    """Rows per chunk of a dataset of ``dtype``: about :data:`CHUNK_BYTES`, at least one."""
    return max(1, CHUNK_BYTES // dtype.itemsize)


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


@dataclass
class Listing:
    """The checkpoint files of a directory.

    Attributes
    ----------
    sessions : dict[int, dict[int, pathlib.Path]]
        Session files as ``{session: {writer: path}}``, those covered by ``merged`` left out.
    merged : pathlib.Path or None
        The newest merged file.
    covered : int
        The last session the merged file covers; -1 without one.
    stale : list[pathlib.Path]
        Files a merged file covers and unfinished ``.part`` files: left behind by a kill, never read.
    """

    sessions: dict[int, dict[int, Path]] = field(default_factory=dict)
    merged: Path | None = None
    covered: int = -1
    stale: list[Path] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        """The files to read, in the order their records apply: the merged file, then session by session."""
        paths = [] if self.merged is None else [self.merged]
        return paths + [self.sessions[s][w] for s in sorted(self.sessions) for w in sorted(self.sessions[s])]

    @property
    def with_state(self) -> set[Path]:
        """The files whose writer state a resume may use: each writer's newest session file."""
        newest: dict[int, Path] = {}
        for session in sorted(self.sessions):
            newest.update(self.sessions[session])
        return set(newest.values())

    @property
    def next_session(self) -> int:
        """The number of the next session: one past every session a file names."""
        return max([self.covered, *self.sessions]) + 1

    def __bool__(self) -> bool:
        return self.merged is not None or bool(self.sessions)


def list_files(directory: Path) -> Listing:
    """Return the checkpoint files in ``directory``."""
    listing = Listing()
    merged: dict[int, Path] = {}
    sessions: dict[int, dict[int, Path]] = {}
    if directory.is_dir():
        for path in directory.iterdir():
            if match := _FILE_RE.match(path.name):
                sessions.setdefault(int(match.group(1)), {})[int(match.group(2))] = path
            elif match := _MERGED_RE.match(path.name):
                merged[int(match.group(1))] = path
            elif _PART_RE.match(path.name):
                listing.stale.append(path)
    if merged:
        listing.covered = max(merged)
        listing.merged = merged[listing.covered]
        listing.stale += [path for session, path in merged.items() if session != listing.covered]
    for session, writers in sessions.items():
        if session <= listing.covered:
            listing.stale += writers.values()
        else:
            listing.sessions[session] = writers
    return listing


# ------------------------------------------------------------------------------------------------- rows


def entry(kind: Record, ind: Individual, home: int, start: float, pending: bool = False) -> tuple[Any, ...]:
    """One queued record of ``ind`` on island ``home``, in the order :class:`RowEncoder` reads.

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
        dict(ind.extras) or None,
        None if pending else ind.error,
        None if pending else ind.losses,
    )


def encode_extras(extras: dict[str, Any]) -> dict[str, Any]:
    """Return the JSON fields that hold an individual's ``_``-prefixed entries.

    As JSON (``"data"``) when JSON gives the same values back, so that other tools can read them; otherwise
    (tuples, arrays, NaN, objects) pickled, base64-encoded (``"data_pickle"``).
    """
    try:
        text = json.dumps(extras, allow_nan=False)
        if json.loads(text) == extras:
            return {"data": extras}
    except (TypeError, ValueError):
        pass
    return {"data_pickle": base64.b64encode(pickle.dumps(extras, protocol=pickle.HIGHEST_PROTOCOL)).decode()}


def decode_extras(fields: dict[str, Any]) -> dict[str, Any] | None:
    """Return the ``_``-prefixed entries that :func:`encode_extras` stored in ``fields``, or ``None``.

    A new object each time: readers share one parsed ``fields`` among rows whose bytes are equal.
    """
    if "data" in fields:
        return copy.deepcopy(fields["data"])
    if "data_pickle" in fields:
        return dict(pickle.loads(base64.b64decode(fields["data_pickle"])))
    return None


def deactivation_entry(uid: int, home: int) -> tuple[Any, ...]:
    """Return a queued deactivation of individual ``uid`` on island ``home``."""
    return (int(Record.DEACTIVATED), 0, 0, uid, -1, home)


class RowEncoder:
    """Turns queued entries into rows of :func:`record_dtype` and the heap bytes their extras need."""

    def __init__(self, ndim: int) -> None:
        self.dtype = record_dtype(ndim)
        self._nan = np.full(ndim, np.nan)
        self._plain_extras: dict[str, bytes] = {}

    def encode(self, entries: Sequence[tuple[Any, ...]], base: int, heap: bytearray) -> np.ndarray:
        """Return the rows of ``entries``; their extras are appended to ``heap``, which starts at ``base``."""
        records = []
        for item in entries:
            if item[0] == Record.DEACTIVATED:
                records.append((*item[:6], 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0, 0, self._nan, self._nan))
                continue
            metrics, history, steps, surrogate, extras, error, losses = item[16:23]
            if (
                not metrics
                and not steps
                and surrogate is None
                and extras is None
                and error is None
                and not losses
            ):
                extra = self._plain_extras.get(history)
                if extra is None:  # the common case: one encoding per migration history
                    extra = json.dumps({"metrics": {}, "history": history}).encode()
                    self._plain_extras[history] = extra
            else:
                extra_fields: dict[str, Any] = {"metrics": metrics, "history": history}
                if steps:
                    extra_fields["steps"] = steps
                if surrogate is not None:
                    extra_fields["surrogate"] = surrogate
                if extras is not None:
                    extra_fields.update(encode_extras(extras))
                if error is not None:
                    extra_fields["error"] = error
                if losses is not None:  # several objectives: NaN and inf as JSON's non-standard literals
                    extra_fields["losses"] = list(losses)
                extra = json.dumps(extra_fields).encode()
            velocity = self._nan if item[15] is None else item[15]
            records.append((*item[:14], base + len(heap), len(extra), item[14], velocity))
            heap += extra
        # One conversion in C instead of assigning the fields of each row from Python.
        return np.array(records, dtype=self.dtype) if records else np.zeros(0, dtype=self.dtype)
