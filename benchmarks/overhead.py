"""What propulate itself costs per evaluation, next to the floor of its message pattern.

Every rank is one worker; the workers form ``--islands`` islands (pollination between them at the default
probability when there are several). The loss costs nothing (``--sleep 0``: a dot product of the
position) or sleeps for ``--sleep`` seconds; the search space has ``--dims`` float parameters (with
``--integers``, integer parameters in -5..5: a finite space, where a worker confirms that its peers received
its announcement before it evaluates, see :mod:`propulate.breeding`); each
propagator of ``--propagator`` runs in turn; checkpointing is on (a fresh temporary directory per run).
For each number of generations per worker given, rank 0 prints one JSON line:

- ``us_per_evaluation_per_worker``: the slowest worker's wall-clock time in ``propulate()``, microseconds,
  divided by the generations per worker (the whole run: start, loop, end-of-run drain, final checkpoint);
- ``overhead_us_per_evaluation_per_worker``: the same less the time the loss function took (its sleep);
- ``cpu_us_per_evaluation``: processor time of all ranks in ``propulate()`` (all threads: the loop, the
  checkpoint writer, MPI progress), divided by the evaluations;
- ``evaluations_per_second``: all evaluations of the run over that wall-clock time, and
  ``throughput_vs_ideal`` (with ``--sleep``): that over the ideal ``ranks / sleep``;
- ``peak_rss_bytes``: the largest peak resident memory of a rank (``ru_maxrss``);
- ``rss_growth_bytes_per_individual``: the largest growth of a rank's resident memory during the run,
  divided by the individuals it stored (``individuals_stored_per_rank``, the largest number);
  ``individuals_in_memory_per_rank``: the largest number it still holds at the end (a long run on one
  island releases all but the best, see ``propulate.Propulator``'s *Memory*);
- ``messages_per_evaluation`` and ``bytes_per_evaluation``: messages (one per destination) and their
  pickled bytes that all workers sent, divided by the evaluations;
- ``checkpoint_bytes``: the checkpoint files on disk at the end of the run;
- ``summary_seconds`` (with ``--summary N``): the time ``summarize(top_n=N)`` takes after the run;
- ``report_seconds`` (with ``--report``): the wall-clock time of ``python -m propulate report`` on the run's
  checkpoint, a fresh process on rank 0 after the run (interpreter start and imports included: what a user
  waits for), and ``report_rows``, the evaluations the checkpoint holds;
- ``result_age_ms_mean``, ``_p90`` and ``_max`` (with ``--age``): how old the island peers' results are
  when a worker takes them in (wall-clock time since their evaluation ended, all workers): how stale a
  worker's view of its island is. Measured by timing each batch of received individuals as it is stored
  (under a microsecond per individual).

With ``--floor`` the script measures, in the same invocation and right before each run, the floor of
``floor.py`` for the same number of generations (building a small message, pickling it once, ``Isend`` to
every other rank, taking in what arrived, until every message has arrived), prints its line, and adds
``floor_us_per_evaluation_per_worker`` and ``times_floor`` (the overhead over the floor) to the run's line;
with ``--sleep`` the floor's loop sleeps as long as the loss, and the line gets the floor's
``floor_throughput_vs_ideal`` instead of ``times_floor``. ``--synchronous-floor`` also measures, right after
it, the floor with synchronous sends (``Issend``, the mailbox's mode), prints its line and adds
``synchronous_floor_us_per_evaluation_per_worker`` (and, with ``--sleep``,
``synchronous_floor_throughput_vs_ideal``).
``--ratio`` prints, per propagator, a line with the per-evaluation overhead of the largest run over the
smallest. ``--profile N`` runs each rank's ``propulate()`` under :mod:`cProfile` and prints, after each run's
line, where its time went: the ``N`` largest parts, each a module of propulate (its functions' own time, MPI
calls included: mpi4py's methods are compiled and invisible to the profiler, so their time counts to the
function that calls them), ``pickle``, ``numpy``, the standard library, the interpreter's built-ins, or the
pauses of the waits (``time.sleep``), in microseconds and calls per evaluation, summed over all ranks. It is
wall-clock time while the code runs: the profiler adds a cost to every call (parts made of many small calls
look larger than they are) and, with more ranks than cores, a rank preempted inside a function adds the
time it waited for the core. ``profiled_us_per_evaluation`` (all parts but the pauses) against the run's
own ``cpu_us_per_evaluation`` tells how much larger; a run without ``--profile`` gives the true figures.

Usage::

    mpiexec -n 4 python benchmarks/overhead.py --floor --generations 500 5000 20000 --ratio
    mpiexec -n 8 python benchmarks/overhead.py --floor --synchronous-floor --sleep 0.01 --generations 200
    mpiexec -n 4 python benchmarks/overhead.py --generations 2000 --profile 20
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import pstats
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from propulate import Individual, Propulator
from propulate.population import Population
from propulate.propagators import Conditional, Propagator
from propulate.utils import get_default_propagator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor import measure_floor

PROPAGATORS = ("default", "pso", "cma", "nelder-mead", "tpe")


def build_propagator(
    name: str, limits: dict[str, Any], rank: int, workers: int, pop_size: int, rng: random.Random
) -> Propagator:
    """Return the propagator called ``name`` (one of :data:`PROPAGATORS`) for worker ``rank`` of an island."""
    if name == "default":
        return get_default_propagator(pop_size, limits, rng=rng)
    if name == "pso":
        from propulate.propagators import pso

        move = pso.BasicPSO(0.729, 1.49445, 1.49445, rank, limits, rng)
        return Conditional(workers, move, pso.InitUniformPSO(limits, rank=rank, rng=rng))
    if name == "tpe":
        from propulate.propagators import TPE

        return TPE(limits, rng=rng)
    if name == "cma":
        from propulate.propagators import cmaes

        return cmaes.CMAPropagator(cmaes.BasicCMA(), limits, rng=rng)
    from propulate.propagators import nm

    return nm.ParallelNelderMead(limits, rng=rng, start=np.zeros(len(limits)))


def resident_bytes() -> int:
    """This process's resident memory now, in bytes (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except OSError:
        return 0


