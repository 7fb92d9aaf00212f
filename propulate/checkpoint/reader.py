"""Reading a checkpoint back: file by file (any process may read any share), then replayed in order."""

from __future__ import annotations

import copy
import functools
import json
import logging
import pickle
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..individual import Individual, Status
from ..space import SearchSpace
from .format import (
    PLAN_DTYPE,
    POSITION_ATTRIBUTES,
    READABLE_VERSIONS,
    RESUME_DTYPE,
    SNAPSHOT_DTYPE,
    STATE_DTYPE,
    WRITER_DTYPE,
    CheckpointError,
    Listing,
    Record,
    decode_extras,
    list_files,
    record_dtype,
    uid_origin,
)

__all__ = [
    "Checkpoint",
    "EmptyFileError",
    "WriterInfo",
    "assemble",
    "collect",
    "load_checkpoint",
    "read_file",
    "read_listing",
    "read_outcome",
]

log = logging.getLogger("propulate")


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
        session and its latest state. A worker whose file of that session is missing (killed before it
        was created) has the counter the session started it with.
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


class EmptyFileError(CheckpointError):
    """A checkpoint file that cannot hold a record: killed between its creation and its first flush."""


# ---------------------------------------------------------------------------------------- one file

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# HDF5 allocates file space for metadata in blocks of 2 KiB first (H5Pset_meta_block_size's default) and
# raw data after them: a file whose superblock ends it within the first block holds no row.
_FIRST_BLOCK = 2048


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

    Raises
    ------
    EmptyFileError
        If the superblock ends the file within HDF5's first metadata block (no row was ever written) and the
        file is shorter than that.
    CheckpointError
        If the file is shorter than its superblock says, or is no HDF5 file.
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
            if end_of_file <= _FIRST_BLOCK:
                raise EmptyFileError(
                    f"checkpoint file {path} holds no record: {size} bytes, its creation was cut off"
                )
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


def _dataset(handle: h5py.File, name: str, dtype: np.dtype) -> np.ndarray | None:
    """Read a whole 1-D dataset into an array of ``dtype``; ``None`` if there is none of that name.

    Through h5py's low-level interface with the row type known beforehand: the high-level one costs a
    millisecond per file in wrappers, which a resume pays for every file of every session.
    """
    key = name.encode()
    if not handle.id.links.exists(key):
        return None
    dataset = h5py.h5d.open(handle.id, key)
    out = np.empty(dataset.shape[0], dtype=dtype)
    if len(out):
        dataset.read(h5py.h5s.ALL, h5py.h5s.ALL, out)
    return out


def _attribute(handle: h5py.File, name: str) -> Any:
    return handle.attrs[name] if h5py.h5a.exists(handle.id, name.encode()) else None


@functools.lru_cache(maxsize=16)
def _space_of_json(config: str) -> tuple[dict[str, Any], SearchSpace]:
    """Return the configuration and search space of a ``config`` attribute (most files share one).

    The configuration returned is shared by every caller with the same attribute: not to be changed.
    """
    parsed = json.loads(config)
    limits = {k: v if isinstance(v, dict) else tuple(v) for k, v in parsed["limits"].items()}
    return parsed, SearchSpace.of(limits)


def _snapshots(handle: h5py.File, blobs: np.ndarray) -> list[tuple[int, bytes]]:
    """Return the state snapshots whose bytes are whole, newest first, as ``(generation, pickle)``."""
    found: list[tuple[int, int, bytes]] = []
    slots = _dataset(handle, "snapshots", SNAPSHOT_DTYPE)
    if slots is not None:  # version 2: two slots, each checked by its CRC
        for slot, (sequence, generation, _, length, crc) in enumerate(slots.tolist()):
            if sequence <= 0 or length <= 0:
                continue
            data = _dataset(handle, f"snapshot{slot}", np.dtype("u1"))
            if data is None or length > len(data):
                continue
            blob = data[:length].tobytes()
            if zlib.crc32(blob) == crc:
                found.append((sequence, generation, blob))
    elif (states := _dataset(handle, "states", STATE_DTYPE)) is not None:  # version 1: a row per flush
        for sequence, (generation, _, offset, length) in enumerate(states.tolist()):
            if length > 0 and offset + length <= len(blobs):
                found.append((sequence, generation, blobs[offset : offset + length].tobytes()))
    return [(generation, blob) for _, generation, blob in sorted(found, reverse=True)]


