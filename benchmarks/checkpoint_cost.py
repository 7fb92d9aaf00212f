"""Measure what checkpointing costs per evaluation, and whether that cost stays flat as a run grows.

Every rank is one worker of a single island that minimizes the sphere function (a loss that costs nothing,
so what remains is the loop and its checkpoint) with the default propagator, for each number of
generations per worker given, in a fresh temporary checkpoint directory. For each size, rank 0 prints one
JSON line:

- ``disk_bytes_per_evaluation``: the checkpoint files' sizes on disk, summed, per evaluation;
- ``appended_bytes_per_evaluation``: bytes the writers appended (``CheckpointWriter.bytes_written``);
- ``flush_seconds_per_evaluation``: CPU seconds the writers' background threads spent flushing
  (``CheckpointWriter.seconds``), summed over writers, per evaluation;
- ``record_seconds_per_evaluation``: CPU seconds the workers' loops spent queueing records and snapshots
  (timed around ``CheckpointWriter.record``, ``deactivated`` and ``snapshot``), summed, per evaluation;
- ``checkpoint_cpu_seconds_per_evaluation``: the two together, the time spent on checkpointing;
- ``wall_seconds_per_evaluation_per_worker``: the slowest worker's time in ``propulate()`` divided by the
  generations per worker, and the same for a run with checkpointing switched off in this script
  (``..._without_checkpoint``) unless ``--no-baseline`` is given; their difference is the whole cost of
  checkpointing as the loop sees it, main thread, background thread and lock contention together.

A last line gives, for each per-evaluation figure, its ratio between the largest and the smallest size:
about 1 when writing costs O(1) per evaluation. Usage::

    mpiexec -n 4 python benchmarks/checkpoint_cost.py --generations 250 5000
    mpiexec -n 4 python benchmarks/checkpoint_cost.py --minutes 1 10 --loss-seconds 0.01 --no-baseline

(1,000 and then 20,000 evaluations at 4 ranks; runs of 1 and 10 minutes with a 10 ms loss.)
``--directory`` puts the temporary checkpoint directories on the file system to measure (a parallel file
system, a node-local disk); the default is the system's temporary directory.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpi4py import MPI

from propulate import Propulator
from propulate.utils import get_default_propagator
from propulate.utils.benchmark_functions import get_function_search_space

PER_EVALUATION = (
    "disk_bytes_per_evaluation",
    "appended_bytes_per_evaluation",
    "flush_seconds_per_evaluation",
    "record_seconds_per_evaluation",
    "checkpoint_cpu_seconds_per_evaluation",
    "wall_seconds_per_evaluation_per_worker",
    "wall_seconds_per_evaluation_per_worker_without_checkpoint",
    "checkpoint_seconds_per_evaluation_per_worker",
)


class Stopwatch:
    """Accumulates the CPU seconds of the calling thread spent in the functions it wraps.

    CPU time, not wall-clock time: on an oversubscribed node a rank may be descheduled inside a call.
    """

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.thread_time() - start

        return timed


def time_writer_calls(propulator: Propulator, stopwatch: Stopwatch) -> None:
    """Time the main thread's calls into the writer, once ``propulate()`` has opened it."""
    session = propulator._session
    assert session is not None
    open_writer = session._open

    def open_and_wrap(*args: Any, **kwargs: Any) -> None:
        open_writer(*args, **kwargs)
        for name in ("record", "deactivated", "snapshot"):
            setattr(session.writer, name, stopwatch.wrap(getattr(session.writer, name)))

    session._open = open_and_wrap  # type: ignore[method-assign]


def switch_off_checkpointing(propulator: Propulator) -> None:
    """No writer is opened and nothing is recorded: the baseline run."""
    session = propulator._session
    assert session is not None
    session._open = lambda *args, **kwargs: None  # type: ignore[method-assign]
    session.record = lambda kind, ind, home=None: None  # type: ignore[method-assign]
    session.started = lambda ind: None  # type: ignore[method-assign]


