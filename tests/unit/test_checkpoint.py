"""Checkpoint files on one process: writing, reading back, damaged files, resume plans (checkpoint.py)."""

from __future__ import annotations

import json
import logging
import math
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from propulate.checkpoint import (
    FORMAT_VERSION,
    RESUME_DTYPE,
    Checkpoint,
    CheckpointError,
    CheckpointWriter,
    Record,
    WriterInfo,
    load_checkpoint,
    make_uid,
    plan_resume,
    uid_origin,
)
from propulate.individual import Individual, Status
from propulate.space import SearchSpace

REPO = Path(__file__).resolve().parents[2]

# A categorical in the middle, so the embedding has more slots than parameters.
LIMITS = {"lr": (1e-4, 1e-1), "act": ("relu", "tanh", "gelu"), "layers": (1, 8)}
SPACE = SearchSpace.of(LIMITS)
# Long enough that the background thread never flushes unless a test waits for it.
NEVER = 3600.0


def writer_attrs(
    space: SearchSpace, island: int, island_rank: int, writer: int, island_counts: list[int], session: int = 0
) -> dict[str, Any]:
    """The attributes ``Propulator._open_writer`` writes."""
    config = {
        "limits": {name: list(bounds) for name, bounds in space.limits.items()},
        "fingerprint": space.fingerprint,
        "island_counts": island_counts,
        "ranks_per_worker": 1,
        "migration_topology": [[0 if i == j else 1 for j in range(len(island_counts))] for i in range(2)],
        "migration_prob": 0.5,
        "pollination": False,
        "propagator": "test",
        "generations": 10,
        "num_workers": sum(island_counts),
        "version": "test",
    }
    return {
        "session": session,
        "writer": writer,
        "island": island,
        "island_rank": island_rank,
        "generation_start": 0,
        "config": config,
    }


def open_writer(
    directory: Path,
    writer: int,
    island: int,
    island_counts: list[int],
    space: SearchSpace = SPACE,
    session: int = 0,
    island_rank: int = 0,
    flush_interval: float = NEVER,
    resume_table: np.ndarray | None = None,
) -> CheckpointWriter:
    attrs = writer_attrs(space, island, island_rank, writer, island_counts, session)
    return CheckpointWriter(directory, session, writer, space, attrs, resume_table, flush_interval)


def bred(uid: int, island: int, generation: int, rank: int = 0, space: SearchSpace = SPACE) -> Individual:
    """An individual as ``Propulator._breed`` leaves it, before its evaluation."""
    rng = random.Random(uid)
    ind = Individual(space.sample(rng), space, generation=generation, rank=rank)
    ind.uid = uid
    ind.island = island
    ind.current = rank
    ind.migration_history = str(island)
    return ind


def evaluate(ind: Individual, loss: float) -> Individual:
    """What ``Propulator._evaluate`` sets."""
    ind.loss = loss
    ind.status = Status.COMPLETED
    ind.metrics = {"accuracy": 1.0 - loss / 10, "epochs": 3.0}
    ind.evalperiod = 0.5
    ind.evaltime = 1_700_000_000.0 + loss
    return ind


def evaluated(uid: int, island: int, loss: float, rank: int = 0, generation: int = 0) -> Individual:
    return evaluate(bred(uid, island, generation, rank), loss)


def start_and_finish(writer: CheckpointWriter, ind: Individual, loss: float, home: int) -> Individual:
    writer.record(Record.STARTED, ind, home)
    evaluate(ind, loss)
    writer.record(Record.EVALUATED, ind, home)
    return ind


def emigrant_of(ind: Individual, uid: int, target: int) -> Individual:
    """The traveller ``Propulator._emigrate`` sends."""
    traveller = ind.copy()
    traveller.uid = uid
    traveller.active = True
    traveller.migration_steps += 1
    traveller.migration_history += f"-{target}"
    return traveller


def assert_same(loaded: Individual, written: Individual) -> None:
    np.testing.assert_array_equal(loaded.position, written.position)
    assert loaded.params() == written.params()
    if written.velocity is None:
        assert loaded.velocity is None
    else:
        np.testing.assert_array_equal(loaded.velocity, written.velocity)
    for attribute in (
        "uid",
        "loss",
        "status",
        "metrics",
        "active",
        "island",
        "rank",
        "current",
        "generation",
        "migration_steps",
        "migration_history",
        "evaltime",
        "evalperiod",
    ):
        assert getattr(loaded, attribute) == getattr(written, attribute), attribute


