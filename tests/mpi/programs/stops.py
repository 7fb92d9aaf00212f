"""Runs that are stopped or fail as a cluster stops them: multi-rank workers, collectives, failing components.

Modes (``--mode``):

- ``mpi``: 2-rank workers whose loss computes 2-4 ms, then all-reduces on the communicator it was handed,
  ``--steps`` times;
- ``torch``: 2-rank workers training a small network with torch ``DistributedDataParallel`` (gloo),
  ``--steps`` steps of 2-4 ms each;
- ``sleep``: the loss sleeps ``--sleep`` seconds (or ``--sleeps``, one per worker);
- ``fail-propagator``, ``fail-surrogate``, ``fail-writer``: rank ``--failing-rank`` raises in that
  component after ``--fail-after`` seconds (the writer: its checkpoint file cannot be created);
- ``handlers``: the caller installed a SIGUSR1 handler and an interval timer before the run; the program
  checks that both still work during and after it.

Every evaluation touches ``evaluating-<rank>`` in the checkpoint folder, so a test can signal in the middle
of one. Prints ``RESULT {json}`` on rank 0: the generation counter of every worker, the evaluations every
rank began, and how ``propulate()`` ended on every rank.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
import traceback
from pathlib import Path

from mpi4py import MPI

from propulate import Islands
from propulate.propagators import Propagator
from propulate.surrogate import StaticSurrogate
from propulate.utils import get_default_propagator

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--mode", required=True)
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=-1)
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--sleep", type=float, default=0.1)
parser.add_argument("--sleeps", type=float, nargs="*", default=None)
parser.add_argument("--grace", type=float, default=1.0)
parser.add_argument("--time-limit", type=float, default=None)
parser.add_argument("--failing-rank", type=int, default=1)
parser.add_argument("--fail-after", type=float, default=0.5)
parser.add_argument("--calls", type=int, default=1)
args = parser.parse_args()

limits = {"x": (-5.0, 5.0), "y": (-5.0, 5.0)}
checkpoint = Path(args.checkpoint)
began = 0
start = time.monotonic()


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def mark() -> None:
    global began
    began += 1
    (checkpoint / f"evaluating-{world.rank}").touch()


def mpi_loss(params, comm):
    mark()
    jitter = random.Random(world.rank)
    value = 0.0
    for _ in range(args.steps):
        busy(0.002 + 0.002 * jitter.random())
        value = comm.allreduce(params["x"] ** 2 + params["y"] ** 2) / comm.size
    return value


def torch_loss(params, comm):
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from propulate.utils.distributed import init_worker_process_group

    mark()
    init_worker_process_group(comm, method="gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * (1 + abs(params["x"])))
    data = torch.randn(16, 8)
    loss = torch.zeros(())
    for _ in range(args.steps):
        busy(0.002)
        optimizer.zero_grad()
        loss = (model(data) ** 2).mean()
        loss.backward()  # all-reduces the gradients
        optimizer.step()
    return float(loss.item()) + params["y"] ** 2


def sleep_loss(params, comm=None):
    mark()
    sleeps = args.sleeps or [args.sleep]
    time.sleep(sleeps[world.rank % len(sleeps)])
    return params["x"] ** 2 + params["y"] ** 2


class FailingPropagator(Propagator):
    """Breeds with the default propagator; raises on the failing rank after a while."""

    def __init__(self, inner: Propagator) -> None:
        super().__init__(-1, 1)
        self.inner = inner

    def __call__(self, inds):
        if world.rank == args.failing_rank and time.monotonic() - start > args.fail_after:
            raise ValueError(f"injected failure while breeding on rank {world.rank}")
        return self.inner(inds)

    @property
    def breeding_pool(self):
        return self.inner.breeding_pool


class FailingSurrogate(StaticSurrogate):
    def cancel(self, loss):
        if world.rank == args.failing_rank and time.monotonic() - start > args.fail_after:
            raise ZeroDivisionError(f"injected failure in the surrogate on rank {world.rank}")
        return super().cancel(loss)


def generator_loss(params):
    mark()
    for epoch in range(3):
        time.sleep(0.02)
        yield (params["x"] ** 2 + params["y"] ** 2) / (epoch + 1)


caller_events: list[str] = []


def handlers_loss(params):
    mark()
    time.sleep(0.05)
    return params["x"] ** 2


rng = random.Random(7 + world.rank)
propagator = get_default_propagator(4, limits, rng=rng)
loss_fn = {"mpi": mpi_loss, "torch": torch_loss, "handlers": handlers_loss}.get(args.mode, sleep_loss)
surrogate_factory = None
if args.mode == "fail-propagator":
    propagator = FailingPropagator(propagator)
elif args.mode == "fail-surrogate":
    loss_fn = generator_loss
    surrogate_factory = FailingSurrogate
elif args.mode == "fail-writer" and world.rank == args.failing_rank:
    import h5py

    create = h5py.File

    def refuse_to_create(name, mode="r", *rest, **options):
        if mode == "w":
            raise PermissionError(f"injected: cannot create the checkpoint file {name}")
        return create(name, mode, *rest, **options)

    h5py.File = refuse_to_create

if args.mode == "handlers":
    signal.signal(signal.SIGUSR1, lambda signum, frame: caller_events.append("usr1"))
    signal.signal(signal.SIGALRM, lambda signum, frame: caller_events.append("alarm"))
    signal.setitimer(signal.ITIMER_REAL, 0.3, 0.3)

islands = Islands(
    loss_fn,
    propagator,
    rng,
    generations=args.generations,
    num_islands=1,
    checkpoint_path=args.checkpoint,
    ranks_per_worker=args.ranks_per_worker,
    time_limit=args.time_limit,
    grace_period=args.grace,
    surrogate_factory=surrogate_factory,
)
outcomes = []
elapsed = []
for _ in range(args.calls):
    called = time.monotonic()
    try:
        islands.propulate(debug=0)
        outcomes.append("returned")
    except Exception as err:
        outcomes.append(f"{type(err).__name__}: {err}")
        traceback.print_exc()
    elapsed.append(time.monotonic() - called)

if args.mode == "handlers":
    timer_left = signal.getitimer(signal.ITIMER_REAL)[0]
    during = caller_events.count("alarm")
    time.sleep(0.7)  # the caller's timer keeps going after the run
    signal.setitimer(signal.ITIMER_REAL, 0)
    after = caller_events.count("alarm") - during
    outcomes.append(f"timer {timer_left:.3f} usr1 {caller_events.count('usr1')} alarms {during} {after}")

propulator = islands.propulator
generation = propulator.generation if propulator.is_worker_root else None
report = world.gather((generation, began, outcomes, elapsed))
if world.rank == 0:
    result = {
        "generations": [g for g, _, _, _ in report if g is not None],
        "began": [b for _, b, _, _ in report],
        "outcomes": [o for _, _, o, _ in report],
        "elapsed": [e for _, _, _, e in report],
    }
    print("RESULT " + json.dumps(result), flush=True)
sys.exit(0)
