"""Costs per worker as the number of workers grows: messages, bytes, overhead and memory per evaluation.

Issue 23 asks for costs per worker that stay flat from 8 to 10,000 ranks. This script measures them at the
sizes a machine allows and fits how they grow. It is a driver: for each number of ranks of ``--ranks`` and
each layout of ``--islands`` it starts this very file under ``mpiexec`` (``--worker``, the ``mpiexec``
next to the interpreter, a fresh temporary checkpoint directory, a timeout), prints the job's JSON line as
it comes, and at the end a Markdown table and the fits. One job: every rank is one worker of
``propulate.Islands``; ``one`` is one island of all ranks, ``eight`` islands of ``--island-size`` (8)
workers, with the ``Islands`` defaults between them (pollination, ``migration_probability`` 0.9, the
``"hypercube"`` topology: one individual per event to each of the ``ceil(log2 I)`` islands
``(i + 2**j) mod I`` of ``I``); the default propagator (``get_default_propagator(--pop-size, limits,
rng=rng)``), sphere from
``propulate.utils.benchmark_functions`` (a loss that costs nothing, so the loop is all that is measured),
``--generations`` evaluations per worker, checkpointing on. The figures, each per evaluation per worker
(all workers' counts over all evaluations, ``generations x workers``), or per rank:

``messages_per_evaluation``, ``bytes_per_evaluation``
    What the workers sent: the loop's mailbox (``propulator._link.mailbox.messages_sent`` and
    ``.bytes_sent``, one message per destination, pickled bytes) plus the alarm's (``messages_sent``/
    ``bytes_sent`` of ``propulator._stops.alarm`` where it counts them, else 0; also given alone as
    ``alarm_...``). ``..._max`` is the busiest worker's count over its own evaluations.
``overhead_us``
    Wall-clock seconds of the slowest worker in ``propulate()`` over the generations per worker, in
    microseconds: start, loop, end-of-run drain and final checkpoint, the loss costing nothing. With more
    ranks than cores this grows with ranks / cores whatever the loop costs: the ranks share the cores.
``overhead_us_core_share``
    The same times ``min(cores, ranks) / ranks`` (``cores``: the processors this process may run on): the
    overhead were each worker given a core's share of the time.
``cpu_us``
    Processor time of all ranks in ``propulate()`` (every thread) over the evaluations: what one worker
    spends per evaluation, were it alone on a core. This is the overhead figure that can stay flat on an
    oversubscribed machine.
``peak_rss_mib_max``, ``peak_rss_mib_median``, ``rss_growth_mib_max``, ``rss_growth_mib_median``
    Peak resident memory of a rank (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) after ``propulate()``,
    the largest and the median over the ranks, and its growth during the run (after minus before
    ``propulate()``; the interpreter, the imports and the ``Islands`` construction come before).
``peak_rss_mib_rank_0``, ``rss_growth_mib_rank_0``
    The same on rank 0, the first worker of the run (it plans each session and logs the progress line).
``busiest_rank``
    The rank with the most messages sent, bytes sent, peak memory, memory growth and individuals held in
    memory at the end (``stored_max``: their largest number; a long run on one island releases all but the
    best, see ``propulate.Propulator``'s *Memory*).

Each figure is then fitted against the number of workers ``N`` with ``a + b log2 N`` and ``a + b N``
(``numpy.linalg.lstsq``); the script prints both fits, their residuals, which fits better (the smaller
sum of squared residuals), and the ratio figure(largest N) / figure(smallest N) next to
log2(largest) / log2(smallest) (7/3 for 128 and 8) and largest / smallest (16): a figure grows at most
logarithmically over the sizes measured when its ratio is at most the logarithm's.

Two more modes:

``--memory-run-length``
    At ``--memory-ranks`` (64) ranks, both layouts: runs of ``--memory-evaluations`` (2,000 and 20,000)
    evaluations in all (generations per worker rounded up); peak memory per rank of each and the ratio
    longest / shortest (target <= 1.2).
``--invariants``
    A run of ``--invariant-ranks`` (128) ranks in islands of ``--island-size`` (16 islands) for the first
    of ``--invariant-generations`` (20, 60), once with migration and once with pollination, each resumed
    from its checkpoint onto the second number of ranks (64, in islands of the same size) with the second
    number of generations per worker (counted over the whole run, as ``generations`` is). After each job
    rank 0 gathers every worker's population and checks, printing PASS or FAIL for each: every worker of
    an island holds the same population (uids and active flags); the loss was called exactly as often as
    the budget leaves (``generations x workers`` less what the checkpoint held) and the workers'
    generation counters add up to the budget; exactly ``generations x workers`` individuals were evaluated
    (bred on their island, ``migration_steps == 0``, each stored once), which the checkpoint, read with
    ``propulate.checkpoint.load_checkpoint``, holds too, island by island, with the same individuals and
    flags and nothing pending or in transit; with migration, exactly one active copy of each individual
    evaluated, among its copies on all islands (a lineage: birth island, rank, generation and loss; some
    must have migrated); with pollination, on every island one individual deactivated per immigrant (and
    some immigrants). The script exits non-zero if any fails.

Usage, from the repository root::

    python benchmarks/scaling.py                                  # 8 to 128 ranks, both layouts
    python benchmarks/scaling.py --ranks 8 16 32 --islands eight --generations 200
    python benchmarks/scaling.py --memory-run-length
    python benchmarks/scaling.py --invariants

Options: ``--seed`` (rank r of a job uses ``random.Random(1000 * seed + r)``), ``--pop-size`` (8),
``--directory`` (parent of the checkpoint directories; default the system's temporary directory),
``--timeout`` (seconds allowed to one ``mpiexec`` job, 1,200), ``--output FILE`` (append every job's JSON
line, and the fits, to FILE), ``--from FILE`` (print the table and the fits of the scaling lines saved in
FILE, and exit).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from statistics import median
from typing import Any

from suite import run_mpi

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LAYOUTS = ("one", "eight")
#: The fitted figures, in table order: key, label.
FIGURES = (
    ("messages_per_evaluation", "messages / evaluation"),
    ("messages_per_evaluation_max", "messages / evaluation, busiest worker"),
    ("alarm_messages_per_evaluation", "alarm messages / evaluation"),
    ("bytes_per_evaluation", "bytes / evaluation"),
    ("bytes_per_evaluation_max", "bytes / evaluation, busiest worker"),
    ("overhead_us", "overhead, µs (wall, slowest worker)"),
    ("overhead_us_core_share", "overhead x cores / ranks, µs"),
    ("cpu_us", "CPU, µs / evaluation"),
    ("peak_rss_mib_max", "peak RSS / rank, MiB, max"),
    ("peak_rss_mib_median", "peak RSS / rank, MiB, median"),
    ("rss_growth_mib_max", "RSS growth / rank, MiB, max"),
    ("rss_growth_mib_median", "RSS growth / rank, MiB, median"),
    ("rss_growth_mib_rank_0", "RSS growth of rank 0, MiB"),
)

# ------------------------------------------------------------------------------------------------- worker


def _islands(args: argparse.Namespace, loss: Any, pollination: bool, resume: bool) -> Any:
    """Build this rank's ``Islands`` (collective) for one job of ``args``."""
    import logging

    from mpi4py import MPI

    from propulate import Islands
    from propulate.utils import get_default_propagator
    from propulate.utils.benchmark_functions import get_function_search_space

    logging.getLogger("propulate").setLevel(logging.WARNING)
    world = MPI.COMM_WORLD
    _, limits = get_function_search_space("sphere")
    rng = random.Random(1000 * args.seed + world.rank)
    return Islands(
        loss,
        get_default_propagator(args.pop_size, limits, rng=rng),
        rng,
        generations=args.generations,
        num_islands=max(1, world.size // args.island_size) if args.layout == "eight" else 1,
        pollination=pollination,
        checkpoint_path=args.checkpoint,
        resume=resume,
    )


def _sent(propulator: Any) -> tuple[int, int, int, int]:
    """Messages and bytes this worker sent: the mailbox's, then the alarm's (0 where it does not count)."""
    link, stops = getattr(propulator, "_link", None), getattr(propulator, "_stops", None)
    mail, alarm = getattr(link, "mailbox", None), None if stops is None else stops.alarm
    return (
        getattr(mail, "messages_sent", 0),
        getattr(mail, "bytes_sent", 0),
        getattr(alarm, "messages_sent", 0),
        getattr(alarm, "bytes_sent", 0),
    )


def _maxrss_mib() -> float:
    """This process's peak resident memory so far, MiB (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(args: argparse.Namespace) -> None:
    """One scaling job (collective): run, gather every rank's figures, rank 0 prints the JSON line."""
    from mpi4py import MPI

    from propulate.utils.benchmark_functions import get_function_search_space

    world = MPI.COMM_WORLD
    sphere, _ = get_function_search_space("sphere")
    islands = _islands(args, sphere, pollination=True, resume=False)
    world.Barrier()
    before = _maxrss_mib()
    cpu = time.process_time()
    start = time.perf_counter()
    islands.propulate(debug=0)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    after = _maxrss_mib()
    propulator = islands.propulator
    mine = (wall, cpu, before, after, *_sent(propulator), len(propulator._population))
    ranks = world.gather(mine, root=0)
    if world.rank != 0:
        return
    assert ranks is not None
    walls, cpus, befores, afters, messages, sizes, alarm, alarm_bytes, stored = map(
        list, zip(*ranks, strict=True)
    )
    workers, generations = world.size, args.generations
    evaluations = workers * generations
    growth = [a - b for a, b in zip(afters, befores, strict=True)]
    sent = [m + a for m, a in zip(messages, alarm, strict=True)]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    line = {
        "benchmark": "scaling",
        "layout": args.layout,
        "ranks": world.size,
        "workers": workers,
        "islands": len(islands.layout.island_counts),
        "island_size": int(max(islands.layout.island_counts)),
        "generations": generations,
        "evaluations": evaluations,
        "messages_per_evaluation": (sum(messages) + sum(alarm)) / evaluations,
        "messages_per_evaluation_max": max(sent) / generations,
        "alarm_messages_per_evaluation": sum(alarm) / evaluations,
        "bytes_per_evaluation": (sum(sizes) + sum(alarm_bytes)) / evaluations,
        "bytes_per_evaluation_max": max(s + a for s, a in zip(sizes, alarm_bytes, strict=True)) / generations,
        "overhead_us": 1e6 * max(walls) / generations,
        "overhead_us_core_share": 1e6 * max(walls) / generations * min(cores, workers) / workers,
        "cpu_us": 1e6 * sum(cpus) / evaluations,
        "peak_rss_mib_max": max(afters),
        "peak_rss_mib_median": median(afters),
        "rss_growth_mib_max": max(growth),
        "rss_growth_mib_median": median(growth),
        "peak_rss_mib_rank_0": afters[0],
        "rss_growth_mib_rank_0": growth[0],
        "stored_max": max(stored),
        # Which rank has the largest figure (ties: the lowest).
        "busiest_rank": {
            "messages": sent.index(max(sent)),
            "bytes": sizes.index(max(sizes)),
            "peak_rss": afters.index(max(afters)),
            "rss_growth": growth.index(max(growth)),
            "stored": stored.index(max(stored)),
        },
        "seconds": max(walls),
        "cores": cores,
    }
    print(json.dumps(line), flush=True)


def check_populations(
    rows: list[tuple[int, list[tuple[Any, ...]]]], births: int, pollination: bool
) -> list[tuple[str, bool, str]]:
    """The invariants of the island model over every worker's population; ``(name, passed, detail)`` each.

    ``rows`` holds, per worker, its island and its population as tuples ``(uid, active, island, rank,
    generation, loss, migration_steps)``; ``births`` is how many individuals the run evaluated in all.
    """
    by_island: dict[int, list[list[tuple[Any, ...]]]] = defaultdict(list)
    for island, population in rows:
        by_island[island].append(population)
    differing = [
        island
        for island, populations in sorted(by_island.items())
        if any(sorted(p[:2] for p in other) != sorted(p[:2] for p in populations[0]) for other in populations)
    ]
    islands = {island: populations[0] for island, populations in by_island.items()}
    checks = [
        (
            "every worker of an island holds the same population (uids, active flags)",
            not differing,
            f"{len(by_island)} islands, {len(rows)} workers"
            + (f"; differ on {differing}" if differing else ""),
        )
    ]
    born = Counter(ind[0] for population in islands.values() for ind in population if ind[6] == 0)
    stored_twice = sum(1 for count in born.values() if count > 1)
    checks.append(
        (
            "individuals evaluated = generations x workers, each stored once",
            len(born) == births and not stored_twice,
            f"{len(born)} evaluated, {births} expected"
            + (f", {stored_twice} stored twice" if stored_twice else ""),
        )
    )
    everything = [ind for population in islands.values() for ind in population]
    immigrants = sum(1 for ind in everything if ind[6] > 0)
    if pollination:
        unbalanced = [
            (island, sum(ind[6] > 0 for ind in population), sum(not ind[1] for ind in population))
            for island, population in sorted(islands.items())
        ]
        unbalanced = [entry for entry in unbalanced if entry[1] != entry[2]]
        checks.append(
            (
                "pollination: one individual deactivated per immigrant on every island",
                immigrants > 0 and not unbalanced,
                f"{immigrants} immigrants"
                + (f"; (island, immigrants, deactivated): {unbalanced}" if unbalanced else ""),
            )
        )
    else:
        lineages: dict[tuple[Any, ...], list[bool]] = defaultdict(list)
        for ind in everything:
            lineages[ind[2:6]].append(ind[1])
        migrated = [key for key, flags in lineages.items() if len(flags) > 1]
        wrong = [key for key, flags in lineages.items() if sum(flags) != 1]
        births_per_key = Counter(ind[2:6] for ind in everything if ind[6] == 0)
        ambiguous = sum(1 for count in births_per_key.values() if count > 1)
        checks.append(
            (
                "migration: exactly one active copy of each lineage (every individual, migrants included)",
                bool(migrated) and not wrong and not ambiguous and len(lineages) == len(born),
                f"{len(migrated)} lineages migrated ({immigrants} immigrant copies), {len(wrong)} lineages "
                f"with another number of active copies than 1, {len(lineages) - len(born)} without a birth, "
                f"{ambiguous} ambiguous keys",
            )
        )
    return checks


def check(args: argparse.Namespace) -> None:
    """One invariants job (collective): run or resume, gather the populations, rank 0 checks and prints."""
    from mpi4py import MPI

    from propulate.checkpoint import load_checkpoint
    from propulate.utils.benchmark_functions import get_function_search_space

    world = MPI.COMM_WORLD
    sphere, _ = get_function_search_space("sphere")
    calls = 0

    def loss(params: Any) -> float:
        nonlocal calls
        calls += 1
        return sphere(params)

    islands = _islands(args, loss, pollination=args.pollination, resume=args.resume)
    done = islands.propulator.generation
    islands.propulate(debug=0)
    propulator, layout = islands.propulator, islands.layout
    population = [
        (
            ind.uid,
            bool(ind.active),
            ind.island,
            ind.rank,
            ind.generation,
            float(ind.loss),
            ind.migration_steps,
        )
        for ind in propulator.population
    ]
    gathered = world.gather((layout.island_index, calls, done, propulator.generation, population), root=0)
    world.Barrier()  # every checkpoint is closed
    failed = False
    if world.rank == 0:
        assert gathered is not None
        workers = world.size
        before = sum(row[2] for row in gathered)
        budget = max(before, args.generations * workers)
        checks = check_populations([(row[0], row[4]) for row in gathered], budget, args.pollination)
        made, counters = sum(row[1] for row in gathered), sum(row[3] for row in gathered)
        checks.insert(
            1,
            (
                "loss calls = budget less the checkpoint's; generation counters add up to the budget",
                made == budget - before and counters == budget,
                f"{made} calls, {budget - before} expected ({budget} in all, {before} before); "
                f"counters {counters}",
            ),
        )
        checkpoint = load_checkpoint(args.checkpoint)
        stored = {island: sorted(p[:2] for p in population) for island, _, _, _, population in gathered}
        read = (
            {}
            if checkpoint is None
            else {
                i: sorted((ind.uid, bool(ind.active)) for ind in p) for i, p in checkpoint.populations.items()
            }
        )
        left = (
            (-1, -1)
            if checkpoint is None
            else (
                sum(len(p) for p in checkpoint.pending.values()),
                sum(len(p) for p in checkpoint.in_transit.values()),
            )
        )
        differ = sorted(i for i in set(stored) | set(read) if stored.get(i) != read.get(i))
        checks.append(
            (
                "the checkpoint holds the same populations, nothing pending or in transit",
                checkpoint is not None and not differ and left == (0, 0),
                f"{len(read)} islands read, differ on {differ}; pending {left[0]}, in transit {left[1]}",
            )
        )
        run = "pollination" if args.pollination else "migration"
        session = "resumed" if args.resume else "fresh"
        size = f"{workers} ranks, {len(layout.island_counts)} islands, {args.generations} generations"
        where = f"{run}, {session}, {size}"
        for name, passed, detail in checks:
            print(f"{'PASS' if passed else 'FAIL'} [{where}] {name}: {detail}", flush=True)
        failed = not all(passed for _, passed, _ in checks)
        line = {
            "benchmark": "scaling-invariants",
            "exchange": run,
            "session": session,
            "ranks": workers,
            "islands": len(layout.island_counts),
            "generations": args.generations,
            "calls": made,
            "evaluated": budget,
            "passed": not failed,
        }
        print(json.dumps(line), flush=True)
    if world.bcast(failed, root=0):
        sys.exit(1)


# ------------------------------------------------------------------------------------------------- driver


def launch(ranks: int, options: list[str], timeout: float) -> tuple[int, str, float]:
    """Run this file with ``options`` on ``ranks`` ranks (:func:`suite.run_mpi`): status, output, seconds."""
    return run_mpi(Path(__file__).resolve(), ranks, options, timeout)


def worker_options(args: argparse.Namespace, layout: str, generations: int, checkpoint: Path) -> list[str]:
    """The command line of one job of ``args``."""
    return [
        "--worker",
        "--layout",
        layout,
        "--generations",
        str(generations),
        "--island-size",
        str(args.island_size),
        "--pop-size",
        str(args.pop_size),
        "--seed",
        str(args.seed),
        "--checkpoint",
        str(checkpoint),
    ]


def emit(args: argparse.Namespace, line: dict[str, Any]) -> None:
    """Print a JSON line and append it to ``--output``."""
    text = json.dumps(line)
    print(text, flush=True)
    if args.output is not None:
        with open(args.output, "a") as file:
            file.write(text + "\n")


def scaling_job(args: argparse.Namespace, layout: str, ranks: int, generations: int) -> dict[str, Any]:
    """Run one scaling job; return its JSON line with the job's wall time (``job_seconds``) added."""
    with tempfile.TemporaryDirectory(prefix="propulate-scaling-", dir=args.directory) as scratch:
        options = worker_options(args, layout, generations, Path(scratch) / "checkpoint")
        load = os.getloadavg()[0]
        status, output, seconds = launch(ranks, options, args.timeout)
    lines = [json.loads(text) for text in output.splitlines() if text.startswith('{"benchmark"')]
    if status != 0 or not lines:
        sys.exit(f"scaling.py: the job of {ranks} ranks ({layout}) failed ({status}):\n{output[-5000:]}")
    line = {**lines[-1], "job_seconds": seconds, "load_before": load}
    emit(args, line)
    return line


def fit(workers: list[int], values: list[float]) -> dict[str, Any]:
    """Fit ``values`` against ``workers`` with ``a + b log2 N`` and ``a + b N``; ratios of the ends."""
    import numpy as np

    x, y = np.asarray(workers, dtype=float), np.asarray(values, dtype=float)
    result: dict[str, Any] = {}
    for name, column in (("log", np.log2(x)), ("linear", x)):
        design = np.column_stack([np.ones_like(x), column])
        (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
        residuals = y - design @ np.array([a, b])
        result[name] = {
            "a": float(a),
            "b": float(b),
            "residuals": [float(r) for r in residuals],
            "rss": float(residuals @ residuals),
        }
    small, large = int(np.argmin(x)), int(np.argmax(x))
    # Both (nearly) exact, e.g. through two points or a constant: neither model is told apart.
    exact = 1e-12 * max(1.0, float(y @ y))
    log_rss, linear_rss = result["log"]["rss"], result["linear"]["rss"]
    result["better"] = (
        "tie" if max(log_rss, linear_rss) <= exact else "log" if log_rss <= linear_rss else "linear"
    )
    result["ratio"] = float(y[large] / y[small]) if y[small] else math.inf if y[large] else 1.0
    result["log_ratio"] = float(np.log2(x[large]) / np.log2(x[small])) if x[small] > 1 else math.inf
    result["linear_ratio"] = float(x[large] / x[small])
    result["at_most_logarithmic"] = result["ratio"] <= result["log_ratio"] * (1 + 1e-9)
    return result


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def scaling_table(lines: list[dict[str, Any]]) -> str:
    """A Markdown table of the scaling runs."""
    header = (
        "| layout | ranks | islands | messages/eval. (max) | alarm msgs/eval. | bytes/eval. (max) "
        "| overhead, µs | x cores / ranks | CPU µs/eval. | peak RSS MiB max / median "
        "| RSS growth MiB max / median | job s |\n" + "| --- " * 12 + "|"
    )
    rows = [
        f"| {line['layout']} | {line['ranks']} | {line['islands']} "
        f"| {line['messages_per_evaluation']:.2f} ({line['messages_per_evaluation_max']:.2f}) "
        f"| {line['alarm_messages_per_evaluation']:.3g} "
        f"| {line['bytes_per_evaluation']:,.0f} ({line['bytes_per_evaluation_max']:,.0f}) "
        f"| {line['overhead_us']:,.0f} | {line.get('overhead_us_core_share', math.nan):,.0f} "
        f"| {line['cpu_us']:,.0f} | {line['peak_rss_mib_max']:.1f} / {line['peak_rss_mib_median']:.1f} "
        f"| {line['rss_growth_mib_max']:.1f} / {line['rss_growth_mib_median']:.1f} "
        f"| {line['job_seconds']:.0f} |"
        for line in lines
    ]
    return "\n".join([header, *rows])


def fits(layout: str, lines: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Both fits of every figure of one layout's runs: a Markdown table and residuals, and the fits."""
    lines = sorted(lines, key=lambda line: line["workers"])
    workers = [line["workers"] for line in lines]
    small, large = workers[0], workers[-1]
    header = (
        f"| {layout}: figure | N={small} | N={large} | ratio | a + b·log2 N (rms resid.) "
        "| a + b·N (rms resid.) | better | at most log |\n" + "| --- " * 8 + "|"
    )
    rows, residuals, results = [], [f"residuals at N = {', '.join(map(str, workers))}:"], []
    for key, label in FIGURES:
        if any(key not in line for line in lines):  # saved by an earlier version of this script
            continue
        values = [line[key] for line in lines]
        result = fit(workers, values)
        log, linear = result["log"], result["linear"]
        rms = {name: math.sqrt(result[name]["rss"] / len(values)) for name in ("log", "linear")}
        rows.append(
            f"| {label} | {_number(values[0])} | {_number(values[-1])} | {result['ratio']:.2f} "
            f"| {_number(log['a'])} + {_number(log['b'])}·log2 N ({_number(rms['log'])}) "
            f"| {_number(linear['a'])} + {_number(linear['b'])}·N ({_number(rms['linear'])}) "
            f"| {result['better']} | {'yes' if result['at_most_logarithmic'] else 'no'} |"
        )
        residuals.append(
            f"  {label}: log [{', '.join(_number(r) for r in log['residuals'])}]; "
            f"linear [{', '.join(_number(r) for r in linear['residuals'])}]"
        )
        results.append(
            {"benchmark": "scaling-fit", "layout": layout, "figure": key, "workers": workers, **result}
        )
    ratios = (
        f"ratio = figure(N={large}) / figure(N={small}); for comparison log2({large}) / log2({small}) = "
        f"{results[0]['log_ratio']:.3f} and {large} / {small} = {large / small:.3g}"
    )
    return "\n".join([header, *rows, "", ratios, *residuals]), results


def report(args: argparse.Namespace, lines: list[dict[str, Any]]) -> None:
    """Print the table of the scaling runs and, per layout with several sizes, the fits."""
    print()
    print(scaling_table(lines))
    for layout in LAYOUTS:
        mine = [line for line in lines if line["layout"] == layout]
        if len({line["workers"] for line in mine}) > 1:
            text, results = fits(layout, mine)
            print()
            print(text)
            if args.output is not None:
                with open(args.output, "a") as file:
                    file.writelines(json.dumps(result) + "\n" for result in results)


def scaling(args: argparse.Namespace) -> None:
    """The scaling runs, their table and fits."""
    start = time.perf_counter()
    lines = [
        scaling_job(args, layout, ranks, args.generations) for layout in args.islands for ranks in args.ranks
    ]
    report(args, lines)
    print(f"\n{len(lines)} jobs in {time.perf_counter() - start:.0f} s", flush=True)


def memory_run_length(args: argparse.Namespace) -> None:
    """Peak memory per rank of a short and a long run, both layouts, and their ratio."""
    ranks = args.memory_ranks
    print("| layout | evaluations | generations | peak RSS MiB max / median | RSS growth MiB max / median |")
    print("| --- | --- | --- | --- | --- |")
    summary = []
    for layout in args.islands:
        lines = [
            scaling_job(args, layout, ranks, math.ceil(evaluations / ranks))
            for evaluations in args.memory_evaluations
        ]
        for line in lines:
            print(
                f"| {layout} | {line['evaluations']:,} | {line['generations']} "
                f"| {line['peak_rss_mib_max']:.1f} / {line['peak_rss_mib_median']:.1f} "
                f"| {line['rss_growth_mib_max']:.1f} / {line['rss_growth_mib_median']:.1f} |",
                flush=True,
            )
        first, last = lines[0], lines[-1]
        for which in ("max", "median"):
            ratio = last[f"peak_rss_mib_{which}"] / first[f"peak_rss_mib_{which}"]
            summary.append(
                f"{layout}, {ranks} ranks: peak RSS per rank ({which}) at {last['evaluations']:,} / at "
                f"{first['evaluations']:,} evaluations = {ratio:.3f} (target <= 1.2): "
                f"{'met' if ratio <= 1.2 else 'missed'}"
            )
    print("\n".join(["", *summary]), flush=True)


def invariants(args: argparse.Namespace) -> None:
    """The invariants runs: fresh, then resumed onto other ranks; exit non-zero if any check fails."""
    (first, second), (generations, more) = args.invariant_ranks, args.invariant_generations
    failed = False
    for pollination in (False, True):
        with tempfile.TemporaryDirectory(prefix="propulate-invariants-", dir=args.directory) as scratch:
            checkpoint = Path(scratch) / "checkpoint"
            for ranks, budget, resume in ((first, generations, False), (second, more, True)):
                options = [*worker_options(args, "eight", budget, checkpoint), "--check"]
                options += ["--pollination"] * pollination + ["--resume"] * resume
                status, output, seconds = launch(ranks, options, args.timeout)
                verdicts = [text for text in output.splitlines() if text.startswith(("PASS ", "FAIL "))]
                print("\n".join(verdicts), flush=True)
                for text in output.splitlines():
                    if text.startswith('{"benchmark"'):
                        emit(args, {**json.loads(text), "job_seconds": seconds})
                if status != 0 and not any(text.startswith("FAIL ") for text in verdicts):
                    print(
                        f"FAIL the job of {ranks} ranks exited with {status}:\n{output[-5000:]}", flush=True
                    )
                failed = failed or status != 0 or not verdicts
    print("invariants: " + ("FAILED" if failed else "all passed"), flush=True)
    if failed:
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64, 128], help="one job each")
    parser.add_argument("--islands", nargs="+", choices=LAYOUTS, default=list(LAYOUTS), help="layouts")
    parser.add_argument("--island-size", type=int, default=8, help="workers per island of 'eight' (8)")
    parser.add_argument("--generations", type=int, default=100, help="evaluations per worker (100)")
    parser.add_argument("--pop-size", type=int, default=8, help="pop_size of the default propagator (8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-run-length", action="store_true", help="short against long runs' memory")
    parser.add_argument("--memory-ranks", type=int, default=64)
    parser.add_argument("--memory-evaluations", type=int, nargs=2, default=[2000, 20000])
    parser.add_argument("--invariants", action="store_true", help="check the island model's invariants")
    parser.add_argument("--invariant-ranks", type=int, nargs=2, default=[128, 64], help="fresh, resumed")
    parser.add_argument("--invariant-generations", type=int, nargs=2, default=[20, 60], help="fresh, resumed")
    parser.add_argument("--directory", default=None, help="parent of the checkpoint directories")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds allowed to one mpiexec job")
    parser.add_argument("--output", type=Path, help="append every JSON line to this file")
    parser.add_argument("--from", dest="saved", type=Path, help="print the table and fits of saved lines")
    # One job's own options (under mpiexec).
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--layout", choices=LAYOUTS, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    parser.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pollination", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        (check if args.check else measure)(args)
        return
    if any(os.environ.get(name) for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")):
        parser.error("run it without mpiexec: it starts its own mpiexec jobs")
    if min(args.ranks) < 1 or args.island_size < 1 or args.generations < 1 or args.pop_size < 1:
        parser.error("--ranks, --island-size, --generations and --pop-size must be positive")
    if args.saved is not None:
        saved = [json.loads(text) for text in args.saved.read_text().splitlines() if text.strip()]
        report(
            argparse.Namespace(output=None), [line for line in saved if line.get("benchmark") == "scaling"]
        )
    elif args.invariants:
        invariants(args)
    elif args.memory_run_length:
        memory_run_length(args)
    else:
        scaling(args)


if __name__ == "__main__":
    main()
