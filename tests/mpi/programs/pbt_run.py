"""Population-based training under MPI: a traceable "network state" handed from member to member.

The state of a member is one number ``w``, trained by ``w += lr (3 - w)`` per step with the loss
``(3 - w)²`` (a larger learning rate is better, so low members exploit high ones). Each step begins with an
all-reduce over the worker's communicator (as a DDP step would), takes longer the smaller ``lr`` (so that
worse members tend to end an interval after better ones, which they then copy), saves ``{"w"}`` on the
worker's first rank and yields the loss with the metrics ``w`` (after the step) and ``start`` (the ``w``
the interval began from); with several ranks per worker every rank loads the state and ``agree`` says
whether all loaded the same ``w``. Every worker root appends ``uid step`` to ``steps-<rank>.log`` for
each step it trained.

``--fail M:I``: member ``M``'s interval ``I`` raises before its first step, on every rank of its worker.

``--stop-at G:S``: when world rank 0 begins step ``S`` of its interval of generation ``G``, it sends SIGTERM
to every rank (SIGKILL with ``--kill``, after waiting for a checkpoint flush).

Rank 0 prints one ``RESULT`` line: every individual of its island (uid, island, status, steps, loss, lr, its
``_`` entries and metrics) and, per evaluation folder left, whether it is inheritable.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import time
from pathlib import Path

from mpi4py import MPI

import propulate
from propulate import Islands
from propulate.parameters import Float
from propulate.pbt import PopulationBasedTraining

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=4)
parser.add_argument("--interval", type=int, default=2)
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--step-seconds", type=float, default=0.02)
parser.add_argument("--keep", type=int, default=3)
parser.add_argument("--stop-at", default="")
parser.add_argument("--kill", action="store_true")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--fail", default="", help="M:I: member M's interval I raises")
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--migration-probability", type=float, default=0.0)
args = parser.parse_args()
checkpoint = Path(args.checkpoint)
checkpoint.mkdir(parents=True, exist_ok=True)
pids = world.allgather(os.getpid())
stop_generation, stop_step = (int(x) for x in args.stop_at.split(":")) if args.stop_at else (-1, -1)
fail_member, fail_interval = (int(x) for x in args.fail.split(":")) if args.fail else (-1, -1)
log = open(checkpoint / f"steps-{world.rank}.log", "a")  # open for the whole run


def stop_job() -> None:
    if args.kill:
        time.sleep(1.0)  # the running interval is in the checkpoint by now
    for pid in [pid for pid in pids if pid != os.getpid()] + [os.getpid()]:
        os.kill(pid, signal.SIGKILL if args.kill else signal.SIGTERM)


def loss_fn(params, comm=MPI.COMM_SELF):
    folders = propulate.evaluation_checkpoint()
    w, step, start = 0.0, 0, 0.0
    if folders.latest is not None:
        saved = json.loads((folders.latest / "w.json").read_text())
        w, step = saved["w"], folders.step
        # A state committed inside this interval (by an interrupted attempt) knows where the interval began.
        start = saved["start"] if step > params["_start"] else w
    agree = float(len(set(comm.allgather(w))) == 1)
    if (params["_member"], params["_interval"]) == (fail_member, fail_interval):
        raise RuntimeError("this member's interval fails")
    while True:
        comm.allreduce(1)
        if (
            world.rank == 0
            and params["_interval"] == stop_generation
            and step - params["_start"] == stop_step
        ):
            stop_job()
        time.sleep(args.step_seconds * min(0.5 / params["lr"], 5.0))  # the worse, the slower
        w += params["lr"] * (3.0 - w)
        step += 1
        if comm.rank == 0:
            (folders.path / "w.json").write_text(json.dumps({"w": w, "start": start}))
            print(folders.uid, step, file=log, flush=True)
        comm.barrier()  # every rank saved what it saves before the commit
        yield {"loss": (3.0 - w) ** 2, "w": w, "start": start, "agree": agree}


pbt = PopulationBasedTraining(
    {"lr": Float(0.02, 0.6, log=True)},
    rng=random.Random(1000 * args.seed + world.rank),
    perturbation_interval=args.interval,
    keep_states=args.keep,
)
islands = Islands(
    loss_fn,
    pbt,
    random.Random(world.rank),
    generations=args.generations,
    checkpoint_path=checkpoint,
    ranks_per_worker=args.ranks_per_worker,
    num_islands=args.num_islands,
    migration_probability=args.migration_probability,
)
islands.propulate(debug=0)
if world.rank == 0:
    individuals = [
        {
            "uid": ind.uid,
            "island": ind.island,
            "status": ind.status.name,
            "steps": ind.steps,
            "loss": ind.loss,
            "lr": ind["lr"],
            "extras": dict(ind.extras),
            "metrics": ind.metrics,
        }
        for ind in islands.propulator.population
    ]
    base = checkpoint / "evaluations"
    folders = {
        name: (base / name / "inheritable").exists() for name in os.listdir(base) if not name.startswith(".")
    }
    print("RESULT " + json.dumps({"individuals": individuals, "folders": folders}), flush=True)
