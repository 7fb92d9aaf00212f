"""Fail on one rank while building ``Islands`` and report what every rank raised.

Building reads the checkpoint collectively (as Propulate 1.2.2 did), which runs user code on each rank: the
surrogate factory, the propagator's ``bind`` and, when a checkpoint is resumed, its ``observe`` and the
surrogate's ``merge``. ``--mode`` makes one of them raise on ``--failing-rank`` only (``observe`` and
``merge`` after a first, clean run has left a checkpoint to resume). Rank 0 prints ``RESULT`` with every
rank's outcome and the seconds building took there.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from mpi4py import MPI

from propulate import Islands
from propulate.propagators import Propagator
from propulate.surrogate import StaticSurrogate
from propulate.utils import get_default_propagator
from propulate.utils.benchmark_functions import get_function_search_space

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--mode", choices=["factory", "bind", "observe", "merge"], required=True)
parser.add_argument("--failing-rank", type=int, default=1)
parser.add_argument("--ranks-per-worker", type=int, default=1)
args = parser.parse_args()

function, limits = get_function_search_space("sphere")
failing = False  # armed for the second build in the resume modes


class Hooked(Propagator):
    """The default propagator, with ``bind`` and ``observe`` that fail on the failing rank when armed."""

    def __init__(self, inner: Propagator) -> None:
        super().__init__(inner.parents, inner.offspring)
        self.inner = inner

    def __call__(self, inds):
        return self.inner(inds)

    def bind(self, island_rank: int, island_size: int = 1) -> None:
        if failing and args.mode == "bind" and world.rank == args.failing_rank:
            raise ValueError(f"injected failure in bind on rank {world.rank}")

    def observe(self, ind) -> None:
        if failing and args.mode == "observe" and world.rank == args.failing_rank:
            raise ValueError(f"injected failure in observe on rank {world.rank}")


class Merging(StaticSurrogate):
    def merge(self, data) -> None:
        if failing and args.mode == "merge" and world.rank == args.failing_rank:
            raise ValueError(f"injected failure in merge on rank {world.rank}")
        super().merge(data)


def factory():
    if failing and args.mode == "factory" and world.rank == args.failing_rank:
        raise ValueError(f"injected failure in the surrogate factory on rank {world.rank}")
    return Merging()


def loss(params, comm=MPI.COMM_SELF):
    for epoch in range(2):
        yield function(params) / (epoch + 1)


def build() -> Islands:
    rng = random.Random(3 + world.rank)
    return Islands(
        loss,
        Hooked(get_default_propagator(4, limits, rng=rng)),
        rng,
        generations=4,
        num_islands=1,
        checkpoint_path=args.checkpoint,
        ranks_per_worker=args.ranks_per_worker,
        surrogate_factory=factory,
    )


if args.mode in ("observe", "merge"):
    build().propulate(debug=0)  # a checkpoint to resume
failing = True
started = time.monotonic()
try:
    build()
    outcome = "built"
except Exception as err:
    outcome = f"{type(err).__name__}: {err}"
seconds = time.monotonic() - started
report = world.gather((outcome, seconds))
if world.rank == 0:
    print("RESULT " + json.dumps({"outcomes": [o for o, _ in report], "seconds": [s for _, s in report]}))