def by_uid(individuals: list[Individual]) -> dict[int, Individual]:
    return {ind.uid: ind for ind in individuals}


def all_uids(checkpoint: Checkpoint) -> list[int]:
    return [
        ind.uid
        for group in (checkpoint.populations, checkpoint.pending, checkpoint.in_transit)
        for inds in group.values()
        for ind in inds
    ]


# --------------------------------------------------------------------------------------------- round trip


@pytest.fixture
def two_islands(tmp_path: Path) -> dict[str, Any]:
    """Session 0 of two one-worker islands: breeding, a migration, an emigrant lost in flight, a snapshot."""
    w0 = open_writer(tmp_path, writer=0, island=0, island_counts=[1, 1])
    w1 = open_writer(tmp_path, writer=1, island=1, island_counts=[1, 1])
    island0 = []
    for g in range(4):
        ind = bred(make_uid(0, 0, g), 0, g)
        if g % 2:
            ind.velocity = np.linspace(-1.0, 1.0, SPACE.ndim) * g  # as a particle swarm breeds them
        island0.append(start_and_finish(w0, ind, float(g + 1), 0))
    island1 = [start_and_finish(w1, bred(make_uid(0, 1, g), 1, g), 10.0 + g, 1) for g in range(3)]
    # Island 0 sends its best to island 1, which receives it.
    traveller = emigrant_of(island0[0], make_uid(0, 0, 4), target=1)
    w0.record(Record.DEPARTED, traveller, 1)
    w0.deactivated(island0[0].uid, 0)
    island0[0].active = False
    traveller.current = 0
    w1.record(Record.ARRIVED, traveller, 1)
    # Island 1 sends its best to island 0; the job dies before it arrives.
    lost = emigrant_of(island1[0], make_uid(0, 1, 3), target=0)
    w1.record(Record.DEPARTED, lost, 0)
    w1.deactivated(island1[0].uid, 1)
    island1[0].active = False
    # Island 1 bred once more and died while evaluating it.
    interrupted = bred(make_uid(0, 1, 4), 1, 3)
    w1.record(Record.STARTED, interrupted, 1)
    rng = random.Random(7)
    rng.random()
    state = {"rng": rng.getstate(), "propagator": {"sigma": 0.3}, "owed_replacements": 0, "next_owner": 1}
    w0.snapshot(3, {**state, "propagator": {"sigma": 0.1}})
    w0.flush()
    w0.snapshot(4, state)
    w0.close()
    w1.close()
    return {
        "island0": island0,
        "island1": island1,
        "traveller": traveller,
        "lost": lost,
        "interrupted": interrupted,
        "state": state,
        "rng": rng,
        "writers": (w0, w1),
    }


def test_round_trip(tmp_path: Path, two_islands: dict[str, Any]) -> None:
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None
    assert checkpoint.sessions == 1
    assert checkpoint.space is SPACE
    assert checkpoint.config["island_counts"] == [1, 1]
    assert checkpoint.config["fingerprint"] == SPACE.fingerprint

    assert set(checkpoint.populations) == {0, 1}
    population0 = by_uid(checkpoint.populations[0])
    population1 = by_uid(checkpoint.populations[1])
    assert set(population0) == {ind.uid for ind in two_islands["island0"]}
    assert set(population1) == {ind.uid for ind in [*two_islands["island1"], two_islands["traveller"]]}
    for ind in two_islands["island0"]:
        assert_same(population0[ind.uid], ind)
    for ind in [*two_islands["island1"], two_islands["traveller"]]:
        assert_same(population1[ind.uid], ind)
    assert population0[two_islands["island0"][0].uid].active is False
    assert population1[two_islands["island1"][0].uid].active is False
    assert population1[two_islands["traveller"].uid].migration_history == "0-1"
    assert population0[two_islands["island0"][1].uid].velocity is not None
    assert population0[two_islands["island0"][0].uid].velocity is None

    assert {island: [ind.uid for ind in inds] for island, inds in checkpoint.pending.items()} == {
        1: [two_islands["interrupted"].uid]
    }
    pending = checkpoint.pending[1][0]
    assert pending.status is Status.INTERRUPTED
    two_islands["interrupted"].status = Status.INTERRUPTED
    assert_same(pending, two_islands["interrupted"])

    assert {island: [ind.uid for ind in inds] for island, inds in checkpoint.in_transit.items()} == {
        0: [two_islands["lost"].uid]
    }
    assert_same(checkpoint.in_transit[0][0], two_islands["lost"])

    assert sorted(all_uids(checkpoint)) == sorted(set(all_uids(checkpoint)))
    assert len(checkpoint.population) == 4 + 4


