"""Population-based training under MPI: a traceable "network state" handed from member to member.

The state of a member is one number ``w``, trained by ``w += lr (3 - w)`` per step with the loss
``(3 - w)²`` (a larger learning rate is better, so low members exploit high ones). Each step begins with an
all-reduce over the worker's communicator (as a DDP step would), takes longer the smaller ``lr`` (so that
worse members tend to end an interval after better ones, which they then copy), saves ``{"w"}`` on the
worker's first rank and yields the loss with the metrics ``w`` (after the step) and ``start`` (the ``w``
the interval began from); with several ranks per worker every rank loads the state and ``agree`` says
whether all loaded the same ``w``. The metrics ``loaded`` and ``saved`` are checksums (the first 48 bits
of SHA-256, as floats) of the state file an interval started from and of the one it committed last (an
interval continued after a stop knows, from its own state, which one it had started from). Every worker
root appends ``uid step`` to ``steps-<rank>.log`` for each step it trained.

``--num-islands``, ``--migration-probability``, ``--pollination 0|1``: the island model. With
``--handicap``, island 0 trains 50 times slower per step, and its steps take twice as long as the slowest
of another island, so that its members rank below any member of another island and exploit the migrants
that come from there.

``--pb2``: :class:`propulate.pbt.PB2` instead of :class:`~propulate.pbt.PopulationBasedTraining`.

``--fail M:I``: member ``M``'s interval ``I`` raises before its first step, on every rank of its worker.

``--stop-at G:S``: when world rank 0 begins step ``S`` of its interval of generation ``G``, it sends SIGTERM
to every rank (SIGKILL with ``--kill``, after waiting for a checkpoint flush).

``--kill-in-copy``: the state holds a second file, and the first worker to copy another worker's state (an
exploit) kills every rank with SIGKILL after the first file is linked, once a checkpoint flush noted the
interval: the job dies in the middle of the copy, with the donor's folder pinned.

Rank 0 prints one ``RESULT`` line: every individual of its island (uid, island, status, steps, loss, lr, its
``_`` entries, metrics and migration steps), the same for every island (``islands``, by island index), per
evaluation folder left whether it is inheritable, and the pins left in any folder.
"""

from __future__ import annotations

import argparse
import hashlib
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
from propulate.pbt import PB2, PopulationBasedTraining

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
parser.add_argument("--pollination", type=int, default=1)
parser.add_argument("--handicap", action="store_true")
parser.add_argument("--kill-in-copy", action="store_true")
parser.add_argument("--pb2", action="store_true")
args = parser.parse_args()
workers = world.size // args.ranks_per_worker
island = world.rank // args.ranks_per_worker // (workers // args.num_islands)
handicapped = args.handicap and island == 0
slowdown = 0.02 if handicapped else 1.0
checkpoint = Path(args.checkpoint)
checkpoint.mkdir(parents=True, exist_ok=True)
pids = world.allgather(os.getpid())
stop_generation, stop_step = (int(x) for x in args.stop_at.split(":")) if args.stop_at else (-1, -1)
fail_member, fail_interval = (int(x) for x in args.fail.split(":")) if args.fail else (-1, -1)
log = open(checkpoint / f"steps-{world.rank}.log", "a")  # open for the whole run


def stop_job(kill: bool = args.kill) -> None:
    if kill:
        time.sleep(1.0)  # the running interval is in the checkpoint by now
    for pid in [pid for pid in pids if pid != os.getpid()] + [os.getpid()]:
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)


mine: set[int] = set()  # the intervals this worker trained: the sources of its own continuations

if args.kill_in_copy:
    from propulate.pbt import states as pbt_states

    link = pbt_states._link_or_copy

    def link_then_die(source: str, target: str) -> None:
        link(source, target)
        if int(Path(source).parent.parent.name) not in mine:  # another worker's state: an exploit
            stop_job(kill=True)

    pbt_states._link_or_copy = link_then_die


def checksum(data: bytes) -> float:
    return float(int(hashlib.sha256(data).hexdigest()[:12], 16))


def loss_fn(params, comm=MPI.COMM_SELF):
    folders = propulate.evaluation_checkpoint()
    mine.add(folders.uid)
    w, step, start, loaded, saved_sum = 0.0, 0, 0.0, 0.0, 0.0
    if folders.latest is not None:
        data = (folders.latest / "w.json").read_bytes()
        loaded = checksum(data)
        saved = json.loads(data)
        w, step = saved["w"], folders.step
        if step > params["_start"]:  # committed inside this interval by an interrupted attempt: it knows
            start, loaded = saved["start"], saved["origin"]
        else:
            start = w
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
        # The worse, the slower; a handicapped step twice as slow as the slowest of another island.
        time.sleep(args.step_seconds * (10.0 if handicapped else min(0.5 / params["lr"], 5.0)))
        w += params["lr"] * slowdown * (3.0 - w)
        step += 1
        data = json.dumps({"w": w, "start": start, "origin": loaded}).encode()
        saved_sum = checksum(data)
        if comm.rank == 0:
            (folders.path / "w.json").write_bytes(data)
            if args.kill_in_copy:
                (folders.path / "more.bin").write_bytes(data)  # a copy is killed between the two
            print(folders.uid, step, file=log, flush=True)
        comm.barrier()  # every rank saved what it saves before the commit
        metrics = {"w": w, "start": start, "agree": agree, "loaded": loaded, "saved": saved_sum}
        yield {"loss": (3.0 - w) ** 2, **metrics}


pbt = (PB2 if args.pb2 else PopulationBasedTraining)(
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
    pollination=bool(args.pollination),
)
islands.propulate(debug=0)
individuals = [
    {
        "uid": ind.uid,
        "island": ind.island,
        "status": ind.status.name,
        "active": ind.active,
        "steps": ind.steps,
        "loss": ind.loss,
        "lr": ind["lr"],
        "extras": dict(ind.extras),
        "metrics": ind.metrics,
        "migration_steps": ind.migration_steps,
    }
    for ind in islands.propulator.population
]
# Every rank of an island holds its population; rank 0 keeps one per island.
gathered = world.gather((island, individuals))
if world.rank == 0:
    by_island = {}
    for entry in gathered:
        if entry is not None:
            by_island.setdefault(entry[0], entry[1])
    base = checkpoint / "evaluations"
    names = [name for name in os.listdir(base) if not name.startswith(".")]
    folders = {name: (base / name / "inheritable").exists() for name in names}
    pins = [f"{name}/{pin}" for name in names for pin in os.listdir(base / name) if pin.startswith(".pin-")]
    result = {"individuals": by_island[0], "islands": by_island, "folders": folders, "pins": pins}
    print("RESULT " + json.dumps(result), flush=True)