def read_file(path: Path, state: bool = True) -> dict[str, Any]:
    """Read everything of one checkpoint file (a session's or a merged one) into plain, picklable data.

    Without ``state``, the writer's state snapshots of a session file are not read (``snapshots`` is empty):
    a resume uses only each writer's newest (:attr:`~.format.Listing.with_state`).

    Raises
    ------
    EmptyFileError
        If the file never got past its creation (it holds no record).
    CheckpointError
        Naming the file, if it cannot be read or has a format version this library does not read.
    """
    handle = _open(path)
    try:
        with handle:
            version = _attribute(handle, "format_version")
            if version not in READABLE_VERSIONS:
                raise CheckpointError(
                    f"checkpoint file {path} has format version {version}; this propulate reads versions "
                    f"{', '.join(map(str, READABLE_VERSIONS))}"
                )
            config_json = handle.attrs["config"]
            config, space = _space_of_json(config_json)
            blobs = _dataset(handle, "blobs", np.dtype("u1"))
            records = _dataset(handle, "records", record_dtype(space.ndim))
            if blobs is None or records is None:
                raise KeyError("no records or blobs")
            contents: dict[str, Any] = {
                "path": str(path),
                "config": config,
                "config_json": config_json,
                "records": records,
                "blobs": blobs,
            }
            merged = _attribute(handle, "merged")
            contents["merged"] = merged is not None
            if merged is not None:
                contents["covered"], contents["sessions"] = (int(value) for value in merged)
                contents["writers"] = _dataset(handle, "writers", WRITER_DTYPE)
                return contents
            position = _attribute(handle, "position")
            if position is None:  # version 1
                position = [handle.attrs[key] for key in POSITION_ATTRIBUTES]
            session, writer, island, island_rank, generation_start = (int(value) for value in position)
            contents["session"], contents["writer"] = session, writer
            contents["position"] = (island, island_rank, generation_start)
            contents["resume"] = _dataset(handle, "resume", RESUME_DTYPE)
            contents["plan"] = _dataset(handle, "plan", PLAN_DTYPE)
            contents["snapshots"] = _snapshots(handle, blobs) if state else []
            return contents
    except (OSError, KeyError, ValueError, TypeError) as err:
        raise _unreadable(path, f"{type(err).__name__}: {err}") from None


def _unpickle_first(snapshots: list[tuple[int, bytes]]) -> dict[str, Any] | None:
    for generation, blob in snapshots:
        try:
            state = pickle.loads(blob)
        except Exception:  # a torn blob: fall back to the previous snapshot
            continue
        state["generation"] = generation
        return state
    return None


# ---------------------------------------------------------------------------------------- replay


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
        ind.error = extra.get("error")
        losses = extra.get("losses")
        ind.losses = None if losses is None else tuple(float(v) for v in losses)
        ind.extras = decode_extras(extra)
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

    def apply_merged(self, rows: np.ndarray, blobs: np.ndarray) -> None:
        """Take the individuals of a merged file as they are: each row is one, on island ``home``."""
        table = _Rows(rows, blobs, self.space)
        for i, kind in enumerate(table.columns["kind"]):
            ind = table.individual(i)
            if ind is None or kind not in (Record.KEPT, Record.DEPARTED):
                raise CheckpointError(f"merged checkpoint row {i} is damaged")
            self.individuals[ind.uid] = ind
            self.residence[ind.uid] = table.columns["home"][i]
            if kind == Record.DEPARTED:
                self.in_transit.add(ind.uid)

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


def _merged_writers(contents: dict[str, Any]) -> dict[tuple[int, int], WriterInfo]:
    writers = {}
    blobs = contents["blobs"]
    for row in contents["writers"].tolist():
        session, writer, island, island_rank, start, end, offset, length = row
        state = None
        if length > 0:
            state = pickle.loads(blobs[offset : offset + length].tobytes())
        writers[(island, island_rank)] = WriterInfo(session, writer, island, island_rank, start, end, state)
    return writers


