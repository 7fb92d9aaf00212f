"""Asynchronous CMA-ES under mpiexec: four workers of one island solve 10-D benchmarks to within 1e-8.

Each launch runs ``programs/cmaes_run.py`` for 3000 generations per worker (12000 evaluations). Measured on
this 2-core machine at 4 ranks (the run is asynchronous, so the numbers vary from run to run): evaluations
until the best loss fell below 1e-8 were 6176/6045 (ellipsoid, basic), 5928/5728 (ellipsoid, active),
5835 to 8118 (Rosenbrock, basic) and 7532 to 8359 (Rosenbrock, active); a launch of 12000 evaluations takes
25-30 s.

The 10-D Rosenbrock function also has a local minimum, ``ROSENBROCK_LOCAL_MINIMUM`` near (-1, 1, ..., 1)
(Newton's method from that point, ``scipy.optimize.minimize(method="trust-exact")``). With the default
population CMA-ES converges to it now and then: in 2 of 12 launches with seed 0 (one per adapter), each
time to within 2e-15. Which minimum a launch finds is chance, so the test asks for either one to within
1e-8: that is what shows the adaptation at work. Asking for the global one, with a second seed when the
first launch ended in the local one, would fail about once in 36 tests (1/6 squared).
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.mpi

GENERATIONS = 3000  # per worker
TARGET = 1e-8
ROSENBROCK_LOCAL_MINIMUM = 3.98657911234714


def best_loss(mpirun, tmp_path, function: str, adapter: str) -> dict:
    args = ["--function", function, "--adapter", adapter, "--generations", str(GENERATIONS)]
    args += ["--seed", "0", "--checkpoint", str(tmp_path)]
    out = mpirun("cmaes_run.py", 4, *args, timeout=90).stdout
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.mark.parametrize("adapter", ["basic", "active"])
@pytest.mark.parametrize("function", ["ellipsoid", "rosenbrock"])
def test_cmaes_reaches_target(mpirun, tmp_path, function, adapter):
    result = best_loss(mpirun, tmp_path, function, adapter)
    assert result["evaluations"] == 4 * GENERATIONS
    minima = [0.0, ROSENBROCK_LOCAL_MINIMUM] if function == "rosenbrock" else [0.0]
    assert min(abs(result["best"] - minimum) for minimum in minima) < TARGET, result