def run(comm: MPI.Comm, generations: int, args: argparse.Namespace) -> dict[str, Any]:
    """Run one optimization (collective); return this rank's figures."""
    directory = tempfile.mkdtemp(prefix="propulate-overhead-", dir=args.directory) if comm.rank == 0 else None
    directory = comm.bcast(directory, root=0)
    if args.integers:
        limits: dict[str, Any] = {f"x{i}": (-5, 5) for i in range(args.dims)}
    else:
        limits = {f"x{i}": (-5.12, 5.12) for i in range(args.dims)}
    sleep = args.sleep

    def loss_fn(ind: Individual) -> float:
        if sleep > 0:
            time.sleep(sleep)
        return float(np.dot(ind.position, ind.position))

    islands = min(args.islands, comm.size)
    island = comm.rank * islands // comm.size
    counts = np.bincount(np.arange(comm.size) * islands // comm.size, minlength=islands)
    displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
    island_comm = comm.Split(island, comm.rank)
    rng = random.Random(args.seed + comm.rank)
    propagator = build_propagator(
        args.propagator, limits, island_comm.rank, island_comm.size, args.pop_size, rng
    )
    propulator = Propulator(
        loss_fn,
        propagator,
        rng=rng,
        island_idx=island,
        island_comm=island_comm,
        propulate_comm=comm,
        generations=generations,
        checkpoint_path=directory,
        migration_prob=0.9 / int(counts[island]) if islands > 1 else 0.0,
        island_displs=displs,
        island_counts=counts,
        pollination=True,
        resume=False,
    )
    gc.collect()
    comm.Barrier()
    before = resident_bytes()
    start = time.perf_counter()
    cpu = time.process_time()
    profiler = cProfile.Profile() if args.profile else None
    with arrival_ages(args.age) as ages, profiler or contextlib.nullcontext():
        propulator.propulate(debug=-1)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    gc.collect()
    # Known: stored at some point; in memory: what is left after releasing (see Propulator's Memory).
    stored, in_memory = propulator._population.n_known, len(propulator._population)
    mailbox = propulator._link.mailbox
    figures: dict[str, Any] = {
        "wall": wall,
        "cpu": cpu,
        "stored": stored,
        "in_memory": in_memory,
        "rss_growth": resident_bytes() - before,
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "messages": mailbox.messages_sent,
        "bytes": mailbox.bytes_sent,
        "ages": ages,
        "parts": profile_parts(profiler) if profiler is not None else None,
    }
    if args.summary:
        start = time.perf_counter()
        propulator.summarize(top_n=args.summary, debug=0)
        figures["summary_seconds"] = time.perf_counter() - start
    comm.Barrier()
    if comm.rank == 0:
        figures["checkpoint_bytes"] = sum(p.stat().st_size for p in Path(directory).iterdir() if p.is_file())
        if args.report:
            figures.update(time_report(directory))
        shutil.rmtree(directory)
    island_comm.Free()
    return figures


#: The part of a profile that is time spent asleep (the waits' pauses): not counted in its total.
SLEEPING = "time.sleep (wall-clock time, not in the total)"


def part_of(filename: str, name: str) -> str:
    """Return the part a profiled function belongs to (see ``--profile`` in the module docstring)."""
    if filename == "~":  # a built-in: "<built-in method _pickle.loads>", "<method 'copy' of ... objects>"
        if name == "<built-in method time.sleep>":
            return SLEEPING
        for part in ("pickle", "numpy"):
            if part in name:
                return part
        return "built-ins"
    path = filename.replace("\\", "/")
    if "/propulate/" in path:
        return "propulate/" + path.rsplit("/propulate/", 1)[1]
    for part in ("numpy", "mpi4py", "h5py"):
        if f"/{part}/" in path:
            return part
    return "standard library" if path.endswith(".py") or path.startswith("<") else path


def profile_parts(profiler: cProfile.Profile) -> dict[str, tuple[float, int]]:
    """Return ``{part: (seconds, calls)}`` of the profiled functions' own time (see :func:`part_of`)."""
    parts: dict[str, tuple[float, int]] = {}
    for (filename, _, name), (_, calls, own, *_) in pstats.Stats(profiler).stats.items():  # type: ignore[attr-defined]
        part = part_of(filename, name)
        seconds, count = parts.get(part, (0.0, 0))
        parts[part] = (seconds + own, count + calls)
    return parts


def profile_line(gathered: list[dict[str, Any]], line: dict[str, Any], top: int) -> dict[str, Any]:
    """Return the ``overhead-profile`` line of a run: its ``top`` parts summed over all ranks."""
    evaluations = line["evaluations"]
    parts: dict[str, list[float]] = {}
    for figures in gathered:
        for part, (seconds, calls) in figures["parts"].items():
            total = parts.setdefault(part, [0.0, 0.0])
            total[0] += seconds
            total[1] += calls
    ranked = sorted(parts.items(), key=lambda item: -item[1][0])
    running = sum(seconds for part, (seconds, _) in parts.items() if part != SLEEPING)
    return {
        "benchmark": "overhead-profile",
        "ranks": line["ranks"],
        "propagator": line["propagator"],
        "generations": line["generations"],
        "profiled_us_per_evaluation": 1e6 * running / evaluations,
        "parts": [
            [part, round(1e6 * seconds / evaluations, 2), round(calls / evaluations, 2)]
            for part, (seconds, calls) in ranked[:top]
        ],
    }


def time_report(directory: str) -> dict[str, Any]:
    """Run ``python -m propulate report`` on ``directory``; return its wall-clock seconds and row count."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "propulate", "report", directory], capture_output=True, text=True, check=True
    )
    seconds = time.perf_counter() - start
    # The report's counts line: "<n> finished evaluations by <w> worker(s) ...".
    rows = next(int(line.split()[0]) for line in done.stdout.splitlines() if " finished evaluations" in line)
    return {"report_seconds": seconds, "report_rows": rows}


@contextlib.contextmanager
def arrival_ages(enabled: bool = True) -> Iterator[list[float]]:
    """Within the block, record the age in seconds of every individual a population takes in by ``extend``.

    With ``enabled`` false, record nothing (and change nothing).

    Peers' results enter a worker's population through ``Population.extend`` (its own through ``add``);
    the age is the time since the evaluation ended (``evaltime``, the evaluating worker's clock: one
    machine here).
    """
    ages: list[float] = []
    if not enabled:
        yield ages
        return
    store = Population.extend

    def timed_extend(population: Population, individuals: Iterable[Individual]) -> None:
        individuals = list(individuals)
        now = time.time()
        ages.extend(now - ind.evaltime for ind in individuals)
        store(population, individuals)

    Population.extend = timed_extend  # type: ignore[method-assign,assignment]
    try:
        yield ages
    finally:
        Population.extend = store  # type: ignore[method-assign]


def measure(comm: MPI.Comm, generations: int, args: argparse.Namespace) -> dict[str, Any] | None:
    """Measure one run; rank 0 returns its JSON line."""
    gathered = comm.gather(run(comm, generations, args))
    if comm.rank != 0:
        return None
    assert gathered is not None
    wall = max(f["wall"] for f in gathered)
    evaluations = comm.size * generations
    per_evaluation = 1e6 * wall / generations
    line: dict[str, Any] = {
        "benchmark": "overhead",
        "ranks": comm.size,
        "islands": min(args.islands, comm.size),
        "propagator": args.propagator,
        "dims": args.dims,
        "sleep_s": args.sleep,
        "generations": generations,
        "evaluations": evaluations,
        "us_per_evaluation_per_worker": per_evaluation,
        "overhead_us_per_evaluation_per_worker": per_evaluation - 1e6 * args.sleep,
        "cpu_us_per_evaluation": 1e6 * sum(f["cpu"] for f in gathered) / evaluations,
        "evaluations_per_second": evaluations / wall,
        "peak_rss_bytes": max(f["peak_rss"] for f in gathered),
        "rss_growth_bytes_per_individual": max(f["rss_growth"] / max(f["stored"], 1) for f in gathered),
        "individuals_stored_per_rank": max(f["stored"] for f in gathered),
        "individuals_in_memory_per_rank": max(f["in_memory"] for f in gathered),
        "messages_per_evaluation": sum(f["messages"] for f in gathered) / evaluations,
        "bytes_per_evaluation": sum(f["bytes"] for f in gathered) / evaluations,
        "checkpoint_bytes": gathered[0]["checkpoint_bytes"],
    }
    if args.summary:
        line["summary_seconds"] = max(f["summary_seconds"] for f in gathered)
    if args.report:
        line["report_seconds"] = gathered[0]["report_seconds"]
        line["report_rows"] = gathered[0]["report_rows"]
    if args.age:
        ages = np.concatenate([np.asarray(f["ages"]) for f in gathered]) * 1e3
        if ages.size:
            line["result_age_ms_mean"] = float(ages.mean())
            line["result_age_ms_p90"] = float(np.percentile(ages, 90))
            line["result_age_ms_max"] = float(ages.max())
    if args.sleep > 0:
        line["throughput_vs_ideal"] = line["evaluations_per_second"] * args.sleep / comm.size
    if args.profile:
        line["profile"] = profile_line(gathered, line, args.profile)
    return line


def attach_floor(line: dict[str, Any], floor: dict[str, Any], prefix: str) -> None:
    """Print a floor's JSON line and add its figures to the run's ``line``, named ``prefix_...``."""
    print(json.dumps(floor), flush=True)
    line[f"{prefix}_us_per_evaluation_per_worker"] = floor["floor_us_per_evaluation_per_worker"]
    if "throughput_vs_ideal" in floor:  # measured with a sleep
        line[f"{prefix}_throughput_vs_ideal"] = floor["throughput_vs_ideal"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--generations", type=int, nargs="+", default=[5000], help="generations per worker, one run each"
    )
    parser.add_argument("--islands", type=int, default=1, help="number of islands (default 1)")
    parser.add_argument(
        "--propagator", choices=PROPAGATORS, nargs="+", default=["default"], help="one run each (default: GA)"
    )
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds the loss sleeps (default 0)")
    parser.add_argument("--dims", type=int, default=10, help="float parameters (default 10)")
    parser.add_argument(
        "--integers",
        action="store_true",
        help="integer parameters in -5..5 instead: a finite space, where workers confirm announcements",
    )
    parser.add_argument("--pop-size", type=int, default=8, help="breeding pool of the default propagator")
    parser.add_argument("--seed", type=int, default=0, help="rank r uses seed + r")
    parser.add_argument("--directory", default=None, help="parent of the temporary checkpoint directories")
    parser.add_argument("--floor", action="store_true", help="measure the floor before each run")
    parser.add_argument(
        "--synchronous-floor", action="store_true", help="with --floor: also the floor with Issend"
    )
    parser.add_argument("--ratio", action="store_true", help="print the largest run over the smallest")
    parser.add_argument(
        "--summary", type=int, default=0, help="time summarize(top_n=SUMMARY) after each run (default: no)"
    )
    parser.add_argument("--age", action="store_true", help="measure how old peers' results are on arrival")
    parser.add_argument(
        "--report", action="store_true", help="time `python -m propulate report` on each run's checkpoint"
    )
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="profile each run; print its N largest parts"
    )
    args = parser.parse_args()
    if any(g < 1 for g in args.generations) or args.islands < 1 or args.dims < 1 or args.sleep < 0:
        parser.error("--generations, --islands and --dims must be positive, --sleep non-negative")
    if args.profile < 0:
        parser.error("--profile must be a number of parts, 1 or more (0: no profile)")
    comm = MPI.COMM_WORLD
    for propagator in args.propagator:
        config = argparse.Namespace(**{**vars(args), "propagator": propagator})
        if args.floor:
            measure_floor(comm, 100, args.dims)  # warm-up (without the sleep)
        run(comm, 20, config)  # warm-up: imports, first messages, first checkpoint file
        lines = []
        for generations in args.generations:
            # The floor right before the run it is compared with: the same load on the machine.
            floor = measure_floor(comm, generations, args.dims, args.sleep) if args.floor else None
            synchronous = None
            if args.floor and args.synchronous_floor:
                synchronous = measure_floor(comm, generations, args.dims, args.sleep, synchronous=True)
            line = measure(comm, generations, config)
            if line is None:
                continue
            if synchronous is not None:
                attach_floor(line, synchronous, "synchronous_floor")
            if floor is not None:
                attach_floor(line, floor, "floor")
                if args.sleep == 0:  # with a sleep, the floor's loop sleeps too: compare throughputs instead
                    line["times_floor"] = (
                        line["overhead_us_per_evaluation_per_worker"]
                        / floor["floor_us_per_evaluation_per_worker"]
                    )
            profile = line.pop("profile", None)
            print(json.dumps(line), flush=True)
            if profile is not None:
                print(json.dumps(profile), flush=True)
            lines.append(line)
        if args.ratio and len(lines) > 1:
            smallest = min(lines, key=lambda x: x["generations"])
            largest = max(lines, key=lambda x: x["generations"])
            key = "overhead_us_per_evaluation_per_worker"
            ratio = {
                "benchmark": "overhead-ratio",
                "propagator": propagator,
                "generations": [smallest["generations"], largest["generations"]],
                "ratio_largest_to_smallest": largest[key] / smallest[key],
            }
            print(json.dumps(ratio), flush=True)


if __name__ == "__main__":
    main()
