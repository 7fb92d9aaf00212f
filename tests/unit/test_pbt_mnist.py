"""``benchmarks/pbt_mnist.py`` without MPI or torch: the epoch budget of a worker and the table.

Every method must train the same number of epochs, so the wrapper around the tutorials' loss functions
ends an individual at its own length and fails one that would train past the worker's budget.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "pbt_mnist", Path(__file__).resolve().parents[2] / "benchmarks" / "pbt_mnist.py"
)
assert spec is not None and spec.loader is not None
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def endless(params, comm=None):
    """A loss function that trains forever, its loss falling by 0.1 per epoch."""
    loss = 1.0
    while True:
        loss -= 0.1
        yield {"loss": loss, "conv_layers": params["conv_layers"]}


def test_an_individual_stops_at_its_length_and_fails_past_the_budget():
    pytest.importorskip("mpi4py")
    trained: list[tuple[float, float]] = []
    loss_fn = bench.counted(endless, budget=5, trained=trained, length=3)
    first = list(loss_fn({"lr": 0.1}))
    assert [round(r["loss"], 1) for r in first] == [0.9, 0.8, 0.7]
    assert first[0]["conv_layers"] == bench.NETWORK["conv_layers"]  # the fixed network is passed on
    second = loss_fn({"lr": 0.1})
    assert [round(next(second)["loss"], 1) for _ in range(2)] == [0.9, 0.8]
    with pytest.raises(bench.BudgetSpentError):
        next(second)
    assert len(trained) == 5
    with pytest.raises(bench.BudgetSpentError):  # a later individual trains nothing
        next(loss_fn({"lr": 0.1}))
    assert len(trained) == 5


def test_without_a_length_the_library_ends_the_individual():
    pytest.importorskip("mpi4py")
    trained: list[tuple[float, float]] = []
    losses = bench.counted(endless, budget=4, trained=trained)({"lr": 0.1})
    assert [round(next(losses)["loss"], 1) for _ in range(4)] == [0.9, 0.8, 0.7, 0.6]
    losses.close()
    assert len(trained) == 4


def test_the_table_gives_medians_and_pbts_p_against_each():
    pytest.importorskip("scipy")
    results = [
        {"method": method, "best": best + shift, "epochs": 32, "at_best": 10}
        for method, shift in (("pbt", 0.0), ("asha", 1.0), ("default", 1.0))
        for best in (0.1, 0.2, 0.3, 0.4, 0.5)
    ]
    lines = bench.table(results).splitlines()
    assert lines[2] == "| pbt | 5 | 0.3000 [0.2000, 0.4000] | 32 [32, 32] | 10 [10, 10] |  |"
    assert lines[3].startswith("| asha | 5 | 1.3000 [1.2000, 1.4000] |") and lines[3].endswith("| 0.008 |")


def test_the_race_counts_the_epochs_until_each_methods_median_best():
    curves = {"pbt": [0.9, 0.5, 0.2, 0.1], "asha": [0.8, 0.4, 0.4, 0.4], "default": [1.0, 0.9, 0.9, 0.9]}
    results = [
        {"method": method, "best": curve[-1], "curve": curve, "epochs": 4, "at_best": 2}
        for method, curve in curves.items()
    ]
    assert bench.epochs_to(curves["pbt"], 0.4) == 3 and bench.epochs_to(curves["default"], 0.4) is None
    lines = bench.race(results).splitlines()
    assert lines[0].startswith("| method | to pbt's median best 0.1000 | to asha's median best 0.4000 |")
    assert lines[2] == "| pbt | 4 [4, 4] (1 of 1) | 3 [3, 3] (1 of 1) | 1 [1, 1] (1 of 1) |"
    assert lines[3] == "| asha | never (0 of 1) | 2 [2, 2] (1 of 1) | 1 [1, 1] (1 of 1) |"
    assert lines[4] == "| default | never (0 of 1) | never (0 of 1) | 2 [2, 2] (1 of 1) |"
