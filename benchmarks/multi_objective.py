"""Multi-objective search: hypervolume of propulate's NSGA-II against Optuna's and random search.

The problems, all minimized over the unit cube (defined below with numpy):

- ZDT1, ZDT2, ZDT3 (Zitzler, Deb & Thiele 2000, "Comparison of multiobjective evolutionary algorithms:
  empirical results", Evolutionary Computation 8(2)): ``n = 30`` variables, 2 objectives. The Pareto set
  is ``x_2 = ... = x_n = 0`` (``g = 1``); the front is ``f2 = 1 - sqrt(f1)`` (convex), ``f2 = 1 - f1**2``
  (concave) and, for ZDT3, the nondominated pieces of ``f2 = 1 - sqrt(f1) - f1 sin(10 pi f1)``
  (disconnected).
- DTLZ2 (Deb, Thiele, Laumanns & Zitzler 2002, "Scalable multi-objective optimization test problems",
  CEC 2002): 3 objectives, ``n = 12`` variables (``k = n - M + 1 = 10`` distance variables); the front is
  the octant of the unit sphere.

Hypervolume. The volume dominated by a run's evaluations and bounded by the reference point, (1.1, 1.1) for
the ZDT problems and (1.1, 1.1, 1.1) for DTLZ2, computed by ``propulate.objectives.hypervolume`` (which
wraps the ``moocore`` package); evaluations that do not dominate the reference point strictly contribute
nothing. Dominated evaluations add nothing either, so the hypervolume of all evaluations is that
of their nondominated set. The "true front" line of each table is the hypervolume of a dense sample of
the analytic front (100,001 points of ``f1`` for ZDT, a 1,601 x 1,601 grid of the two angles for DTLZ2), next
to the closed form where one exists (ZDT1 ``0.11 + 0.1 + 2/3``, ZDT2 ``0.11 + 0.1 + 1/3``, DTLZ2
``1.1**3 - pi/6``). The regret of a run is the closed form (the dense sample's hypervolume for ZDT3) minus
the run's hypervolume; the sample of DTLZ2's sphere falls short of the closed form by about 4e-4.

Budgets. Every run has 2,000 evaluations (``--evaluations``); its hypervolume is that of its first 2,000
evaluations in the order in which they ended. The methods, with seeds 0, ..., ``--seeds - 1``:

``propulate``
    One island of 8 workers: this file re-invoked as ``mpiexec -n 8 python multi_objective.py --worker``
    (the ``mpiexec`` next to the interpreter, a fresh temporary checkpoint directory, ``--timeout``
    seconds), every rank with ``rng = random.Random(1000 * seed + rank)``, the propagator
    ``propulate.propagators.NSGA2(limits, pop_size=--pop-size, rng=rng)`` over the limits
    ``x_i in (0.0, 1.0)``, ``propulate.Propulator(..., objectives=M, generations=250)`` (250 x 8 = 2,000
    evaluations). The loss function returns the tuple of the M objectives and records, on each rank, when
    each evaluation started and ended and its objectives; rank 0 gathers the records, orders them by their
    end and computes the hypervolume of the first 2,000. As a check of the library's export, it also reads
    the run back with ``propulate.report.load_dataframe`` (columns ``values_0``, ``values_1``, ..., the
    completed rows ordered by ``datetime_complete``) and reports that hypervolume too
    (``hypervolume_checkpoint``).
    ``--pop-size`` is 50, ``NSGA2``'s default and the population of Optuna's sampler, so that both keep
    populations of one size; it was fixed before any run of either (Deb, Pratap, Agarwal & Meyarivan 2002
    used 100 for 25,000 evaluations, where 2,000 would make 20 generations).
``optuna-nsga2``
    ``optuna.samplers.NSGAIISampler(seed=seed)`` with its defaults (population 50, uniform crossover,
    mutation by resampling), ``optuna.create_study(directions=["minimize"] * M)``, ``suggest_float(f"x{i}",
    0, 1)`` for every variable, ``study.optimize(objective, n_trials=2000)``: sequential, in this process.
``random``
    2,000 points drawn uniformly with ``numpy.random.default_rng(seed)``.

Propulate's workers breed without the results still being evaluated by the other seven; that is the price
of the parallelism, which Optuna, sequential here, does not pay. Each run prints one JSON line (appended to
``--output``): ``problem``, ``method``, ``seed``, ``hypervolume``, ``evaluations``, ``seconds`` (the run's
wall-clock time: Optuna's ``optimize``, or the slowest rank's ``propulate()``) and ``version``; propulate's
runs add ``pop_size``, ``workers``, ``generations``, ``launch_seconds`` (the whole ``mpiexec`` job),
``breeding_cpu_us`` (processor microseconds of the propagator per bred individual, see below) and
``hypervolume_checkpoint`` with ``checkpoint_rows`` (or ``checkpoint_error``). At the end one Markdown
table per problem gives, per method, the median hypervolume [25th, 75th percentile] over the seeds, the
median regret, how many runs reached the reference box (hypervolume > 0), the two-sided Mann-Whitney U
p-value of the method's sample against propulate's
(``scipy.stats.mannwhitneyu``) and the median ``seconds``, then the line "propulate median >= optuna-nsga2
on K of 4 problems".

Breeding cost (``--breeding-cost``). One run of propulate on ZDT1 with ``--breeding-ranks`` (8) ranks and
``--breeding-evaluations`` (20,000) evaluations in all (generations per worker rounded up), the loss costing
nothing beyond ZDT1 itself, seed 0. ``NSGA2`` works in two places: ``__call__`` breeds a child from its
population after NSGA-II's selection has kept the best ``pop_size`` of it and of what arrived since the last
breeding (one sort per breeding), and ``observe``, called by the loop on every worker for every evaluation of
the island (its own and its peers'), adds the result to the population (no sort). A subclass calls both
unchanged and records the wall-clock (``time.perf_counter``) and processor (``time.thread_time``) seconds of
every call, with the time it ended. A call belongs to the island's evaluation count at that time (the number
of evaluations of all workers that had ended, from the gathered records). The table gives, per window of 1,000
counts (0, 1,000, 10,000 and 19,000 onward), the mean microseconds per ``__call__`` and per ``observe``, the
propagator's time per bred individual (all ``__call__`` and ``observe`` time of the window over its
``__call__`` count: about one breeding and eight observes per evaluation of a worker), and the loop's time
between two evaluations of a worker (the end of one to the start of the next: taking in messages, ``observe``,
breeding, checkpointing), then the ratio of the last window to the first, which is near 1 when breeding costs
O(1) per individual as the run grows. With more ranks than cores the wall-clock figures include waiting for a
core; the processor times do not. The first window also holds each rank's first calls (loading ``moocore``,
warming caches) and the uniform draws before ``pop_size`` results.

Measured (a shared 2-core virtual machine, 8 ranks oversubscribed; propulate 2.0.0.dev0, Optuna 5.0.0): one
comparison of 4 problems x 10 seeds takes 4 to 6 minutes (a propulate run 1 to 3 s plus 2 to 3 s to start
``mpiexec``, an Optuna run 1.3 to 4.6 s), the breeding-cost run 10 to 25 s. Propulate's runs are not
reproducible from their seed: which results a worker has when it breeds depends on timing. Seeds 0-19, median
hypervolume [IQR], propulate against Optuna's NSGA-II: ZDT1 0.530 [0.448, 0.570] against 0.324 (p = 3e-7),
ZDT2 0 [0, 0.019] against 0 [0, 0.006] (6 and 8 of 20 runs reach the reference box; p = 1), ZDT3 0.852
against 0.750 (p = 3e-5), DTLZ2 0.678 against 0.671 (p = 0.35). NSGA2's distribution indices are 10;
with Deb et al.'s 20, its default until these comparisons, propulate had 0.376, 0 (no run in the box;
p = 0.002 against Optuna), 0.730 (p = 0.76) and 0.697: the indices were chosen with these problems and
checked on three held out of them (see the docstring of ``propulate.propagators.nsga2``). The breeding cost
did not grow: processor time per bred individual 1.02 times as much at 19,000-20,000 evaluations as at
0-1,000 with 8 ranks on 2 cores, 0.90 times on 16 cores (465 us).

Usage, from the repository root with the project's environment::

    python benchmarks/multi_objective.py --seeds 10 --output mo.jsonl          # the comparison
    python benchmarks/multi_objective.py --breeding-cost --output mo.jsonl     # the breeding cost
    python benchmarks/multi_objective.py --from mo.jsonl                       # the tables again
    python benchmarks/multi_objective.py --problems zdt1 --seeds 2 --methods optuna-nsga2 random

``--resume`` skips the runs already in ``--output``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from suite import run_mpi

REPO = Path(__file__).resolve().parents[1]
METHODS = ("propulate", "optuna-nsga2", "random")
# Width of a window of the breeding-cost run, in island evaluations.
WINDOW = 1000

# --------------------------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class Problem:
    """A test problem: ``evaluate`` maps points, shape (n_points, n_var), to objectives (n_points, n_obj)."""

    name: str
    n_var: int
    n_obj: int
    reference: tuple[float, ...]
    evaluate: Callable[[np.ndarray], np.ndarray]
    front: Callable[[], np.ndarray]
    # The hypervolume of the analytic front, where it has a closed form.
    exact: float | None = None


def _zdt(h: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """ZDT's ``f1 = x_1``, ``f2 = g h(f1, g)``, ``g = 1 + 9 mean(x_2..x_n)`` (Zitzler et al. 2000)."""

    def evaluate(x: np.ndarray) -> np.ndarray:
        f1 = x[:, 0]
        g = 1.0 + 9.0 * x[:, 1:].mean(axis=1)
        return np.column_stack([f1, g * h(f1, g)])

    return evaluate


