"""Checkpoint and resume under mpiexec: same and changed layouts, refusals, fresh starts and kill -9."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from propulate.checkpoint import load_checkpoint
from propulate.individual import Status

from .conftest import PROGRAMS, REPO, find_mpiexec, kill_job

pytestmark = pytest.mark.mpi


def session(mpirun, directory: Path, ranks: int, generations: int, *extra: str) -> dict:
    args = ["--checkpoint", str(directory), "--generations", str(generations), *extra]
    out = mpirun("resume.py", ranks, *args, timeout=120).stdout
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def bred(directory: Path) -> list:
    """The individuals bred (not migrated copies) stored in the checkpoint, completed ones."""
    checkpoint = load_checkpoint(directory)
    assert checkpoint is not None
    assert not checkpoint.pending, "a finished run left interrupted evaluations"
    return [
        ind for ind in checkpoint.population if ind.migration_steps == 0 and ind.status is Status.COMPLETED
    ]


def test_resume_same_layout(mpirun, tmp_path):
    first = session(mpirun, tmp_path, 4, 10, "--num-islands", "2")
    assert first["calls"] == 40 and first["counters"] == [10] * 4
    second = session(mpirun, tmp_path, 4, 15, "--num-islands", "2")
    assert second["calls"] == 20, "generations count per worker in total: only 5 more each"
    assert second["counters"] == [15] * 4
    assert len(bred(tmp_path)) == 60
    third = session(mpirun, tmp_path, 4, 15, "--num-islands", "2")
    assert third["calls"] == 0, "a finished run resumed with the same budget does nothing"
    assert sum(third["islands"].values()) >= 60


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ((4, ["--num-islands", "2"]), (2, ["--num-islands", "1"])),  # fewer ranks, islands merged
        ((2, ["--num-islands", "1"]), (8, ["--num-islands", "2", "--pollination"])),  # more ranks, split
        (
            (4, ["--num-islands", "2"]),
            (8, ["--num-islands", "2", "--ranks-per-worker", "2"]),
        ),  # 2 ranks/worker
        ((8, ["--num-islands", "4", "--ranks-per-worker", "2"]), (4, ["--num-islands", "3"])),
    ],
    ids=["fewer-ranks", "more-ranks-split-islands", "ranks-per-worker", "from-multi-rank-workers"],
)
def test_elastic_resume(mpirun, tmp_path, first, second):
    ranks1, args1 = first
    ranks2, args2 = second
    rpw1 = 2 if "--ranks-per-worker" in args1 else 1
    rpw2 = 2 if "--ranks-per-worker" in args2 else 1
    workers1, workers2 = ranks1 // rpw1, ranks2 // rpw2
    one = session(mpirun, tmp_path, ranks1, 12, *args1)
    assert one["calls"] == 12 * workers1
    before = {ind.uid: ind.loss for ind in bred(tmp_path)}
    two = session(mpirun, tmp_path, ranks2, 12, *args2)
    done = 12 * workers1
    assert two["calls"] == max(0, 12 * workers2 - done)
    assert sum(two["counters"]) == max(done, 12 * workers2)
    after = {ind.uid: ind.loss for ind in bred(tmp_path)}
    assert len(after) == max(done, 12 * workers2)
    assert all(after[uid] == loss for uid, loss in before.items()), "resume lost or changed an evaluation"
    assert len(two["islands"]) == int(args2[args2.index("--num-islands") + 1])


def refusals(result: subprocess.CompletedProcess, ranks: int) -> list[str]:
    assert result.returncode != 0, result.stdout
    # Lines of different ranks may interleave; each report starts with its rank.
    reports = re.findall(r"rank (\d+) refused: (.*?)(?=rank \d+ refused|\n|$)", result.stdout)
    assert sorted(int(rank) for rank, _ in reports) == list(range(ranks)), result.stdout
    return [message for _, message in reports]


def test_other_search_space_refused_on_every_rank(mpirun, mpilaunch, tmp_path):
    session(mpirun, tmp_path, 2, 5)
    result = mpilaunch("resume.py", 4, "--checkpoint", str(tmp_path), "--space", "other", timeout=60)
    assert all("another search space" in line for line in refusals(result, 4))


def test_truncated_file_fails_clearly(mpirun, mpilaunch, tmp_path):
    session(mpirun, tmp_path, 4, 20)
    victim = sorted(tmp_path.glob("propulate-s0000-w*.h5"))[1]
    with open(victim, "r+b") as handle:
        handle.truncate(victim.stat().st_size // 2)
    result = mpilaunch("resume.py", 4, "--checkpoint", str(tmp_path), "--generations", "25", timeout=60)
    assert all(victim.name in line and "truncated or corrupted" in line for line in refusals(result, 4))


def test_start_fresh(mpirun, tmp_path):
    session(mpirun, tmp_path, 4, 6)
    fresh = session(mpirun, tmp_path, 4, 6, "--fresh")
    assert fresh["calls"] == 24, "a fresh start evaluates everything again"
    archived = list(tmp_path.glob("previous-*/propulate-s0000-w*.h5"))
    assert len(archived) == 4, "the earlier files are kept aside, not deleted"
    assert len(bred(tmp_path)) == 24


def finished_evaluations(directory: Path, offsets: dict[str, int], before: float) -> list[float]:
    """Losses logged after ``offsets`` (bytes already read of each log) and before time ``before``."""
    losses = []
    for log in directory.glob("evals-*.log"):
        text = log.read_bytes()[offsets.get(log.name, 0) :].decode()
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2:
                try:
                    stamp, loss = float(parts[0]), float(parts[1])
                except ValueError:
                    continue  # the line being written at the kill
                if stamp < before:
                    losses.append(loss)
    return losses


def test_kill_minus_nine_at_random_moments(mpirun, tmp_path):
    """SIGKILL the whole job 5 times; every evaluation finished 1 s before a kill must be on disk."""
    choose = random.Random(20261121)
    ranks = 4
    required: set[float] = set()
    for _ in range(5):
        offsets = {log.name: log.stat().st_size for log in tmp_path.glob("evals-*.log")}
        cmd = [find_mpiexec(), "-n", str(ranks), sys.executable, str(PROGRAMS / "resume.py")]
        cmd += [
            "--checkpoint",
            str(tmp_path),
            "--generations",
            "100000",
            "--num-islands",
            "2",
            "--sleep",
            "0.01",
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True
        )
        try:
            deadline = time.time() + 60
            start_size = sum(log.stat().st_size for log in tmp_path.glob("evals-*.log"))
            while sum(log.stat().st_size for log in tmp_path.glob("evals-*.log")) == start_size:
                assert time.time() < deadline and proc.poll() is None, "the job did not start evaluating"
                time.sleep(0.05)
            time.sleep(choose.uniform(1.2, 3.5))
        finally:
            killed_at = time.time()
            kill_job(proc)
            proc.wait(timeout=30)
        checkpoint = load_checkpoint(tmp_path)
        assert checkpoint is not None
        stored = {ind.loss for ind in checkpoint.population if ind.status is Status.COMPLETED}
        # What this session finished a second before the kill, and everything required before, is stored.
        required.update(finished_evaluations(tmp_path, offsets, killed_at - 1.0))
        missing = required - stored
        assert not missing, f"{len(missing)} of {len(required)} finished evaluations were lost"
    # Finishing the run after the crashes: interrupted evaluations are redone, counts are exact.
    counters = [info.generation_end for info in checkpoint.writers.values()]
    target = max(counters) + 3
    result = session(mpirun, tmp_path, ranks, target, "--num-islands", "2")
    assert result["counters"] == [target] * ranks
    individuals = bred(tmp_path)
    assert len(individuals) == target * ranks
    assert len({(ind.island, ind.rank, ind.generation) for ind in individuals}) == target * ranks


def test_reading_needs_no_mpi(mpirun, tmp_path):
    session(mpirun, tmp_path, 2, 4)
    code = (
        "import sys\n"
        "from propulate import load_checkpoint\n"
        f"checkpoint = load_checkpoint({str(tmp_path)!r})\n"
        "assert 'mpi4py.MPI' not in sys.modules, 'reading a checkpoint initialized MPI'\n"
        "assert len(checkpoint.population) == 8, len(checkpoint.population)\n"
        "assert checkpoint.config['island_counts'] == [2]\n"
        "print(sorted(checkpoint.population, key=lambda ind: ind.loss)[0])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    assert "Individual(" in result.stdout
