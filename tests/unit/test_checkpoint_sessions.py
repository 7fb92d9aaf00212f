"""Checkpoints across sessions on one process: plans, merged files, empty files, bounded size and writes."""

from __future__ import annotations

import logging
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from propulate.checkpoint import (
    PLAN_DTYPE,
    Checkpoint,
    CheckpointError,
    CheckpointWriter,
    Record,
    compact,
    list_files,
    load_checkpoint,
    make_uid,
    plan_session,
)
from propulate.checkpoint.format import CHUNK_BYTES
from propulate.checkpoint.reader import read_listing

from .test_checkpoint import (
    NEVER,
    SPACE,
    all_uids,
    assert_same,
    bred,
    by_uid,
    emigrant_of,
    open_writer,
    start_and_finish,
    writer_attrs,
)


def plan_table(counters: dict[tuple[int, int], int]) -> np.ndarray:
    return np.array([(*key, value) for key, value in sorted(counters.items())], dtype=PLAN_DTYPE)


def snapshot_state(seed: int) -> dict[str, Any]:
    return {"rng": random.Random(seed).getstate(), "propagator": {"sigma": seed}}


def assert_same_checkpoint(a: Checkpoint, b: Checkpoint) -> None:
    assert a.config == b.config
    assert a.sessions == b.sessions
    assert a.space.fingerprint == b.space.fingerprint
    for group in ("populations", "pending", "in_transit"):
        left, right = getattr(a, group), getattr(b, group)
        assert {k: sorted(i.uid for i in v) for k, v in left.items()} == {
            k: sorted(i.uid for i in v) for k, v in right.items()
        }, group
        for island, inds in left.items():
            others = by_uid(right[island])
            for ind in inds:
                assert_same(ind, others[ind.uid])
    assert a.writers.keys() == b.writers.keys()
    for key, info in a.writers.items():
        other = b.writers[key]
        assert (info.generation_start, info.generation_end, info.state) == (
            other.generation_start,
            other.generation_end,
            other.state,
        ), key


def three_sessions(directory: Path) -> dict[str, Any]:
    """Two one-worker islands over three sessions: migrations, an emigrant in flight, an interruption."""
    made: dict[str, Any] = {"inds": []}
    for session in range(3):
        counters = {(0, 0): 3 * session, (1, 0): 3 * session}
        w0 = first_writer(directory, session, counters, [1, 1])
        w1 = open_writer(directory, writer=1, island=1, island_counts=[1, 1], session=session)
        for g in range(3):
            generation = 3 * session + g
            made["inds"].append(
                start_and_finish(w0, bred(make_uid(session, 0, g), 0, generation), g + 0.5, 0)
            )
            made["inds"].append(
                start_and_finish(w1, bred(make_uid(session, 1, g), 1, generation), g + 1.5, 1)
            )
        traveller = emigrant_of(made["inds"][-2], make_uid(session, 0, 10), target=1)
        w0.record(Record.DEPARTED, traveller, 1)
        if session < 2:
            traveller.current = 0
            w1.record(Record.ARRIVED, traveller, 1)
        else:
            made["lost"] = traveller
            made["interrupted"] = bred(make_uid(session, 1, 11), 1, 3 * session + 3)
            w1.record(Record.STARTED, made["interrupted"], 1)
        w0.snapshot(3 * session + 3, snapshot_state(session))
        w1.snapshot(3 * session + 3, snapshot_state(10 + session))
        w0.close()
        w1.close()
    return made


def first_writer(
    directory: Path, session: int, counters: dict[tuple[int, int], int], island_counts: list[int]
) -> CheckpointWriter:
    """The first writer of ``session`` (worker 0 of island 0), writing the session's plan of ``counters``."""
    attrs = writer_attrs(SPACE, 0, 0, 0, island_counts, session)
    attrs["generation_start"] = counters[(0, 0)]
    return CheckpointWriter(directory, session, 0, SPACE, attrs, None, NEVER, plan_table=plan_table(counters))


# ------------------------------------------------------------------------------------------- compaction


