"""Asynchronous CMA-ES under mpiexec: an island of 1, 4 or 8 workers minimizes 10-D benchmarks.

Each launch runs ``programs/cmaes_run.py``: 6,000 evaluations in all, each sleeping a lognormal time of
median 2 ms (so that an evaluation takes longer than a message, as in real use; the loss itself costs
nothing). The program asserts on every rank that the individuals lie inside the limits, that the workers
agree on the best loss and that every worker observed every evaluation; it reports the best loss, the
updates of each worker's copy of the strategy and how far the copies ended apart.

Thresholds come from launches on this 2-core machine (8 ranks oversubscribe it), seed 0, repeated
``LAUNCHES`` times per case (the runs are asynchronous, so they differ from launch to launch); see
``MEASURED``. With one rank the run is the serial strategy and deterministic: its best loss is compared with
that of the serial strategy computed here, on the same machine (the rounding of the BLAS kernel, which differs
from CPU to CPU, decides the last digits and, through them, the path).
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from propulate.individual import Status
from propulate.propagators.cmaes import ActiveCMA, CMAPropagator

EVALUATIONS = 6000
SLEEP = "0.002"

#: Launches per case behind the thresholds, and what they gave: best loss (min / median / max) and the
#: largest spread of the copies' means (in step sizes) and ratio of their step sizes (with the step size
#: predicted for the end of an evaluation; see propulate.propagators.cmaes).
LAUNCHES = 10
MEASURED = {
    ("ellipsoid", 4): "2.4e-19 / 5.0e-16 / 1.2e-14; spread 0.02, step sizes 1.51",
    ("ellipsoid", 8): "1.2e-12 / 1.6e-9 / 1.7e-8; spread 0.19, step sizes 1.48",
    ("rosenbrock", 4): "5.6e-15 / 9.5e-10 / 5.3e-3; spread 0.23, step sizes 1.40",
    ("rosenbrock", 8): "8.0e-8 / 4.3e-5 / 3.99; spread 0.24, step sizes 1.44",
}
#: Best loss each case must reach: a decade or more above the worst launch measured on the ellipsoid. On
#: Rosenbrock a launch may settle in the local minimum (3.99; one of the ten at 8 ranks did, as synchronous
#: CMA-ES does in some runs): it must be at or below it; points drawn at random in the box score hundreds
#: to thousands.
THRESHOLDS = {
    ("ellipsoid", 4): 1e-10,
    ("ellipsoid", 8): 1e-6,
    ("rosenbrock", 4): 4.5,
    ("rosenbrock", 8): 4.5,
}


def run(mpirun, tmp_path, ranks: int, function: str, adapter: str = "active") -> dict:
    args = ["--function", function, "--adapter", adapter, "--generations", str(EVALUATIONS // ranks)]
    args += ["--seed", "0", "--sleep", SLEEP, "--checkpoint", str(tmp_path)]
    out = mpirun("cmaes_run.py", ranks, *args, timeout=60).stdout
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def serial_best(seed: int) -> float:
    """The best loss of the serial strategy on the ellipsoid of ``cmaes_run.py`` over ``EVALUATIONS``, asked
    and told on this process with the generator that rank 0 of a launch with ``--seed seed`` builds."""
    limits = {f"x{i}": (-5.12, 5.12) for i in range(10)}
    propagator = CMAPropagator(ActiveCMA(), limits, rng=random.Random(seed * 1000))
    best = math.inf
    for uid in range(EVALUATIONS):
        ind = propagator([])[0]
        x = ind.position
        ind.loss = float(np.sum(10.0 ** (6.0 * np.arange(10) / 9) * x**2))
        ind.status, ind.uid, ind.evaltime = Status.COMPLETED, uid, float(uid)
        propagator.observe(ind)
        best = min(best, ind.loss)
    return best


def test_one_rank_is_the_serial_strategy(mpirun, tmp_path):
    result = run(mpirun, tmp_path, 1, "ellipsoid")
    assert result["evaluations"] == EVALUATIONS and result["updates"] == [EVALUATIONS // 10]
    assert result["best"] == serial_best(0), result
    # It reaches 1e-8, which the serial strategy does after 3,600 to 4,760 evaluations (seeds 0-9 under four
    # BLAS kernels); with an unadapted covariance matrix it is still above 1 after 100,000.
    assert result["to_target"] is not None, result


@pytest.mark.parametrize("ranks", [4, 8])
@pytest.mark.parametrize("function", ["ellipsoid", "rosenbrock"])
def test_an_island_learns_one_strategy(mpirun, tmp_path, function, ranks):
    def converged(result: dict) -> bool:
        close = result["spread"] < 1.0 and result["sigma_ratio"] < 2.0
        return close and result["best"] < THRESHOLDS[(function, ranks)]

    result = run(mpirun, tmp_path / "first", ranks, function)
    assert result["evaluations"] == EVALUATIONS
    lambda_ = {4: 10, 8: 12}[ranks]  # max(4 + floor(3 ln 10), ceil(4 sqrt(ranks)))
    assert result["lambda"] == lambda_
    # Every copy learned every result: evaluations / lambda updates each.
    assert result["updates"] == [EVALUATIONS // lambda_] * ranks, result
    if not converged(result):
        # The thresholds come from launches on an idle machine; the whole test suite's load changes the
        # order in which results arrive (3 launches of 36 in CI missed them). One more launch must make it.
        result = run(mpirun, tmp_path / "second", ranks, function)
        assert result["updates"] == [EVALUATIONS // lambda_] * ranks, result
    assert result["spread"] < 1.0 and result["sigma_ratio"] < 2.0, result
    assert result["best"] < THRESHOLDS[(function, ranks)], result