def _zdt_front(h: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[], np.ndarray]:
    """The curve ``g = 1`` of a ZDT problem; its dominated points add nothing to the hypervolume."""

    def front() -> np.ndarray:
        f1 = np.linspace(0.0, 1.0, 100_001)
        return np.column_stack([f1, h(f1, np.ones_like(f1))])

    return front


def _zdt1_h(f1: np.ndarray, g: np.ndarray) -> np.ndarray:
    return 1.0 - np.sqrt(f1 / g)


def _zdt2_h(f1: np.ndarray, g: np.ndarray) -> np.ndarray:
    return 1.0 - (f1 / g) ** 2


def _zdt3_h(f1: np.ndarray, g: np.ndarray) -> np.ndarray:
    return 1.0 - np.sqrt(f1 / g) - f1 / g * np.sin(10.0 * np.pi * f1)


def _dtlz2_objectives(angles: np.ndarray, radius: np.ndarray) -> np.ndarray:
    """``f_i = r cos(x_1 pi/2) ... cos(x_{M-i} pi/2) sin(x_{M-i+1} pi/2)`` (Deb et al. 2002, eq. (6))."""
    n_obj = angles.shape[1] + 1
    cos, sin = np.cos(angles * np.pi / 2), np.sin(angles * np.pi / 2)
    f = np.empty((angles.shape[0], n_obj))
    for i in range(n_obj):
        f[:, i] = radius * np.prod(cos[:, : n_obj - 1 - i], axis=1)
        if i > 0:
            f[:, i] *= sin[:, n_obj - 1 - i]
    return f


