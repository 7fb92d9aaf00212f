"""Best loss of propulate against Propulate 1.2.2, side by side, on the zero-cost benchmark functions.

Each run is one ``mpiexec`` job: one island of all ``--ranks`` ranks, the default propagator
(``get_default_propagator(pop_size, limits, rng=rng)``, default settings) minimizing one function of
``propulate.utils.benchmark_functions`` for ``--generations`` generations per worker, in a fresh temporary
checkpoint directory, with ``random.Random(1000 * seed + rank)`` on every rank. The job runs this very file
with ``--worker`` under either package's interpreter; the worker uses only names that both packages export
(``Propulator``, ``get_default_propagator``, ``get_function_search_space``), so the same code runs under
both. The driver runs the jobs one after another (package innermost, so a drifting machine load touches
both alike), prints each job's JSON line as it comes and, at the end, one Markdown table per loss cost:
median best loss [interquartile range] of each package, the two-sided Mann–Whitney U p-value of the two
samples (``scipy.stats.mannwhitneyu``), and the medians of the duplicate share, the seen share and the
wall time.

Set-up of the Propulate 1.2.2 environment (git-ignored, next to ``.venv``)::

    python3 -m venv .venv-122
    .venv-122/bin/pip install propulate==1.2.2 mpi4py mpich==5.0.2

``mpi4py`` from the registry is built against the MPI ABI and loads whatever ``libmpi`` it finds; without
``mpich`` in the environment (the same version as in ``.venv``) it fails with ``libmpi.so: cannot open
shared object file``. 1.2.2 pulls in ``deepdiff``, ``colorlog``, ``h5py``, ``matplotlib ~= 3.8.4`` and
``GPy ~= 1.13.1`` (with ``paramz``, ``scipy``, ``cython``), and with them ``numpy`` 1.26; all come as
wheels for Python 3.11. Importing it takes about 3 s per rank (GPy).

Usage, from the repository root with the project's environment::

    python benchmarks/vs_propulate122.py --seeds 11 --output vs122.jsonl      # the full comparison
    python benchmarks/vs_propulate122.py --from vs122.jsonl                   # its tables again
    python benchmarks/vs_propulate122.py --functions sphere griewank --seeds 2   # a quick check

``--output`` appends every job's line to a file as it comes; with ``--resume`` the jobs already in that file
are skipped. ``--timeout`` bounds every job (it is killed with its process group when it runs over, and
recorded as failed). ``--venv`` (default: the running interpreter's environment) and ``--venv-122`` name the
environments; each one's own ``mpiexec`` is used when it has one.

What each job reports (rank 0, one JSON line):

``best``
    The lowest loss among all evaluations of the island, gathered from the workers' own evaluations (not
    from ``summarize``: with ``debug=0`` 1.2.2 returns one individual per worker instead of a list).
``duplicate_share``
    The share of evaluations whose decoded parameter values (``tuple(ind[k] for k in limits)``, exact
    equality) equal those of an individual evaluated earlier on the island.
``seen_share_sums``, ``seen_share_mean``
    How much of the island's results a worker had when it bred. The loss function, which the worker calls
    right after breeding, records ``(time.time(), evaluated individuals in propulator.population)``; it
    reaches the worker's ``Propulator`` through a module-level reference set after construction. An
    individual counts as evaluated when its ``evaltime`` is finite: both packages set ``evaltime`` to the
    epoch time at which the loss returned, before the individual is stored or sent; 1.2.2 keeps only
    evaluated individuals in its population, and so does propulate's store, whose count (``n_known``) is
    taken instead: it includes the individuals a long run on one island releases from memory. "Produced"
    at that moment is the number of the island's evaluations whose ``evaltime`` is not later. The first form
    is the sum of seen over the sum of produced over all breedings, the second the mean of the per-breeding
    ratios over breedings with produced > 0. Both count the worker's own evaluations, which it always has.

Caveats for reading the tables:

- Seen is measured at the call of the loss, so it is what the breeding used, except for results taken in
  between (none: both packages take in messages before breeding, not between breeding and evaluating).
  Produced counts results whose evaluation had finished anywhere on the island, including those not yet
  sent or still in transit, so even an ideal loop stays below 1 when evaluations are short. 1.2.2 sends a
  result right after its evaluation; propulate sends it with the worker's next message, right after its
  next breeding, so its results travel one loop step later.
- With a zero-cost loss the loop is the whole cost. Propulate 1.2.2's loop is slow: every generation it
  deep-copies the new individual and sends it to each peer with a blocking send, and one worker pickles the
  whole population to its checkpoint, which grows with the run; in the runs made while writing this script
  its ``propulate()`` took 3 to 5 times as long as propulate's. A worker of either package takes in its
  peers' results right before it breeds, and with such short generations its peers rarely finish anything
  in between, so both see almost everything (seen share about 0.99): with a zero-cost loss both behave
  nearly like a synchronous loop, and the seen share cannot tell them apart. The 2 ms loss
  (``time.sleep``, which frees the processor for the peers) is the regime the benchmark functions stand in
  for: evaluations that cost more than the loop.
- The same seed does not give the same runs in both packages (their propagators draw random numbers
  differently, and arrival order depends on timing), so the samples are independent: hence the unpaired
  Mann–Whitney U test. With 11 seeds a p-value below 0.05 needs a clear shift; ties (e.g. step's floor of
  -25) lower the power further.
- The functions differ between the packages in two places. Quartic: 1.2.2 returns
  ``abs(sum(i * x_i**4 + N(0, 1)_i))`` (one noise draw per dimension, from the global ``np.random``, and
  an absolute value), propulate ``sum(i * x_i**4) + N(0, 1)`` (De Jong's F4). With ``--quartic common``
  (the default) both packages minimize the same function, De Jong's F4 with noise from a generator
  seeded by seed and rank, defined in this file; ``--quartic package`` uses each package's own. Schwefel:
  the constant is 418.982887 in 1.2.2 and 418.9829 in propulate, a shift of 1.3e-4 in 10-D, negligible
  at the losses reached here. Dimensions and limits are the same in both for all seven functions (the
  parameter names differ: ``a, b, ...`` in 1.2.2, ``x0, x1, ...`` in propulate).
- Best loss is the lowest loss evaluated; on quartic, whose loss is noisy, it is partly a draw of the noise.
- The loss function counts the evaluated individuals incrementally (see ``_evaluated_so_far``), a few
  microseconds per call in both packages; ``recount_mismatches`` must be 0.
- Wall time is the slowest rank's time in ``propulate()``; ``launch_seconds`` (added by the driver) is the
  whole job, interpreter start and imports included. On a shared machine both are noisy.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mpijob

FUNCTIONS = ("sphere", "rosenbrock", "rastrigin", "griewank", "schwefel", "step", "quartic")
PACKAGES = ("propulate", "1.2.2")
ROOT = Path(__file__).resolve().parents[1]
# What must be equal for runs to be compared (besides the loss cost).
SETTING = ("ranks", "generations", "pop_size")

# ------------------------------------------------------------------------------------------------- worker

# Set by the worker after constructing its Propulator; read by the loss function.
_PROPULATOR: Any = None
_FUNCTION: Callable[[Any], float] | None = None
_COST = 0.0
_BREEDINGS: list[tuple[float, int]] = []
# The evaluated individuals among the first ``_COUNTED`` of the population (see ``_evaluated_so_far``), and
# how often a full recount disagreed with that running count.
_COUNTED = 0
_SEEN = 0
_RECOUNT_MISMATCHES = 0
RECOUNT_EVERY = 64


def _evaluated(population: list[Any]) -> int:
    return sum(1 for ind in population if ind.evaltime < math.inf)


def _evaluated_so_far() -> int:
    """Count the evaluated individuals in the worker's population, looking only at the newly arrived.

    Both packages keep the population in arrival order and, in a fresh run on one island, add individuals
    only once evaluated and never remove any; a full count (O(population), about 0.2 ms at 1,000
    individuals) in every call would slow the zero-cost runs noticeably. Every ``RECOUNT_EVERY``-th call
    checks the running count against a full one. This package's store counts them itself.
    """
    global _COUNTED, _SEEN, _RECOUNT_MISMATCHES
    store = getattr(_PROPULATOR, "_population", None)
    if hasattr(store, "n_known"):
        # This package: only evaluated individuals enter the store, which counts those it released from
        # memory too (a long run on one island keeps only the best in memory, see Propulator's Memory).
        return int(store.n_known)
    population = _PROPULATOR.population
    _SEEN += _evaluated(population[_COUNTED:])
    _COUNTED = len(population)
    if len(_BREEDINGS) % RECOUNT_EVERY == 0 and _evaluated(population) != _SEEN:
        _RECOUNT_MISMATCHES += 1
        _SEEN = _evaluated(population)
    return _SEEN


def _loss(params: Any) -> float:
    """Record what the worker has when it breeds, wait ``_COST`` seconds, return the function's value."""
    now = time.time()
    _BREEDINGS.append((now, _evaluated_so_far()))
    if _COST > 0:
        time.sleep(_COST)
    assert _FUNCTION is not None
    return _FUNCTION(params)


