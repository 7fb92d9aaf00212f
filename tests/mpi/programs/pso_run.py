"""Minimize a benchmark function with a particle swarm propagator and report the best loss.

Every worker initializes its particle uniformly until the island holds one individual per worker, then
moves it with the chosen PSO variant. With ``--num-islands`` > 1 individuals migrate between islands (or,
with ``--pollination``, copies pollinate them); the propagator is built with the world rank, as Propulate
1.2.2 scripts do, and bound to the island rank by the loop. After each breeding a checking step looks at the
particle the swarm moved (:attr:`BasicPSO.particle`) and counts it as adopted if it is not one this worker
bred on its island.

Checks collectively (every rank learns every rank's failures, so no rank waits for another): every
individual lies inside the limits and carries a velocity; each worker bred exactly ``generations``
individuals, and all workers ``generations`` times their number; every worker of an island holds the same
population (uids, and which of them are active); no worker adopted a particle that is not its own; the
summary agrees on every rank. Rank 0 prints ``RESULT {"best": ..., ...}`` with the failures; the program then
exits 1 on every rank if there are any, unless ``--measure`` is given.
"""

from __future__ import annotations

import argparse
import json
import random
import sys

from mpi4py import MPI

from propulate import Individual, Islands
from propulate.propagators import Compose, Conditional, Propagator
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
parser.add_argument("--pollination", action="store_true")
parser.add_argument(
    "--variant",
    choices=["Basic", "VelocityClamping", "Constriction", "Canonical", "Stateless"],
    default="Basic",
)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--dim", type=int, default=0, help="dimension (default: the function's own)")
parser.add_argument("--checkpoint", default="")
parser.add_argument("--measure", action="store_true", help="report the failures without failing")
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
    pso = StatelessPSO(1.49445, 1.49445, world.rank, limits, rng)  # Propulate 1.2.2's order


class ParticleCheck(Propagator):
    """Pass the offspring through; count the swarm's moves, and those of a particle not bred here."""

    def __init__(self, swarm: BasicPSO) -> None:
        super().__init__(-1, -1)
        self.swarm = swarm
        self.moves = 0
        self.adopted = 0

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        particle, self.swarm.particle = self.swarm.particle, None  # None again if the next call initializes
        if particle is not None:
            self.moves += 1
            self.adopted += particle.migration_steps > 0 or particle.rank != self.swarm.rank
        return inds


n_workers = world.size // args.num_islands
check = ParticleCheck(pso)
propagator = Compose([Conditional(n_workers, pso, InitUniformPSO(limits, world.rank, rng=rng)), check])

islands = Islands(
    function,
    propagator,
    rng,
    generations=args.generations,
    num_islands=args.num_islands,
    migration_probability=args.migration_probability,
    pollination=args.pollination,
    checkpoint_path=args.checkpoint or f"/tmp/propulate-pso-test-{world.size}-{args.num_islands}",
)
islands.propulate(debug=0)
summary = islands.summarize(top_n=1, debug=0)
island, island_comm = islands.layout.island_index, islands.layout.island_comm

failures: list[str] = []
population = islands.propulator.population
for ind in population:
    if not all(low <= ind[name] <= high for name, (low, high) in limits.items()):
        failures.append(f"rank {world.rank}: outside the limits: {ind}")
    if ind.velocity is None:
        failures.append(f"rank {world.rank}: no velocity: {ind}")
bred_here = sum(1 for ind in population if ind.migration_steps == 0 and ind.rank == island_comm.rank)
if bred_here != args.generations:
    failures.append(f"rank {world.rank}: bred {bred_here} individuals, not {args.generations}")
members = sorted((ind.uid, ind.active) for ind in population)
if len(set(map(json.dumps, island_comm.allgather(members)))) != 1:
    failures.append(f"island {island}: the workers' populations differ")
if check.adopted:
    failures.append(f"rank {world.rank}: moved {check.adopted} particle(s) it did not breed")
summaries = world.allgather([[(ind.loss, tuple(ind.values())) for ind in best] for best in summary])
if any(s != summaries[0] for s in summaries):
    failures.append(f"rank {world.rank}: the summary differs from rank 0's")

figures = {
    "island": island,
    "island_rank": island_comm.rank,
    "best": min(ind.loss for ind in population),
    "bred_here": bred_here,
    "immigrants": sum(1 for ind in population if ind.migration_steps > 0),
    "moves": check.moves,
    "adopted": check.adopted,
}
everyone = world.allgather((failures, figures))
every = [f for _, f in everyone]
heads = [f for f in every if f["island_rank"] == 0]
if world.rank == 0:
    result = {
        "best": min(ind.loss for best_list in summary for ind in best_list),
        "island_best": [f["best"] for f in heads],
        "n": sum(f["bred_here"] for f in every),
        "immigrants": sum(f["immigrants"] for f in heads),
        "moves": sum(f["moves"] for f in every),
        "adopted": sum(f["adopted"] for f in every),
        "failures": sorted({line for lines, _ in everyone for line in lines})[:20],
    }
    print("RESULT " + json.dumps(result), flush=True)
if any(lines for lines, _ in everyone) and not args.measure:
    sys.exit(1)
