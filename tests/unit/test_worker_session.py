"""A worker root's checkpoint session on one process: plan, begin, record, snapshot, close, resume."""

from __future__ import annotations

import random

import numpy as np
from mpi4py import MPI

from propulate import Individual
from propulate.checkpoint import Record, load_checkpoint
from propulate.checkpoint.worker import PlanPart, WorkerSession, WorkerState, resume_wanted
from propulate.individual import Status
from propulate.space import SearchSpace

LIMITS = {"x": (0.0, 1.0), "n": (1, 4)}


def session(directory, resume: bool = True) -> WorkerSession:
    settings = {"generations": 3, "island_counts": [1], "ranks_per_worker": 1, "num_workers": 1}
    return WorkerSession(directory, MPI.COMM_SELF, MPI.COMM_SELF, 0, np.array([1]), settings, resume, False)


def test_a_fresh_session_plans_nothing_and_writes_nothing_before_it_begins(tmp_path) -> None:
    worker = session(tmp_path)
    error, part = worker.plan(None)
    assert error is None and isinstance(part, PlanPart)
    assert (part.session, part.limits, part.counter, part.requeue, part.state, part.population) == (
        0,
        None,
        0,
        [],
        None,
        [],
    )
    assert worker.planned and worker.writer is None
    assert list(tmp_path.iterdir()) == []


def test_what_a_session_records_is_resumed_by_the_next(tmp_path) -> None:
    worker = session(tmp_path)
    worker.plan(None)
    space = SearchSpace.of(LIMITS)
    assert worker.begin(space, island_rank=0) is None
    assert worker.writer is not None and not worker.planned
    ind = Individual({"x": 0.5, "n": 2}, LIMITS)
    ind.uid, ind.loss, ind.status, ind.evaltime, ind.evalperiod = (
        worker.mint_uid(),
        0.25,
        Status.COMPLETED,
        1.0,
        0.1,
    )
    worker.started(ind)
    worker.record(Record.EVALUATED, ind)
    rng = random.Random(3)
    assert worker.snapshot_due(force=True)
    worker.snapshot(1, WorkerState(rng.getstate(), {"step": 1}, owed_replacements=2, next_owner=0))
    assert not worker.snapshot_due(), "at most one snapshot per interval"
    worker.close()
    assert [i.uid for i in load_checkpoint(tmp_path).populations[0]] == [ind.uid]

    again = session(tmp_path)
    error, part = again.plan(space)
    assert error is None and part is not None
    assert part.session == 1 and part.limits == space.limits
    assert [i.uid for i in part.population] == [ind.uid]
    assert part.state == WorkerState(rng.getstate(), {"step": 1}, 2, 0)
    assert again.mint_uid() != ind.uid


def test_a_checkpoint_of_another_space_is_refused_with_an_error(tmp_path) -> None:
    worker = session(tmp_path)
    worker.plan(None)
    worker.begin(SearchSpace.of(LIMITS), 0)
    worker.close()
    error, part = session(tmp_path).plan(SearchSpace.of({"y": (0.0, 1.0)}))
    assert part is None and error is not None and "another search space" in error


def test_resume_follows_the_argument_then_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("PROPULATE_RESUME", "0")
    assert not resume_wanted(None) and resume_wanted(True)
    monkeypatch.delenv("PROPULATE_RESUME")
    assert resume_wanted(None) and not resume_wanted(False)


def test_worker_state_reads_back_what_it_writes() -> None:
    state = WorkerState(random.Random(1).getstate(), {"a": 1}, 3, 1)
    assert WorkerState.of(state.to_dict()) == state