def _de_jong_f4(seed: int, rank: int) -> Callable[[Any], float]:
    """De Jong's F4 (quartic with N(0, 1) noise), the same in both packages; noise seeded by seed and rank."""
    import numpy as np

    noise = np.random.default_rng([seed, rank])

    def quartic(params: Any) -> float:
        x = np.array([float(v) for v in params.values()])
        return float(np.sum(np.arange(1, x.size + 1) * x**4) + noise.standard_normal())

    return quartic


def _seen_shares(breedings: list[tuple[float, int]], evaltimes: list[float]) -> dict[str, Any]:
    """Seen share as ratio of sums and as mean ratio; ``evaltimes`` sorted, one per island evaluation."""
    produced = [bisect.bisect_right(evaltimes, t) for t, _ in breedings]
    seen = [s for _, s in breedings]
    ratios = [s / p for s, p in zip(seen, produced, strict=True) if p > 0]
    return {
        "seen_share_sums": sum(seen) / sum(produced) if sum(produced) else None,
        "seen_share_mean": sum(ratios) / len(ratios) if ratios else None,
        "breedings": len(breedings),
        # Cannot happen on one machine's clock; a non-zero count would mean the measure is broken.
        "seen_above_produced": sum(s > p for s, p in zip(seen, produced, strict=True)),
    }