def _dtlz2(x: np.ndarray) -> np.ndarray:
    # The last k = n - M + 1 variables are the distance variables; 3 objectives.
    g = ((x[:, 2:] - 0.5) ** 2).sum(axis=1)
    return _dtlz2_objectives(x[:, :2], 1.0 + g)


def _dtlz2_front() -> np.ndarray:
    grid = np.linspace(0.0, 1.0, 1601)
    angles = np.stack(np.meshgrid(grid, grid), axis=-1).reshape(-1, 2)
    return _dtlz2_objectives(angles, np.ones(len(angles)))


PROBLEMS = {
    "zdt1": Problem("zdt1", 30, 2, (1.1, 1.1), _zdt(_zdt1_h), _zdt_front(_zdt1_h), 0.11 + 0.1 + 2 / 3),
    "zdt2": Problem("zdt2", 30, 2, (1.1, 1.1), _zdt(_zdt2_h), _zdt_front(_zdt2_h), 0.11 + 0.1 + 1 / 3),
    "zdt3": Problem("zdt3", 30, 2, (1.1, 1.1), _zdt(_zdt3_h), _zdt_front(_zdt3_h)),
    "dtlz2": Problem("dtlz2", 12, 3, (1.1, 1.1, 1.1), _dtlz2, _dtlz2_front, 1.1**3 - math.pi / 6),
}


