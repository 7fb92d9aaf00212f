"""Run an island model on a benchmark function and check its invariants collectively.

Checks, on every rank: exact evaluation counts per worker and in total, identical populations (uids,
activity, losses) across the workers of each island, migration conserving the number of active individuals,
pollination replacing one individual per immigrant, and a summary that is the same everywhere.
"""

from __future__ import annotations

import argparse
import json
import random
import sys

import numpy as np
from mpi4py import MPI

from propulate import Islands
from propulate.mpi.layout import known_node_local_rank
from propulate.population import distinct_best
from propulate.utils import get_default_propagator
from propulate.utils.benchmark_functions import get_function_search_space

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--generations", type=int, default=20)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--island-sizes", type=str, default="")
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--migration-probability", type=float, default=0.9)
parser.add_argument("--pollination", action="store_true")
parser.add_argument("--function", default="sphere")
parser.add_argument("--pop-size", type=int, default=4)
parser.add_argument("--top-n", type=int, default=3)
parser.add_argument("--checkpoint", default="")
parser.add_argument("--topology", default="", help="JSON list of lists")
parser.add_argument("--relay-radix", type=int, default=0, help="island relay tree radix (0: default)")
args = parser.parse_args()
if args.relay_radix:  # a small radix relays news over several hops even on a few ranks
    from propulate.mpi import dissemination

    dissemination.RADIX = args.relay_radix

if args.function == "categorical":
    # No float parameter at all (Propulate 1.2.2's default propagator crashed on this).
    limits = {"n": (0, 10), "colour": ("red", "green", "blue"), "m": (-5, 5)}

    def function(params):
        return (params["n"] - 3) ** 2 + abs(params["m"]) + {"red": 1, "green": 0, "blue": 2}[params["colour"]]

elif args.function == "reversed":
    # High-to-low ranges as in published tutorials.
    limits = {"lr": (0.01, 0.0001), "x": (5.0, -5.0), "k": (9, 2)}

    def function(params):
        return (params["lr"] - 0.001) ** 2 + params["x"] ** 2 + params["k"]

else:
    function, limits = get_function_search_space(args.function)
calls = 0


def loss(params, comm=MPI.COMM_SELF):
    global calls
    calls += 1
    if comm.size > 1:
        # Every rank of the worker sees the same parameters.
        values = comm.allgather(tuple(params.values()))
        assert all(v == values[0] for v in values), values
    return function(params)


rng = random.Random(1000 + world.rank)
propagator = get_default_propagator(args.pop_size, limits, rng=rng)
sizes = [int(s) for s in args.island_sizes.split(",")] if args.island_sizes else None
topology = np.array(json.loads(args.topology)) if args.topology else None
islands = Islands(
    loss,
    propagator,
    rng,
    generations=args.generations,
    num_islands=args.num_islands,
    island_sizes=sizes,
    migration_topology=topology,
    migration_probability=args.migration_probability,
    pollination=args.pollination,
    checkpoint_path=args.checkpoint or f"/tmp/propulate-test-{world.size}",
    ranks_per_worker=args.ranks_per_worker,
)
islands.propulate(debug=0)
summary = islands.summarize(top_n=args.top_n, debug=0)

layout = islands.layout
propulator = islands.propulator
num_workers = world.size // args.ranks_per_worker

# The node-local rank (for GPU choice) was recorded while every rank was present; one host here.
assert known_node_local_rank() == world.rank

# Every rank of a worker evaluated exactly `generations` individuals.
assert calls == args.generations, (world.rank, calls)

# The summary is identical on every rank, one list per worker, best first, distinct.
summaries = world.allgather([[(ind.loss, tuple(ind.values())) for ind in best] for best in summary])
assert all(s == summaries[0] for s in summaries)
assert len(summary) == num_workers
for best in summary:
    losses = [ind.loss for ind in best]
    assert losses == sorted(losses)
    assert len({(ind.loss, tuple(ind.values())) for ind in best}) == len(best)

# Every rank of a worker holds the worker's population.
own = sorted((ind.uid, ind.active, ind.loss) for ind in propulator.population)
assert all(other == own for other in layout.worker_comm.allgather(own)), "sub-ranks hold another population"

result = {}
if propulator.is_worker_root:
    island_comm = layout.island_comm
    population = propulator.population
    signature = sorted((ind.uid, ind.active, ind.loss, ind.migration_steps) for ind in population)
    signatures = island_comm.allgather(signature)
    assert all(s == signatures[0] for s in signatures), "populations differ within an island"
    # This worker's list of the summary (sent by its island's first worker) is the best of its own population.
    listed = [(ind.loss, tuple(ind.values())) for ind in summary[layout.propulate_comm.rank]]
    assert listed == [(ind.loss, tuple(ind.values())) for ind in distinct_best(population, args.top_n)]
    mine = [ind for ind in population if ind.migration_steps == 0 and ind.island == layout.island_index]
    bred_here = [ind for ind in mine if ind.rank == island_comm.rank]
    assert len(bred_here) == args.generations, (len(bred_here), args.generations)
    assert sorted(ind.generation for ind in bred_here) == list(range(args.generations))
    born = layout.propulate_comm.allreduce(len(mine) if island_comm.rank == 0 else 0)
    assert born == args.generations * num_workers, (born, args.generations * num_workers)
    for ind in population:
        for name, bounds in limits.items():
            if isinstance(bounds[0], str):
                assert ind[name] in bounds, (name, ind[name])
            else:
                assert type(ind[name]) is type(bounds[0]), (name, ind[name])
                assert min(bounds) <= ind[name] <= max(bounds), (name, ind[name])
    immigrants = sum(1 for ind in population if ind.migration_steps > 0)
    inactive = sum(1 for ind in population if not ind.active)
    active = len(population) - inactive
    stats = layout.propulate_comm.gather(
        (layout.island_index, immigrants, inactive, active) if island_comm.rank == 0 else None
    )
    # Messages of the loop's mailbox per generation, the most of any worker (relayed island news).
    sent = layout.propulate_comm.allreduce(propulator._link.mailbox.messages_sent, op=MPI.MAX)
    if layout.propulate_comm.rank == 0:
        stats = [s for s in stats if s is not None]
        total_active = sum(s[3] for s in stats)
        total_immigrants = sum(s[1] for s in stats)
        if args.num_islands > 1 and args.migration_probability > 0 and not args.pollination:
            # Migration moves individuals: each evaluated individual is active on exactly one island.
            assert total_active == args.generations * num_workers, (total_active, stats)
        if args.pollination:
            for island, n_immigrants, n_inactive, _ in stats:
                assert n_immigrants == n_inactive, (island, n_immigrants, n_inactive)
        if args.num_islands == 1 or args.migration_probability == 0:
            assert total_immigrants == 0
        result = {
            "islands": stats,
            "immigrants": total_immigrants,
            "best": summary[0][0].loss if summary[0] else None,
            "messages_per_generation": sent / max(args.generations, 1),
        }

if world.rank == 0:
    print("RESULT " + json.dumps(result), flush=True)
sys.stdout.flush()