def assemble(directory: Path, files: list[dict[str, Any]]) -> Checkpoint | None:
    """Replay the contents of a directory's files into a :class:`Checkpoint`; ``None`` if there are none.

    ``files`` are what :func:`read_file` returned, in the order of :attr:`~.format.Listing.paths`.

    Each worker of a session starts from the counter the session's plan gave it (its own file may be
    missing: killed before it was created) and the state it had at the end of the previous session (same
    layout only); its own file, where there is one, then says how far it got.

    Raises
    ------
    CheckpointError
        If the files disagree on the search space, or a merged file is damaged.
    """
    if not files:
        return None
    replay: _Replay | None = None
    config: dict[str, Any] = {}
    writers: dict[tuple[int, int], WriterInfo] = {}
    sessions = 0
    by_session: dict[int, list[dict[str, Any]]] = {}
    for contents in files:
        file_config = contents["config"]
        space = _space_of_json(contents["config_json"])[1]
        if replay is None:
            replay = _Replay(space)
        elif space.fingerprint != replay.space.fingerprint:
            raise CheckpointError(
                f"checkpoint file {contents['path']} holds another search space than the others"
            )
        if contents["merged"]:
            replay.apply_merged(contents["records"], contents["blobs"])
            writers = _merged_writers(contents)
            config = file_config
            sessions = contents["sessions"]
        else:
            by_session.setdefault(contents["session"], []).append(contents)
    assert replay is not None
    for session in sorted(by_session):
        session_files = sorted(by_session[session], key=lambda contents: contents["writer"])
        first = session_files[0]
        session_config = next((c["config"] for c in session_files if c["writer"] == 0), first["config"])
        same_layout = session_config.get("island_counts") == config.get("island_counts")
        session_writers: dict[tuple[int, int], WriterInfo] = {}
        for contents in session_files:
            if contents["plan"] is None:
                continue
            for island, island_rank, start in contents["plan"].tolist():
                before = writers.get((island, island_rank)) if same_layout else None
                state = None if before is None else before.state
                session_writers[(island, island_rank)] = WriterInfo(
                    session, -1, island, island_rank, start, start, state
                )
        for contents in session_files:
            if contents["resume"] is not None:
                replay.apply_resume_table(contents["resume"])
            island, island_rank, start = contents["position"]
            bred_end = replay.apply(
                contents["records"], contents["blobs"], island, (session, contents["writer"])
            )
            planned = session_writers.get((island, island_rank))
            state = _unpickle_first(contents["snapshots"])
            if state is None and planned is not None:
                state = planned.state
            session_writers[(island, island_rank)] = WriterInfo(
                session, contents["writer"], island, island_rank, start, max(start, bred_end), state
            )
        writers = session_writers
        config = session_config
        sessions += 1
    # A copy: the configurations read are shared by the files (and loads) with the same one.
    config = copy.deepcopy(config)
    checkpoint = Checkpoint(directory, config, replay.space, writers=writers, sessions=sessions)
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


def read_outcome(path: Path, state: bool) -> tuple[str, Any]:
    """Read one file and say how it went, without raising.

    Returns ``("read", contents)`` (see :func:`read_file`), ``("empty", message)`` for a file that holds no
    record, or ``("error", message)``: a rank reading its share hands the outcome on instead of raising alone.
    """
    try:
        return "read", read_file(path, state=state)
    except EmptyFileError as err:
        return "empty", str(err)
    except CheckpointError as err:
        return "error", str(err)


def collect(paths: list[Path], outcomes: list[tuple[str, Any]]) -> tuple[list[dict[str, Any]], list[Path]]:
    """Sort what :func:`read_outcome` gave for ``paths`` into the contents read and the files with no record.

    A file with no record is skipped with a warning.

    Raises
    ------
    CheckpointError
        For the first file that could not be read, naming it.
    """
    files, empty = [], []
    for path, (outcome, value) in zip(paths, outcomes, strict=True):
        if outcome == "error":
            raise CheckpointError(value)
        if outcome == "empty":
            log.warning(f"Checkpoint: skipping {path}: {value}")
            empty.append(path)
        else:
            files.append(value)
    return files, empty


def read_listing(listing: Listing) -> tuple[list[dict[str, Any]], list[Path]]:
    """Read every file of ``listing`` in order; return their contents and the files that hold no record.

    A file that never got past its creation (killed before its first flush) is skipped with a warning.

    Raises
    ------
    CheckpointError
        Naming the file, if one that may hold records cannot be read.
    """
    with_state = listing.with_state
    return collect(listing.paths, [read_outcome(path, path in with_state) for path in listing.paths])


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
        disagree on the search space. Torn rows at the end of a file (a crash during a write) are skipped,
        and so, with a warning, is a file killed between its creation and its first flush.
    """
    directory = Path(checkpoint_path)
    return assemble(directory, read_listing(list_files(directory))[0])