def hypervolume(points: np.ndarray, reference: tuple[float, ...]) -> float:
    """Hypervolume of ``points``, shape (n_points, n_obj), up to ``reference``, every objective minimized."""
    from propulate.objectives import hypervolume as library_hypervolume

    return library_hypervolume(np.asarray(points, dtype=float).reshape(-1, len(reference)), reference)


# ------------------------------------------------------------------------------------- optuna, random


def run_optuna(problem: Problem, seed: int, evaluations: int) -> dict[str, Any]:
    """One sequential run of Optuna's NSGA-II sampler with its defaults."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.NSGAIISampler(seed=seed)
    study = optuna.create_study(directions=["minimize"] * problem.n_obj, sampler=sampler)

    def objective(trial: Any) -> tuple[float, ...]:
        x = np.array([[trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(problem.n_var)]])
        return tuple(float(v) for v in problem.evaluate(x)[0])

    start = time.perf_counter()
    study.optimize(objective, n_trials=evaluations)
    seconds = time.perf_counter() - start
    values = np.array([trial.values for trial in study.trials[:evaluations]])
    return {
        "hypervolume": hypervolume(values, problem.reference),
        "evaluations": len(values),
        "seconds": seconds,
        "version": optuna.__version__,
    }


def run_random(problem: Problem, seed: int, evaluations: int) -> dict[str, Any]:
    """Uniform random search."""
    start = time.perf_counter()
    x = np.random.default_rng(seed).random((evaluations, problem.n_var))
    values = problem.evaluate(x)
    return {
        "hypervolume": hypervolume(values, problem.reference),
        "evaluations": evaluations,
        "seconds": time.perf_counter() - start,
        "version": np.__version__,
    }


# ------------------------------------------------------------------------------------- propulate worker

# Each rank's records: (start, end, objectives, processor time at start, at end) of every evaluation,
# written by the loss function, and (end, wall seconds, processor seconds) of every call of the
# propagator's ``__call__`` and ``observe``; times are epoch seconds, processor times the thread's.
_EVALUATIONS: list[tuple[float, float, tuple[float, ...], float, float]] = []
_CALLS: list[tuple[float, float, float]] = []
_OBSERVES: list[tuple[float, float, float]] = []


def _timed(base: type) -> type:
    """``base`` with every ``__call__`` and ``observe`` timed; its behaviour is unchanged."""

    def timing(records: list[tuple[float, float, float]], method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(self: Any, *args: Any) -> Any:
            wall, cpu = time.perf_counter(), time.thread_time()
            out = method(self, *args)
            records.append((time.time(), time.perf_counter() - wall, time.thread_time() - cpu))
            return out

        return timed

    return type(
        f"Timed{base.__name__}",
        (base,),
        {"__call__": timing(_CALLS, base.__call__), "observe": timing(_OBSERVES, base.observe)},
    )


def _checkpoint_hypervolume(path: str, problem: Problem, evaluations: int) -> dict[str, Any]:
    """The hypervolume of the run as ``propulate.report.load_dataframe`` reads it back."""
    from propulate.report import load_dataframe

    try:
        frame = load_dataframe(path)
        columns = [f"values_{i}" for i in range(problem.n_obj)]
        done = frame[frame["state"] == "COMPLETE"].sort_values("datetime_complete", kind="stable")
        done = done.head(evaluations)
        return {
            "hypervolume_checkpoint": hypervolume(done[columns].to_numpy(float), problem.reference),
            "checkpoint_rows": len(frame),
        }
    except Exception as error:  # reported, not fatal: the gathered records are the measurement
        return {"checkpoint_error": f"{type(error).__name__}: {error}"}


def worker(args: argparse.Namespace) -> None:
    """One propulate run on all ranks; rank 0 prints its JSON line."""
    from mpi4py import MPI

    import propulate
    from propulate.propagators import NSGA2

    comm = MPI.COMM_WORLD
    problem = PROBLEMS[args.problem]
    names = [f"x{i}" for i in range(problem.n_var)]

    def loss(params: Any) -> tuple[float, ...]:
        start, cpu = time.time(), time.thread_time()
        x = np.array([[params[name] for name in names]], dtype=float)
        values = tuple(float(v) for v in problem.evaluate(x)[0])
        _EVALUATIONS.append((start, time.time(), values, cpu, time.thread_time()))
        return values

    rng = random.Random(1000 * args.seed + comm.rank)
    limits = {name: (0.0, 1.0) for name in names}
    propagator = _timed(NSGA2)(limits, pop_size=args.pop_size, rng=rng)
    propulator = propulate.Propulator(
        loss,
        propagator,
        rng=rng,
        island_comm=comm,
        generations=args.generations,
        checkpoint_path=args.checkpoint,
        objectives=problem.n_obj,
    )
    comm.barrier()
    start = time.perf_counter()
    propulator.propulate()
    seconds = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    gathered = comm.gather((_EVALUATIONS, _CALLS, _OBSERVES), root=0)
    comm.barrier()
    if comm.rank != 0:
        return

    evaluations = sorted((e for own, _, _ in gathered for e in own), key=lambda e: e[1])
    calls = [c for _, own, _ in gathered for c in own]
    observes = [o for _, _, own in gathered for o in own]
    result: dict[str, Any] = {
        "problem": args.problem,
        "method": "propulate",
        "seed": args.seed,
        "pop_size": args.pop_size,
        "workers": comm.size,
        "generations": args.generations,
        "evaluations": len(evaluations),
        "seconds": seconds,
        "version": propulate.__version__,  # also where propulate is on PYTHONPATH, not installed
    }
    if args.breeding_cost:
        result["benchmark"] = "breeding_cost"
        result.update(_breeding_windows(evaluations, calls, observes, gathered, args.windows))
    else:
        result["benchmark"] = "hypervolume"
        values = np.array([e[2] for e in evaluations[: args.evaluations]])
        result["hypervolume"] = hypervolume(values, problem.reference)
        # Processor time of the propagator (breeding and taking in results) per bred individual.
        result["breeding_cpu_us"] = (
            1e6 * (sum(c[2] for c in calls) + sum(o[2] for o in observes)) / len(calls)
        )
        result.update(_checkpoint_hypervolume(args.checkpoint, problem, args.evaluations))
    print(json.dumps(result), flush=True)


def _breeding_windows(
    evaluations: list[tuple[float, float, tuple[float, ...], float, float]],
    calls: list[tuple[float, float, float]],
    observes: list[tuple[float, float, float]],
    gathered: list[Any],
    windows: list[int],
) -> dict[str, Any]:
    """Mean propagator and loop times per window of the island's evaluation count (see the docstring)."""
    ends = np.array([e[1] for e in evaluations])
    # The loop's time between two evaluations of a worker: the end of one to the start of the next.
    gaps = [
        (previous[1], current[0] - previous[1], current[3] - previous[4])
        for own, _, _ in gathered
        for previous, current in itertools.pairwise(own)
    ]
    # Each record with the island's evaluation count when it ended.
    counted = []
    for records in (calls, observes, gaps):
        array = np.array(records, dtype=float).reshape(-1, 3)
        counted.append((array, np.searchsorted(ends, array[:, 0], side="right")))
    figures: dict[str, Any] = {}
    for low in windows:
        bred, seen, loop = (array[(count >= low) & (count < low + WINDOW)] for array, count in counted)
        figures[f"window_{low}"] = {
            "from": low,
            "to": low + WINDOW,
            "calls": len(bred),
            "observes": len(seen),
            "call_cpu_us": 1e6 * bred[:, 2].mean(),
            "observe_cpu_us": 1e6 * seen[:, 2].mean(),
            # The propagator's whole share per bred individual: its breeding and the observes in between.
            "per_individual_cpu_us": 1e6 * (bred[:, 2].sum() + seen[:, 2].sum()) / len(bred),
            "per_individual_wall_us": 1e6 * (bred[:, 1].sum() + seen[:, 1].sum()) / len(bred),
            "loop_cpu_us": 1e6 * loop[:, 2].mean(),
            "loop_wall_us": 1e6 * loop[:, 1].mean(),
        }
    return figures


