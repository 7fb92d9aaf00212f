"""One worker root's checkpoint for one session: plan, begin, record, snapshot, close.

A :class:`WorkerSession` reads the checkpoint with the other worker roots and takes its part of the plan
(:meth:`~WorkerSession.plan`, collective), begins the session (:meth:`~WorkerSession.begin`, collective: the
first root moves earlier files aside or tidies the evaluation folders, creates its file with every worker's
generation counter before any other worker starts, and logs what the run will do), then records what enters
its island and its own state as the loop hands them over, and closes its file at the end. Nothing is
written before :meth:`~WorkerSession.begin`. Like the rest of this package it never imports MPI: the
communicators it is given are used through their methods.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..individual import Individual
from ..objectives import Objectives
from ..space import SearchSpace
from .format import CheckpointError, Record, make_uid
from .session import SessionPlan, archive, describe_session, share_plan, tidy_evaluation_folders
from .writer import CheckpointWriter

__all__ = ["SNAPSHOT_INTERVAL", "PlanPart", "WorkerSession", "WorkerState", "resume_wanted"]

log = logging.getLogger("propulate")

#: Seconds between two snapshots of a worker's state for the checkpoint: the writer's flush interval, since a
#: flush stores only the latest snapshot (taking one costs about 100 us).
SNAPSHOT_INTERVAL = 0.25


def resume_wanted(resume: bool | None) -> bool:
    """Whether to continue from the checkpoint: ``resume``, or by default ``PROPULATE_RESUME`` (``0`` no)."""
    if resume is not None:
        return bool(resume)
    return os.environ.get("PROPULATE_RESUME", "1").strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True)
class WorkerState:
    """What a worker snapshots besides its population: it continues from this on resume.

    Attributes
    ----------
    rng : tuple
        ``random.Random.getstate()`` of the worker's generator.
    propagator : dict
        :meth:`Propagator.state_dict` of its propagator.
    owed_replacements : int
        Pollinators that arrived without an active individual to replace yet.
    next_owner : int
        The island rank responsible for the next immigrant.
    """

    rng: Any
    propagator: dict[str, Any]
    owed_replacements: int = 0
    next_owner: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the state as the checkpoint's snapshots store it (a pickled dict)."""
        return {
            "rng": self.rng,
            "propagator": self.propagator,
            "owed_replacements": self.owed_replacements,
            "next_owner": self.next_owner,
        }

    @classmethod
    def of(cls, state: Mapping[str, Any]) -> WorkerState:
        """Read a snapshot (:meth:`to_dict`)."""
        return cls(
            state["rng"], state["propagator"], int(state["owed_replacements"]), int(state["next_owner"])
        )


@dataclass(frozen=True)
class PlanPart:
    """One worker root's part of a session's plan.

    Attributes
    ----------
    session : int
        The session's number.
    limits : dict or None
        The search space's limits; ``None`` while neither the propagator nor a checkpoint tells.
    counter : int
        The worker's generation counter at the start of the session.
    requeue : list of Individual
        Interrupted evaluations to do again first.
    state : WorkerState or None
        The worker's state to continue from (the same layout of workers only).
    population : list of Individual
        The island's population.
    """

    session: int
    limits: dict[str, Any] | None
    counter: int = 0
    requeue: list[Individual] = field(default_factory=list)
    state: WorkerState | None = None
    population: list[Individual] = field(default_factory=list)

    @property
    def space(self) -> SearchSpace | None:
        """The search space, once known."""
        return None if self.limits is None else SearchSpace.of(self.limits)


