"""Measure how much a worker's checkpoint file grows while its loss function runs for a long time.

Every rank is one worker of one island whose loss function sleeps ``--wait`` seconds (default 60), for two
generations. Rank 0 samples the size of its own checkpoint file every second while it waits and prints one
JSON line: the size when its first evaluation had started and been flushed, the size just before that
evaluation ended, and the growth per hour of waiting (the issue's bound: 100 kB/h)::

    mpiexec -n 2 python benchmarks/checkpoint_waiting.py --wait 60
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path

from mpi4py import MPI

from propulate import Propulator
from propulate.utils import get_default_propagator
from propulate.utils.benchmark_functions import get_function_search_space


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wait", type=float, default=60.0, help="seconds each evaluation sleeps (60)")
    parser.add_argument("--directory", default=None, help="parent of the temporary checkpoint directory")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    directory = tempfile.mkdtemp(prefix="propulate-waiting-", dir=args.directory) if comm.rank == 0 else None
    directory = comm.bcast(directory, root=0)
    sphere, limits = get_function_search_space("sphere")
    samples: list[tuple[float, int]] = []
    waiting = threading.Event()
    calls = 0

    def loss(params: dict[str, float]) -> float:
        nonlocal calls
        calls += 1
        if calls == 1:
            waiting.set()
        time.sleep(args.wait)
        waiting.clear()
        return sphere(params)

    def sample() -> None:
        """Sample the file's size during the first evaluation only: nothing but waiting happens then."""
        path = Path(directory) / "propulate-s0000-w000000.h5"
        while not done.is_set():
            if waiting.is_set() and path.exists():
                samples.append((time.monotonic(), path.stat().st_size))
            time.sleep(1.0)

    done = threading.Event()
    if comm.rank == 0:
        threading.Thread(target=sample, daemon=True).start()
    rng = random.Random(comm.rank)
    propulator = Propulator(
        loss,
        get_default_propagator(4, limits, rng=rng),
        rng=rng,
        island_comm=comm,
        propulate_comm=comm,
        generations=2,
        checkpoint_path=directory,
    )
    propulator.propulate(debug=-1)
    done.set()
    if comm.rank == 0:
        # Skip the first two seconds: the row saying the evaluation started is flushed then.
        steady = [(t, size) for t, size in samples if t - samples[0][0] > 2.0]
        first, last = steady[0], steady[-1]
        growth = (last[1] - first[1]) / max(last[0] - first[0], 1e-9) * 3600
        line = {
            "wait_seconds": args.wait,
            "samples": len(samples),
            "bytes_at_start": first[1],
            "bytes_at_end": last[1],
            "growth_bytes_per_hour": growth,
        }
        print(json.dumps(line), flush=True)
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
