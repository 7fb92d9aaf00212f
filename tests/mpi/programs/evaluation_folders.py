"""Per-evaluation checkpoints under MPI: a training stopped by a signal or killed continues where it was.

The loss function trains for ``--epochs`` epochs: each begins with an all-reduce over the worker's
communicator (as a DDP epoch would), adds ``(x² + y²) / (epoch + 1)`` to a running sum ``w`` (the state),
sleeps a little (the middle of the epoch), saves ``{"epoch", "w"}`` into its evaluation folder on the
worker's first rank and yields ``w`` (or, with ``--plain``, commits and returns ``w`` at the end). On resume
it loads the latest state, unless ``--restart``, where it starts over and relies on the library to take its
first interim losses as known. Every rank appends ``uid epoch`` to its own ``epochs-<rank>.log`` when an
epoch begins, so the test counts the epochs trained; with ``--surrogate log`` every worker root's surrogate
appends what it was shown (``uid cancel|replay loss``) to ``surrogate-<rank>.log``.

``--fail-at G:E``: the last rank of every worker raises in epoch ``E`` of its individual of generation
``G``, after the epoch's all-reduce, while the first rank goes on to commit.

``--stop-at G:E``: when world rank 0 begins epoch ``E`` of its individual of generation ``G``, it sends
SIGTERM to every rank of the job (as ``scancel`` or a launcher would), or SIGKILL with ``--kill`` (after
waiting for a checkpoint flush, as a node failure would, after which nothing is written).

Rank 0 prints one ``RESULT`` line: every individual of the population (uid, status, steps, loss, x, y), the
evaluation folders left, and the error of every individual that failed (by uid).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

from mpi4py import MPI

import propulate
from propulate import Islands
from propulate.surrogate import NullSurrogate, SuccessiveHalving
from propulate.utils import get_default_propagator

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=3)
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--epoch-seconds", type=float, default=0.05)
parser.add_argument("--stop-at", default="")
parser.add_argument("--kill", action="store_true")
parser.add_argument("--fail-at", default="")
parser.add_argument("--plain", action="store_true")
parser.add_argument("--restart", action="store_true")
parser.add_argument("--surrogate", choices=("none", "log", "asha"), default="none")
parser.add_argument("--keep", type=int, default=0)
args = parser.parse_args()
checkpoint = Path(args.checkpoint)
checkpoint.mkdir(parents=True, exist_ok=True)
pids = world.allgather(os.getpid())
epochs_log = open(checkpoint / f"epochs-{world.rank}.log", "a")  # open for the whole run
stop_generation, stop_epoch = (int(x) for x in args.stop_at.split(":")) if args.stop_at else (-1, -1)
fail_generation, fail_epoch = (int(x) for x in args.fail_at.split(":")) if args.fail_at else (-1, -1)


def stop_job() -> None:
    """Signal every rank of the job, this one last."""
    if args.kill:
        time.sleep(1.0)  # the running evaluation is in the checkpoint by now (it flushes every 0.25 s)
    others = [pid for pid in pids if pid != os.getpid()]
    for pid in [*others, os.getpid()]:
        os.kill(pid, signal.SIGKILL if args.kill else signal.SIGTERM)


def begin(params: Any) -> tuple[propulate.EvaluationCheckpoint, int, float]:
    """Return the folders, and the epoch and sum to continue from."""
    folders = propulate.evaluation_checkpoint()
    if args.restart or folders.latest is None:
        return folders, 0, 0.0
    state = json.loads((folders.latest / "state.json").read_text())
    # A generator's state is that of its last interim loss (a plain loss function reports none).
    assert args.plain or state["epoch"] == folders.step, (state, folders.step)
    return folders, state["epoch"], state["w"]


def epoch(
    params: Any, comm: MPI.Comm, folders: propulate.EvaluationCheckpoint, number: int, w: float
) -> float:
    """Train one epoch and save the state on the worker's first rank; return the new sum."""
    epochs_log.write(f"{folders.uid} {number}\n")
    epochs_log.flush()
    comm.allreduce(number)
    w += (params["x"] ** 2 + params["y"] ** 2) / (number + 1)
    if world.rank == 0 and params.generation == stop_generation and number == stop_epoch:
        stop_job()
    if comm.rank == comm.size - 1 and params.generation == fail_generation and number == fail_epoch:
        # On the worker's last rank only, after the epoch's collective: the first rank goes on to commit.
        raise RuntimeError(f"rank {world.rank} fails in epoch {number}")
    time.sleep(args.epoch_seconds)
    if comm.rank == 0:
        (folders.path / "state.json").write_text(json.dumps({"epoch": number + 1, "w": w}))
    return w


def generator_loss(params: Any, comm: MPI.Comm = MPI.COMM_SELF):
    folders, start, w = begin(params)
    for number in range(start, args.epochs):
        w = epoch(params, comm, folders, number, w)
        yield w


def plain_loss(params: Any, comm: MPI.Comm = MPI.COMM_SELF) -> float:
    folders, start, w = begin(params)
    for number in range(start, args.epochs):
        w = epoch(params, comm, folders, number, w)
        folders.commit()
    return w


class LoggingSurrogate(NullSurrogate):
    """Never cancels; logs every interim loss it is shown, and how."""

    def __init__(self) -> None:
        self.uid = -1
        self.log = open(checkpoint / f"surrogate-{world.rank}.log", "a")

    def start_run(self, ind: Any) -> None:
        self.uid = ind.uid

    def _write(self, kind: str, loss: float) -> None:
        self.log.write(f"{self.uid} {kind} {loss!r}\n")
        self.log.flush()

    def replay(self, loss: float) -> None:
        self._write("replay", loss)

    def cancel(self, loss: float) -> bool:
        self._write("cancel", loss)
        return False


factories = {
    "none": None,
    "log": LoggingSurrogate,
    "asha": lambda: SuccessiveHalving(min_resource=1, reduction_factor=2, max_resource=args.epochs),
}
limits = {"x": (-3.0, 3.0), "y": (-3.0, 3.0)}
rng = random.Random(7 + world.rank)
islands = Islands(
    plain_loss if args.plain else generator_loss,
    get_default_propagator(4, limits, rng=random.Random(11 + world.rank)),
    rng,
    generations=args.generations,
    num_islands=args.num_islands,
    ranks_per_worker=args.ranks_per_worker,
    checkpoint_path=str(checkpoint),
    surrogate_factory=factories[args.surrogate],
    keep_best_folders=args.keep,
)
islands.propulate(debug=0)

# Each island's first worker reports its population (read once: outside propulate() it may come from disk).
mine: tuple[list[tuple[Any, ...]], dict[int, str]] = ([], {})
if islands.propulator.island_rank == 0:
    members = [ind for ind in islands.propulator.population if not ind.migration_steps]
    mine = (
        [(ind.uid, ind.status.name, ind.steps, ind.loss, ind.island, ind["x"], ind["y"]) for ind in members],
        {ind.uid: ind.error for ind in members if ind.error},
    )
gathered = world.gather(mine, root=0)
if world.rank == 0:
    assert gathered is not None
    individuals = sorted({entry for part, _ in gathered for entry in part})
    folder = checkpoint / "evaluations"
    left = {
        name: sorted(os.listdir(folder / name)) for name in (os.listdir(folder) if folder.is_dir() else [])
    }
    errors = {str(uid): error for _, failed in gathered for uid, error in failed.items()}
    print("RESULT " + json.dumps({"individuals": individuals, "folders": left, "errors": errors}))