def test_round_trip_writers_and_state(tmp_path: Path, two_islands: dict[str, Any]) -> None:
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None
    assert set(checkpoint.writers) == {(0, 0), (1, 0)}
    info0, info1 = checkpoint.writers[(0, 0)], checkpoint.writers[(1, 0)]
    assert (info0.session, info0.writer, info0.island, info0.generation_start) == (0, 0, 0, 0)
    assert (info1.session, info1.writer, info1.island, info1.generation_start) == (0, 1, 1, 0)
    # Highest generation bred + 1; the interrupted generation 3 of island 1 counts as bred.
    assert info0.generation_end == 4
    assert info1.generation_end == 4
    assert checkpoint.generations_done == 8

    # The latest snapshot wins; island 1 never snapshotted.
    assert info1.state is None
    assert info0.state is not None
    expected = dict(two_islands["state"])
    assert info0.state == {**expected, "generation": 4}
    restored = random.Random()
    restored.setstate(info0.state["rng"])
    assert [restored.random() for _ in range(5)] == [two_islands["rng"].random() for _ in range(5)]

    w0, w1 = two_islands["writers"]
    assert (w0.n_records, w1.n_records) == (4 * 2 + 2, 3 * 2 + 3 + 1)
    assert w0.bytes_written > 0 and w0.seconds > 0


def test_files_hold_their_layout(tmp_path: Path, two_islands: dict[str, Any]) -> None:
    paths = sorted(p.name for p in tmp_path.iterdir())
    assert paths == ["propulate-s0000-w000000.h5", "propulate-s0000-w000001.h5"]
    with h5py.File(tmp_path / paths[1], "r") as handle:
        assert handle.attrs["format_version"] == FORMAT_VERSION
        assert (handle.attrs["island"], handle.attrs["island_rank"], handle.attrs["writer"]) == (1, 0, 1)
        assert json.loads(handle.attrs["config"])["island_counts"] == [1, 1]
        assert handle["records"].shape == (10,)
        # Rows are written in the order they were queued, deactivations included.
        assert [Record(k) for k in handle["records"]["kind"][-4:]] == [
            Record.ARRIVED,
            Record.DEPARTED,
            Record.DEACTIVATED,
            Record.STARTED,
        ]
        assert "resume" not in handle


def test_empty_directory_is_no_checkpoint(tmp_path: Path) -> None:
    assert load_checkpoint(tmp_path) is None
    assert load_checkpoint(tmp_path / "missing") is None


def test_a_resumed_session_applies_its_resume_table(tmp_path: Path) -> None:
    w0 = open_writer(tmp_path, writer=0, island=0, island_counts=[2])
    first = [start_and_finish(w0, bred(make_uid(0, 0, g), 0, g), float(g), 0) for g in range(3)]
    w0.close()
    # Session 1 (two islands now) moved the first individual to island 1 and deactivated the second.
    table = np.array(
        [(first[0].uid, 1, 0, 1), (first[1].uid, 0, 0, 0), (first[2].uid, 0, 0, 1)], dtype=RESUME_DTYPE
    )
    w1 = open_writer(tmp_path, writer=0, island=0, island_counts=[1, 1], session=1, resume_table=table)
    fresh = start_and_finish(w1, bred(make_uid(1, 0, 0), 0, 5), 0.5, 0)
    w1.snapshot(6, {"rng": random.Random(1).getstate()})
    w1.close()

    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None
    assert checkpoint.sessions == 2
    assert {ind.uid for ind in checkpoint.populations[1]} == {first[0].uid}
    assert {ind.uid for ind in checkpoint.populations[0]} == {first[1].uid, first[2].uid, fresh.uid}
    assert not by_uid(checkpoint.populations[0])[first[1].uid].active
    # Only the latest session's writers describe the workers.
    assert list(checkpoint.writers) == [(0, 0)]
    assert checkpoint.writers[(0, 0)].session == 1
    assert checkpoint.writers[(0, 0)].generation_end == 6


