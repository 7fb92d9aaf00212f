"""Preemption: the DDP tutorial, stopped by SIGTERM three times in the middle of an epoch, loses no training.

2 workers of 2 DDP ranks train 3 individuals each for 4 epochs (20 batches per epoch, so it runs in CI).
Each job is sent SIGTERM half an epoch after an epoch ended (the launcher forwards it to every rank, as
``scancel`` or a preempting scheduler does); the same command then resumes. Every training stopped at its
next commit and continued from it, so the epochs trained by all jobs together are those of an
uninterrupted run (at most one more per interruption and worker, the issue's bound), and the last job ends
with every individual completed once.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from propulate import Status, load_checkpoint

from .conftest import REPO, kill_job, start_job

pytestmark = pytest.mark.torch

WORKERS, GENERATIONS, EPOCHS, INTERRUPTIONS = 2, 3, 4, 3
TRAINED = re.compile(r"^This job trained (\d+) epoch\(s\) and continued (\d+) training\(s\)", re.MULTILINE)


def committed(checkpoint: Path) -> set[str]:
    """The states committed so far, as ``uid/step-k`` names."""
    folder = checkpoint / "evaluations"
    return (
        {f"{path.parent.name}/{path.name}" for path in folder.glob("*/step-*")} if folder.is_dir() else set()
    )


def job(checkpoint: Path, cache: Path, interrupt: bool) -> tuple[str, bool]:
    """Run the tutorial once; with ``interrupt``, SIGTERM it in the middle of an epoch. Output, and whether
    the signal was sent."""
    args = [
        *("--generations", str(GENERATIONS), "--epochs", str(EPOCHS), "--train-batches", "20"),
        *("--checkpoint", str(checkpoint), "--top-n", "2"),
    ]
    proc = start_job(
        REPO / "tutorials" / "torch_ddp_example.py",
        2 * WORKERS,
        *args,
        env={"PROPULATE_DATA_CACHE": str(cache)},
    )
    signalled = False
    try:
        if interrupt:
            before, commits = committed(checkpoint), []
            deadline = time.monotonic() + 240
            while proc.poll() is None and len(commits) < 2 and time.monotonic() < deadline:
                new = committed(checkpoint) - before
                if new:
                    commits.append(time.monotonic())
                    before |= new
                time.sleep(0.02)
            if proc.poll() is None and len(commits) == 2:
                time.sleep((commits[1] - commits[0]) / 2)  # the middle of the epoch that just began
                proc.send_signal(signal.SIGTERM)  # to the launcher, which forwards it to every rank
                signalled = True
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        kill_job(proc)
        out, _ = proc.communicate()
        pytest.fail(f"the tutorial hung; output:\n{out[-5000:]}")
    assert proc.returncode == 0, f"exit code {proc.returncode}; output:\n{out[-5000:]}"
    return out, signalled


def test_ddp_tutorial_survives_three_preemptions(tmp_path):
    pytest.importorskip("torchvision")
    checkpoint, cache = tmp_path / "checkpoints", tmp_path / "cache"
    trained = continued = 0
    for attempt in range(INTERRUPTIONS):
        out, signalled = job(checkpoint, cache, interrupt=True)
        assert signalled, f"job {attempt} ended before it could be interrupted:\n{out[-3000:]}"
        assert "SIGTERM received" in out, out[-3000:]
        epochs, resumed = (int(x) for x in TRAINED.findall(out)[0])
        trained, continued = trained + epochs, continued + resumed
        print(f"job {attempt}: {epochs} epoch(s) trained, {resumed} training(s) continued")
        pending = load_checkpoint(checkpoint).pending
        # Stopped at a commit: each interrupted training has its state, taken after a whole epoch.
        for ind in (ind for inds in pending.values() for ind in inds):
            assert list((checkpoint / "evaluations" / str(ind.uid)).glob("step-*")), ind.uid
    out, _ = job(checkpoint, cache, interrupt=False)
    epochs, resumed = (int(x) for x in TRAINED.findall(out)[0])
    trained, continued = trained + epochs, continued + resumed

    uninterrupted = WORKERS * GENERATIONS * EPOCHS
    assert trained <= uninterrupted + INTERRUPTIONS * WORKERS, (trained, uninterrupted)
    assert trained == uninterrupted, "a training lost or repeated epochs although every stop came at a commit"
    assert continued >= INTERRUPTIONS, continued
    final = load_checkpoint(checkpoint)
    individuals = [ind for inds in final.populations.values() for ind in inds]
    assert len(individuals) == WORKERS * GENERATIONS
    assert all(ind.status is Status.COMPLETED for ind in individuals)
    assert not any(final.pending.values())
    assert not list((checkpoint / "evaluations").iterdir()), "evaluation folders left behind"
    assert f"{WORKERS * GENERATIONS} completed, 0 failed, 0 pruned, 0 interrupted" in out, out[-3000:]
