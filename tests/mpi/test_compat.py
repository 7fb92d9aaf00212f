"""Propulate 1.2.2 scripts under mpiexec: the checkpoint at construction, ``_`` entries that travel.

Each launch runs ``programs/compat_run.py``, which checks collectively on every rank (see its docstring).
"""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_propulator_built_on_a_checkpoint_has_its_population(mpirun, ranks, tmp_path):
    out = mpirun("compat_run.py", ranks, "--direct", "--checkpoint", str(tmp_path), timeout=180).stdout
    assert "OK" in out


@pytest.mark.parametrize("ranks", [4, 8])
@pytest.mark.parametrize("pollination", [False, True], ids=["migrator", "pollinator"])
def test_islands_built_on_a_checkpoint_have_their_populations(mpirun, ranks, pollination, tmp_path):
    args = ["--num-islands", "2", *(["--pollination"] if pollination else [])]
    out = mpirun("compat_run.py", ranks, *args, "--checkpoint", str(tmp_path), timeout=180).stdout
    assert "OK" in out


@pytest.mark.parametrize("ranks", [2, 8])
def test_sub_ranks_of_multi_rank_workers_have_the_population_at_construction(mpirun, ranks, tmp_path):
    args = ["--ranks-per-worker", "2", "--num-islands", str(ranks // 4 or 1)]
    out = mpirun("compat_run.py", ranks, *args, "--checkpoint", str(tmp_path), timeout=180).stdout
    assert "OK" in out


@pytest.mark.parametrize("ranks", [1, 2])
def test_more_islands_than_workers_run_as_in_1_2_2(mpirun, ranks, tmp_path):
    # A script written for a cluster (a tutorial's default of 2 islands and a topology made for them) on
    # fewer workers than islands.
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