def test_deactivation_of_an_individual_bred_by_a_later_writer(tmp_path: Path) -> None:
    w0 = open_writer(tmp_path, writer=0, island=0, island_counts=[2], island_rank=0)
    w1 = open_writer(tmp_path, writer=1, island=0, island_counts=[2], island_rank=1)
    worst = start_and_finish(w1, bred(make_uid(0, 1, 0), 0, 0, rank=1), 99.0, 0)
    start_and_finish(w0, bred(make_uid(0, 0, 0), 0, 0), 1.0, 0)
    w0.deactivated(worst.uid, 0)  # a pollinator arrived at worker 0 and replaced the worst
    w0.close()
    w1.close()
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None
    assert by_uid(checkpoint.populations[0])[worst.uid].active is False


# ---------------------------------------------------------------------------------------- flushing


@pytest.mark.slow
def test_background_flush_is_visible_to_another_reader(tmp_path: Path) -> None:
    interval = 0.1
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1], flush_interval=interval)
    try:
        for g in range(5):
            start_and_finish(writer, bred(make_uid(0, 0, g), 0, g), float(g), 0)
        writer.record(Record.STARTED, bred(make_uid(0, 0, 5), 0, 5), 0)
        writer.snapshot(5, {"rng": random.Random(3).getstate()})
        time.sleep(3.5 * interval)
        assert writer.n_records == 11
        # Another process, so nothing is read from this process's HDF5 caches; the file is still open for
        # writing, as after a kill -9.
        script = (
            "import json, sys\n"
            "from propulate.checkpoint import load_checkpoint\n"
            "c = load_checkpoint(sys.argv[1])\n"
            "print(json.dumps([len(c.populations.get(0, [])), len(c.pending.get(0, [])),\n"
            "                  c.writers[(0, 0)].generation_end, c.writers[(0, 0)].state['generation']]))\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == [5, 1, 6, 5]
    finally:
        writer.close()


def test_close_flushes_what_is_queued(tmp_path: Path) -> None:
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1])
    start_and_finish(writer, bred(make_uid(0, 0, 0), 0, 0), 1.0, 0)
    assert writer.n_records == 0
    writer.close()
    assert writer.n_records == 2
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None and len(checkpoint.populations[0]) == 1


def test_close_during_background_flushes_loses_nothing_and_ends_the_flushing(tmp_path: Path) -> None:
    # close() does not wait for the thread: a flush it has begun is waited for, later ones do nothing.
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1], flush_interval=1e-4)
    for g in range(400):
        start_and_finish(writer, bred(make_uid(0, 0, g), 0, g), float(g), 0)
    writer.close()
    assert writer.n_records == 800
    time.sleep(0.05)  # the thread would have flushed many times over
    writer.flush()  # a no-op on a closed writer, not an error
    assert writer.n_records == 800
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None and len(checkpoint.populations[0]) == 400


def test_the_interpreters_exit_closes_open_writers_and_waits_for_their_threads(tmp_path: Path) -> None:
    # A writer thread still in an h5py call when the interpreter finalizes keeps h5py's lock for good and
    # the process never ends (checkpoint.writer._end_writers, registered with atexit, prevents it).
    from propulate.checkpoint import writer as writer_module

    closed = open_writer(tmp_path, writer=0, island=0, island_counts=[2], flush_interval=1e-4)
    left_open = open_writer(
        tmp_path, writer=1, island=0, island_counts=[2], flush_interval=1e-4, island_rank=1
    )
    start_and_finish(closed, bred(make_uid(0, 0, 0), 0, 0), 1.0, 0)
    start_and_finish(left_open, bred(make_uid(0, 1, 0), 0, 0, rank=1), 2.0, 0)
    closed.close()
    thread = closed._thread
    del closed  # a thread can outlive its writer, and free it (its h5py objects) as it ends
    writer_module._end_writers()
    assert not thread.is_alive() and not left_open._thread.is_alive()
    assert left_open._closed
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None and len(checkpoint.populations[0]) == 2


def test_a_noted_start_costs_no_row_when_the_result_comes_before_a_flush(tmp_path: Path) -> None:
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1])
    ind = bred(make_uid(0, 0, 0), 0, 0)
    writer.started(ind, 0)
    writer.record(Record.EVALUATED, evaluate(ind, 1.0), 0)
    writer.close()
    assert writer.n_records == 1
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None
    assert [i.loss for i in checkpoint.populations[0]] == [1.0] and not checkpoint.pending


