"""Run an island model and check collectively that no island evaluated a configuration twice.

Every propagator family on a space where it applies: ``--space small`` has 12 configurations (an int range
of 3 and 4 categories), so a budget beyond 12 ends with the search space exhausted; ``discrete`` has 360
(three int ranges and a categorical), ``continuous`` is 2-D. Checks on every rank: the workers of an island
hold the same population; among the individuals bred on an island no two have equal parameter values; with
``--space small`` the run evaluated every configuration exactly once in all and stopped, on every worker,
for that reason; otherwise exactly ``generations`` evaluations per worker. Rank 0 prints ``RESULT {json}``
with the counts.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from collections import Counter

from mpi4py import MPI

from propulate import Islands
from propulate.propagators import TPE, Conditional, InitUniform
from propulate.propagators.cmaes import ActiveCMA, CMAPropagator
from propulate.propagators.nm import ParallelNelderMead
from propulate.propagators.pso import BasicPSO, InitUniformPSO
from propulate.utils import get_default_propagator

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from _verdict import verdict

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--space", choices=("small", "discrete", "continuous"), default="small")
parser.add_argument(
    "--propagator", choices=("default", "random", "pso", "cmaes", "nm", "tpe"), default="default"
)
parser.add_argument("--generations", type=int, default=100)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--migration-probability", type=float, default=0.0)
parser.add_argument("--pollination", action="store_true")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--relay-radix", type=int, default=0, help="island relay tree radix (0: default)")
args = parser.parse_args()
if args.relay_radix:  # a small radix relays news over several hops even on a few ranks
    from propulate.mpi import dissemination

    dissemination.RADIX = args.relay_radix

LIMITS = {
    "small": {"layers": (1, 3), "activation": ("relu", "tanh", "gelu", "silu")},
    "discrete": {"a": (0, 5), "b": (-2, 2), "c": (1, 3), "kind": ("x", "y", "z", "w")},
    "continuous": {"x": (-2.0, 2.0), "y": (-2.0, 2.0)},
}
limits = LIMITS[args.space]
size = {"small": 12, "discrete": 6 * 5 * 3 * 4, "continuous": None}[args.space]


def loss(params):
    # Ties between configurations on purpose: the breeding pool is often full of equal losses.
    return float(sum(round(v) if isinstance(v, (int, float)) else len(v) for v in params.values()) ** 2)


rng = random.Random(args.seed * 1000 + world.rank)
if args.propagator == "default":
    propagator = get_default_propagator(4, limits, rng=rng)
elif args.propagator == "random":
    propagator = InitUniform(limits, rng=rng)
elif args.propagator == "pso":
    propagator = Conditional(
        4, BasicPSO(0.729, 1.49445, 1.49445, 0, limits, rng), InitUniformPSO(limits, 0, rng=rng)
    )
elif args.propagator == "tpe":
    propagator = TPE(limits, rng=rng, n_startup=8, seed=args.seed)
elif args.propagator == "cmaes":
    propagator = CMAPropagator(ActiveCMA(), limits, rng=rng)
else:
    propagator = ParallelNelderMead(limits, rng)

checkpoint = world.bcast(tempfile.mkdtemp() if world.rank == 0 else None)
islands = Islands(
    loss,
    propagator,
    rng,
    generations=args.generations,
    num_islands=args.num_islands,
    migration_probability=args.migration_probability,
    pollination=args.pollination,
    checkpoint_path=checkpoint,
)
islands.propulate(debug=0)
propulator = islands.propulator
island = propulator.island_idx
population = propulator.population

failures: list[str] = []
comm = world.Dup()
island_comm = comm.Split(island, comm.rank)
uids = sorted(ind.uid for ind in population)
if island_comm.allgather(uids) != [uids] * island_comm.size:
    failures.append(f"rank {comm.rank}: the workers of island {island} hold different populations")

# Bred on this island: the originals (an emigrant's original stays, deactivated, with migration_steps 0).
bred_here = [ind for ind in population if ind.island == island and ind.migration_steps == 0]
keys = Counter(tuple(ind.values()) for ind in bred_here)
repeated = {k: n for k, n in keys.items() if n > 1}
if repeated:
    failures.append(f"rank {comm.rank}: island {island} evaluated configurations twice: {repeated}")
mine = sum(1 for ind in bred_here if ind.rank == propulator.island_rank)
evaluations = comm.allreduce(mine)
stopped = propulator._stops.reason or ""
if size is not None and size <= args.generations * comm.size and args.num_islands == 1:
    if evaluations != size:
        failures.append(f"rank {comm.rank}: {evaluations} evaluations of a space of {size} configurations")
    if "exhausted" not in stopped:
        failures.append(f"rank {comm.rank}: stopped for {stopped!r}, not an exhausted search space")
elif mine != args.generations:
    failures.append(f"rank {comm.rank}: {mine} evaluations, expected {args.generations}")

distinct = comm.allreduce(len(keys) if island_comm.rank == 0 else 0)  # summed over the islands
if comm.rank == 0:
    print("RESULT " + json.dumps({"evaluations": evaluations, "distinct": distinct, "stopped": stopped}))
island_comm.Free()
verdict(comm, failures)
