"""Bounded memory: a worker past its memory limit releases what breeding no longer needs, and nothing changes.

``programs/memory_release.py`` checks collectively what the user sees (the population read back from the
checkpoint, every evaluation once, the same on every worker; the run's counts; ``summarize`` within and
beyond what stays in memory) and what breeding reads (the best individuals in memory are the population's).
The serial test below compares a run that released with one that did not, evaluation by evaluation.
"""

from __future__ import annotations

import random

import pytest
from mpi4py import MPI

from propulate import Propulator
from propulate.population import MEMORY_LIMIT, memory_limit
from propulate.utils import get_default_propagator
from propulate.utils.benchmark_functions import get_function_search_space

from .conftest import Cases

LIMIT = 100
ONE_ISLAND = [1, 2, 4, 8]
RESUMED = [1, 4]

# Every case at PROPULATE_MEMORY_LIMIT=100: one launch per rank count. The run under a larger limit needs
# another environment, so it keeps a launch of its own.
CASES: dict[str, tuple[int, list[str]]] = {}
for ranks in ONE_ISLAND:
    CASES[f"one-island-{ranks}"] = (ranks, ["--generations", str(1200 // ranks), "--expect-release"])
for ranks in RESUMED:
    args = ["--generations", str(600 // ranks), "--resume", "--expect-release"]
    CASES[f"resumed-{ranks}"] = (ranks, args)
args = ["--generations", "300", "--ranks-per-worker", "2", "--resume", "--expect-release"]
CASES["two-rank-workers"] = (4, args)
# An immigrant deactivates the worst individual, which may be one released: nothing is released.
CASES["pollination"] = (4, ["--generations", "150", "--num-islands", "2"])
for case, (ranks, args) in CASES.items():
    CASES[case] = (ranks, ["--limit", str(LIMIT), *args])


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Cases:
    """The cases above, in one launch per rank count (4 launches instead of 8)."""
    env = {"PROPULATE_MEMORY_LIMIT": str(LIMIT)}
    return Cases("memory_release.py", CASES, tmp_path_factory.mktemp("memory"), timeout=180, env=env)


def check(out) -> None:
    assert out.returncode == 0, f"exit code {out.returncode}; output:\n{out.stdout[-8000:]}"
    assert "OK" in out.stdout, out.stdout[-4000:]


@pytest.mark.parametrize("ranks", ONE_ISLAND)
def test_one_island_releases_past_its_limit_and_loses_nothing(cases, ranks):
    check(cases(f"one-island-{ranks}"))


@pytest.mark.parametrize("ranks", RESUMED)
def test_a_resumed_population_above_the_limit_is_released_as_it_is_taken_in(cases, ranks):
    check(cases(f"resumed-{ranks}"))


def test_workers_of_two_ranks_hand_the_released_store_to_their_other_rank(cases):
    check(cases("two-rank-workers"))


def test_islands_with_pollination_keep_everything(cases):
    check(cases("pollination"))


def test_a_run_under_its_limit_releases_nothing(mpirun):
    out = mpirun(
        "memory_release.py",
        2,
        *("--limit", "5000", "--generations", "300"),
        timeout=180,
        env={"PROPULATE_MEMORY_LIMIT": "5000"},
    )
    check(out)


def _serial_run(directory, limit: int, monkeypatch) -> tuple[list[tuple], Propulator]:
    monkeypatch.setenv("PROPULATE_MEMORY_LIMIT", str(limit))
    rastrigin, limits = get_function_search_space("rastrigin")
    rng = random.Random(3)
    propulator = Propulator(
        rastrigin,
        get_default_propagator(8, limits, rng=rng),
        rng,
        generations=900,
        checkpoint_path=directory,
        island_comm=MPI.COMM_SELF,
        propulate_comm=MPI.COMM_SELF,
    )
    propulator.propulate(debug=0)
    rows = sorted((ind.uid, ind.loss, tuple(ind.position)) for ind in propulator.population)
    return rows, propulator


def test_releasing_changes_no_evaluation(tmp_path, monkeypatch):
    kept, whole = _serial_run(tmp_path / "whole", 100_000, monkeypatch)
    released, bounded = _serial_run(tmp_path / "bounded", 50, monkeypatch)
    assert whole._population.released == 0
    assert bounded._population.released >= 500 and len(bounded._population) <= 400
    assert released == kept  # the same 900 evaluations, bred from the same pools
    for top_n in (3, 500):  # within what stays in memory, and beyond it (read from the checkpoint)
        best = [[ind.uid for ind in worker] for worker in bounded.summarize(top_n=top_n, debug=0)]
        assert best == [[ind.uid for ind in worker] for worker in whole.summarize(top_n=top_n, debug=0)]


@pytest.mark.parametrize("value", ["0", "-3", "many", "1.5"])
def test_a_bad_memory_limit_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("PROPULATE_MEMORY_LIMIT", value)
    with pytest.raises(ValueError, match="PROPULATE_MEMORY_LIMIT"):
        memory_limit()


def test_the_memory_limit_defaults_when_unset(monkeypatch):
    monkeypatch.delenv("PROPULATE_MEMORY_LIMIT", raising=False)
    assert memory_limit() == MEMORY_LIMIT
    monkeypatch.setenv("PROPULATE_MEMORY_LIMIT", " 256 ")
    assert memory_limit() == 256


def test_a_checkpoint_moved_away_after_the_run_gives_the_individuals_in_memory(tmp_path, monkeypatch, caplog):
    _, bounded = _serial_run(tmp_path / "bounded", 50, monkeypatch)
    (tmp_path / "bounded").rename(tmp_path / "elsewhere")
    with caplog.at_level("WARNING", logger="propulate"):
        population = bounded.population
    assert len(population) == len(bounded._population) < 900
    assert "released from memory" in caplog.text and f"giving the {len(population)} in memory" in caplog.text