def test_a_flush_during_an_evaluation_writes_its_start_once(tmp_path: Path) -> None:
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1])
    ind = bred(make_uid(0, 0, 0), 0, 0)
    writer.started(ind, 0)
    writer.flush()
    writer.flush()
    assert writer.n_records == 1
    # Read while still running, as after a kill -9: the evaluation is pending, with its search position.
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None
    (pending,) = checkpoint.pending[0]
    assert pending.uid == ind.uid and pending.status is Status.INTERRUPTED
    np.testing.assert_array_equal(pending.position, ind.position)
    writer.record(Record.EVALUATED, evaluate(ind, 2.0), 0)
    writer.close()
    assert writer.n_records == 2
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None
    assert [i.loss for i in checkpoint.populations[0]] == [2.0] and not checkpoint.pending


def test_an_evaluation_running_at_close_is_left_pending(tmp_path: Path) -> None:
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1])
    start_and_finish(writer, bred(make_uid(0, 0, 0), 0, 0), 1.0, 0)
    interrupted = bred(make_uid(0, 0, 1), 0, 1)
    writer.started(interrupted, 0)
    interrupted.status = Status.INTERRUPTED  # what the loop does before it stops
    writer.close()
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None
    assert [i.uid for i in checkpoint.pending[0]] == [interrupted.uid]
    assert len(checkpoint.populations[0]) == 1


# ------------------------------------------------------------------------------------ damaged files


def append_rows(path: Path, rows: np.ndarray) -> None:
    with h5py.File(path, "a") as handle:
        records = handle["records"]
        n = records.shape[0]
        records.resize((n + len(rows),))
        records[n:] = rows


def test_torn_rows_are_dropped(tmp_path: Path) -> None:
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1])
    inds = [start_and_finish(writer, bred(make_uid(0, 0, g), 0, g), float(g), 0) for g in range(3)]
    writer.snapshot(2, {"rng": random.Random(0).getstate()})
    writer.flush()
    writer.snapshot(3, {"rng": random.Random(1).getstate()})
    writer.close()
    before = load_checkpoint(tmp_path)
    assert before is not None
    assert before.writers[(0, 0)].state == {"rng": random.Random(1).getstate(), "generation": 3}

    with h5py.File(writer.path, "r") as handle:
        dtype = handle["records"].dtype
        heap = handle["blobs"].shape[0]
        template = handle["records"][-1]
    zeroed = np.zeros(3, dtype=dtype)
    past_heap = np.repeat(template, 4)
    past_heap["uid"] = [make_uid(0, 0, 10 + i) for i in range(4)]
    past_heap["generation"] = 50
    past_heap["extra_offset"] = [heap, heap - 1, heap + 100, 0]
    past_heap["extra_length"] = [10, 10, 1, 0]  # entirely past, straddling, beyond, empty
    append_rows(writer.path, np.concatenate([zeroed, past_heap]))
    # A torn state snapshot too: the newer slot was being rewritten (its bytes no longer match its CRC).
    with h5py.File(writer.path, "a") as handle:
        slots = handle["snapshots"][()]
        newer = int(np.argmax(slots["sequence"]))
        handle[f"snapshot{newer}"][:10] = 0

    after = load_checkpoint(tmp_path)
    assert after is not None
    assert sorted(ind.uid for ind in after.populations[0]) == sorted(ind.uid for ind in inds)
    assert after.pending == {} and after.in_transit == {}
    for ind in inds:
        assert_same(by_uid(after.populations[0])[ind.uid], ind)
    assert after.writers[(0, 0)].generation_end == before.writers[(0, 0)].generation_end == 3
    # The older slot is taken instead.
    assert after.writers[(0, 0)].state == {"rng": random.Random(0).getstate(), "generation": 2}


def test_truncated_file_raises_naming_it(tmp_path: Path) -> None:
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1])
    for g in range(50):
        start_and_finish(writer, bred(make_uid(0, 0, g), 0, g), float(g), 0)
    writer.close()
    size = writer.path.stat().st_size
    with writer.path.open("r+b") as handle:
        handle.truncate(size // 2)
    with pytest.raises(CheckpointError, match=writer.path.name):
        load_checkpoint(tmp_path)


def test_garbage_file_raises_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "propulate-s0000-w000000.h5"
    path.write_bytes(b"not an HDF5 file" * 10)
    with pytest.raises(CheckpointError, match=path.name):
        load_checkpoint(tmp_path)


def test_other_format_version_raises(tmp_path: Path) -> None:
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1])
    writer.close()
    with h5py.File(writer.path, "a") as handle:
        handle.attrs["format_version"] = FORMAT_VERSION + 1
    with pytest.raises(CheckpointError, match=rf"{writer.path.name}.*version {FORMAT_VERSION + 1}"):
        load_checkpoint(tmp_path)


