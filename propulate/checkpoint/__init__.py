"""Crash-consistent checkpoints in HDF5: append-only, one file per writer and session, plain serial h5py.

Every worker root (a *writer*) appends what it decides to its own file, so no two processes ever write the
same file and no parallel HDF5 build is needed. A *session* is one run of the job on a checkpoint directory;
each session starts new files, so a file is written by one process in one session only. Records are buffered
in memory and a background thread appends and flushes them every ``flush_interval`` seconds, so the loop
never waits for the disk and every evaluation that finished more than ``flush_interval`` seconds before a
crash is on disk. Files are written in HDF5's single-writer/multiple-reader (SWMR) mode, which orders its
flushes so that the file on disk is always readable, even after ``kill -9``.

What a checkpoint costs follows the evaluations, not the time: a flush writes its new rows plus at most one
partly filled chunk of 4 kB per dataset; a writer keeps at most two snapshots of its state, overwritten in
turn; and a resume merges the files of all sessions so far into one (:mod:`.compaction`), with the reading
shared among the worker roots (:func:`.session.read_shared`).

- :mod:`.format`: file names, row types, record kinds and uids — the on-disk format, declared once;
- :mod:`.writer`: :class:`CheckpointWriter`, one writer's file;
- :mod:`.reader`: :func:`load_checkpoint` and the replay of the records into a :class:`Checkpoint`;
- :mod:`.compaction`: merging the files (also ``python -m propulate compact``);
- :mod:`.session`: planning a session — resume, redistribution onto a new layout, generation counters;
- :mod:`.evaluations`: a folder per evaluation for the loss function's own state
  (:func:`propulate.evaluation_checkpoint`).

This package never imports MPI: reading a checkpoint in a notebook does not initialize it.
"""

from .compaction import compact
from .format import (
    FORMAT_VERSION,
    PLAN_DTYPE,
    RESUME_DTYPE,
    CheckpointError,
    Listing,
    Record,
    list_files,
    make_uid,
    record_dtype,
    uid_origin,
)
from .reader import Checkpoint, EmptyFileError, WriterInfo, load_checkpoint, read_file
from .session import (
    ResumePlan,
    SessionPlan,
    archive,
    describe_session,
    plan_resume,
    plan_session,
    read_shared,
    share_plan,
    tidy_evaluation_folders,
)
from .writer import CheckpointWriter

__all__ = [
    "FORMAT_VERSION",
    "PLAN_DTYPE",
    "RESUME_DTYPE",
    "Checkpoint",
    "CheckpointError",
    "CheckpointWriter",
    "EmptyFileError",
    "Listing",
    "Record",
    "ResumePlan",
    "SessionPlan",
    "WriterInfo",
    "archive",
    "compact",
    "describe_session",
    "list_files",
    "load_checkpoint",
    "make_uid",
    "plan_resume",
    "plan_session",
    "read_file",
    "read_shared",
    "record_dtype",
    "share_plan",
    "tidy_evaluation_folders",
    "uid_origin",
]
