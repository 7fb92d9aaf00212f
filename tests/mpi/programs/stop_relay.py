"""Stop requests and failures of one worker, or of all, relayed over the alarm's tree of worker roots.

Modes (``--mode``):

- ``signal``: rank ``--origin`` alone receives SIGUSR1 in its ``--at``-th evaluation (as a node-local
  preemption notice would), so its worker asks the run to stop;
- ``abort``: with ``on_failure="stop"``, the loss function raises on rank ``--origin`` in its ``--at``-th
  evaluation (``--at -1``: its last, while the other workers, with evaluations ``--slow`` times shorter, have
  already finished theirs);
- ``time-limit``: every worker reaches ``--time-limit`` at about the same moment;
- ``fail``: the propagator raises on rank ``--origin`` in its ``--at``-th breeding (outside the loss).

Every evaluation sleeps ``--sleep`` seconds (``--slow`` times that on ``--origin`` with ``--at -1``).
``--calls 2`` calls ``propulate()`` again after the first call returned, up to ``--generations``.
Prints ``RESULT {json}`` on rank 0 with, per rank: how each call ended, the stop its worker root took (reason,
abort), the alarm messages it sent to other worker roots in the last call, its generation counter, and
whether the watchdog thread took in alarm messages (MPI_THREAD_MULTIPLE).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time

from mpi4py import MPI

from propulate import Islands
from propulate.mpi.alarm import threads_may_poll
from propulate.propagators import Propagator
from propulate.utils import get_default_propagator

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--mode", required=True, choices=["signal", "abort", "time-limit", "fail"])
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=-1)
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--origin", type=int, default=0)
parser.add_argument("--at", type=int, default=3)
parser.add_argument("--sleep", type=float, default=0.05)
parser.add_argument("--slow", type=float, default=10.0)
parser.add_argument("--time-limit", type=float, default=None)
parser.add_argument("--calls", type=int, default=1)
args = parser.parse_args()

limits = {"x": (-5.0, 5.0), "y": (-5.0, 5.0)}
origin = world.rank == args.origin
evaluations = 0
calls = 0


def loss(params, comm=None):
    global evaluations
    evaluations += 1
    last = args.at == -1 and evaluations == args.generations
    slow = args.slow if origin and args.at == -1 else 1.0
    time.sleep(args.sleep * slow)
    if origin and calls == 1 and (evaluations == args.at or last):
        if args.mode == "signal":
            signal.raise_signal(signal.SIGUSR1)
        elif args.mode == "abort":
            raise RuntimeError(f"injected failure on rank {world.rank}")
    return params["x"] ** 2 + params["y"] ** 2


class FailingPropagator(Propagator):
    """Breeds with the default propagator; raises on rank ``--origin`` in its ``--at``-th breeding."""

    def __init__(self, inner: Propagator) -> None:
        super().__init__(-1, 1)
        self.inner = inner
        self.bred = 0

    def __call__(self, inds):
        self.bred += 1
        if origin and self.bred == args.at:
            raise ValueError(f"injected failure while breeding on rank {world.rank}")
        return self.inner(inds)

    @property
    def breeding_pool(self):
        return self.inner.breeding_pool


rng = random.Random(11 + world.rank)
propagator = get_default_propagator(4, limits, rng=rng)
if args.mode == "fail":
    propagator = FailingPropagator(propagator)
islands = Islands(
    loss,
    propagator,
    rng,
    generations=args.generations,
    num_islands=args.num_islands,
    migration_probability=0.5,
    pollination=False,
    checkpoint_path=args.checkpoint,
    ranks_per_worker=args.ranks_per_worker,
    on_failure="stop" if args.mode == "abort" else "continue",
    time_limit=args.time_limit,
    grace_period=5.0,
)
propulator = islands.propulator
outcomes = []
elapsed = []
for _ in range(args.calls):
    calls += 1
    called = time.monotonic()
    try:
        islands.propulate(debug=0)
        outcomes.append("returned")
    except Exception as err:
        outcomes.append(f"{type(err).__name__}: {err}")
    elapsed.append(time.monotonic() - called)

alarm = propulator._stops.alarm
root = propulator.is_worker_root
mine = {
    "outcomes": outcomes,
    "elapsed": elapsed,
    "stop": [propulator._stops.reason, propulator._stops.abort] if root else None,
    "sent": alarm.messages_sent if root and alarm is not None else None,
    "generation": propulator.generation if root else None,
    "threads": threads_may_poll(),
}
report = world.gather(mine)
if world.rank == 0:
    print("RESULT " + json.dumps(report), flush=True)
sys.exit(0)
