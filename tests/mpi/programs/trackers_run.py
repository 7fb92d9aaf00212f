"""A short island run with the TensorBoard and MLflow trackers; the test reads what they logged.

The loss function is a generator of three interim losses, pruned by a static surrogate; each worker's
second evaluation of a session fails at its second step (on every rank of the worker), so that every state
(completed, pruned, failed) is logged. With ``--stop-at n``, the first rank signals its own stop during its
``n``-th evaluation, which is interrupted, and evaluated again and logged once when the search resumes.
Each rank prints ``SECONDS <s>``: how long ``propulate()`` took.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import time

from mpi4py import MPI

from propulate import Islands
from propulate.surrogate import StaticSurrogate
from propulate.trackers import MLflowTracker, TensorBoardTracker
from propulate.utils import get_default_propagator, set_logger_config

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=6)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--tensorboard", help="the log folder; default: in the checkpoint")
parser.add_argument("--mlflow", help="the tracking URI; default: in the checkpoint")
parser.add_argument("--flush-timeout", type=float, default=60.0)
parser.add_argument("--stop-at", type=int, default=0, help="first rank: SIGTERM during its n-th evaluation")
args = parser.parse_args()

set_logger_config(log_to_stdout=True, log_rank=True, colors=False)
limits = {"x": (-1.0, 1.0), "n": (1, 4), "opt": ("adam", "sgd")}


calls = 0


def loss(params, comm=None):
    global calls
    calls += 1
    for step in range(1, 4):
        time.sleep(0.01)
        if step == 2 and calls == 2:
            raise ValueError("x too large")
        if step == 1 and calls == args.stop_at and MPI.COMM_WORLD.rank == 0:
            os.kill(os.getpid(), signal.SIGTERM)  # the job ends; this evaluation is interrupted
        yield {"loss": (params["x"] ** 2 + params["n"]) / step, "accuracy": 1.0 / (params["n"] + step)}


rng = random.Random(11 + MPI.COMM_WORLD.rank)
trackers = [
    TensorBoardTracker(args.tensorboard, flush_timeout=args.flush_timeout),
    MLflowTracker(args.mlflow, http_timeout=2, http_retries=1, flush_timeout=args.flush_timeout),
]
islands = Islands(
    loss,
    get_default_propagator(4, limits, rng=rng),
    rng,
    generations=args.generations,
    num_islands=args.num_islands,
    migration_probability=0.9,
    checkpoint_path=args.checkpoint,
    ranks_per_worker=args.ranks_per_worker,
    surrogate_factory=StaticSurrogate,
    trackers=trackers,
    grace_period=0,
)
began = time.monotonic()
islands.propulate(debug=0)
print(f"SECONDS {time.monotonic() - began:.2f}", flush=True)
