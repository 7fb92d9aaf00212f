"""Workers of an island tell the TPE propagator what their peers evaluate now (``test_tpe.py``).

Every evaluation sleeps ``--sleep`` seconds, so the island's workers evaluate at the same time. A TPE
subclass records, before each breeding, the configurations the loop says the island's other workers are
evaluating (``Propagator.pending``). Checks on every rank: at most ``workers - 1`` are pending at a time; each
one is a configuration that another worker of the island evaluated in this run (none is made up, none is
this worker's own); and with evaluations that overlap, most breedings after the first see some pending.
Rank 0 prints ``RESULT {json}`` with the mean number pending per breeding.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from propulate import Propulator
from propulate.propagators import TPE

sys.path.insert(0, str(Path(__file__).parent))
from _verdict import verdict

parser = argparse.ArgumentParser()
parser.add_argument("--generations", type=int, default=12)
parser.add_argument("--sleep", type=float, default=0.05)
args = parser.parse_args()
world = MPI.COMM_WORLD
LIMITS = {"x": (-1.0, 1.0), "lr": (1e-4, 1e-1), "units": (1, 64), "act": ("relu", "tanh", "gelu")}


class Recording(TPE):
    """TPE that keeps what it was told before each breeding."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.told: list[np.ndarray] = []

    def pending(self, positions: np.ndarray) -> None:
        self.told.append(positions.copy())
        super().pending(positions)


def loss(params: Any) -> float:
    time.sleep(args.sleep)
    return float(params["x"] ** 2 + (params["act"] != "gelu"))


rng = random.Random(11 + world.rank)
propagator = Recording(LIMITS, rng=rng, n_startup=4, seed=3)
checkpoint = world.bcast(tempfile.mkdtemp() if world.rank == 0 else None)
propulator = Propulator(loss, propagator, rng, generations=args.generations, checkpoint_path=checkpoint)
propulator.propulate(debug=0)

comm = world.Dup()
failures: list[str] = []
space = propulator.population[0].space
by_key = {space.key(ind.position): ind for ind in propulator.population}
counts = [len(rows) for rows in propagator.told]
if max(counts, default=0) > comm.size - 1:
    failures.append(f"rank {comm.rank}: {max(counts)} pending at once with {comm.size} workers")
for rows in propagator.told:
    for row in rows:
        ind = by_key.get(space.key(row))
        if ind is None:
            failures.append(f"rank {comm.rank}: pending {space.decode(row)} was never evaluated")
        elif ind.rank == comm.rank:
            failures.append(f"rank {comm.rank}: its own configuration {space.decode(row)} told as pending")
if len(propagator.told) < args.generations:  # more where a peer claimed the same configuration first
    failures.append(f"rank {comm.rank}: told {len(propagator.told)} times for {args.generations} breedings")
seen = np.mean([c > 0 for c in counts[1:]]) if len(counts) > 1 else 0.0
if comm.size > 1 and seen < 0.5:
    failures.append(f"rank {comm.rank}: only {seen:.0%} of its breedings saw a pending evaluation")
mean = comm.allreduce(float(np.mean(counts)) if counts else 0.0) / comm.size
if comm.rank == 0:
    print("RESULT " + json.dumps({"mean_pending": mean, "workers": comm.size}), flush=True)
verdict(comm, failures)