def worker(args: argparse.Namespace) -> None:
    """Run one optimization on all ranks; rank 0 prints its JSON line."""
    global _PROPULATOR, _FUNCTION, _COST

    from importlib.metadata import version

    from mpi4py import MPI

    import propulate
    from propulate import Propulator
    from propulate.utils import get_default_propagator
    from propulate.utils.benchmark_functions import get_function_search_space

    if args.propagator == "tpe":  # this package's recommended search; 1.2.2 has no such thing
        from propulate.utils import get_tpe_propagator

    comm = MPI.COMM_WORLD
    function, limits = get_function_search_space(args.function)
    if args.function == "quartic" and args.quartic == "common":
        function = _de_jong_f4(args.seed, comm.rank)
    _FUNCTION, _COST = function, args.cost
    rng = random.Random(1000 * args.seed + comm.rank)
    if args.propagator == "tpe":
        propagator = get_tpe_propagator(limits, rng=args.seed)  # the seed, the same on every rank
    else:
        propagator = get_default_propagator(args.pop_size, limits, rng=rng)
    propulator = Propulator(
        _loss, propagator, rng=rng, generations=args.generations, checkpoint_path=args.checkpoint
    )
    _PROPULATOR = propulator
    comm.barrier()
    start = time.perf_counter()
    propulator.propulate(debug=0)
    seconds = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)

    population = propulator.population
    names = list(limits)
    own = [
        (ind.evaltime, float(ind.loss), tuple(ind[k] for k in names))
        for ind in population
        if ind.rank == comm.rank and ind.evaltime < math.inf
    ]
    known = sum(1 for ind in population if ind.evaltime < math.inf)
    gathered = comm.gather((own, _BREEDINGS, known, _RECOUNT_MISMATCHES), root=0)
    if comm.rank != 0:
        return
    evaluations = sorted(e for own_evaluations, *_ in gathered for e in own_evaluations)
    first_seen: set[tuple[Any, ...]] = set()
    duplicates = 0
    for _, _, key in evaluations:
        duplicates += key in first_seen
        first_seen.add(key)
    evaltimes = [e[0] for e in evaluations]
    result = {
        "package": args.package,
        "version": version("propulate"),
        "module": str(Path(propulate.__file__).parent),
        "function": args.function,
        "cost": args.cost,
        "seed": args.seed,
        "generations": args.generations,
        "ranks": comm.size,
        "pop_size": args.pop_size,
        "propagator": args.propagator,
        "quartic": args.quartic if args.function == "quartic" else None,
        "best": min(e[1] for e in evaluations),
        "evaluations": len(evaluations),
        "known_on_rank_0": gathered[0][2],
        "duplicates": duplicates,
        "duplicate_share": duplicates / len(evaluations),
        **_seen_shares([b for _, breedings, *_ in gathered for b in breedings], evaltimes),
        "recount_mismatches": sum(g[3] for g in gathered),
        "seconds": seconds,
    }
    print(json.dumps(result), flush=True)


