"""Propulate 1.2.2 scripts under mpiexec: the checkpoint at construction, ``_`` entries that travel.

Each launch runs ``programs/compat_run.py``, which checks collectively on every rank (see its docstring).
"""

from __future__ import annotations

import json

import pytest

from .conftest import Cases

ISLANDS = [(ranks, exchange) for ranks in (4, 8) for exchange in ("migrator", "pollinator")]

CASES: dict[str, tuple[int, list[str]]] = {}
for ranks in (1, 2, 4, 8):
    CASES[f"direct-{ranks}"] = (ranks, ["--direct", "--checkpoint", f"{{tmp}}/direct-{ranks}"])
for ranks, exchange in ISLANDS:
    name = f"islands-{ranks}-{exchange}"
    args = ["--num-islands", "2", *(["--pollination"] if exchange == "pollinator" else [])]
    CASES[name] = (ranks, [*args, "--checkpoint", f"{{tmp}}/{name}"])
for ranks in (2, 8):
    args = ["--ranks-per-worker", "2", "--num-islands", str(ranks // 4 or 1)]
    CASES[f"sub-ranks-{ranks}"] = (ranks, [*args, "--checkpoint", f"{{tmp}}/sub-ranks-{ranks}"])


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Cases:
    """The cases above, in one launch per rank count (4 launches instead of 10)."""
    return Cases("compat_run.py", CASES, tmp_path_factory.mktemp("compat"), timeout=180)


def verdict_of(cases: Cases, name: str) -> str:
    out = cases(name)
    assert out.returncode == 0, f"exit code {out.returncode}; output:\n{out.stdout[-8000:]}"
    return out.stdout


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_propulator_built_on_a_checkpoint_has_its_population(cases, ranks):
    assert "OK" in verdict_of(cases, f"direct-{ranks}")


@pytest.mark.parametrize(("ranks", "exchange"), ISLANDS)
def test_islands_built_on_a_checkpoint_have_their_populations(cases, ranks, exchange):
    assert "OK" in verdict_of(cases, f"islands-{ranks}-{exchange}")


@pytest.mark.parametrize("ranks", [2, 8])
def test_sub_ranks_of_multi_rank_workers_have_the_population_at_construction(cases, ranks):
    assert "OK" in verdict_of(cases, f"sub-ranks-{ranks}")


@pytest.mark.parametrize("ranks", [1, 2])
def test_more_islands_than_workers_run_as_in_1_2_2(mpirun, ranks, tmp_path):
    # A script written for a cluster (a tutorial's default of 2 islands and a topology made for them) on
    # fewer workers than islands. A launch of its own: the warning is a log line, on standard error, which
    # is not ordered with the CASE lines of a shared launch.
    args = ["--num-islands", "3", "--topology", "--checkpoint", str(tmp_path)]
    out = mpirun("compat_run.py", ranks, *args, timeout=180).stdout
    assert "OK" in out and f"num_islands=3, but there are only {ranks} worker(s)" in out


def _result(output: str) -> dict:
    line = next(line for line in output.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.mark.parametrize(
    ("ranks", "mode", "ranks_per_worker", "failing"),
    [
        (2, "factory", 1, 1),
        (4, "bind", 1, 1),
        (8, "observe", 1, 1),
        (4, "merge", 1, 1),
        (4, "factory", 2, 1),  # a worker's second rank
        (8, "bind", 2, 2),  # the root of a worker of two ranks
    ],
)
def test_a_rank_failing_while_the_checkpoint_is_read_fails_every_rank(
    mpirun, tmp_path, ranks, mode, ranks_per_worker, failing
):
    # Building reads the checkpoint collectively and runs user hooks; one rank's exception must not leave
    # the others waiting in a collective.
    args = ["--mode", mode, "--ranks-per-worker", str(ranks_per_worker), "--failing-rank", str(failing)]
    result = _result(
        mpirun("build_failure.py", ranks, *args, "--checkpoint", str(tmp_path), timeout=120).stdout
    )
    outcomes = result["outcomes"]
    assert outcomes[failing].startswith("ValueError: injected failure"), outcomes
    for rank, outcome in enumerate(outcomes):
        if rank != failing:
            assert outcome.startswith(f"WorkerFailedError: rank {failing} on "), outcome
            assert "building the Propulator" in outcome and "injected failure" in outcome
    assert max(result["seconds"]) < 30