def test_compaction_keeps_what_the_files_say(tmp_path: Path) -> None:
    made = three_sessions(tmp_path)
    before = load_checkpoint(tmp_path)
    assert before is not None and before.sessions == 3
    assert len(list_files(tmp_path).paths) == 6

    assert compact(tmp_path) == 6
    listing = list_files(tmp_path)
    assert listing.paths == [tmp_path / "propulate-merged-s0002.h5"] and not listing.stale
    after = load_checkpoint(tmp_path)
    assert after is not None
    assert_same_checkpoint(before, after)
    assert [i.uid for i in after.in_transit[1]] == [made["lost"].uid]
    assert [i.uid for i in after.pending[1]] == [made["interrupted"].uid]
    assert after.writers[(0, 0)].generation_end == 9
    assert after.writers[(1, 0)].generation_end == 10  # it bred generation 9, interrupted
    assert after.writers[(1, 0)].state == {**snapshot_state(12), "generation": 9}
    assert compact(tmp_path) == 0  # nothing more to merge


def test_sessions_after_a_merge_apply_on_top_of_it(tmp_path: Path) -> None:
    three_sessions(tmp_path)
    compact(tmp_path)
    w0 = first_writer(tmp_path, 3, {(0, 0): 9, (1, 0): 9}, [1, 1])
    late = start_and_finish(w0, bred(make_uid(3, 0, 0), 0, 9), 0.01, 0)
    w0.deactivated(make_uid(0, 0, 0), 0)
    w0.close()
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None and checkpoint.sessions == 4
    population = by_uid(checkpoint.populations[0])
    assert late.uid in population and population[make_uid(0, 0, 0)].active is False
    # Worker (1, 0) never created its file in session 3: its counter and state come from the plan and
    # from session 2.
    assert checkpoint.writers[(1, 0)].generation_end == 9
    assert checkpoint.writers[(1, 0)].state == {**snapshot_state(12), "generation": 9}
    assert checkpoint.writers[(0, 0)].generation_end == 10
    before = load_checkpoint(tmp_path)
    compact(tmp_path)
    assert list_files(tmp_path).paths == [tmp_path / "propulate-merged-s0003.h5"]
    after = load_checkpoint(tmp_path)
    assert before is not None and after is not None
    assert_same_checkpoint(before, after)


def test_covered_files_left_by_a_kill_during_compaction_are_ignored(tmp_path: Path) -> None:
    three_sessions(tmp_path)
    before = load_checkpoint(tmp_path)
    files = list_files(tmp_path).paths
    saved = {path: path.read_bytes() for path in files}
    compact(tmp_path)
    for path, data in saved.items():  # as if killed after the rename, before the deletions
        path.write_bytes(data)
    listing = list_files(tmp_path)
    assert listing.merged is not None and sorted(listing.stale) == sorted(files)
    after = load_checkpoint(tmp_path)
    assert before is not None and after is not None
    assert_same_checkpoint(before, after)
    compact(tmp_path)
    assert not list_files(tmp_path).stale


def test_a_resume_merges_and_plans_from_the_merged_file(tmp_path: Path) -> None:
    three_sessions(tmp_path)
    listing = list_files(tmp_path)
    plan = plan_session(tmp_path, (listing, *read_listing(listing)), SPACE, [1, 1], pollination=False)
    assert plan.session == 3
    assert [p["counter"] for p in plan.payloads] == [9, 10]
    assert plan.plan_table.tolist() == [(0, 0, 9), (1, 0, 10)]
    assert [i.uid for i in plan.payloads[1]["requeue"]] == [make_uid(2, 1, 11)]
    assert list_files(tmp_path).paths == [tmp_path / "propulate-merged-s0002.h5"]


# -------------------------------------------------------------------------------- kills at session start


def test_a_worker_killed_before_its_file_existed_keeps_its_counter(tmp_path: Path) -> None:
    """4 workers x 8 generations, then a session killed while two workers were creating their files."""
    counters = {(0, r): 0 for r in range(4)}
    writers = [first_writer(tmp_path, 0, counters, [4])] + [
        open_writer(tmp_path, writer=r, island=0, island_counts=[4], island_rank=r) for r in range(1, 4)
    ]
    for r, writer in enumerate(writers):
        for g in range(8):
            start_and_finish(writer, bred(make_uid(0, r, g), 0, g, rank=r), float(g), 0)
        writer.close()
    # Session 1: the plan is written, workers 0 and 1 created their files, 2 and 3 did not.
    first_writer(tmp_path, 1, dict.fromkeys(counters, 8), [4]).close()
    attrs = writer_attrs(SPACE, 0, 1, 1, [4], session=1)
    attrs["generation_start"] = 8
    CheckpointWriter(tmp_path, 1, 1, SPACE, attrs, None, NEVER).close()
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None
    assert {key: info.generation_end for key, info in checkpoint.writers.items()} == dict.fromkeys(
        counters, 8
    )
    assert checkpoint.generations_done == 32


