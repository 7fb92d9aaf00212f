"""Runs with several objectives under MPI: fronts, resume, failures, islands (multi_objective_run.py).

Each case checks collectively that every worker of an island holds the same population, that
``summarize()`` gives each worker its island's Pareto front, that the run's front (``pareto_front``) is the
same on every rank and is the front of the islands' fronts, and that the checkpoint read back has Optuna's
``values_<i>`` columns (a maximized objective as returned). The tests add counts, states and what a user
sees when the loss function returns the wrong number of values or a resume changes the objectives.
"""

from __future__ import annotations

import json

import pytest

from .conftest import Cases

ISLANDS = [(4, False), (8, False), (8, True)]
OBJECTIVES = ["3", '{"a": "minimize", "b": "maximize"}']


def checkpoint(name: str) -> list[str]:
    return ["--checkpoint", f"{{tmp}}/{name}"]


# A test that launches twice names its cases name-first and name-second, in the order they run.
CASES: dict[str, tuple[int, list[str]]] = {}
for ranks in (1, 4, 8):
    CASES[f"fronts-{ranks}"] = (ranks, [*checkpoint(f"fronts-{ranks}"), "--generations", "20"])
    args = [*checkpoint(f"resume-{ranks}"), "--generations"]
    CASES[f"resume-{ranks}-first"] = (ranks, [*args, "10"])
    CASES[f"resume-{ranks}-second"] = (ranks, [*args, "25"])
    args = [*checkpoint(f"failed-{ranks}-raised"), "--fail-every", "3", "--generations", "12"]
    CASES[f"failed-{ranks}-raised"] = (ranks, args)
    args = [*checkpoint(f"failed-{ranks}-nan"), "--space", "mixed", "--nan-every", "4", "--generations", "12"]
    CASES[f"failed-{ranks}-nan"] = (ranks, args)
for ranks in (4, 8):
    CASES[f"named-{ranks}"] = (
        ranks,
        [*checkpoint(f"named-{ranks}"), "--space", "mixed", "--generations", "15"],
    )
for ranks, pollination in ISLANDS:
    name = f"islands-{ranks}-{pollination}"
    args = [*checkpoint(name), "--num-islands", "2", "--generations", "20"]
    CASES[name] = (ranks, [*args, *(["--pollination"] if pollination else [])])
args = ["--ranks-per-worker", "2", "--num-islands", "2", "--generations", "15"]
CASES["multi-rank"] = (8, [*checkpoint("multi-rank"), *args])
for index, objectives in enumerate(OBJECTIVES):
    args = checkpoint(f"refused-{index}")
    CASES[f"refused-{index}-first"] = (4, [*args, "--generations", "5"])
    CASES[f"refused-{index}-second"] = (4, [*args, "--generations", "10", "--objectives", objectives])
for ranks in (1, 4):
    CASES[f"wrong-count-{ranks}"] = (
        ranks,
        [*checkpoint(f"wrong-count-{ranks}"), "--wrong-count", "--generations", "3"],
    )


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Cases:
    """Every case above, in one launch per rank count (3 launches instead of 27)."""
    return Cases("multi_objective_run.py", CASES, tmp_path_factory.mktemp("multi_objective"), timeout=120)


def run(cases: Cases, name: str) -> dict:
    out = cases(name)
    assert out.returncode == 0, f"exit code {out.returncode}; output:\n{out.stdout[-8000:]}"
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    assert result.get("problems", []) == [], result
    return result


@pytest.mark.parametrize("ranks", [1, 4, 8])
def test_fronts_are_the_same_on_every_worker(cases, ranks):
    result = run(cases, f"fronts-{ranks}")
    assert result["evaluations"] == 20 * ranks
    assert result["states"] == {"COMPLETE": 20 * ranks}
    assert result["front"] >= 1


@pytest.mark.parametrize("ranks", [4, 8])
def test_named_objectives_with_a_maximized_one(cases, ranks):
    result = run(cases, f"named-{ranks}")
    assert result["evaluations"] == 15 * ranks


@pytest.mark.parametrize(("ranks", "pollination"), ISLANDS)
def test_islands_exchange_by_pareto_rank(cases, ranks, pollination):
    result = run(cases, f"islands-{ranks}-{pollination}")
    assert result["evaluations"] == 20 * ranks


def test_multi_rank_workers(cases):
    result = run(cases, "multi-rank")
    assert result["evaluations"] == 15 * 4


@pytest.mark.parametrize("ranks", [1, 4, 8])
def test_resume_continues_the_search(cases, ranks):
    first = run(cases, f"resume-{ranks}-first")
    second = run(cases, f"resume-{ranks}-second")
    assert first["evaluations"] == 10 * ranks
    assert second["evaluations"] == 25 * ranks
    # The resumed run's front covers the first one's points: its hypervolume cannot be smaller.
    assert second["hypervolume"] >= first["hypervolume"] - 1e-12


@pytest.mark.parametrize("index", range(len(OBJECTIVES)), ids=OBJECTIVES)
def test_resume_with_other_objectives_is_refused(cases, index):
    run(cases, f"refused-{index}-first")
    refused = run(cases, f"refused-{index}-second")
    assert "made for other objectives" in refused["checkpoint_error"]


@pytest.mark.parametrize("ranks", [1, 4, 8])
def test_failed_evaluations_are_never_on_the_front(cases, ranks):
    # Every third evaluation raises, every fourth returns NaN in one objective (the mixed space).
    raised = run(cases, f"failed-{ranks}-raised")
    assert raised["states"] == {"COMPLETE": 8 * ranks, "FAIL": 4 * ranks}
    nan = run(cases, f"failed-{ranks}-nan")
    assert nan["states"] == {"COMPLETE": 9 * ranks, "FAIL": 3 * ranks}


@pytest.mark.parametrize("ranks", [1, 4])
def test_a_wrong_number_of_objectives_fails_each_evaluation_with_a_message(cases, ranks):
    result = run(cases, f"wrong-count-{ranks}")
    assert "every evaluation of the run failed" in result["run_failed"]
    assert result["states"] == ["FAIL"]
    assert result["reasons"] == [
        "ValueError: loss_fn returned 3 objective value(s); the run has 2 objectives "
        "['values_0', 'values_1'] (the objectives argument)"
    ]