def test_files_of_different_search_spaces_raise(tmp_path: Path) -> None:
    other = SearchSpace.of({"lr": (1e-4, 1e-1), "act": ("relu", "tanh"), "layers": (1, 8)})
    open_writer(tmp_path, writer=0, island=0, island_counts=[1, 1]).close()
    second = open_writer(tmp_path, writer=1, island=1, island_counts=[1, 1], space=other)
    second.close()
    with pytest.raises(CheckpointError, match=f"{second.path.name}.*another search space"):
        load_checkpoint(tmp_path)


# ------------------------------------------------------------------------------------------ uids


@pytest.mark.parametrize(
    ("session", "writer", "counter"),
    [(0, 0, 0), (0, 1, 0), (1, 0, 0), (3, 17, 123_456), (4095, (1 << 20) - 1, (1 << 31) - 1)],
)
def test_uid_round_trip(session: int, writer: int, counter: int) -> None:
    uid = make_uid(session, writer, counter)
    assert 0 <= uid < 1 << 63
    assert uid_origin(uid) == (session, writer)
    assert np.int64(uid) == uid  # fits the i8 columns


def test_uids_are_distinct() -> None:
    uids = {make_uid(s, w, c) for s in range(3) for w in range(3) for c in (0, 1, (1 << 31) - 1)}
    assert len(uids) == 27


@pytest.mark.parametrize(("session", "writer", "counter"), [(4096, 0, 0), (0, 1 << 20, 0), (0, 0, 1 << 31)])
def test_uid_overflow(session: int, writer: int, counter: int) -> None:
    with pytest.raises(OverflowError, match="uid space exhausted"):
        make_uid(session, writer, counter)


# ------------------------------------------------------------------------------------- writing cost


def test_writing_cost_is_constant_per_evaluation(tmp_path: Path) -> None:
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1])
    rng = random.Random(0)
    per_record: dict[int, float] = {}
    per_record_on_disk: dict[int, float] = {}
    g = 0
    for target in (1_000, 10_000):
        while writer.n_records < target:
            for _ in range(50):  # one flush per 50 evaluations, each with a snapshot
                start_and_finish(writer, bred(make_uid(0, 0, g), 0, g), rng.random(), 0)
                g += 1
            writer.snapshot(g, {"rng": rng.getstate(), "propagator": {}})
            writer.flush()
        per_record[target] = writer.bytes_written / writer.n_records
        per_record_on_disk[target] = writer.path.stat().st_size / writer.n_records
    writer.close()
    assert per_record[10_000] == pytest.approx(per_record[1_000], rel=0.1)
    # The file does not grow faster than what is appended (no rewrites), allocation slack aside.
    assert per_record_on_disk[10_000] <= 1.1 * per_record_on_disk[1_000]


# ------------------------------------------------------------------------------------------ resume plans


def make_checkpoint(
    island_counts: list[int],
    populations: dict[int, list[Individual]],
    generation_ends: dict[tuple[int, int], int],
    pending: dict[int, list[Individual]] | None = None,
    in_transit: dict[int, list[Individual]] | None = None,
    states: dict[tuple[int, int], dict[str, Any]] | None = None,
) -> Checkpoint:
    writers = {}
    for writer, (key, end) in enumerate(sorted(generation_ends.items())):
        writers[key] = WriterInfo(0, writer, key[0], key[1], 0, end, (states or {}).get(key))
    return Checkpoint(
        Path("nowhere"),
        {"island_counts": island_counts},
        SPACE,
        populations=populations,
        pending=pending or {},
        in_transit=in_transit or {},
        writers=writers,
        sessions=1,
    )


def layout_checkpoint(island_counts: list[int], per_island: int, pending_per_island: int) -> Checkpoint:
    """Every worker bred ``per_island`` / size individuals; some evaluations were interrupted."""
    populations: dict[int, list[Individual]] = {}
    pending: dict[int, list[Individual]] = {}
    ends: dict[tuple[int, int], int] = {}
    writer = 0
    for island, size in enumerate(island_counts):
        populations[island], pending[island] = [], []
        for rank in range(size):
            ends[(island, rank)] = 3 + 2 * writer  # uneven, so sharing them is visible
            writer += 1
        for i in range(per_island):
            rank = i % size
            uid = make_uid(0, island * 10 + rank, i)
            populations[island].append(evaluated(uid, island, loss=float(i), rank=rank, generation=i))
        for i in range(pending_per_island):
            rank = i % size
            pending[island].append(bred(make_uid(0, island * 10 + rank, 1000 + i), island, 100 + i, rank))
    return make_checkpoint(island_counts, populations, ends, pending=pending)


