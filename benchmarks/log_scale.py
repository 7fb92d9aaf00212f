"""A learning rate declared on a log scale against the same range declared linear, at equal budget.

The problem is a synthetic validation loss of a classifier after a fixed training budget, as a function of
four hyperparameters (:func:`validation_loss`): the learning rate ``lr`` in ``[1e-5, 1e-1]``, whose best value
is about ``3e-5`` (the lowest of the range's four decades, as when fine-tuning a pretrained network), the
weight decay, the dropout rate and the batch size. The loss costs nothing; only where the search looks
matters. The two arms differ in the declaration of ``lr`` alone:

- ``linear``: the Propulate 1.2.2 tuple ``(1e-5, 1e-1)``, searched on the value itself: a uniform draw lands
  in the lowest decade with probability 9e-5 / 0.1, about 0.1 %, and the default propagator's Gaussian
  step has a standard deviation of 5 % of the range, 0.005, fifty times the width of that decade;
- ``log``: ``propulate.Float(1e-5, 1e-1, log=True)``, searched on ``ln(lr)``: each decade holds a quarter
  of the range, for initialization and mutation alike.

The other parameters are declared the same way in both arms (weight decay on a log scale, dropout as a
1.2.2 float range, batch size as a choice of numbers).

Each run is a real search: one island of all ranks running ``propulate.Propulator`` with the default
propagator (``propulate.utils.get_default_propagator(pop_size, limits, rng=rng)``, default settings) for
``--generations`` generations per worker, in a fresh temporary checkpoint directory, with
``random.Random(1000 * seed + rank)`` on every rank. It runs under ``mpiexec`` rather than as a serial
loop because the default propagator is used as users run it: every worker breeds asynchronously from the
results its peers have sent so far, and the no-repeat rule and the breeding pool act on the island, not on
one process; a serial stand-in would measure another algorithm. The same seed gives both arms the same
random generators; the runs still differ in timing, so the samples are treated as independent (unpaired
Mann–Whitney U test, two-sided, ``scipy.stats.mannwhitneyu``).

Rank 0 prints one JSON line per run, then a Markdown table: per arm, the median best loss with its
interquartile range and its distance from the optimum's loss, the median of the best configuration's
``lr``, the share of all evaluations of the arm whose ``lr`` lay in the lowest decade ``[1e-5, 1e-4)``, and
the share whose ``lr`` was the lower bound ``1e-5`` itself (where a Gaussian step that overshoots the range
is clipped to); then the p-value of the two samples of best losses. The best loss of a run is
``propulator.best_loss``, the run-wide result every rank holds after ``propulate()``; the script checks it
against the lowest loss its loss function returned.

Usage (the table in ``benchmarks/README.md``)::

    mpiexec -n 4 python benchmarks/log_scale.py --generations 50 --seeds 11

``--pop-size`` sets the default propagator's breeding pool (default: twice the number of ranks).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import tempfile
import time
from typing import Any

import numpy as np
from mpi4py import MPI

import propulate
from propulate import Propulator
from propulate.utils import get_default_propagator

LR_RANGE = (1e-5, 1e-1)
# The decade the optimum lies in; an evaluation "looks there" when low <= lr < high.
LOWEST_DECADE = (1e-5, 1e-4)

# The surface: the best learning rate at batch size 64, scaled with the square root of the batch size (the
# rule Krizhevsky 2014, "One weird trick for parallelizing convolutional neural networks", derives from the
# variance of the gradient estimate), so it lies in [1.5e-5, 6e-5] for the batch sizes below.
LR_BEST_AT_64 = 3e-5
WEIGHT_DECAY_BEST = 1e-4
DROPOUT_BEST = 0.1
# The loss of the best configuration, and of chance for 10 balanced classes (ln 10): a run whose learning rate
# is far too large diverges and predicts at chance, so the loss saturates there.
LOSS_BEST = 0.35
LOSS_CHANCE = math.log(10)

ARMS = ("linear", "log")


def limits_of(arm: str) -> dict[str, Any]:
    """Return the search space of ``arm``; only the declaration of ``lr`` differs."""
    lr = LR_RANGE if arm == "linear" else propulate.Float(*LR_RANGE, log=True)
    return {
        "lr": lr,
        "weight_decay": propulate.Float(1e-6, 1e-2, log=True),
        "dropout": (0.0, 0.5),
        "batch_size": propulate.Categorical((16, 32, 64, 128, 256)),
    }


def validation_loss(lr: float, weight_decay: float, dropout: float, batch_size: int) -> float:
    """Return the synthetic validation loss of one configuration (cross-entropy, in nats).

    With ``u`` the distance of ``lr`` from the best learning rate of the batch size in decades, a learning
    rate too small trains too little (``0.25 u**2``), one too large costs more (``0.5 u**2``, as training
    becomes unstable); weight decay adds ``0.05 v**2`` for its distance ``v`` in decades from 1e-4, dropout
    ``0.6 (dropout - 0.1)**2``, the batch size a small ``0.005 log2(batch_size / 64)**2``. The sum of these
    excesses over :data:`LOSS_BEST` saturates smoothly (``tanh``) at the chance level :data:`LOSS_CHANCE`.
    """
    u = math.log10(lr / (LR_BEST_AT_64 * math.sqrt(batch_size / 64)))
    v = math.log10(weight_decay / WEIGHT_DECAY_BEST)
    excess = (0.25 if u < 0 else 0.5) * u**2
    excess += 0.05 * v**2 + 0.6 * (dropout - DROPOUT_BEST) ** 2 + 0.005 * math.log2(batch_size / 64) ** 2
    headroom = LOSS_CHANCE - LOSS_BEST
    return LOSS_BEST + headroom * math.tanh(excess / headroom)


# The evaluations of this rank in the current run: (lr, loss).
_EVALUATED: list[tuple[float, float]] = []


def _loss(params: Any) -> float:
    loss = validation_loss(params["lr"], params["weight_decay"], params["dropout"], params["batch_size"])
    _EVALUATED.append((params["lr"], loss))
    return loss


def run_one(arm: str, seed: int, generations: int, pop_size: int, comm: MPI.Comm) -> dict[str, Any]:
    """Run one search on all ranks; return its figures (on rank 0; ``{}`` elsewhere)."""
    _EVALUATED.clear()
    limits = limits_of(arm)
    rng = random.Random(1000 * seed + comm.rank)
    propagator = get_default_propagator(pop_size, limits, rng=rng)
    directory = comm.bcast(tempfile.mkdtemp(prefix="propulate-log-scale-") if comm.rank == 0 else None)
    propulator = Propulator(_loss, propagator, rng, generations=generations, checkpoint_path=directory)
    comm.barrier()
    start = time.perf_counter()
    propulator.propulate(debug=0)
    seconds = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    evaluated = comm.gather(list(_EVALUATED), root=0)
    best_loss, best_lr = propulator.best_loss, propulator.best_params["lr"]
    comm.barrier()
    if evaluated is None:  # not rank 0
        return {}
    shutil.rmtree(directory, ignore_errors=True)
    pairs = [pair for rank_pairs in evaluated for pair in rank_pairs]
    low, high = LOWEST_DECADE
    if best_loss != min(loss for _, loss in pairs):
        raise RuntimeError(f"best_loss {best_loss!r} is not the lowest loss evaluated")
    return {
        "arm": arm,
        "seed": seed,
        "ranks": comm.size,
        "generations": generations,
        "pop_size": pop_size,
        "evaluations": len(pairs),
        "best_loss": best_loss,
        "best_lr": best_lr,
        "lowest_decade_share": sum(low <= lr < high for lr, _ in pairs) / len(pairs),
        "lower_bound_share": sum(lr == LR_RANGE[0] for lr, _ in pairs) / len(pairs),
        "seconds": seconds,
    }


def table(results: list[dict[str, Any]]) -> str:
    """Markdown table: per arm, median [IQR] of the best loss and the medians of the other figures."""
    from scipy.stats import mannwhitneyu

    lines = [
        "| declaration of lr | best loss, median [25 %, 75 %] | above the optimum, median | best lr, median "
        "| evaluations in [1e-5, 1e-4) | evaluations at lr = 1e-5 exactly |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    best = {arm: [r["best_loss"] for r in results if r["arm"] == arm] for arm in ARMS}
    for arm in ARMS:
        runs = [r for r in results if r["arm"] == arm]
        q1, median, q3 = np.percentile(best[arm], [25, 50, 75])
        lr = np.median([r["best_lr"] for r in runs])
        evaluations = sum(r["evaluations"] for r in runs)
        decade = sum(r["lowest_decade_share"] * r["evaluations"] for r in runs) / evaluations
        bound = sum(r["lower_bound_share"] * r["evaluations"] for r in runs) / evaluations
        declared = "`(1e-5, 1e-1)`" if arm == "linear" else "`Float(1e-5, 1e-1, log=True)`"
        lines.append(
            f"| {arm}: {declared} | {median:.4g} [{q1:.4g}, {q3:.4g}] | {median - LOSS_BEST:.2g} | {lr:.3g} "
            f"| {decade:.1%} | {bound:.1%} |"
        )
    p = mannwhitneyu(best["linear"], best["log"], alternative="two-sided").pvalue
    lines.append(f"\nTwo-sided Mann–Whitney U on the best losses, linear against log: p = {p:.3g}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generations", type=int, default=50, help="generations per worker and run")
    parser.add_argument("--seeds", type=int, default=11, help="runs per declaration")
    parser.add_argument("--pop-size", type=int, help="breeding pool of the default propagator (2 x ranks)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    pop_size = args.pop_size or 2 * comm.size
    results = []
    for seed in range(args.seeds):
        for arm in ARMS:
            result = run_one(arm, seed, args.generations, pop_size, comm)
            if comm.rank == 0:
                results.append(result)
                print(json.dumps(result), flush=True)
    if comm.rank == 0:
        setting = f"{args.seeds} seeds, {comm.size} ranks x {args.generations} generations"
        setting += f", pop_size {pop_size}"
        print(f"\nOptimum at lr = {LR_BEST_AT_64:g} (batch size 64), best loss {LOSS_BEST}; {setting}:\n")
        print(table(results))


if __name__ == "__main__":
    main()
