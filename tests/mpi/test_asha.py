"""Successive halving under mpiexec: shared rung records, decisions the island agrees on, resume.

The program (programs/asha_run.py) trains known synthetic learning curves with an all-reduce over the worker
in every epoch, so a worker whose ranks disagreed about stopping would hang and the launch would time out.
"""

from __future__ import annotations

import json

import pytest

GENERATIONS = 10


def run(mpirun, tmp_path, n, *args, timeout=120.0):
    out = mpirun("asha_run.py", n, "--checkpoint", str(tmp_path / "ckpt"), *args, timeout=timeout)
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def check_island(result, workers):
    assert result["workers"] == workers
    assert result["problems"] == []
    assert result["records_equal"], "workers of the island hold different rung records"
    assert result["rebuilt_equal"], "records differ from those rebuilt from the individuals' data"
    assert result["decisions_agree"], "workers see different outcomes for the same individual"


@pytest.mark.parametrize(
    ("n", "ranks_per_worker", "brackets"), [(1, 1, 1), (2, 1, 1), (4, 1, 1), (4, 2, 1), (4, 1, 3), (4, 2, 2)]
)
def test_rung_decisions_agree_across_the_island(mpirun, tmp_path, n, ranks_per_worker, brackets):
    result = run(
        mpirun, tmp_path, n, "--ranks-per-worker", str(ranks_per_worker), "--brackets", str(brackets)
    )
    workers = n // ranks_per_worker
    check_island(result, workers)
    assert result["evaluations"] == workers * GENERATIONS
    status = result["status"]
    assert status["PRUNED"] > 0 and status["COMPLETED"] > 0, status
    assert status["PRUNED"] + status["COMPLETED"] == workers * GENERATIONS, status
    assert result["same_epochs_in_worker"], "ranks of one worker left an evaluation at different epochs"
    assert result["epochs_counted"]
    assert result["logged_decisions_consistent"]
    assert result["decisions"] > 0


@pytest.mark.parametrize("ranks_per_worker", [1, 2])
def test_rung_records_are_rebuilt_on_resume(mpirun, tmp_path, ranks_per_worker):
    first = run(mpirun, tmp_path, 4, "--ranks-per-worker", str(ranks_per_worker))
    workers = 4 // ranks_per_worker
    check_island(first, workers)
    # Nothing left to evaluate: the records come from the checkpoint alone.
    again = run(mpirun, tmp_path, 4, "--ranks-per-worker", str(ranks_per_worker))
    check_island(again, workers)
    assert again["records_digest"] == first["records_digest"]
    assert again["status"] == first["status"]
    # A longer run decides from the rebuilt records and goes on sharing.
    longer = run(mpirun, tmp_path, 4, "--ranks-per-worker", str(ranks_per_worker), "--generations", "14")
    check_island(longer, workers)
    assert longer["logged_decisions_consistent"]
    assert longer["evaluations"] == workers * 14
    assert longer["status"]["PRUNED"] >= first["status"]["PRUNED"]