# ------------------------------------------------------------------------------------------------- driver


def _interpreter(venv: Path) -> Path:
    """Return a virtual environment's interpreter (:mod:`mpijob` starts it with that venv's ``mpiexec``)."""
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no interpreter at {python}; see the set-up in this script's docstring")
    return python


def launch(package: str, venv: Path, job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one job under ``mpiexec`` with the package's interpreter; return its JSON line as a dict.

    A job that fails or runs over ``timeout`` seconds gives ``job`` with an ``error`` (and the tail of the
    job's standard error) instead.
    """
    python = _interpreter(venv)
    with tempfile.TemporaryDirectory(prefix="vs-propulate122-") as scratch:
        options = ["--worker", "--package", package, "--function", job["function"]]
        options += ["--cost", repr(job["cost"]), "--seed", str(job["seed"])]
        options += ["--generations", str(job["generations"])]
        options += ["--pop-size", str(job["pop_size"]), "--quartic", job["quartic"] or "common"]
        options += ["--propagator", job["propagator"]]
        options += ["--checkpoint", str(Path(scratch) / "checkpoint")]
        # The package's interpreter imports its own propulate: the repository stays off PYTHONPATH.
        done = mpijob.run(
            Path(__file__).resolve(),
            job["ranks"],
            options,
            timeout=timeout,
            grace=10.0,
            python=python,
            repo_on_path=False,
            env=mpijob.ONE_BLAS_THREAD,
            cwd=scratch,
            errors_apart=True,
        )
    if done.timed_out:
        return {**job, "error": f"timed out after {timeout:g} s", "stderr": done.errors[-2000:]}
    lines = [line for line in done.output.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        error = f"exit status {done.returncode}" if done.returncode else "no result line"
        return {**job, "error": error, "stderr": done.errors[-2000:]}
    result = json.loads(lines[-1])
    result["launch_seconds"] = done.seconds
    if (result["version"] == "1.2.2") != (package == "1.2.2"):
        return {**job, "error": f"{venv} runs propulate {result['version']} from {result['module']}"}
    return result


def _key(result: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two results the same job."""
    propagator = result.get("propagator", "default")  # files written before the option: the default
    return (*(result[k] for k in ("package", "function", "quartic", "cost", "seed", *SETTING)), propagator)


def _row(result: dict[str, Any]) -> str:
    return "quartic (each package's own)" if result["quartic"] == "package" else result["function"]


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    import numpy as np

    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return float(median), float(q1), float(q3)


def _median(results: list[dict[str, Any]], key: str) -> str:
    values = [r[key] for r in results if r.get(key) is not None]
    return f"{_quantiles(values)[0]:.3g}" if values else "n/a"


def table(results: list[dict[str, Any]]) -> str:
    """Markdown table of results of one setting and cost: one row per function, both packages side by side."""
    from scipy.stats import mannwhitneyu

    lines = [
        "| function | propulate median [IQR] | 1.2.2 median [IQR] | Mann–Whitney p | runs (ours / 1.2.2) "
        "| duplicates (ours / 1.2.2) | seen share, sums (ours / 1.2.2) | seen share, mean (ours / 1.2.2) "
        "| wall s (ours / 1.2.2) |",
        "| --- " * 9 + "|",
    ]
    for row in dict.fromkeys(_row(r) for r in results):
        runs = {
            package: [r for r in results if r["package"] == package and _row(r) == row]
            for package in PACKAGES
        }
        ok = {package: [r for r in group if "error" not in r] for package, group in runs.items()}
        best = {package: [r["best"] for r in group] for package, group in ok.items()}
        cells = []
        for package in PACKAGES:
            if best[package]:
                median, q1, q3 = _quantiles(best[package])
                cells.append(f"{median:.3g} [{q1:.3g}, {q3:.3g}]")
            else:
                cells.append("n/a")
        if best["propulate"] and best["1.2.2"]:
            cells.append(
                f"{mannwhitneyu(best['propulate'], best['1.2.2'], alternative='two-sided').pvalue:.3g}"
            )
        else:
            cells.append("n/a")
        failed = {package: len(runs[package]) - len(ok[package]) for package in PACKAGES}
        cells.append(
            " / ".join(f"{len(ok[p])}" + (f" ({failed[p]} failed)" if failed[p] else "") for p in PACKAGES)
        )
        for key in ("duplicate_share", "seen_share_sums", "seen_share_mean", "seconds"):
            cells.append(" / ".join(_median(ok[package], key) for package in PACKAGES))
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(results: list[dict[str, Any]]) -> None:
    """Print a table per setting, loss cost and propagator of this package, functions in FUNCTIONS's order.

    1.2.2 always runs its default propagator: its runs are the other column of every table of their setting.
    """
    order = {name: i for i, name in enumerate(FUNCTIONS)}
    results = sorted(results, key=lambda r: (order.get(r["function"], len(order)), r["quartic"] or ""))
    groups = sorted({(tuple(r[k] for k in SETTING), r["cost"]) for r in results})
    for setting, cost in groups:
        ranks, generations, pop_size = setting
        alike = [r for r in results if (tuple(r[k] for k in SETTING), r["cost"]) == (setting, cost)]
        ours = [r for r in alike if r["package"] == "propulate"]
        for propagator in sorted({r.get("propagator", "default") for r in ours}) or ["default"]:
            chosen = [r for r in ours if r.get("propagator", "default") == propagator]
            chosen += [r for r in alike if r["package"] == "1.2.2"]
            searched = "its default propagator" if propagator == "default" else f"propagator {propagator}"
            print(
                f"\nLoss cost {cost * 1000:g} ms, {ranks} ranks x {generations} generations, pop_size "
                f"{pop_size}, propulate with {searched}; best loss, median [25 %, 75 %] over the seeds:\n"
            )
            print(table(chosen))


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--functions", nargs="+", default=list(FUNCTIONS), choices=list(FUNCTIONS))
    parser.add_argument("--seeds", type=int, default=11, help="runs per package, function and cost")
    parser.add_argument("--costs", nargs="+", type=float, default=[0.0, 0.002], help="loss cost, seconds")
    parser.add_argument("--generations", type=int, default=250, help="generations per worker and run")
    parser.add_argument("--ranks", type=int, default=4, help="MPI ranks per run (one island)")
    parser.add_argument("--pop-size", type=int, default=8, help="pop_size of the default propagator")
    parser.add_argument("--packages", nargs="+", default=list(PACKAGES), choices=list(PACKAGES))
    parser.add_argument(
        "--propagator",
        choices=("default", "tpe"),
        default="default",
        help="this package's search: the default propagator (as 1.2.2's) or the recommended TPE",
    )
    parser.add_argument(
        "--quartic", choices=("common", "package"), default="common", help="see the docstring"
    )
    parser.add_argument("--venv", type=Path, default=Path(sys.prefix), help="environment with propulate")
    parser.add_argument("--venv-122", type=Path, default=ROOT / ".venv-122", help="environment with 1.2.2")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed to one mpiexec job")
    parser.add_argument("--output", type=Path, help="append every job's JSON line to this file")
    parser.add_argument("--resume", action="store_true", help="skip the jobs already done in --output")
    parser.add_argument("--from", dest="saved", type=Path, help="print the tables of a saved file and exit")
    # The worker's own options (one job, under mpiexec).
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--package", help=argparse.SUPPRESS)
    parser.add_argument("--function", help=argparse.SUPPRESS)
    parser.add_argument("--cost", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.saved is not None:
        report(_read(args.saved))
        return

    jobs = [
        {
            "package": package,
            "function": function,
            "quartic": args.quartic if function == "quartic" else None,
            "cost": cost,
            "seed": seed,
            "ranks": args.ranks,
            "generations": args.generations,
            "pop_size": args.pop_size,
            "propagator": args.propagator if package == "propulate" else "default",
        }
        for cost in args.costs
        for function in args.functions
        for seed in range(args.seeds)
        for package in args.packages
    ]
    results = []
    if args.resume and args.output is not None and args.output.exists():
        wanted = {_key(job) for job in jobs}
        results = [r for r in _read(args.output) if "error" not in r and _key(r) in wanted]
        done = {_key(r) for r in results}
        jobs = [job for job in jobs if _key(job) not in done]
    venvs = {"propulate": args.venv, "1.2.2": args.venv_122}
    for job in jobs:
        result = launch(job["package"], venvs[job["package"]], job, args.timeout)
        results.append(result)
        line = json.dumps(result)
        print(line, flush=True)
        if args.output is not None:
            with args.output.open("a") as file:
                file.write(line + "\n")
    report(results)


if __name__ == "__main__":
    main()
