"""Checkpoint and resume under mpiexec: same and changed layouts, refusals, fresh starts and kill -9."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from propulate.checkpoint import load_checkpoint
from propulate.individual import Status

from .conftest import REPO, finish_job, kill_job, start_job


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


def logged_evaluations(directory: Path) -> list[tuple[float, float]]:
    """Every ``(epoch time, loss)`` the worker roots logged when an evaluation finished, all sessions."""
    found = []
    for log in directory.glob("evals-*.log"):
        for line in log.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                try:
                    found.append((float(parts[0]), float(parts[1])))
                except ValueError:
                    continue  # the line being written at a kill
    return found


def session_files(directory: Path) -> set[str]:
    return {path.name for path in directory.glob("propulate-s*-w*.h5")}


# When each of 20 sessions is killed: (event, seconds after it). "launch": the job started; "file": the
# session's first checkpoint file appeared (the first writer's, holding the plan); "eval": the session's first
# evaluation finished; "end": every evaluation of a session that runs to its end finished.
KILL_MOMENTS = [
    ("launch", 0.2),
    ("eval", 0.0),
    ("eval", 0.25),
    ("file", 0.0),
    ("eval", 0.6),
    ("file", 0.0),
    ("launch", 1.0),
    ("file", 0.01),
    ("eval", 1.0),
    ("file", 0.0),
    ("file", 0.03),
    ("end", 0.0),
    ("file", 0.06),
    ("eval", 1.6),
    ("file", 0.1),
    ("end", 0.05),
    ("file", 0.2),
    ("eval", 2.5),
    ("file", 0.3),
    ("end", 0.2),
]


def _happened(event: str, directory: Path, files_before: set[str], logged_before: int, expected: int) -> bool:
    if event == "launch":
        return True
    if event == "file":
        return bool(session_files(directory) - files_before)
    logged = len(logged_evaluations(directory)) - logged_before
    return logged >= (expected if event == "end" else 1)


def test_kill_minus_nine_at_scripted_moments(tmp_path):
    """SIGKILL the whole job at 20 moments, the first second of a session included; resume each time.

    Every evaluation finished 1 s before the kill that ended its session is kept; counts are exact at the
    end; an evaluation is done twice only when its first result was lost in the last second before a kill.
    """
    ranks, per_session = 4, 5
    kills: list[float] = []
    target = 0
    for event, delay in KILL_MOMENTS:
        checkpoint = load_checkpoint(tmp_path)
        done = 0 if checkpoint is None else max(info.generation_end for info in checkpoint.writers.values())
        runs_to_end = event == "end"
        target = done + per_session if runs_to_end else 100_000
        before_files, before_logged = session_files(tmp_path), len(logged_evaluations(tmp_path))
        expected = ranks * per_session
        args = ["--checkpoint", str(tmp_path), "--generations", str(target), "--num-islands", "2"]
        proc = start_job("resume.py", ranks, *args, "--sleep", "0.01", capture=False)
        try:
            deadline = time.time() + 60

            while not _happened(event, tmp_path, before_files, before_logged, expected):
                assert time.time() < deadline, f"{event} did not happen"
                if proc.poll() is not None:
                    break  # the session ended before the moment: nothing to kill
                time.sleep(0.005)
            time.sleep(delay)
        finally:
            kill_job(proc)
            proc.wait(timeout=30)
            kills.append(time.time())  # when every rank is dead: no evaluation can finish later
        checkpoint = load_checkpoint(tmp_path)
        if checkpoint is not None:
            stored = {ind.loss for ind in checkpoint.population if ind.status is Status.COMPLETED}
            for stamp, loss in logged_evaluations(tmp_path):
                ended_by = next((kill for kill in kills if kill >= stamp), None)
                if ended_by is not None and stamp < ended_by - 1.0:
                    assert loss in stored, (
                        f"kill {len(kills)} ({event}, {delay}): an evaluation finished "
                        f"{ended_by - stamp:.2f} s before a kill was lost"
                    )
    # Finishing the run: interrupted evaluations are redone, counts are exact.
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None
    target = max(info.generation_end for info in checkpoint.writers.values()) + 2
    args = ["--checkpoint", str(tmp_path), "--generations", str(target), "--num-islands", "2"]
    proc = finish_job(start_job("resume.py", ranks, *args), 120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["counters"] == [target] * ranks
    individuals = bred(tmp_path)
    assert len(individuals) == target * ranks
    assert len({(ind.island, ind.rank, ind.generation) for ind in individuals}) == target * ranks
    # Nothing redone beyond what the kills lost: every evaluation logged but not kept (a multiset: two
    # individuals may share a loss) finished within the second before a kill.
    logged = logged_evaluations(tmp_path)
    kept = Counter(ind.loss for ind in individuals)
    assert not kept - Counter(loss for _, loss in logged), "a stored result was never evaluated"
    lost = Counter(loss for _, loss in logged) - kept
    just_before_a_kill = {
        loss for stamp, loss in logged if any(stamp <= kill < stamp + 1.0 for kill in kills)
    }
    assert set(lost) <= just_before_a_kill, "an evaluation was redone though its result was kept"


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
