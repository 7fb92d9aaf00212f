"""Time ``python -m propulate report --html`` on the checkpoint of a 100,000-evaluation run.

The run is real: two islands (one worker each under ``mpiexec -n 2``) with migration minimize a loss that
costs nothing and is a generator of three interim losses followed by a static surrogate, so the checkpoint
holds learning curves and pruned evaluations; one evaluation in a hundred fails. Rank 0 then builds the
report in a fresh process, as a user on a login node would, and prints one JSON line: the evaluations,
the seconds the run took, ``build_seconds`` (wall-clock time of the whole command, interpreter start and
imports included) and ``html_bytes`` (the size of the file). Usage::

    mpiexec -n 2 python benchmarks/report_html.py --evaluations 100000

The issue asks for a build in under 10 s at 100,000 evaluations.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from mpi4py import MPI

from propulate import Float, Islands
from propulate.surrogate import StaticSurrogate
from propulate.utils import get_default_propagator

REPO = Path(__file__).resolve().parents[1]
LIMITS = {
    "lr": Float(1e-5, 1e-1, log=True),
    "layers": (1, 8),
    "act": ("relu", "tanh", "gelu"),
    "dropout": (0.0, 0.5),
}


def loss(params: dict) -> Iterator[dict[str, float]]:
    """Three interim losses of a made-up training; fails for one configuration in a hundred."""
    base = (params["lr"] - 0.003) ** 2 * 1e4 + abs(params["layers"] - 4) + params["dropout"]
    if params["dropout"] > 0.495:
        raise RuntimeError("dropout too high for this toy network")
    for epoch in range(1, 4):
        value = base + 1.0 / epoch
        yield {"loss": value, "accuracy": 1.0 / (1.0 + value)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=100_000, help="in all, over every rank")
    parser.add_argument("--directory", help="where to put the checkpoint (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint and the report")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    directory = args.directory or (tempfile.mkdtemp(prefix="report-html-") if world.rank == 0 else None)
    directory = world.bcast(directory)
    rng = random.Random(7 + world.rank)
    islands = Islands(
        loss,
        get_default_propagator(8, LIMITS, rng=rng),
        rng,
        generations=-(-args.evaluations // world.size),
        num_islands=min(world.size, 2),
        migration_probability=0.05,
        pollination=False,
        checkpoint_path=directory,
        surrogate_factory=StaticSurrogate,
    )
    start = time.perf_counter()
    islands.propulate(debug=-1)
    run_seconds = time.perf_counter() - start
    world.Barrier()
    if world.rank != 0:
        return
    target = Path(directory, "report.html")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI", "HYDRA", "OMPI_"))}
    env["PYTHONPATH"] = str(REPO)
    command = [sys.executable, "-m", "propulate", "report", directory, "--html", str(target)]
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, capture_output=True)
    build = time.perf_counter() - start
    figures = {
        "evaluations": world.size * islands.propulator.generation,
        "run_seconds": round(run_seconds, 1),
        "build_seconds": round(build, 2),
        "html_bytes": target.stat().st_size,
    }
    print(json.dumps(figures), flush=True)
    if not args.keep and not args.directory:
        import shutil

        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
