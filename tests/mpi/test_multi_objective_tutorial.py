"""The multi-objective tutorial (tutorials/mnist_multi_objective.py) runs under mpiexec, prints a true front.

A tiny search (a few networks per worker, four training batches, one validation batch) on the bundled MNIST
slice. The printed table is checked against the checkpoint: every row is an evaluation there, no evaluation
of the run dominates it, and each size is the parameter count its configuration implies.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.torch

GENERATIONS = 3
#: The table the first rank prints: a header with the count, then one row per network of the front.
HEADER = re.compile(r"^Pareto front: (\d+) network\(s\), smallest first$", re.MULTILINE)
ROW = re.compile(r"^ *(\d+\.\d{4}) +(\d+)  (\{.*\})$", re.MULTILINE)


def expected_parameters(config: dict) -> int:
    """Weights and biases of the perceptron: ``r * r`` inputs, ``d`` hidden layers of ``w``, 10 outputs."""
    inputs, width, layers = config["resolution"] ** 2, config["width"], config["layers"]
    return inputs * width + width + (layers - 1) * (width * width + width) + width * 10 + 10


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(x < y for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("ranks", [2, 4])
def test_multi_objective_tutorial(mpirun, tmp_path: Path, ranks: int) -> None:
    pytest.importorskip("torchvision")
    pytest.importorskip("pandas")
    from propulate.report import load_dataframe

    checkpoint = tmp_path / "checkpoint"
    out = mpirun(
        REPO / "tutorials" / "mnist_multi_objective.py",
        ranks,
        *("--generations", str(GENERATIONS), "--pop-size", "4", "--epochs", "1"),
        *("--train-batches", "4", "--val-batches", "1", "--verbosity", "0", "--checkpoint", str(checkpoint)),
        timeout=120,
        env={"PROPULATE_DATA_CACHE": str(tmp_path / "cache")},
        cwd=REPO,
    ).stdout

    header = HEADER.findall(out)
    rows = [(float(e), int(p), ast.literal_eval(c)) for e, p, c in ROW.findall(out)]
    assert len(header) == 1 and int(header[0]) == len(rows) >= 1, out[-3000:]
    assert [p for _, p, _ in rows] == sorted(p for _, p, _ in rows), out[-3000:]
    points = [(error, float(size)) for error, size, _ in rows]
    assert not [(a, b) for a in points for b in points if dominates(a, b)], out[-3000:]
    for _, size, config in rows:
        assert size == expected_parameters(config), config

    # One row per evaluation, all completed, sizes as the configurations imply.
    frame = load_dataframe(checkpoint)
    assert len(frame) == GENERATIONS * ranks
    assert {"values_0", "values_1"} <= set(frame.columns) and "value" not in frame.columns
    assert set(frame["state"]) == {"COMPLETE"}
    for _, row in frame.iterrows():
        config = {name: row[f"params_{name}"] for name in ("resolution", "layers", "width")}
        assert row["values_1"] == expected_parameters(config)
        assert 0.0 <= row["values_0"] <= 1.0

    # Each printed network is an evaluation of the run that none of the run's evaluations dominates.
    evaluated = [(float(e), float(p)) for e, p in zip(frame["values_0"], frame["values_1"], strict=True)]
    for error, size, config in rows:
        same = frame[
            (frame["params_layers"] == config["layers"])
            & (frame["params_width"] == config["width"])
            & (frame["params_activation"].astype(str) == config["activation"])
            & (frame["params_lr"] == config["lr"])
        ]
        assert len(same) >= 1, config
        assert (same["values_0"].round(4) == error).any() and (same["values_1"] == size).any(), config
        assert not [point for point in evaluated if dominates(point, (error, float(size)))], config

    # The report command reads the checkpoint without MPI and shows the front.
    report = subprocess.run(
        [sys.executable, "-m", "propulate", "report", str(checkpoint)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert "Pareto front" in report.stdout, report.stdout[-3000:]
