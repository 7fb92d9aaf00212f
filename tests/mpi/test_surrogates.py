"""Early stopping under mpiexec: generator losses, surrogates, multi-rank workers, resume.

The program (programs/surrogate_run.py) does an all-reduce over the worker in every epoch, so a worker whose
ranks disagreed about cancelling would hang and the launch would time out.
"""

from __future__ import annotations

import json

import pytest


def run(mpirun, tmp_path, n, *args, timeout=120.0):
    out = mpirun("surrogate_run.py", n, "--checkpoint", str(tmp_path / "ckpt"), *args, timeout=timeout)
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def check_consistent(result, workers, generations):
    assert result["workers"] == workers
    assert result["evaluations"] == workers * generations
    assert result["problems"] == []
    assert result["islands_consistent"]
    assert result["baselines_consistent"]


@pytest.mark.parametrize(
    ("n", "ranks_per_worker", "num_islands"), [(1, 1, 1), (2, 1, 1), (4, 2, 1), (8, 2, 2), (8, 4, 1)]
)
def test_static_surrogate_cancels_and_workers_agree(mpirun, tmp_path, n, ranks_per_worker, num_islands):
    generations = 12
    result = run(
        mpirun,
        tmp_path,
        n,
        "--ranks-per-worker",
        str(ranks_per_worker),
        "--num-islands",
        str(num_islands),
        "--generations",
        str(generations),
    )
    workers = n // ranks_per_worker
    check_consistent(result, workers, generations)
    status = result["status"]
    assert status["PRUNED"] > 0, status
    assert status["COMPLETED"] > 0, status
    assert status["PRUNED"] + status["COMPLETED"] == workers * generations, status
    assert result["baseline_is_best_curve"]
    assert result["epochs_counted"]


def test_null_surrogate_never_cancels(mpirun, tmp_path):
    result = run(mpirun, tmp_path, 4, "--ranks-per-worker", "2", "--surrogate", "null")
    check_consistent(result, 2, 12)
    assert result["status"]["COMPLETED"] == 24
    assert result["epochs_counted"]


def test_subrank_failure_mid_training_fails_the_evaluation_without_hanging(mpirun, tmp_path):
    result = run(
        mpirun,
        tmp_path,
        4,
        "--ranks-per-worker",
        "2",
        "--mode",
        "subrank-fail",
        "--generations",
        "16",
        "--surrogate",
        "null",
    )
    check_consistent(result, 2, 16)
    assert result["status"]["FAILED"] > 0, result["status"]
    assert result["epochs_counted"]


@pytest.mark.parametrize("ranks_per_worker", [1, 2])
def test_surrogate_state_survives_resume(mpirun, tmp_path, ranks_per_worker):
    first = run(mpirun, tmp_path, 4, "--ranks-per-worker", str(ranks_per_worker), "--generations", "8")
    workers = 4 // ranks_per_worker
    check_consistent(first, workers, 8)
    # Nothing left to evaluate: the surrogates are rebuilt from the checkpoint alone.
    again = run(mpirun, tmp_path, 4, "--ranks-per-worker", str(ranks_per_worker), "--generations", "8")
    check_consistent(again, workers, 8)
    assert again["baseline_is_best_curve"]
    assert again["status"] == first["status"]
    # And a longer run goes on learning from where it stopped.
    longer = run(mpirun, tmp_path, 4, "--ranks-per-worker", str(ranks_per_worker), "--generations", "14")
    check_consistent(longer, workers, 14)
    assert longer["baseline_is_best_curve"]


@pytest.mark.parametrize("surrogate", ["loglinear", "dynamic"])
def test_learning_curve_surrogates_under_mpi(mpirun, tmp_path, surrogate):
    result = run(
        mpirun,
        tmp_path,
        4,
        "--ranks-per-worker",
        "2",
        "--surrogate",
        surrogate,
        "--generations",
        "16",
        timeout=240,
    )
    check_consistent(result, 2, 16)
    status = result["status"]
    assert status["PRUNED"] > 0, status
    assert status["PRUNED"] + status["COMPLETED"] == 32, status
    assert result["epochs_counted"]
