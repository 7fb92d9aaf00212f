"""Merging a checkpoint's files into one: its size and the work of a resume follow the evaluations only.

Every session adds one file per writer. :func:`compact` replaces the files of all sessions so far by one
*merged* file, ``propulate-merged-s<last session>.h5``, holding one row per individual as the sessions left it
(population, interrupted evaluations, emigrants in flight) and each worker's counters and latest state:
what :func:`~propulate.checkpoint.reader.load_checkpoint` reads back is the same. A resume compacts before its
session starts; ``python -m propulate compact <checkpoint_path>`` does it offline.

It is safe against a kill at any moment: the merged file is written as ``.part``, synced to disk and renamed,
and only then are the files it covers deleted; a reader ignores covered files left behind.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .format import (
    CHUNK_BYTES,
    FORMAT_VERSION,
    MERGED_PATTERN,
    PART_SUFFIX,
    WRITER_DTYPE,
    Listing,
    Record,
    RowEncoder,
    chunk_rows,
    entry,
    list_files,
)
from .reader import Checkpoint, assemble, read_listing

__all__ = ["compact", "set_aside", "write_merged"]

log = logging.getLogger("propulate")


def _sync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_merged(checkpoint: Checkpoint, covered: int) -> Path:
    """Write ``checkpoint`` as the merged file of sessions ``0 .. covered`` in its directory.

    The file appears under its name only when complete and on disk.

    Returns
    -------
    pathlib.Path
        The merged file.

    Raises
    ------
    OSError
        If it cannot be written; no file under a checkpoint name is changed then.
    """
    path = checkpoint.directory / MERGED_PATTERN.format(session=covered)
    part = path.with_name(path.name + PART_SUFFIX)
    encoder = RowEncoder(checkpoint.space.ndim)
    entries = []
    for source, kind in (
        (checkpoint.populations, Record.KEPT),
        (checkpoint.pending, Record.KEPT),
        (checkpoint.in_transit, Record.DEPARTED),
    ):
        for island in sorted(source):
            for ind in source[island]:
                entries.append(entry(kind, ind, island, ind.evaltime - ind.evalperiod))
    heap = bytearray()
    rows = encoder.encode(entries, 0, heap)
    writers = np.zeros(len(checkpoint.writers), dtype=WRITER_DTYPE)
    for i, (key, info) in enumerate(sorted(checkpoint.writers.items())):
        offset, length = len(heap), 0
        if info.state is not None:
            blob = pickle.dumps(info.state, protocol=pickle.HIGHEST_PROTOCOL)
            heap += blob
            length = len(blob)
        writers[i] = (
            info.session,
            info.writer,
            *key,
            info.generation_start,
            info.generation_end,
            offset,
            length,
        )
    with h5py.File(part, "w", libver="latest") as handle:
        handle.attrs["format_version"] = FORMAT_VERSION
        handle.attrs["merged"] = np.array([covered, checkpoint.sessions], dtype="i8")
        handle.attrs["config"] = json.dumps(checkpoint.config)
        handle.create_dataset(
            "records",
            data=rows,
            maxshape=(None,),
            chunks=(max(1, min(len(rows), 64 * chunk_rows(rows.dtype))),),
        )
        handle.create_dataset(
            "blobs", data=np.frombuffer(bytes(heap), dtype="u1"), maxshape=(None,), chunks=(64 * CHUNK_BYTES,)
        )
        handle.create_dataset("writers", data=writers)
    with open(part, "rb+") as raw:
        os.fsync(raw.fileno())
    os.replace(part, path)
    _sync_directory(path.parent)
    return path


def set_aside(directory: Path, paths: list[Path]) -> Path | None:
    """Move files that hold no record into ``<directory>/set-aside``, with a warning; return that folder."""
    if not paths:
        return None
    folder = directory / "set-aside"
    folder.mkdir(exist_ok=True)
    for path in paths:
        path.replace(folder / path.name)
    log.warning(
        f"Checkpoint: set aside {len(paths)} file(s) that hold no record (killed while being created) in "
        f"{folder}: {', '.join(path.name for path in paths)}"
    )
    return folder


def compact(
    checkpoint_path: str | Path,
    listing: Listing | None = None,
    files: tuple[list[dict[str, Any]], list[Path]] | None = None,
    checkpoint: Checkpoint | None = None,
) -> int:
    """Merge the checkpoint files in ``checkpoint_path`` into one and delete those it replaces.

    Not while a run writes to the directory. Files that hold no record (killed between their creation and
    their first flush) are set aside in ``set-aside/``; files a merged file already covered are deleted.

    Parameters
    ----------
    checkpoint_path : str or pathlib.Path
        The ``checkpoint_path`` of the run.
    listing : Listing, optional
        Its files, if already listed.
    files : tuple, optional
        What :func:`~propulate.checkpoint.reader.read_listing` returned for ``listing``, if already read.
    checkpoint : Checkpoint, optional
        What :func:`~propulate.checkpoint.reader.assemble` made of ``files``, if already done (unchanged
        since: a resume plan changes the individuals it places).

    Returns
    -------
    int
        How many files were merged into the new one (0: nothing to do).

    Raises
    ------
    CheckpointError
        If a file cannot be read; nothing is changed then.
    OSError
        If the merged file cannot be written; no file is deleted then.
    """
    directory = Path(checkpoint_path)
    listing = list_files(directory) if listing is None else listing
    contents, empty = read_listing(listing) if files is None else files
    stale_parts = [path for path in listing.stale if path.name.endswith(PART_SUFFIX)]
    set_aside(directory, empty + stale_parts)
    covered_files = [path for path in listing.stale if not path.name.endswith(PART_SUFFIX)]
    for path in covered_files:
        path.unlink(missing_ok=True)
    if len(contents) <= 1 and (not contents or contents[0]["merged"]):
        return 0
    checkpoint = assemble(directory, contents) if checkpoint is None else checkpoint
    assert checkpoint is not None
    path = write_merged(checkpoint, listing.next_session - 1)
    merged = [Path(c["path"]) for c in contents]
    for old in merged:
        if old != path:
            old.unlink(missing_ok=True)
    log.info(f"Checkpoint: merged {len(merged)} file(s) of {checkpoint.sessions} session(s) into {path}.")
    return len(merged)