# ------------------------------------------------------------------------------------------------- driver


def launch(ranks: int, options: list[str], timeout: float) -> tuple[dict[str, Any] | None, str, float]:
    """Run this file with ``options`` on ``ranks`` ranks (:func:`suite.run_mpi`).

    Return its JSON line, its output and wall seconds; the line is ``None`` if the job failed or printed
    none.
    """
    status, output, seconds = run_mpi(Path(__file__).resolve(), ranks, options, timeout)
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if status != 0 or not lines:
        return None, output, seconds
    return json.loads(lines[-1]), output, seconds


def run_propulate(args: argparse.Namespace, problem: str, seed: int) -> dict[str, Any]:
    """One propulate run under ``mpiexec``; a failed run gives an ``error`` and the tail of its output."""
    generations = math.ceil(args.evaluations / args.workers)
    with tempfile.TemporaryDirectory(prefix="multi-objective-") as scratch:
        options = ["--worker", "--problem", problem, "--seed", str(seed), "--pop-size", str(args.pop_size)]
        options += ["--generations", str(generations), "--evaluations", str(args.evaluations)]
        options += ["--checkpoint", str(Path(scratch) / "checkpoint")]
        result, output, seconds = launch(args.workers, options, args.timeout)
    if result is None:
        return {"error": "the mpiexec job failed", "output": output[-3000:]}
    result["launch_seconds"] = seconds
    return result