def test_a_file_is_created_under_a_temporary_name(tmp_path: Path, monkeypatch) -> None:
    """Killed while the file is created, nothing under a checkpoint name exists."""
    seen = []

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        return original(self, *args, **kwargs)

    original = h5py.Group.create_dataset
    monkeypatch.setattr(h5py.Group, "create_dataset", spy)
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1])
    writer.close()
    assert seen and all(names == ["propulate-s0000-w000000.h5.part"] for names in seen)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["propulate-s0000-w000000.h5"]


def torn_empty_file(path: Path) -> None:
    """What a kill between creating an HDF5 file and its first flush leaves (48 bytes of superblock)."""
    code = (
        "import h5py, os, sys\n"
        "handle = h5py.File(sys.argv[1], 'w', libver='latest')\n"
        "handle.create_dataset('records', shape=(0,), maxshape=(None,), chunks=(16,), dtype='f8')\n"
        "os.kill(os.getpid(), 9)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], timeout=60, check=False)
    assert 0 < path.stat().st_size < 2048


def test_a_file_without_records_is_set_aside_with_a_warning(tmp_path: Path, caplog) -> None:
    three_sessions(tmp_path)
    empty = tmp_path / "propulate-s0003-w000001.h5"
    torn_empty_file(empty)
    part = tmp_path / "propulate-s0003-w000000.h5.part"
    torn_empty_file(part)
    before = load_checkpoint(tmp_path)
    assert before is not None and before.sessions == 3
    with caplog.at_level(logging.WARNING, logger="propulate"):
        compact(tmp_path)
    assert "holds no record" in caplog.text and "set aside" in caplog.text
    assert sorted(p.name for p in (tmp_path / "set-aside").iterdir()) == sorted([empty.name, part.name])
    after = load_checkpoint(tmp_path)
    assert after is not None
    assert_same_checkpoint(before, after)
    # The next session is numbered past the one that was set aside (its uids may be elsewhere).
    assert list_files(tmp_path).next_session == 4


def test_a_truncated_file_with_records_is_still_refused(tmp_path: Path) -> None:
    three_sessions(tmp_path)
    path = tmp_path / "propulate-s0001-w000001.h5"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=path.name):
        load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match=path.name):
        compact(tmp_path)
    assert path.exists() and len(list_files(tmp_path).paths) == 6  # nothing changed


# ------------------------------------------------------------------------------------- bounded growth


def _proc_written() -> int:
    with open("/proc/self/io") as handle:
        for line in handle:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io")
def test_a_flush_writes_its_new_data_and_a_small_constant(tmp_path: Path) -> None:
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1])
    rng = random.Random(0)
    worst = 0.0
    for g in range(600):
        start_and_finish(writer, bred(make_uid(0, 0, g), 0, g), rng.random(), 0)
        if g % 7 == 0:
            writer.snapshot(g, {"rng": rng.getstate(), "propagator": {"history": list(range(g % 50))}})
        new_before, written_before = writer.bytes_written, _proc_written()
        writer.flush()
        written = _proc_written() - written_before
        new = writer.bytes_written - new_before
        worst = max(worst, written - 2 * new)
    writer.close()
    assert worst <= 4 * CHUNK_BYTES  # 16 kB


@pytest.mark.slow
def test_state_snapshots_do_not_grow_the_file(tmp_path: Path) -> None:
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1])
    rng = random.Random(0)
    sizes = []
    for i in range(2000):
        rng.random()
        writer.snapshot(i, {"rng": rng.getstate(), "propagator": {"step": i}})
        writer.flush()
        if i in (100, 1999):
            sizes.append(writer.path.stat().st_size)
    writer.close()
    assert sizes[1] == sizes[0]
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None and checkpoint.writers[(0, 0)].state is not None
    assert checkpoint.writers[(0, 0)].state["propagator"] == {"step": 1999}


@pytest.mark.slow
def test_waiting_grows_nothing(tmp_path: Path) -> None:
    """A worker in a long evaluation: its start is written once, then nothing."""
    writer = open_writer(tmp_path, writer=0, island=0, island_counts=[1], flush_interval=0.01)
    writer.started(bred(make_uid(0, 0, 0), 0, 0), 0)
    time.sleep(0.2)
    size = writer.path.stat().st_size
    written = writer.bytes_written
    time.sleep(1.0)  # 100 flushes
    assert writer.path.stat().st_size == size and writer.bytes_written == written
    writer.close()
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None and [i.uid for i in checkpoint.pending[0]] == [make_uid(0, 0, 0)]
    assert all_uids(checkpoint) == [make_uid(0, 0, 0)]
