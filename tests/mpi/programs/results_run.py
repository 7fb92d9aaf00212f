"""A small finished island run for the export, report and plot tests (``tests/mpi/test_cli.py``).

Two islands of two workers with migration, a mixed search space and a loss function that returns a metric
and fails for one category. Each worker root records what its loss function was called with and returned;
rank 0 writes all of it to ``<checkpoint>/truth.json`` as a list of ``{island, worker, generation, params,
loss, accuracy}`` (``loss`` is ``null`` for a failed evaluation), the ground truth the export must match.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from mpi4py import MPI

from propulate import Islands
from propulate.utils import get_default_propagator

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=12)
parser.add_argument("--sleep", type=float, default=0.02, help="seconds each evaluation takes")
args = parser.parse_args()

limits = {"lr": (1e-4, 1e-1), "layers": (1, 6), "act": ("relu", "tanh", "gelu"), "dropout": (0.0, 0.5)}
calls: list[dict] = []


def loss(params):
    time.sleep(args.sleep)
    value = (params["lr"] - 0.01) ** 2 * 1e3 + abs(params["layers"] - 3) + params["dropout"] + 0.1
    record = {"generation": len(calls), "params": dict(params), "loss": None, "accuracy": None}
    calls.append(record)
    if params["act"] == "gelu":
        raise RuntimeError("this toy network does not support gelu")
    record["loss"], record["accuracy"] = value, 1.0 / (1.0 + value)
    return {"loss": value, "accuracy": record["accuracy"]}


rng = random.Random(11 + world.rank)
islands = Islands(
    loss,
    get_default_propagator(4, limits, rng=rng),
    rng,
    generations=args.generations,
    num_islands=2,
    migration_probability=0.9,
    pollination=False,
    checkpoint_path=args.checkpoint,
)
islands.propulate(debug=0)

layout = islands.layout
for record in calls:
    record["island"], record["worker"] = layout.island_index, islands.propulator.island_rank
everything = world.gather(calls)
if everything is not None:  # rank 0
    truth = [record for records in everything for record in records]
    Path(args.checkpoint, "truth.json").write_text(json.dumps(truth))
    print(f"RESULT {len(truth)} evaluations", flush=True)