def _emit(result: dict[str, Any], output: Path | None) -> None:
    line = json.dumps(result)
    print(line, flush=True)
    if output is not None:
        with output.open("a") as file:
            file.write(line + "\n")


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return float(median), float(q1), float(q3)


def true_hypervolumes(problems: list[str]) -> dict[str, float]:
    """The hypervolume of each problem's dense front sample."""
    return {name: hypervolume(PROBLEMS[name].front(), PROBLEMS[name].reference) for name in problems}


def report(results: list[dict[str, Any]]) -> None:
    """Print the table of each problem, the summary line and the breeding-cost table of ``results``."""
    from scipy.stats import mannwhitneyu

    comparison = [r for r in results if r.get("benchmark") == "hypervolume"]
    problems = [name for name in PROBLEMS if any(r["problem"] == name for r in comparison)]
    truth = true_hypervolumes(problems)
    wins = compared = 0
    ties = []
    for name in problems:
        problem = PROBLEMS[name]
        exact = f", closed form {problem.exact:.6f}" if problem.exact is not None else ""
        best = problem.exact if problem.exact is not None else truth[name]
        print(
            f"\n{name} ({problem.n_var} variables, {problem.n_obj} objectives, reference "
            f"{problem.reference}): true front hypervolume {truth[name]:.6f} (dense sample{exact})\n"
        )
        print(
            "| method | runs | hypervolume, median [IQR] | regret, median | runs with hypervolume > 0 "
            "| p vs propulate | seconds |"
        )
        print("| --- " * 7 + "|")
        samples = {}
        for method in METHODS:
            runs = [r for r in comparison if r["problem"] == name and r["method"] == method]
            ok = [r for r in runs if "error" not in r]
            if not runs:
                continue
            failed = f" ({len(runs) - len(ok)} failed)" if len(ok) < len(runs) else ""
            if not ok:
                print(f"| {method} | 0{failed} |" + " n/a |" * 5)
                continue
            samples[method] = [r["hypervolume"] for r in ok]
            median, q1, q3 = _quartiles(samples[method])
            p = "–"
            if method != "propulate" and "propulate" in samples:
                test = mannwhitneyu(samples["propulate"], samples[method], alternative="two-sided")
                p = f"{test.pvalue:.3g}"
            seconds = float(np.median([r["seconds"] for r in ok]))
            print(
                f"| {method} | {len(ok)}{failed} | {median:.4f} [{q1:.4f}, {q3:.4f}] | "
                f"{best - median:.4f} | {sum(v > 0 for v in samples[method])} | {p} | {seconds:.3g} |"
            )
        if "propulate" in samples and "optuna-nsga2" in samples:
            compared += 1
            ours, theirs = np.median(samples["propulate"]), np.median(samples["optuna-nsga2"])
            wins += ours >= theirs
            if ours == theirs:
                ties.append(f"{name}, both {ours:.4g}")
        checked = [r for r in comparison if r["problem"] == name and "hypervolume_checkpoint" in r]
        if checked:
            largest = max(abs(r["hypervolume_checkpoint"] - r["hypervolume"]) for r in checked)
            print(f"\nRead back from the checkpoint ({len(checked)} runs): largest difference {largest:.3g}")
        errors = {
            r["checkpoint_error"] for r in comparison if r["problem"] == name and "checkpoint_error" in r
        }
        for error in errors:
            print(f"\nReading the checkpoint failed: {error}")
    if compared:
        tied = f" (equal medians on {len(ties)}: {'; '.join(ties)})" if ties else ""
        print(f"\npropulate median >= optuna-nsga2 on {wins} of {compared} problems{tied}")
    for cost in (r for r in results if r.get("benchmark") == "breeding_cost"):
        breeding_table(cost)


