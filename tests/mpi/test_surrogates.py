"""Early stopping under mpiexec: generator losses, surrogates, multi-rank workers, resume.

The program (programs/surrogate_run.py) does an all-reduce over the worker in every epoch, so a worker whose
ranks disagreed about cancelling would hang and the launch would time out.
"""

from __future__ import annotations

import json

import pytest

from .conftest import Cases

STATIC = [(1, 1, 1), (2, 1, 1), (4, 2, 1), (8, 2, 2), (8, 4, 1)]
CURVES = ["loglinear", "dynamic"]

CASES: dict[str, tuple[int, list[str]]] = {}
for n, ranks_per_worker, num_islands in STATIC:
    args = ["--ranks-per-worker", str(ranks_per_worker), "--num-islands", str(num_islands)]
    CASES[f"static-{n}-{ranks_per_worker}-{num_islands}"] = (n, [*args, "--generations", "12"])
CASES["null"] = (4, ["--ranks-per-worker", "2", "--surrogate", "null"])
for ranks_per_worker in (1, 2):
    # The three runs of one resume test, in order, on one checkpoint.
    args = ["--ranks-per-worker", str(ranks_per_worker), "--generations"]
    CASES[f"resume-{ranks_per_worker}-first"] = (4, [*args, "8"])
    CASES[f"resume-{ranks_per_worker}-again"] = (4, [*args, "8"])
    CASES[f"resume-{ranks_per_worker}-longer"] = (4, [*args, "14"])
for surrogate in CURVES:
    args = ["--ranks-per-worker", "2", "--surrogate", surrogate, "--generations", "16"]
    CASES[f"curve-{surrogate}"] = (4, args)
# Last of its launch: the cases before it run in a process that no failure has touched yet.
args = ["--ranks-per-worker", "2", "--mode", "subrank-fail", "--generations", "16", "--surrogate", "null"]
CASES["subrank-fail"] = (4, args)
for case, (ranks, args) in CASES.items():
    folder = case.removesuffix("-first").removesuffix("-again").removesuffix("-longer")
    CASES[case] = (ranks, ["--checkpoint", f"{{tmp}}/{folder}/ckpt", *args])


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Cases:
    """The cases above, in one launch per rank count (4 launches instead of 15)."""
    return Cases("surrogate_run.py", CASES, tmp_path_factory.mktemp("surrogates"), timeout=240)


def run(cases: Cases, name: str) -> dict:
    out = cases(name)
    assert out.returncode == 0, f"exit code {out.returncode}; output:\n{out.stdout[-8000:]}"
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def check_consistent(result, workers, generations):
    assert result["workers"] == workers
    assert result["evaluations"] == workers * generations
    assert result["problems"] == []
    assert result["islands_consistent"]
    assert result["baselines_consistent"]


@pytest.mark.parametrize(("n", "ranks_per_worker", "num_islands"), STATIC)
def test_static_surrogate_cancels_and_workers_agree(cases, n, ranks_per_worker, num_islands):
    generations = 12
    result = run(cases, f"static-{n}-{ranks_per_worker}-{num_islands}")
    workers = n // ranks_per_worker
    check_consistent(result, workers, generations)
    status = result["status"]
    assert status["PRUNED"] > 0, status
    assert status["COMPLETED"] > 0, status
    assert status["PRUNED"] + status["COMPLETED"] == workers * generations, status
    assert result["baseline_is_best_curve"]
    assert result["epochs_counted"]


def test_null_surrogate_never_cancels(cases):
    result = run(cases, "null")
    check_consistent(result, 2, 12)
    assert result["status"]["COMPLETED"] == 24
    assert result["epochs_counted"]


def test_subrank_failure_mid_training_fails_the_evaluation_without_hanging(cases):
    result = run(cases, "subrank-fail")
    check_consistent(result, 2, 16)
    assert result["status"]["FAILED"] > 0, result["status"]
    assert result["epochs_counted"]


@pytest.mark.parametrize("ranks_per_worker", [1, 2])
def test_surrogate_state_survives_resume(cases, ranks_per_worker):
    first = run(cases, f"resume-{ranks_per_worker}-first")
    workers = 4 // ranks_per_worker
    check_consistent(first, workers, 8)
    # Nothing left to evaluate: the surrogates are rebuilt from the checkpoint alone.
    again = run(cases, f"resume-{ranks_per_worker}-again")
    check_consistent(again, workers, 8)
    assert again["baseline_is_best_curve"]
    assert again["status"] == first["status"]
    # And a longer run goes on learning from where it stopped.
    longer = run(cases, f"resume-{ranks_per_worker}-longer")
    check_consistent(longer, workers, 14)
    assert longer["baseline_is_best_curve"]


@pytest.mark.parametrize("surrogate", CURVES)
def test_learning_curve_surrogates_under_mpi(cases, surrogate):
    result = run(cases, f"curve-{surrogate}")
    check_consistent(result, 2, 16)
    status = result["status"]
    assert status["PRUNED"] > 0, status
    assert status["PRUNED"] + status["COMPLETED"] == 32, status
    assert result["epochs_counted"]
