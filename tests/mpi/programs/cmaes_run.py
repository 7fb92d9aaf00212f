"""Minimize a 10-D benchmark with asynchronous CMA-ES on one island of all ranks; print what it learned.

Usage: ``cmaes_run.py --function sphere|ellipsoid|rosenbrock --adapter basic|active --generations G
[--sleep S] [--seed N] [--checkpoint DIR]``. ``--sleep`` makes each evaluation sleep a lognormal time of
median ``S`` seconds (log-standard deviation 0.5), so that evaluations take longer than messages, as in real
use; without it the loss costs nothing.

Checks on every rank that all individuals lie inside the limits, that the workers agree on the best loss and
that every worker's propagator observed every evaluation. Then every worker learns whatever it still holds
back, so that all have learned the same results, and rank 0 prints ``RESULT {...}`` with: ``best`` (best
loss), ``evaluations``, ``to_target`` (evaluations, in the order they ended, until the first loss below
1e-8), ``lambda``, ``updates`` (``par.generation`` of each worker), ``spread`` (largest Mahalanobis distance
between a worker's mean and worker 0's, in units of worker 0's step size), ``sigma_ratio`` (largest over
smallest step size) and ``seconds`` (slowest worker's time in ``propulate()``).
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
from mpi4py import MPI

from propulate import Propulator
from propulate.propagators.cmaes import ActiveCMA, BasicCMA, CMAPropagator

N_DIMS = 10
world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--function", choices=["sphere", "ellipsoid", "rosenbrock"], default="ellipsoid")
parser.add_argument("--adapter", choices=["basic", "active"], default="active")
parser.add_argument("--generations", type=int, default=1500)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--checkpoint", default="")
args = parser.parse_args()


def sphere(x: np.ndarray) -> float:
    return float(np.sum(x**2))


def ellipsoid(x: np.ndarray) -> float:
    """Ill-conditioned ellipsoid, condition number 1e6: sum_i 10^(6 i / (n - 1)) x_i^2."""
    return float(np.sum(10.0 ** (6.0 * np.arange(N_DIMS) / (N_DIMS - 1)) * x**2))


def rosenbrock(x: np.ndarray) -> float:
    """Rosenbrock's valley: sum_i 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2, minimum 0 at (1, ..., 1)."""
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))


function, bound = {
    "sphere": (sphere, 5.12),
    "ellipsoid": (ellipsoid, 5.12),
    "rosenbrock": (rosenbrock, 2.048),
}[args.function]
limits = {f"x{i}": (-bound, bound) for i in range(N_DIMS)}
sleep_rng = np.random.default_rng([args.seed, world.rank])


def loss(params: dict[str, float]) -> float:
    if args.sleep > 0:
        time.sleep(args.sleep * sleep_rng.lognormal(0.0, 0.5))
    return function(np.array([params[f"x{i}"] for i in range(N_DIMS)]))


rng = random.Random(args.seed * 1000 + world.rank)
adapter = ActiveCMA() if args.adapter == "active" else BasicCMA()
propagator = CMAPropagator(adapter, limits, rng=rng)
propulator = Propulator(
    loss,
    propagator,
    rng=rng,
    island_comm=world,
    generations=args.generations,
    checkpoint_path=args.checkpoint or f"/tmp/propulate-cmaes-{world.size}",
    resume=False,
)
start = time.perf_counter()
propulator.propulate(debug=0)
seconds = world.allreduce(time.perf_counter() - start, op=MPI.MAX)

population = propulator.population
for ind in population:
    assert all(-bound <= ind[name] <= bound for name in limits), ind
best = min(ind.loss for ind in population)
assert world.allreduce(best, op=MPI.MIN) == best, "workers disagree on the best loss"
assert propagator._arrivals == len(population) == args.generations * world.size, (
    "an evaluation was not observed"
)

propagator._learn_pending()  # what the margin held back: every worker has now learned every result
par = propagator.par
means, sigmas = world.allgather(par.mean), world.allgather(par.sigma)
whiten = np.linalg.inv(np.linalg.cholesky(world.bcast(par.C)))
spread = max(float(np.linalg.norm(whiten @ (mean - means[0]))) / sigmas[0] for mean in means)
updates = world.gather(par.generation)
# Evaluations (in the order they finished) until the first loss below 1e-8.
by_time = sorted(population, key=lambda ind: ind.evaltime)
to_target = next((i + 1 for i, ind in enumerate(by_time) if ind.loss < 1e-8), None)
if world.rank == 0:
    result = {
        "best": best,
        "evaluations": len(population),
        "to_target": to_target,
        "lambda": par.lambda_,
        "updates": updates,
        "spread": spread,
        "sigma_ratio": max(sigmas) / min(sigmas),
        "seconds": round(seconds, 2),
    }
    print("RESULT " + json.dumps(result), flush=True)