def breeding_table(result: dict[str, Any]) -> None:
    """Print the breeding cost of one ``--breeding-cost`` run."""
    if "error" in result:
        print(f"\nBreeding cost: the run failed:\n{result['output']}")
        return
    windows = sorted((v for k, v in result.items() if k.startswith("window_")), key=lambda w: w["from"])
    print(
        f"\nBreeding cost: {result['problem']}, {result['workers']} workers x {result['generations']} "
        f"generations ({result['evaluations']:,} evaluations), pop_size {result['pop_size']}, "
        f"{result['seconds']:.0f} s; mean microseconds:\n"
    )
    columns = {
        "call_cpu_us": "`__call__`, processor",
        "observe_cpu_us": "`observe`, processor",
        "per_individual_cpu_us": "per bred individual, processor",
        "per_individual_wall_us": "per bred individual, wall",
        "loop_cpu_us": "loop between evaluations, processor",
        "loop_wall_us": "loop between evaluations, wall",
    }
    print("| island evaluations | calls / observes | " + " | ".join(columns.values()) + " |")
    print("| --- " * (len(columns) + 2) + "|")
    for w in windows:
        cells = " | ".join(f"{w[key]:.0f}" for key in columns)
        print(f"| {w['from']:,}–{w['to']:,} | {w['calls']} / {w['observes']} | {cells} |")
    first, last = windows[0], windows[-1]
    ratios = " | ".join(f"{last[key] / first[key]:.2f}" for key in columns)
    print(f"| ratio last / first | | {ratios} |")


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _key(result: dict[str, Any]) -> tuple[Any, ...]:
    return result.get("benchmark"), result.get("problem"), result.get("method"), result.get("seed")


