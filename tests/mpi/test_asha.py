"""Successive halving under mpiexec: shared rung records, decisions the island agrees on, resume, islands.

The program (programs/asha_run.py) trains known synthetic learning curves with an all-reduce over the worker
in every epoch, so a worker whose ranks disagreed about stopping would hang and the launch would time out.
With several islands each keeps rung records of its own, to which immigrants bring the records of their
evaluations on their home island.
"""

from __future__ import annotations

import json

import pytest

from .conftest import Cases

GENERATIONS = 10
SINGLE = [(1, 1, 1), (2, 1, 1), (4, 1, 1), (4, 2, 1), (4, 1, 3), (4, 2, 2)]
ISLANDS = [(2, 1), (4, 1), (4, 2)]
# Exchange between islands: none, migration or pollination, at every generation of a one-worker island.
EXCHANGES = {
    "isolated": (),
    "migration": ("--migration-prob", "1"),
    "pollination": ("--migration-prob", "1", "--pollination"),
}


def checkpoint(name: str) -> list[str]:
    return ["--checkpoint", f"{{tmp}}/{name}"]


CASES: dict[str, tuple[int, list[str]]] = {}
for n, ranks_per_worker, brackets in SINGLE:
    name = f"single-{n}-{ranks_per_worker}-{brackets}"
    args = ["--ranks-per-worker", str(ranks_per_worker), "--brackets", str(brackets)]
    CASES[name] = (n, [*checkpoint(name), *args])
for ranks_per_worker in (1, 2):
    # The three runs of one resume test, in order, on one checkpoint.
    args = [*checkpoint(f"resume-{ranks_per_worker}"), "--ranks-per-worker", str(ranks_per_worker)]
    CASES[f"resume-{ranks_per_worker}-first"] = (4, args)
    CASES[f"resume-{ranks_per_worker}-again"] = (4, args)
    CASES[f"resume-{ranks_per_worker}-longer"] = (4, [*args, "--generations", "14"])
for n, ranks_per_worker in ISLANDS:
    for exchange, extra in EXCHANGES.items():
        name = f"islands-{n}-{ranks_per_worker}-{exchange}"
        args = ["--num-islands", "2", "--ranks-per-worker", str(ranks_per_worker), *extra]
        CASES[name] = (n, [*checkpoint(name), *args])


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Cases:
    """Every case above, in one launch per rank count (3 launches instead of 21)."""
    return Cases("asha_run.py", CASES, tmp_path_factory.mktemp("asha"), timeout=120)


def run(cases: Cases, name: str) -> dict:
    out = cases(name)
    assert out.returncode == 0, f"exit code {out.returncode}; output:\n{out.stdout[-8000:]}"
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def check_island(result, workers):
    assert result["workers"] == workers
    assert result["problems"] == []
    assert result["records_equal"], "workers of the island hold different rung records"
    assert result["rebuilt_equal"], "records differ from those rebuilt from the individuals' data"
    assert result["decisions_agree"], "workers see different outcomes for the same individual"


@pytest.mark.parametrize(("n", "ranks_per_worker", "brackets"), SINGLE)
def test_rung_decisions_agree_across_the_island(cases, n, ranks_per_worker, brackets):
    result = run(cases, f"single-{n}-{ranks_per_worker}-{brackets}")
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
def test_rung_records_are_rebuilt_on_resume(cases, ranks_per_worker):
    first = run(cases, f"resume-{ranks_per_worker}-first")
    workers = 4 // ranks_per_worker
    check_island(first, workers)
    # Nothing left to evaluate: the records come from the checkpoint alone.
    again = run(cases, f"resume-{ranks_per_worker}-again")
    check_island(again, workers)
    assert again["records_digest"] == first["records_digest"]
    assert again["status"] == first["status"]
    # A longer run decides from the rebuilt records and goes on sharing.
    longer = run(cases, f"resume-{ranks_per_worker}-longer")
    check_island(longer, workers)
    assert longer["logged_decisions_consistent"]
    assert longer["evaluations"] == workers * 14
    assert longer["status"]["PRUNED"] >= first["status"]["PRUNED"]


@pytest.mark.parametrize("exchange", list(EXCHANGES))
@pytest.mark.parametrize(("n", "ranks_per_worker"), ISLANDS)
def test_each_island_keeps_the_records_of_its_population(cases, n, ranks_per_worker, exchange):
    result = run(cases, f"islands-{n}-{ranks_per_worker}-{exchange}")
    workers = n // ranks_per_worker
    assert result["workers"] == workers
    assert result["problems"] == []
    assert result["same_epochs_in_worker"], "ranks of one worker left an evaluation at different epochs"
    assert result["epochs_counted"]
    assert [island["island"] for island in result["islands"]] == [0, 1]
    for island in result["islands"]:
        assert island["workers"] == workers // 2, island
        assert island["records_equal"], f"workers of island {island['island']} hold different rung records"
        assert island["rebuilt_equal"], f"island {island['island']}: records differ from its population's"
        assert island["decisions_agree"], f"island {island['island']}: workers see an individual differently"
        assert island["logged_decisions_consistent"], island
        assert island["decisions"] > 0, island
        status = island["status"]
        assert island["evaluations"] == workers // 2 * GENERATIONS, island
        assert status["PRUNED"] + status["COMPLETED"] == island["evaluations"], island
        assert status["PRUNED"] > 0, island
    if exchange == "isolated":
        for island in result["islands"]:
            assert island["immigrants"] == 0, island
            assert island["foreign_records"] == 0, island
            # No immigrant has brought a record yet when an island's first run is judged: it completes.
            assert island["status"]["COMPLETED"] > 0, island
        assert result["records_disjoint"]
    else:
        for island in result["islands"]:
            assert island["immigrants"] > 0, island
        # The first emigrant of the run was evaluated on its home island: the island it reaches records it.
        assert sum(island["foreign_records"] for island in result["islands"]) > 0, result["islands"]
        assert not result["records_disjoint"]
        assert result["immigrants_carry_data"], "an immigrant's data differs from its home island's"
        assert result["immigrants_without_data"] == 0  # bracket 0: every run reaches its first rung
        # No record exists when the run's first evaluation is judged: it completes.
        assert result["status"]["COMPLETED"] > 0, result["status"]
