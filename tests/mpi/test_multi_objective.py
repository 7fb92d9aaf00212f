"""Runs with several objectives under MPI: fronts, resume, failures, islands (multi_objective_run.py).

Each launch checks collectively that every worker of an island holds the same population, that
``summarize()`` gives each worker its island's Pareto front, that the run's front (``pareto_front``) is the
same on every rank and is the front of the islands' fronts, and that the checkpoint read back has Optuna's
``values_<i>`` columns (a maximized objective as returned). The tests add counts, states and what a user
sees when the loss function returns the wrong number of values or a resume changes the objectives.
"""

from __future__ import annotations

import json

import pytest


def run(mpirun, ranks: int, tmp_path, *args: str, timeout: float = 120.0) -> dict:
    out = mpirun(
        "multi_objective_run.py", ranks, "--checkpoint", str(tmp_path / "ckpt"), *args, timeout=timeout
    )
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    assert result.get("problems", []) == [], result
    return result


@pytest.mark.parametrize("ranks", [1, 4, 8])
def test_fronts_are_the_same_on_every_worker(mpirun, ranks, tmp_path):
    result = run(mpirun, ranks, tmp_path, "--generations", "20")
    assert result["evaluations"] == 20 * ranks
    assert result["states"] == {"COMPLETE": 20 * ranks}
    assert result["front"] >= 1


@pytest.mark.parametrize("ranks", [4, 8])
def test_named_objectives_with_a_maximized_one(mpirun, ranks, tmp_path):
    result = run(mpirun, ranks, tmp_path, "--space", "mixed", "--generations", "15")
    assert result["evaluations"] == 15 * ranks


@pytest.mark.parametrize(("ranks", "pollination"), [(4, False), (8, False), (8, True)])
def test_islands_exchange_by_pareto_rank(mpirun, ranks, pollination, tmp_path):
    args = ["--num-islands", "2", "--generations", "20", *(["--pollination"] if pollination else [])]
    result = run(mpirun, ranks, tmp_path, *args)
    assert result["evaluations"] == 20 * ranks


def test_multi_rank_workers(mpirun, tmp_path):
    result = run(mpirun, 8, tmp_path, "--ranks-per-worker", "2", "--num-islands", "2", "--generations", "15")
    assert result["evaluations"] == 15 * 4


@pytest.mark.parametrize("ranks", [1, 4, 8])
def test_resume_continues_the_search(mpirun, ranks, tmp_path):
    first = run(mpirun, ranks, tmp_path, "--generations", "10")
    second = run(mpirun, ranks, tmp_path, "--generations", "25")
    assert first["evaluations"] == 10 * ranks
    assert second["evaluations"] == 25 * ranks
    # The resumed run's front covers the first one's points: its hypervolume cannot be smaller.
    assert second["hypervolume"] >= first["hypervolume"] - 1e-12


@pytest.mark.parametrize("objectives", ["3", '{"a": "minimize", "b": "maximize"}'])
def test_resume_with_other_objectives_is_refused(mpirun, objectives, tmp_path):
    run(mpirun, 4, tmp_path, "--generations", "5")
    refused = run(mpirun, 4, tmp_path, "--generations", "10", "--objectives", objectives)
    assert "made for other objectives" in refused["checkpoint_error"]


@pytest.mark.parametrize("ranks", [1, 4, 8])
def test_failed_evaluations_are_never_on_the_front(mpirun, ranks, tmp_path):
    # Every third evaluation raises, every fourth returns NaN in one objective (the mixed space).
    raised = run(mpirun, ranks, tmp_path / "raised", "--fail-every", "3", "--generations", "12")
    assert raised["states"] == {"COMPLETE": 8 * ranks, "FAIL": 4 * ranks}
    nan = run(mpirun, ranks, tmp_path / "nan", "--space", "mixed", "--nan-every", "4", "--generations", "12")
    assert nan["states"] == {"COMPLETE": 9 * ranks, "FAIL": 3 * ranks}


@pytest.mark.parametrize("ranks", [1, 4])
def test_a_wrong_number_of_objectives_fails_each_evaluation_with_a_message(mpirun, ranks, tmp_path):
    result = run(mpirun, ranks, tmp_path, "--wrong-count", "--generations", "3")
    assert "every evaluation of the run failed" in result["run_failed"]
    assert result["states"] == ["FAIL"]
    assert result["reasons"] == [
        "ValueError: loss_fn returned 3 objective value(s); the run has 2 objectives "
        "['values_0', 'values_1'] (the objectives argument)"
    ]