def run(
    comm: MPI.Comm,
    generations: int,
    checkpoint: bool,
    parent: str | None,
    seed: int,
    pop_size: int,
    seconds: float | None = None,
    loss_seconds: float = 0.0,
) -> dict[str, float]:
    """Run one optimization (``generations`` per worker, or for ``seconds``); return this rank's figures.

    Collective.
    """
    directory = tempfile.mkdtemp(prefix="propulate-checkpoint-cost-", dir=parent) if comm.rank == 0 else None
    directory = comm.bcast(directory, root=0)
    sphere, limits = get_function_search_space("sphere")

    def loss_fn(params: dict[str, float]) -> float:
        if loss_seconds:
            time.sleep(loss_seconds)
        return sphere(params)

    rng = random.Random(seed + comm.rank)
    propagator = get_default_propagator(pop_size, limits, rng=rng)
    propulator = Propulator(
        loss_fn,
        propagator,
        rng=rng,
        island_comm=comm,
        propulate_comm=comm,
        generations=-1 if seconds else generations,
        time_limit=seconds,
        checkpoint_path=directory,
        resume=False,
    )
    stopwatch = Stopwatch()
    if checkpoint:
        time_writer_calls(propulator, stopwatch)
    else:
        switch_off_checkpointing(propulator)
    comm.Barrier()
    start = time.perf_counter()
    propulator.propulate(debug=-1)
    wall = time.perf_counter() - start
    comm.Barrier()
    figures = {"wall": wall, "record_seconds": stopwatch.seconds, "generations": propulator.generation}
    writer = propulator._session.writer if propulator._session is not None else None
    if writer is not None:
        # The counters survive close().
        figures.update(
            bytes_written=writer.bytes_written, flush_seconds=writer.seconds, records=writer.n_records
        )
    if comm.rank == 0:
        figures["disk_bytes"] = sum(
            path.stat().st_size for path in Path(directory).iterdir() if path.is_file()
        )
        shutil.rmtree(directory)
    return figures


def measure(
    comm: MPI.Comm, generations: int, args: argparse.Namespace, seconds: float | None = None
) -> dict[str, Any] | None:
    """Measure one size (``generations`` per worker, or ``seconds``); rank 0 returns its JSON line."""
    common = (args.directory, args.seed, args.pop_size, seconds, args.loss_seconds)
    with_checkpoint = comm.gather(run(comm, generations, True, *common))
    without = None
    if not args.no_baseline:
        without = comm.gather(run(comm, generations, False, *common))
    if comm.rank != 0:
        return None
    assert with_checkpoint is not None
    evaluations = sum(figures["generations"] for figures in with_checkpoint)
    wall = max(figures["wall"] for figures in with_checkpoint) / (evaluations / comm.size)
    line: dict[str, Any] = {
        "ranks": comm.size,
        "seconds": seconds,
        "generations": evaluations // comm.size,
        "evaluations": evaluations,
        "records": sum(figures["records"] for figures in with_checkpoint),
        "disk_bytes_per_evaluation": with_checkpoint[0]["disk_bytes"] / evaluations,
        "appended_bytes_per_evaluation": sum(f["bytes_written"] for f in with_checkpoint) / evaluations,
        "flush_seconds_per_evaluation": sum(f["flush_seconds"] for f in with_checkpoint) / evaluations,
        "record_seconds_per_evaluation": sum(f["record_seconds"] for f in with_checkpoint) / evaluations,
        "checkpoint_cpu_seconds_per_evaluation": sum(
            f["flush_seconds"] + f["record_seconds"] for f in with_checkpoint
        )
        / evaluations,
        "wall_seconds_per_evaluation_per_worker": wall,
    }
    if without is not None:
        baseline = max(figures["wall"] for figures in without) / (
            sum(figures["generations"] for figures in without) / comm.size
        )
        line["wall_seconds_per_evaluation_per_worker_without_checkpoint"] = baseline
        line["checkpoint_seconds_per_evaluation_per_worker"] = wall - baseline
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--generations",
        type=int,
        nargs="+",
        default=[250, 5000],
        help="generations per worker, one run per value, in turn (default: 250 5000)",
    )
    parser.add_argument("--directory", default=None, help="parent of the temporary checkpoint directories")
    parser.add_argument("--pop-size", type=int, default=8, help="breeding pool of the default propagator")
    parser.add_argument("--seed", type=int, default=0, help="rank r uses seed + r")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the runs without checkpointing (halves the time)"
    )
    parser.add_argument(
        "--minutes",
        type=float,
        nargs="+",
        default=None,
        help="instead of --generations: one run of each length in minutes (time_limit), e.g. 1 10",
    )
    parser.add_argument("--loss-seconds", type=float, default=0.0, help="seconds each evaluation sleeps")
    args = parser.parse_args()
    if any(g < 1 for g in args.generations):
        parser.error(f"--generations: expected positive ints, got {args.generations}")
    comm = MPI.COMM_WORLD
    # Warm-up (imports, first messages, first file): not measured.
    run(comm, 10, True, args.directory, args.seed, args.pop_size)
    lines = []
    sizes = (
        [(g, None) for g in args.generations]
        if args.minutes is None
        else [(-1, 60 * m) for m in args.minutes]
    )
    for generations, seconds in sizes:
        line = measure(comm, generations, args, seconds)
        if line is not None:
            print(json.dumps(line), flush=True)
            lines.append(line)
    if comm.rank == 0 and len(lines) > 1:
        smallest, largest = (
            min(lines, key=lambda x: x["evaluations"]),
            max(lines, key=lambda x: x["evaluations"]),
        )
        ratios = {
            key: largest[key] / smallest[key] if smallest[key] else None
            for key in PER_EVALUATION
            if key in smallest
        }
        summary = {
            "ratio_largest_to_smallest": ratios,
            "evaluations": [smallest["evaluations"], largest["evaluations"]],
        }
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