def plan_uids(plan: Any) -> list[int]:
    return [ind.uid for inds in plan.populations.values() for ind in inds] + [
        ind.uid for inds in plan.requeue.values() for ind in inds
    ]


def assert_dealt_in_turn(plan: Any, counts: list[int]) -> None:
    """``current`` and interrupted evaluations are dealt round-robin among each island's workers."""
    for island, inds in plan.populations.items():
        assert [ind.current for ind in inds] == [serial % counts[island] for serial in range(len(inds))]
    for island, size in enumerate(counts):
        loads = [len(plan.requeue.get((island, rank), [])) for rank in range(size)]
        assert max(loads) - min(loads) <= 1


def test_plan_same_layout_keeps_each_worker() -> None:
    checkpoint = layout_checkpoint([2, 3], per_island=6, pending_per_island=3)
    states = {key: {"rng": random.Random(sum(key)).getstate()} for key in checkpoint.writers}
    for key, info in checkpoint.writers.items():
        info.state = states[key]
    before = {uid: (ind.current, ind.active) for uid, ind in by_uid(checkpoint.population).items()}

    plan = plan_resume(checkpoint, [2, 3], pollination=False)
    assert plan.same_layout
    assert "the same layout" in plan.description
    assert plan.counters == {key: info.generation_end for key, info in checkpoint.writers.items()}
    assert plan.states == states
    for island in (0, 1):
        assert [ind.uid for ind in plan.populations[island]] == sorted(
            ind.uid for ind in checkpoint.populations[island]
        )
        for rank in range(checkpoint.config["island_counts"][island]):
            assert [ind.uid for ind in plan.requeue.get((island, rank), [])] == [
                ind.uid for ind in checkpoint.pending[island] if ind.rank == rank
            ]
    # Nothing moves: responsibilities and activity are kept.
    after = [ind for inds in plan.populations.values() for ind in inds]
    assert {ind.uid: (ind.current, ind.active) for ind in after} == before


def test_plan_same_layout_requeues_unknown_workers_to_the_first() -> None:
    orphan = bred(make_uid(0, 9, 0), 0, 4, rank=5)  # bred by a worker the layout no longer has
    checkpoint = make_checkpoint([2], {0: []}, {(0, 0): 1, (0, 1): 1}, pending={0: [orphan]})
    plan = plan_resume(checkpoint, [2], pollination=False)
    assert [ind.uid for ind in plan.requeue[(0, 0)]] == [orphan.uid]


def check_redistribution(old_counts: list[int], new_counts: list[int]) -> tuple[Any, dict[int, int]]:
    """Plan ``old_counts`` -> ``new_counts``, check what holds for any layout change, return the plan and
    each individual's old island."""
    checkpoint = layout_checkpoint(old_counts, per_island=9, pending_per_island=5)
    origin = {ind.uid: island for island, inds in checkpoint.populations.items() for ind in inds}
    origin.update({ind.uid: island for island, inds in checkpoint.pending.items() for ind in inds})
    done = checkpoint.generations_done

    plan = plan_resume(checkpoint, new_counts, pollination=False)
    assert not plan.same_layout
    assert plan.states == {}
    # Every individual exactly once.
    uids = plan_uids(plan)
    assert Counter(uids) == Counter(list(origin))
    # Generations shared evenly, none lost.
    workers = [(island, rank) for island, size in enumerate(new_counts) for rank in range(size)]
    assert sorted(plan.counters) == workers
    assert sum(plan.counters.values()) == done
    assert max(plan.counters.values()) - min(plan.counters.values()) <= 1
    assert_dealt_in_turn(plan, new_counts)
    # The resume table lists everyone once, where the plan put them.
    table = plan.resume_table()
    assert Counter(table["uid"].tolist()) == Counter(list(origin))
    where = {ind.uid: island for island, inds in plan.populations.items() for ind in inds}
    where.update({ind.uid: island for (island, _), inds in plan.requeue.items() for ind in inds})
    assert {int(uid): int(island) for uid, island in table[["uid", "island"]].tolist()} == where
    return plan, origin


