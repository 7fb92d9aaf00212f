"""Particle swarm propagators under mpiexec: convergence at 4 ranks and an island model with migration.

Each launch runs ``programs/pso_run.py``, which asserts collectively that every individual lies inside the
limits and carries a velocity, that each worker bred exactly ``generations`` individuals, and that the
summary is the same on every rank.

Thresholds, measured on 2 oversubscribed cores (the runs are asynchronous, so not reproducible):

- sphere (2-D), 250 generations: best loss below 5e-16 in 15 runs over all variants; asserted < 1e-6.
- rosenbrock (2-D), 500 generations: below 0.023 in 24 runs (Basic and Constriction); asserted < 0.1.
  At 250 generations the worst of 24 runs was 0.27, too close to 0.1 for a stable test.
- 2 islands of 2 workers, migration probability 0.9, sphere, 250 generations: about 900 immigrants and a
  best loss below 4e-8 in 3 runs; asserted < 1e-3.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.mpi


def result_of(output: str) -> dict:
    line = next(line for line in output.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.mark.parametrize("variant", ["Basic", "VelocityClamping", "Constriction", "Canonical"])
def test_sphere(mpirun, variant, tmp_path):
    args = ["--function", "sphere", "--generations", "250", "--variant", variant]
    result = result_of(mpirun("pso_run.py", 4, *args, "--checkpoint", str(tmp_path), timeout=180).stdout)
    assert result["best"] < 1e-6, result


def test_rosenbrock(mpirun, tmp_path):
    args = ["--function", "rosenbrock", "--generations", "500", "--variant", "Basic"]
    result = result_of(mpirun("pso_run.py", 4, *args, "--checkpoint", str(tmp_path), timeout=240).stdout)
    assert result["best"] < 1e-1, result


@pytest.mark.parametrize(("function", "threshold"), [("sphere", 1e-4), ("rosenbrock", 30.0)])
def test_ten_dimensions(mpirun, tmp_path, function, threshold):
    """4 particles, 1,000 generations each: measured 2e-8 to 9e-7 on sphere and 6 to 10 on rosenbrock.

    The 10-D Rosenbrock valley is hard for a swarm of four (random points start near 1e4); the threshold
    states progress, not the optimum.
    """
    args = ["--function", function, "--dim", "10", "--generations", "1000", "--variant", "Constriction"]
    result = result_of(mpirun("pso_run.py", 4, *args, "--checkpoint", str(tmp_path), timeout=240).stdout)
    assert result["best"] < threshold, result


def test_two_islands_with_migration(mpirun, tmp_path):
    # The propagators are built with the world rank; the loop binds them to the island rank (defect 5).
    args = [
        "--function",
        "sphere",
        "--generations",
        "250",
        "--num-islands",
        "2",
        "--migration-probability",
        "0.9",
    ]
    result = result_of(mpirun("pso_run.py", 4, *args, "--checkpoint", str(tmp_path), timeout=180).stdout)
    assert result["immigrants"] > 0, "no migration happened at probability 0.9"
    assert result["best"] < 1e-3, result