class WorkerSession:
    """One worker root's checkpoint file and what it writes into it, for one session at a time.

    Parameters
    ----------
    directory : pathlib.Path
        The checkpoint directory.
    roots, island : communicator
        The worker roots, and those of this worker's island (``mpi4py`` communicators).
    island_index : int
        This worker's island.
    island_counts : numpy.ndarray
        Workers per island.
    settings : dict
        This run's settings as the checkpoint stores them (JSON values; see :func:`describe_session`).
    resume : bool
        Continue from the checkpoint in ``directory`` (else earlier files are moved aside at :meth:`begin`).
    pollination : bool
        Whether immigrants replace individuals (a resume delivers emigrants caught in flight accordingly).
    objectives : Objectives, optional
        The run's objectives; a checkpoint of others cannot be resumed.
    keep_best : int
        Evaluation folders of the best individuals kept when the session begins.

    Attributes
    ----------
    session : int
        The number of the planned or running session.
    writer : CheckpointWriter or None
        This session's file, once it is open.
    planned : bool
        A part was planned and its session has not begun yet.
    """

    def __init__(
        self,
        directory: Path,
        roots: Any,
        island: Any,
        island_index: int,
        island_counts: np.ndarray,
        settings: dict[str, Any],
        resume: bool,
        pollination: bool,
        objectives: Objectives | None = None,
        keep_best: int = 0,
    ) -> None:
        self.directory = directory
        self.roots = roots
        self.island = island
        self.island_index = island_index
        self.island_counts = island_counts
        self.settings = settings
        self.resume = resume
        self.pollination = pollination
        self.objectives = objectives
        self.keep_best = keep_best
        self.session = 0
        self.writer: CheckpointWriter | None = None
        self.planned = False
        self._plan: SessionPlan | None = None  # the whole plan, on the first root
        self._generation_start = 0
        self._introduced = 0
        self._last_snapshot = -math.inf

    def plan(self, space: SearchSpace | None) -> tuple[str | None, PlanPart | None]:
        """Read the checkpoint and take this worker's part of the plan; collective over the roots.

        ``space`` is the search space the propagator was built for, if it names one (a checkpoint of
        another is refused). Returns an error message, the same on every root, or this root's part.
        """
        self.writer = None  # the last session's, closed
        error, self._plan, part = share_plan(
            self.roots,
            self.island,
            self.directory,
            self.resume,
            space,
            self.island_counts,
            self.pollination,
            self.objectives,
        )
        if error is not None:
            return error, None
        state = part["state"]
        taken = PlanPart(
            int(part["session"]),
            part["limits"],
            int(part["counter"]),
            list(part["requeue"]),
            None if state is None else WorkerState.of(state),
            list(part["population"]),
        )
        self.session = taken.session
        self._generation_start = taken.counter
        self._introduced = 0
        self.planned = True
        return None, taken

    def begin(self, space: SearchSpace | None, island_rank: int) -> str | None:
        """Begin the planned session; collective over the roots. Returns an error message or ``None``.

        The first root moves the earlier files aside for a fresh start (else removes the evaluation folders
        the session does not need), opens its file, which holds every worker's generation counter, and logs
        what the checkpoint holds and what the run will do; then every root opens its own file (where the
        search space is known; else at the first record).
        """
        self.planned = False
        self.island_rank = island_rank
        error = None
        plan = self._plan  # on the first worker root
        if plan is not None:
            try:
                if plan.fresh:
                    archive(self.directory)
                else:
                    tidy_evaluation_folders(plan, self.directory, self.keep_best)
                if plan.limits is not None:
                    counter = int(plan.payloads[0]["counter"])
                    self._open(SearchSpace.of(plan.limits), counter, plan.resume_table, plan.plan_table)
                for level, line in describe_session(plan, self.settings, self.directory):
                    log.log(level, line)
            except (CheckpointError, OSError, ValueError) as err:
                error = str(err) if isinstance(err, CheckpointError) else f"{type(err).__name__}: {err}"
        error = self.roots.bcast(error, root=0)
        if error is not None:
            return str(error)
        self.resume = True  # a later session continues from what this one writes
        if space is not None and self.writer is None:
            self._open(space, self._generation_start)
        return None

    def _open(
        self,
        space: SearchSpace,
        generation_start: int,
        resume_table: np.ndarray | None = None,
        plan_table: np.ndarray | None = None,
    ) -> None:
        config = {"limits": space.to_json(), "fingerprint": space.fingerprint, **self.settings}
        attrs = {
            "session": self.session,
            "writer": self.roots.rank,
            "island": self.island_index,
            "island_rank": self.island_rank,
            "generation_start": generation_start,
            "config": config,
        }
        self.writer = CheckpointWriter(
            self.directory,
            self.session,
            self.roots.rank,
            space,
            attrs,
            resume_table=resume_table,
            plan_table=plan_table,
        )

    def mint_uid(self) -> int:
        """Return a uid for an individual this worker introduces (bred, or sent to another island)."""
        self._introduced += 1
        return make_uid(self.session, self.roots.rank, self._introduced - 1)

    def _writer(self, space: SearchSpace) -> CheckpointWriter:
        if self.writer is None:
            self._open(space, self._generation_start)
        assert self.writer is not None
        return self.writer

    def started(self, ind: Individual) -> None:
        """Note that ``ind`` is being evaluated: its row is written if a flush finds it running."""
        self._writer(ind.space).started(ind, self.island_index)

    def record(self, kind: Record, ind: Individual, home: int | None = None) -> None:
        """Queue a row for ``ind`` (on island ``home``, by default this worker's)."""
        self._writer(ind.space).record(kind, ind, self.island_index if home is None else home)

    def deactivated(self, uid: int) -> None:
        """Queue the deactivation of ``uid`` on this worker's island."""
        if self.writer is not None:
            self.writer.deactivated(uid, self.island_index)

    def snapshot_due(self, force: bool = False) -> bool:
        """Whether to take a snapshot now: at most one per :data:`SNAPSHOT_INTERVAL`, unless ``force``.

        A flush stores only the latest snapshot. Never before the file is open.
        """
        now = time.monotonic()
        if self.writer is None or (not force and now - self._last_snapshot < SNAPSHOT_INTERVAL):
            return False
        self._last_snapshot = now
        return True

    def snapshot(self, generation: int, state: WorkerState) -> None:
        """Hand the writer this worker's state after ``generation``; the next flush stores the latest."""
        if self.writer is not None:
            self.writer.snapshot(generation, state.to_dict())

    def close(self) -> None:
        """Close this session's file (flushing what is left).

        Raises
        ------
        CheckpointError
            If what is left cannot be written.
        """
        if self.writer is not None:
            self.writer.close()  # kept: its counters outlive it

    def abandon(self) -> None:
        """Close the file after a failure elsewhere; a failure to close is logged, not raised."""
        writer, self.writer = self.writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception as err:
                log.error(f"Checkpoint: closing {writer.path} after the failure failed: {err}")