def test_plan_merges_four_islands_into_two() -> None:
    plan, origin = check_redistribution([2, 1, 2, 1], [2, 3])
    for island, inds in plan.populations.items():
        assert {origin[ind.uid] % 2 for ind in inds} == {island}
        assert len(inds) == 18
    for (island, _), inds in plan.requeue.items():
        assert {origin[ind.uid] % 2 for ind in inds} == {island}
    assert "merged" in plan.description


def test_plan_splits_two_islands_into_four() -> None:
    plan, origin = check_redistribution([2, 2], [1, 2, 1, 3])
    for island, inds in plan.populations.items():
        assert {origin[ind.uid] for ind in inds} == {island % 2}
    # Each old island is dealt in turn to its new islands: 9 individuals -> 5 and 4.
    assert sorted(len(inds) for inds in plan.populations.values()) == [4, 4, 5, 5]
    pending = Counter(island for (island, _), inds in plan.requeue.items() for _ in inds)
    assert sorted(pending.values()) == [2, 2, 3, 3]
    assert "split" in plan.description


def test_plan_delivers_emigrants_in_flight() -> None:
    checkpoint = layout_checkpoint([1, 1], per_island=3, pending_per_island=0)
    flying = emigrant_of(checkpoint.populations[0][0], make_uid(0, 0, 50), target=1)
    checkpoint.in_transit = {1: [flying]}
    plan = plan_resume(checkpoint, [1, 1], pollination=False)
    assert flying in plan.populations[1] and flying.active
    assert all(ind.active for ind in plan.populations[1])  # migration replaces nobody
    assert "1 emigrant(s) delivered" in plan.description
    assert Counter(plan.resume_table()["uid"].tolist()) == Counter(all_uids(checkpoint))


def test_plan_delivers_emigrants_in_flight_to_a_split_island() -> None:
    checkpoint = layout_checkpoint([1, 1], per_island=3, pending_per_island=0)
    flying = [emigrant_of(checkpoint.populations[0][i], make_uid(0, 0, 50 + i), target=1) for i in range(2)]
    checkpoint.in_transit = {1: flying}
    plan = plan_resume(checkpoint, [1, 1, 1, 1], pollination=False)
    for ind in flying:
        assert sum(ind in inds for inds in plan.populations.values()) == 1
        assert any(ind in plan.populations[j] for j in (1, 3))


def test_plan_pollinators_in_flight_replace_the_worst() -> None:
    checkpoint = layout_checkpoint([1, 2], per_island=4, pending_per_island=0)
    island1 = sorted(checkpoint.populations[1], key=lambda ind: ind.loss)
    island1[0].loss = math.nan  # a NaN loss is the worst of all
    island1[3].active = False  # inactive ones are never replaced
    flying = [emigrant_of(checkpoint.populations[0][i], make_uid(0, 0, 50 + i), target=1) for i in range(2)]
    for ind in flying:
        ind.loss = -1.0
    checkpoint.in_transit = {1: flying}
    plan = plan_resume(checkpoint, [1, 2], pollination=True)
    active = {ind.uid for ind in plan.populations[1] if ind.active}
    assert active == {island1[1].uid, *(ind.uid for ind in flying)}
    assert not island1[0].active and not island1[2].active
    assert all(ind.active for ind in plan.populations[0])
    assert Counter(plan.resume_table()["uid"].tolist()) == Counter(all_uids(checkpoint))
    table = plan.resume_table()
    inactive = {int(uid) for uid in table["uid"][table["active"] == 0]}
    assert inactive == {island1[0].uid, island1[2].uid, island1[3].uid}


def test_a_failed_flush_keeps_the_records_and_is_retried(tmp_path: Path, monkeypatch, caplog) -> None:
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1], flush_interval=0.05)
    real_append = CheckpointWriter._append
    failures = {"left": 2}

    def flaky(dataset, values):
        if failures["left"]:
            failures["left"] -= 1
            raise OSError("No space left on device")
        real_append(dataset, values)

    monkeypatch.setattr(writer, "_append", flaky)
    logger = logging.getLogger("propulate")
    monkeypatch.setattr(logger, "handlers", [*logger.handlers, caplog.handler])  # even if not propagating
    with caplog.at_level("ERROR", logger="propulate"):
        ind = start_and_finish(writer, bred(make_uid(0, 0, 0), 0, 0), 3.0, 0)
        deadline = time.time() + 5
        while writer.n_records == 0 and time.time() < deadline:
            time.sleep(0.05)
    writer.close()
    assert "No space left on device" in caplog.text, "a failing disk must be reported"
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None
    assert [i.loss for i in checkpoint.population] == [ind.loss]
