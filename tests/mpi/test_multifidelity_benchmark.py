"""benchmarks/multifidelity.py runs the tutorial per method and seed and counts what each run trained.

Tiny sizes on the bundled MNIST slice: not a measurement, only the script's plumbing and its counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, kill_job

pytestmark = pytest.mark.torch

RANKS, GENERATIONS, EPOCHS = 2, 2, 3


def test_multifidelity_counts_every_run(tmp_path: Path) -> None:
    pytest.importorskip("torchvision")
    command = [
        sys.executable,
        str(REPO / "benchmarks" / "multifidelity.py"),
        *("--ranks", str(RANKS), "--generations", str(GENERATIONS), "--epochs", str(EPOCHS)),
        *("--seeds", "1", "--train-batches", "2", "--val-batches", "1", "--timeout", "120"),
        *("--directory", str(tmp_path)),
    ]
    env = {"PROPULATE_DATA_CACHE": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    job = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
        cwd=REPO,
        start_new_session=True,
    )
    try:
        out, _ = job.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        kill_job(job)
        out, _ = job.communicate()
        pytest.fail(f"{' '.join(command)} ran for more than 300 s; output:\n{out[-5000:]}")
    assert job.returncode == 0, out[-5000:]

    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    runs = [line for line in lines if "method" in line]
    assert [(run["method"], run["seed"]) for run in runs] == [("none", 1), ("static", 1), ("asha", 1)]
    evaluated = RANKS * GENERATIONS
    for run in runs:
        assert run["evaluated"] == evaluated and run["failed"] == 0, run
        assert run["completed"] + run["pruned"] == evaluated and run["completed"] >= 1, run
        assert evaluated <= run["epochs_trained"] <= evaluated * EPOCHS, run
        assert run["epochs_share"] == pytest.approx(run["epochs_trained"] / (evaluated * EPOCHS)), run
        assert sum(run["pruned_after"].values()) == run["pruned"], run
        assert 0 < run["best_val_loss"] < 10 and 0 <= run["best_accuracy"] <= 1, run
    none, _, asha = runs
    assert none["epochs_trained"] == evaluated * EPOCHS and none["pruned"] == 0
    # With eta 3 and 3 epochs, the only rung below the maximum resource is epoch 1.
    assert set(asha["pruned_after"]) <= {"1"}, asha

    summaries = {line["summary"]: line for line in lines if "summary" in line}
    assert list(summaries) == ["none", "static", "asha"]
    for run in runs:
        # One seed: its median, min and max are that run's figures.
        one = {"median": run["epochs_trained"], "min": run["epochs_trained"], "max": run["epochs_trained"]}
        assert summaries[run["method"]]["epochs_trained"] == one
    assert "ASHA trains " in out and "% of the epochs of no early stopping (target <= 40 %)" in out
    assert "seed-to-seed spread of none [" in out
    # The checkpoints live in a temporary folder below --directory, removed at the end without --keep.
    assert [path.name for path in tmp_path.iterdir()] == ["cache"]
