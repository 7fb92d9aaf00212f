"""Run ParallelNelderMead on sphere or Rosenbrock, on one island or several, and check the serial method.

The start is not the optimum: (3, -4, 3, -4, ...) for sphere, the classic (-1.2, 1, -1.2, 1, ...) for
Rosenbrock. With one island the program drives a :class:`propulate.Propulator` as Propulate 1.2.2 scripts do;
with ``--num-islands`` > 1 it builds :class:`propulate.Islands`, which migrate (or, with ``--pollination``,
pollinate) with ``--migration-probability``. Every island runs the same serial method from the same start, so
an immigrant is often a point the receiving island needs too.

After the run, collectively (every rank learns every rank's failures, so no rank waits for another):

- every individual lies inside the limits;
- every worker of an island holds the same population (uids, and which of them are active);
- the island's own evaluations (individuals born there that never moved) number ``generations`` times its
  workers;
- every worker's replica of the serial Nelder–Mead method is the same within its island, and it is a state
  the serial method reaches when it runs alone on the same function for as many evaluations (the trajectory
  does not depend on the number of workers, their timing, migration, or a resume).

Rank 0 prints ``RESULT {json}``: the best loss (``best``, over every island), each island's best
(``island_best``), the number of evaluations ``n``, how many distinct points the first island holds, how many
evaluations of the serial method the slowest island's replica is at (``serial_steps``), the immigrants and
the deactivated individuals bred at home (emigrated, or replaced by pollinators) summed over the islands, and
the ``failures``. The program then exits 1 on every rank if there are failures, unless ``--measure`` is
given (to measure a propagator that is expected to fail them).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile

from mpi4py import MPI

from propulate import Islands, Propulator
from propulate.individual import Status
from propulate.propagators.nm import ParallelNelderMead, SimplexState
from propulate.utils.benchmark_functions import get_function_search_space

parser = argparse.ArgumentParser()
parser.add_argument("--function", choices=("sphere", "rosenbrock"), default="sphere")
parser.add_argument("--dim", type=int, default=2)
parser.add_argument("--generations", type=int, default=100)
parser.add_argument("--scale", type=float, default=1.0, help="initial edge length / range")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--checkpoint", default="", help="directory; a fresh temporary one if not given")
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--migration-probability", type=float, default=0.3)
parser.add_argument("--pollination", action="store_true")
parser.add_argument("--measure", action="store_true", help="report the failures without failing")
args = parser.parse_args()

# Both functions are defined for any number of parameters.
loss_fn, limits = get_function_search_space(args.function)
bounds = next(iter(limits.values()))
limits = {f"x{i}": bounds for i in range(args.dim)}
pattern = {"sphere": (3.0, -4.0), "rosenbrock": (-1.2, 1.0)}[args.function]
start = [pattern[i % 2] for i in range(args.dim)]

world = MPI.COMM_WORLD
checkpoint = args.checkpoint or world.bcast(tempfile.mkdtemp() if world.rank == 0 else None)
rng = random.Random(1000 * args.seed + world.rank)
propagator = ParallelNelderMead(limits, rng, start=start, scale=args.scale)
if args.num_islands == 1:
    propulator = Propulator(
        loss_fn, propagator, rng=rng, generations=args.generations, checkpoint_path=checkpoint
    )
    island, island_comm = 0, world
else:
    islands = Islands(
        loss_fn,
        propagator,
        rng,
        generations=args.generations,
        num_islands=args.num_islands,
        migration_probability=args.migration_probability,
        pollination=args.pollination,
        checkpoint_path=checkpoint,
    )
    propulator = islands.propulator
    island, island_comm = islands.layout.island_index, islands.layout.island_comm
propulator.propulate(logging_interval=10**6, debug=0)

failures: list[str] = []
population = propulator.population
low, high = bounds
if not all(low <= value <= high for ind in population for value in ind.values()):
    failures.append(f"island {island}: an individual outside the limits")
members = sorted((ind.uid, ind.active) for ind in population)
if len(set(map(json.dumps, island_comm.allgather(members)))) != 1:
    failures.append(f"island {island}: the workers' populations differ")
born_here = sum(1 for ind in population if ind.migration_steps == 0)
if born_here != args.generations * island_comm.size:
    failures.append(f"island {island}: {born_here} evaluations, not {args.generations} x {island_comm.size}")
# The replica after the run: every loss is known by now (passing the population again teaches nothing new).
state = propagator.replica([ind for ind in population if ind.active and ind.status is Status.COMPLETED])
plain = None if state is None else json.dumps(state.to_plain())
if state is None or len(set(island_comm.allgather(plain))) != 1:
    failures.append(f"island {island}: the workers' replicas of the serial method differ")


def serial_state(steps: int) -> SimplexState:
    """Run the serial method alone for ``steps`` evaluations of the loss and return its state."""
    serial = ParallelNelderMead(limits, random.Random(0), start=start, scale=args.scale)
    current = serial.replica([])  # the initial state of the serial method
    assert current is not None
    for _ in range(steps):
        current = serial.tell(current, loss_fn(dict(zip(limits, current.point.tolist(), strict=True))))
    return current


if island_comm.rank == 0 and state is not None and json.dumps(serial_state(state.step).to_plain()) != plain:
    failures.append(f"island {island}: the replica is not a state of the serial method")

figures = {
    "island": island,
    "island_rank": island_comm.rank,
    "best": min((ind.loss for ind in population), default=math.inf),
    "born_here": born_here,
    "distinct": len({ind.position.tobytes() for ind in population}),
    "serial_steps": -1 if state is None else state.step,
    "immigrants": sum(1 for ind in population if ind.migration_steps > 0),
    "deactivated": sum(1 for ind in population if ind.migration_steps == 0 and not ind.active),
}
everyone = world.allgather((failures, figures))
heads = [f for _, f in everyone if f["island_rank"] == 0]
if world.rank == 0:
    result = {
        "function": args.function,
        "dim": args.dim,
        "best": min(f["best"] for f in heads),
        "island_best": [f["best"] for f in heads],
        "n": sum(f["born_here"] for f in heads),
        "distinct": heads[0]["distinct"],
        "serial_steps": min(f["serial_steps"] for f in heads),
        "immigrants": sum(f["immigrants"] for f in heads),
        "deactivated": sum(f["deactivated"] for f in heads),
        "failures": sorted({line for lines, _ in everyone for line in lines}),
    }
    print("RESULT " + json.dumps(result), flush=True)
if any(lines for lines, _ in everyone) and not args.measure:
    sys.exit(1)
