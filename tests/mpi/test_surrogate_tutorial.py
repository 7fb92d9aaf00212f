"""The early-stopping tutorial (tutorials/surrogate_example.py) runs under mpiexec and prunes individuals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from propulate import Status, load_checkpoint

from .conftest import REPO

pytestmark = pytest.mark.torch

EPOCHS = 3
GENERATIONS = 4


@pytest.mark.parametrize(("ranks", "ranks_per_worker"), [(2, 1), (4, 2)])
def test_surrogate_tutorial(mpirun, tmp_path: Path, ranks: int, ranks_per_worker: int) -> None:
    """A tiny search on the bundled slice; margin 1 cancels every run that falls behind the best one."""
    pytest.importorskip("torchvision")
    checkpoint = tmp_path / "checkpoint"
    result = mpirun(
        REPO / "tutorials" / "surrogate_example.py",
        ranks,
        *("--ranks-per-worker", str(ranks_per_worker), "--surrogate", "static", "--margin", "1.0"),
        *("--epochs", str(EPOCHS), "--generations", str(GENERATIONS), "--train-batches", "4"),
        *("--val-batches", "1", "--verbosity", "0", "--checkpoint", str(checkpoint)),
        timeout=150,
        env={"PROPULATE_DATA_CACHE": str(tmp_path / "cache")},
        cwd=REPO,
    )
    out = result.stdout
    individuals = ranks // ranks_per_worker * GENERATIONS
    search = re.search(
        r"Search with the static surrogate: (\d+) individuals evaluated, (\d+) completed, (\d+) pruned, "
        r"(\d+) failed",
        out,
    )
    epochs = re.search(r"Epochs trained: (\d+) of (\d+) \((\d+)% saved by early stopping\)", out)
    assert search is not None and epochs is not None, out[-3000:]
    evaluated, completed, pruned, failed = (int(x) for x in search.groups())
    trained, budget, _ = (int(x) for x in epochs.groups())
    assert (evaluated, failed, budget) == (individuals, 0, individuals * EPOCHS), out[-3000:]
    assert completed + pruned == evaluated and completed >= 1 and pruned >= 1, out[-3000:]
    # Every completed run trained all epochs, every pruned one at least one.
    assert completed * EPOCHS + pruned <= trained <= budget, out[-3000:]
    best = re.findall(r"^\d\. validation loss (\d+\.\d+), accuracy \d+\.\d+%", out, flags=re.MULTILINE)
    assert 1 <= len(best) <= 3 and [float(x) for x in best] == sorted(float(x) for x in best), out[-3000:]

    # The checkpoint tells the same story, one individual at a time.
    loaded = load_checkpoint(checkpoint)
    assert loaded is not None
    population = [ind for ind in loaded.population if ind.migration_steps == 0]
    assert len(population) == individuals
    assert sum(ind.steps for ind in population) == trained
    for ind in population:
        if ind.status is Status.COMPLETED:
            assert ind.steps == EPOCHS
        else:
            assert ind.status is Status.PRUNED and 1 <= ind.steps <= EPOCHS
        assert 0.0 <= ind.metrics["accuracy"] <= 1.0
    assert (checkpoint / "surrogate_example.log").is_file()


def test_surrogate_tutorial_with_successive_halving(mpirun, tmp_path: Path) -> None:
    """``--surrogate asha --eta 2``: runs stop only at a rung (epochs 1 and 2 of 3), the counts add up."""
    pytest.importorskip("torchvision")
    checkpoint = tmp_path / "checkpoint"
    result = mpirun(
        REPO / "tutorials" / "surrogate_example.py",
        2,
        *("--surrogate", "asha", "--eta", "2", "--epochs", str(EPOCHS), "--generations", str(GENERATIONS)),
        *("--train-batches", "4", "--val-batches", "1", "--verbosity", "0", "--checkpoint", str(checkpoint)),
        timeout=150,
        env={"PROPULATE_DATA_CACHE": str(tmp_path / "cache")},
        cwd=REPO,
    )
    out = result.stdout
    search = re.search(
        r"Search with the asha surrogate: (\d+) individuals evaluated, (\d+) completed, (\d+) pruned, "
        r"(\d+) failed",
        out,
    )
    assert search is not None, out[-3000:]
    evaluated, completed, pruned, failed = (int(x) for x in search.groups())
    assert (evaluated, failed) == (2 * GENERATIONS, 0) and completed + pruned == evaluated, out[-3000:]
    loaded = load_checkpoint(checkpoint)
    assert loaded is not None
    for ind in (ind for ind in loaded.population if ind.migration_steps == 0):
        # Rungs of r_min 1 and eta 2 below the maximum resource of 3 epochs: 1 and 2.
        assert ind.steps == EPOCHS if ind.status is Status.COMPLETED else ind.steps in (1, 2), ind
