"""ParallelNelderMead under Propulator on 4 ranks: best loss below thresholds measured on this machine.

Measured (4 ranks, seeds fixed in the program): sphere 2-D, 100 generations: 3.5e-18; rosenbrock 2-D,
300 generations: 1.6e-14; sphere 10-D, 500 generations: 3.3; rosenbrock 10-D, 500 generations: 10.0.
Asynchrony makes runs differ slightly, so the thresholds leave a wide margin.
"""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize(
    ("function", "generations", "threshold"),
    [("sphere", 100, 1e-8), ("rosenbrock", 300, 1e-4), ("sphere10", 500, 20.0), ("rosenbrock10", 500, 100.0)],
)
def test_nm_converges(mpirun, function, generations, threshold):
    out = mpirun("nm_run.py", 4, "--function", function, "--generations", str(generations), timeout=60)
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    assert result["best"] < threshold, result
