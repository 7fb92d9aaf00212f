"""Minimize a 10-D benchmark with asynchronous CMA-ES on one island of all ranks; print the best loss.

Usage: ``cmaes_run.py --function ellipsoid|rosenbrock --adapter basic|active --generations G``. Checks on
every rank that all individuals lie inside the limits and that the workers agree on the best loss; rank 0
prints ``RESULT {"best": ..., "evaluations": ..., "to_target": ...}``, where ``to_target`` counts the
evaluations, in the order they finished, until the first loss below 1e-8.
"""

from __future__ import annotations

import argparse
import json
import random

import numpy as np
from mpi4py import MPI

from propulate import Propulator
from propulate.propagators.cmaes import ActiveCMA, BasicCMA, CMAPropagator

N_DIMS = 10
world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--function", choices=["ellipsoid", "rosenbrock"], default="ellipsoid")
parser.add_argument("--adapter", choices=["basic", "active"], default="basic")
parser.add_argument("--generations", type=int, default=1500)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--checkpoint", default="")
args = parser.parse_args()


def ellipsoid(params: dict[str, float]) -> float:
    """Ill-conditioned ellipsoid, condition number 1e6: sum_i 10^(6 i / (n - 1)) x_i^2."""
    x = np.array([params[f"x{i}"] for i in range(N_DIMS)])
    return float(np.sum(10.0 ** (6.0 * np.arange(N_DIMS) / (N_DIMS - 1)) * x**2))


def rosenbrock(params: dict[str, float]) -> float:
    """Rosenbrock's valley: sum_i 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2, minimum 0 at (1, ..., 1)."""
    x = np.array([params[f"x{i}"] for i in range(N_DIMS)])
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))


function, bound = {"ellipsoid": (ellipsoid, 5.12), "rosenbrock": (rosenbrock, 2.048)}[args.function]
limits = {f"x{i}": (-bound, bound) for i in range(N_DIMS)}
rng = random.Random(args.seed + world.rank)
adapter = ActiveCMA() if args.adapter == "active" else BasicCMA()
propagator = CMAPropagator(adapter, limits, rng=rng)
propulator = Propulator(
    function,
    propagator,
    rng=rng,
    island_comm=world,
    generations=args.generations,
    checkpoint_path=args.checkpoint or f"/tmp/propulate-cmaes-{world.size}",
)
propulator.propulate(debug=0)

population = propulator.population
for ind in population:
    assert all(-bound <= ind[name] <= bound for name in limits), ind
best = min(ind.loss for ind in population)
# Evaluations (in the order they finished) until the first loss below 1e-8.
by_time = sorted(population, key=lambda ind: ind.evaltime)
to_target = next((i + 1 for i, ind in enumerate(by_time) if ind.loss < 1e-8), None)
assert world.allreduce(best, op=MPI.MIN) == best, "workers disagree on the best loss"
if world.rank == 0:
    print(
        "RESULT " + json.dumps({"best": best, "evaluations": len(population), "to_target": to_target}),
        flush=True,
    )