def compare(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every method on every problem and seed (method innermost); return the results."""
    done: dict[tuple[Any, ...], dict[str, Any]] = {}
    if args.resume and args.output is not None and args.output.exists():
        done = {_key(r): r for r in _read(args.output) if "error" not in r}
    results = []
    for name in args.problems:
        for seed in range(args.seeds):
            for method in args.methods:
                key = ("hypervolume", name, method, seed)
                if key in done:
                    results.append(done[key])
                    continue
                if method == "propulate":
                    result = run_propulate(args, name, seed)
                elif method == "optuna-nsga2":
                    result = run_optuna(PROBLEMS[name], seed, args.evaluations)
                else:
                    result = run_random(PROBLEMS[name], seed, args.evaluations)
                result = {
                    "benchmark": "hypervolume",
                    "problem": name,
                    "method": method,
                    "seed": seed,
                } | result
                _emit(result, args.output)
                results.append(result)
    return results


def breeding_cost(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--breeding-cost`` run."""
    generations = math.ceil(args.breeding_evaluations / args.breeding_ranks)
    total = args.breeding_evaluations
    windows = sorted({0, WINDOW, total // 2 // WINDOW * WINDOW, total - WINDOW})
    with tempfile.TemporaryDirectory(prefix="multi-objective-") as scratch:
        options = ["--worker", "--breeding-cost", "--problem", "zdt1", "--seed", "0"]
        options += ["--pop-size", str(args.pop_size), "--generations", str(generations)]
        options += ["--windows", *map(str, windows), "--checkpoint", str(Path(scratch) / "checkpoint")]
        result, output, seconds = launch(args.breeding_ranks, options, args.timeout)
    if result is None:
        result = {"benchmark": "breeding_cost", "error": "the mpiexec job failed", "output": output[-3000:]}
    else:
        result["launch_seconds"] = seconds
    _emit(result, args.output)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, default=10, help="runs per method and problem (seeds 0..N-1)")
    parser.add_argument("--evaluations", type=int, default=2000, help="evaluations per run")
    parser.add_argument("--workers", type=int, default=8, help="MPI ranks of a propulate run (one island)")
    parser.add_argument("--pop-size", type=int, default=50, help="pop_size of propulate's NSGA2")
    parser.add_argument("--breeding-cost", action="store_true", help="measure the breeding cost instead")
    parser.add_argument("--breeding-ranks", type=int, default=8, help="MPI ranks of the breeding-cost run")
    parser.add_argument("--breeding-evaluations", type=int, default=20_000, help="its evaluations in all")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed to one mpiexec job")
    parser.add_argument("--output", type=Path, help="append every run's JSON line to this file")
    parser.add_argument("--resume", action="store_true", help="skip the runs already in --output")
    parser.add_argument("--from", dest="saved", type=Path, help="print the tables of saved lines and exit")
    # The worker's own options (one run, under mpiexec).
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--problem", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--generations", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    parser.add_argument("--windows", nargs="+", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.saved is not None:
        report(_read(args.saved))
        return
    start = time.perf_counter()
    results = [breeding_cost(args)] if args.breeding_cost else compare(args)
    report(results)
    print(f"\nTotal: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
