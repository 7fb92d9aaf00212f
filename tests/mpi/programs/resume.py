"""One session of a checkpointed island run, for the resume and crash tests.

Each worker root logs every evaluation it finishes (epoch time and loss) to ``<checkpoint>/evals-<rank>.log``
just before returning it, so a test can check what a checkpoint must hold after a crash. Prints one
``RESULT`` line with the evaluations made in this session and the populations; a refused checkpoint makes
every rank print ``refused:`` and exit with code 3.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from mpi4py import MPI

from propulate import Islands
from propulate.checkpoint import CheckpointError
from propulate.utils import get_default_propagator

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=10)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--pollination", action="store_true")
parser.add_argument("--space", choices=("default", "other"), default="default")
parser.add_argument("--fresh", action="store_true")
parser.add_argument("--sleep", type=float, default=0.0, help="seconds each evaluation takes")
args = parser.parse_args()

if args.space == "default":
    limits = {"x": (-5.0, 5.0), "y": (-5.0, 5.0), "k": (1, 4), "act": ("relu", "tanh")}
else:
    limits = {"x": (-5.0, 5.0), "z": (0.0, 1.0)}

calls = 0
log_path = Path(args.checkpoint) / f"evals-{world.rank}.log"


def loss(params, comm=MPI.COMM_SELF):
    global calls
    if args.sleep:
        time.sleep(args.sleep)
    value = params["x"] ** 2 + params.get("y", 0.0) ** 2 + params.get("k", 0) + (params.get("act") == "tanh")
    if comm.rank == 0:
        calls += 1
        with open(log_path, "a") as log:
            log.write(f"{time.time()!r} {value!r}\n")
    return value


rng = random.Random(7 + world.rank)
try:
    # The checkpoint is read when the optimizer is built, as in Propulate 1.2.2.
    islands = Islands(
        loss,
        get_default_propagator(4, limits, rng=rng),
        rng,
        generations=args.generations,
        num_islands=args.num_islands,
        migration_probability=0.5,
        pollination=args.pollination,
        checkpoint_path=args.checkpoint,
        ranks_per_worker=args.ranks_per_worker,
        resume=not args.fresh,
    )
    islands.propulate(debug=0)
except CheckpointError as err:
    print(f"rank {world.rank} refused: {err}", flush=True)
    world.Barrier()
    sys.exit(3)

propulator = islands.propulator
result = {}
if propulator.is_worker_root:
    layout = islands.layout
    signature = sorted((ind.uid, ind.active, ind.loss) for ind in propulator.population)
    assert all(s == signature for s in layout.island_comm.allgather(signature)), "island populations differ"
    assert propulator.generation == max(args.generations, propulator.generation)
    counters = layout.propulate_comm.gather(propulator.generation)
    total_calls = layout.propulate_comm.reduce(calls)
    sizes = layout.propulate_comm.gather(
        (layout.island_index, len(propulator.population)) if layout.island_comm.rank == 0 else None
    )
    if layout.propulate_comm.rank == 0:
        result = {
            "calls": total_calls,
            "counters": counters,
            "islands": dict(s for s in sizes if s is not None),
        }
if world.rank == 0:
    print("RESULT " + json.dumps(result), flush=True)
