"""Measure how long a resume takes from a checkpoint of many writers and sessions, and what it leaves on disk.

Rank 0 first writes a synthetic checkpoint as a long job would leave it: ``--writers`` workers (in islands of
``--island-size``) that each evaluated ``--per-session`` individuals in each of ``--sessions`` sessions, one
file per writer and session, each with its state snapshot, the first writer's with the session's plan —
written by :class:`propulate.checkpoint.CheckpointWriter`, the code a run uses. Then every rank of the job
(one island) resumes from it: it builds a ``Propulator`` on it (which reads the checkpoint, as 1.2.2 did) and
calls ``propulate()`` with a budget already spent, so that what is timed is the resume: listing and reading
the files (shared among the worker roots), merging them into one, planning the new layout, handing every
worker its part and beginning the session. A second resume, from the merged file, follows.
Rank 0 prints one JSON line:

- ``files_before`` / ``files_after``: checkpoint files before and after the first resume;
- ``resume_seconds``: the slowest rank's time to build the first ``Propulator`` and run ``propulate()``;
- ``second_resume_seconds``: the same for the second;
- ``serial_load_seconds``: :func:`propulate.load_checkpoint` of the original files on one process (what
  one rank alone would spend reading them), unless ``--no-serial``;
- ``individuals``: the population the resume restored.

Usage (the issue's figure: 64 writers x 100 sessions, under 10 s)::

    mpiexec -n 4 python benchmarks/checkpoint_resume.py --writers 64 --sessions 100
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from propulate import Propulator
from propulate.checkpoint import PLAN_DTYPE, CheckpointWriter, Record, list_files, load_checkpoint, make_uid
from propulate.individual import Individual, Status
from propulate.space import SearchSpace
from propulate.utils import get_default_propagator
from propulate.utils.benchmark_functions import get_function_search_space


def write_checkpoint(directory: Path, space: SearchSpace, args: argparse.Namespace) -> None:
    """Write the files of ``args.sessions`` sessions of ``args.writers`` writers."""
    counts = [args.island_size] * (args.writers // args.island_size)
    rng = random.Random(0)
    config = {
        "limits": {name: list(bounds) for name, bounds in space.limits.items()},
        "fingerprint": space.fingerprint,
        "island_counts": counts,
        "ranks_per_worker": 1,
        "migration_topology": [[0 if i == j else 1 for j in range(len(counts))] for i in range(len(counts))],
        "migration_prob": 0.1,
        "pollination": False,
        "propagator": "benchmark",
        "generations": args.sessions * args.per_session,
        "num_workers": args.writers,
        "version": "benchmark",
    }
    for session in range(args.sessions):
        start = session * args.per_session
        plan = np.array(
            [(w // args.island_size, w % args.island_size, start) for w in range(args.writers)],
            dtype=PLAN_DTYPE,
        )
        for writer in range(args.writers):
            island, island_rank = divmod(writer, args.island_size)
            attrs = {
                "session": session,
                "writer": writer,
                "island": island,
                "island_rank": island_rank,
                "generation_start": start,
                "config": config,
            }
            handle = CheckpointWriter(
                directory,
                session,
                writer,
                space,
                attrs,
                flush_interval=3600,
                plan_table=plan if writer == 0 else None,
            )
            for g in range(args.per_session):
                ind = Individual(space.sample(rng), space, generation=start + g, rank=island_rank)
                ind.uid = make_uid(session, writer, g)
                ind.island = island
                ind.current = island_rank
                ind.migration_history = str(island)
                ind.loss = rng.random()
                ind.status = Status.COMPLETED
                ind.evalperiod = 1.0
                ind.evaltime = 1.7e9 + session
                handle.record(Record.EVALUATED, ind, island)
            handle.snapshot(
                start + args.per_session,
                {"rng": rng.getstate(), "propagator": {}, "owed_replacements": 0, "next_owner": 0},
            )
            handle.close()


def resume(comm: MPI.Comm, directory: str, generations: int) -> tuple[float, int]:
    """Resume on every rank of ``comm`` (one island); return the slowest rank's seconds and the population."""
    function, limits = get_function_search_space("sphere")
    rng = random.Random(comm.rank)
    comm.Barrier()
    start = time.perf_counter()
    propulator = Propulator(
        function,
        get_default_propagator(8, limits, rng=rng),
        rng=rng,
        island_comm=comm,
        propulate_comm=comm,
        generations=generations,
        checkpoint_path=directory,
    )
    propulator.propulate(debug=-1)
    seconds = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    return seconds, len(propulator.population)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=64, help="writers of the checkpoint (default 64)")
    parser.add_argument("--sessions", type=int, default=100, help="sessions of the checkpoint (default 100)")
    parser.add_argument("--per-session", type=int, default=5, help="evaluations per writer and session")
    parser.add_argument("--island-size", type=int, default=8, help="workers per island of the checkpoint")
    parser.add_argument("--directory", default=None, help="parent of the temporary checkpoint directory")
    parser.add_argument("--no-serial", action="store_true", help="skip the serial load_checkpoint timing")
    args = parser.parse_args()
    if args.writers % args.island_size:
        parser.error(f"--island-size: must divide --writers ({args.writers}), got {args.island_size}")
    comm = MPI.COMM_WORLD
    _, limits = get_function_search_space("sphere")
    space = SearchSpace.of(limits)
    line: dict = {"writers": args.writers, "sessions": args.sessions, "ranks": comm.size}
    directory = None
    if comm.rank == 0:
        directory = tempfile.mkdtemp(prefix="propulate-resume-", dir=args.directory)
        start = time.perf_counter()
        write_checkpoint(Path(directory), space, args)
        line["write_seconds"] = time.perf_counter() - start
        line["files_before"] = len(list_files(Path(directory)).paths)
        if not args.no_serial:
            start = time.perf_counter()
            load_checkpoint(directory)
            line["serial_load_seconds"] = time.perf_counter() - start
    directory = comm.bcast(directory, root=0)
    # Every generation is done already: the resume is all that runs.
    done = args.writers * args.sessions * args.per_session // comm.size
    line["resume_seconds"], line["individuals"] = resume(comm, directory, done)
    if comm.rank == 0:
        line["files_after"] = len(list_files(Path(directory)).paths)
    line["second_resume_seconds"], _ = resume(comm, directory, done)
    if comm.rank == 0:
        shutil.rmtree(directory)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
