"""Minimize a benchmark function with a particle swarm propagator and report the best loss.

Every worker initializes its particle uniformly until the island holds one individual per worker, then
moves it with the chosen PSO variant. With ``--num-islands`` > 1 individuals migrate between islands; the
propagator is built with the world rank, as Propulate 1.2.2 scripts do, and bound to the island rank by
the loop. Checks collectively that every individual lies inside the limits and that the summary agrees on
every rank; rank 0 prints ``RESULT {"best": ..., ...}``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys

from mpi4py import MPI

from propulate import Islands
from propulate.propagators import Conditional
from propulate.propagators.pso import (
    BasicPSO,
    CanonicalPSO,
    ConstrictionPSO,
    InitUniformPSO,
    StatelessPSO,
    VelocityClampingPSO,
)
from propulate.utils.benchmark_functions import get_function_search_space

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--function", default="sphere")
parser.add_argument("--generations", type=int, default=250)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--migration-probability", type=float, default=0.9)
parser.add_argument(
    "--variant",
    choices=["Basic", "VelocityClamping", "Constriction", "Canonical", "Stateless"],
    default="Basic",
)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--dim", type=int, default=0, help="dimension (default: the function's own)")
parser.add_argument("--checkpoint", default="")
args = parser.parse_args()

function, limits = get_function_search_space(args.function)
if args.dim:
    # The same function in ``--dim`` dimensions (sphere and rosenbrock are defined for any dimension).
    bounds = next(iter(limits.values()))
    limits = {f"x{i}": bounds for i in range(args.dim)}
rng = random.Random(args.seed + world.rank)
if args.variant == "Basic":
    pso = BasicPSO(0.729, 1.49445, 1.49445, world.rank, limits, rng)
elif args.variant == "VelocityClamping":
    pso = VelocityClampingPSO(0.729, 1.49445, 1.49445, world.rank, limits, rng, 0.6)
elif args.variant == "Constriction":
    pso = ConstrictionPSO(2.05, 2.05, world.rank, limits, rng)
elif args.variant == "Canonical":
    pso = CanonicalPSO(2.05, 2.05, world.rank, limits, rng)
else:
    pso = StatelessPSO(0.729, 1.49445, 1.49445, world.rank, limits, rng)
n_workers = world.size // args.num_islands
propagator = Conditional(n_workers, pso, InitUniformPSO(limits, world.rank, rng=rng))

islands = Islands(
    function,
    propagator,
    rng,
    generations=args.generations,
    num_islands=args.num_islands,
    migration_probability=args.migration_probability,
    pollination=False,
    checkpoint_path=args.checkpoint or f"/tmp/propulate-pso-test-{world.size}-{args.num_islands}",
)
islands.propulate(debug=0)
summary = islands.summarize(top_n=1, debug=0)

population = islands.propulator.population
for ind in population:
    for name, (low, high) in limits.items():
        assert low <= ind[name] <= high, (name, ind[name])
    assert ind.velocity is not None, ind
bred_here = [
    ind for ind in population if ind.migration_steps == 0 and ind.rank == islands.layout.island_comm.rank
]
assert len(bred_here) == args.generations, (len(bred_here), args.generations)

summaries = world.allgather([[(ind.loss, tuple(ind.values())) for ind in best] for best in summary])
assert all(s == summaries[0] for s in summaries)
best = min(ind.loss for best_list in summary for ind in best_list)
immigrants = world.allreduce(sum(1 for ind in population if ind.migration_steps > 0))
if world.rank == 0:
    print("RESULT " + json.dumps({"best": best, "immigrants": immigrants}), flush=True)
sys.stdout.flush()
