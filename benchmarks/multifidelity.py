"""Epochs trained by successive halving on MNIST, against no early stopping and the static surrogate.

Runs ``tutorials/surrogate_example.py`` under ``mpiexec`` (found next to this Python interpreter) once for
every seed and method (``--surrogate none``, ``static`` and ``asha``; seeds outer, so that a change in the
machine's load spreads over the methods), each in a fresh checkpoint directory, with the same ranks (one
rank per worker), generations and epochs, so every run evaluates the same number of individuals. For each
run it prints one JSON line, read from the run's checkpoint with ``propulate.load_checkpoint`` (every
evaluated individual once, migrated copies left out, as ``surrogate_savings.py`` reads it):

- ``evaluated``, ``completed``, ``pruned``, ``failed``: individuals by status;
- ``epochs_trained``: the sum of ``ind.steps``, the training epochs run in total;
- ``epochs_share``: ``epochs_trained / (evaluated * --epochs)``, the share of what training every
  individual to the end costs; that is what the ``none`` run of the same settings trains, exactly;
- ``pruned_after``: how many pruned runs stopped after how many epochs (ASHA stops only at its rungs,
  epochs ``1, η, η², ...`` below ``--epochs``: 1 and 3 for ``η = 3`` and 8 epochs);
- ``best_val_loss``, ``best_accuracy``: the completed individual of lowest validation loss;
- ``wall_seconds``, ``cpu_seconds``: wall-clock time of the whole ``mpiexec`` job (start-up and data
  loading included) and the CPU time of all its ranks; ``load_before``: the 1, 5 and 15 minute load
  averages when it started.

Then, per method over the seeds, the median and range (min–max) of the epochs trained, of their share and
of the best validation loss, as a JSON line each and a markdown table, and two verdicts:

- ``ASHA trains X % of the epochs of no early stopping (target <= 40 %)``: X is the median over the seeds
  of ASHA's ``epochs_share``;
- ``ASHA's median best validation loss Y vs none's Z, seed-to-seed spread of none [a, b]``: ``[a, b]`` is
  the range of ``none``'s best validation losses over the seeds, and ASHA is *within* the spread when
  ``Y <= b``: its median best loss is no worse than the worst seed of the search without early stopping
  (inside ``[a, b]`` or better than all of it).

The tutorial seeds the breeding of rank ``r`` with ``seed + r``, so seeds closer than the number of ranks
would share breeding streams; the default seeds are 100 apart. The same seed also fixes the networks'
initial weights and the order of the training batches. The workers are asynchronous, so the runs of one
seed evaluate different individuals once pruning (or timing) changes what the population holds.

Usage, from the repository root (the second command is the smoke test's, seconds on the bundled slice)::

    nice -n 15 python benchmarks/multifidelity.py --data-root ../shared/data --train-batches 125
    python benchmarks/multifidelity.py --ranks 2 --generations 2 --epochs 3 --seeds 1 --train-batches 2

Results
-------
At the library's HEAD of 2026-11-26 (rung results shared as runs reach the rungs), on this machine with
nothing else running, 4 workers × 6 generations = 24 individuals per run, up to 8 epochs, half epochs
(``--train-batches 125``), seeds 100, 200 and 300, the median [min, max] over the seeds::

    python benchmarks/multifidelity.py --data-root ../shared/data --train-batches 125 \
        --methods none asha --eta 4
    python benchmarks/multifidelity.py --data-root ../shared/data --train-batches 125 --methods static asha

========================  ======================  =========================
method                    share of none's epochs  best validation loss
========================  ======================  =========================
none                      100 %                   0.0799 [0.0594, 0.0850]
static                    38.5 % [35.4, 43.8 %]   0.0611 [0.0566, 0.0884]
asha, η = 3 (rungs 1, 3)  43.2 % [35.9, 44.3 %]   0.0623 [0.0611, 0.0880]
asha, η = 4 (rungs 1, 4)  36.5 % [33.3, 39.1 %]   0.0650 [0.0611, 0.1121]
========================  ======================  =========================

Per seed, epochs trained (of 192) and best loss: none 192, 0.0799 / 0.0594 / 0.0850 (0.0883 in the earlier
run of seed 300); static 68 / 74 / 84, 0.0566 / 0.0611 / 0.0884; ASHA η = 3: 83 / 69 / 85, 0.0623 / 0.0611 /
0.0880; ASHA η = 4: 64 / 70 / 75, 0.0650 / 0.0611 / 0.1121. Verdicts: with η = 4 "ASHA trains 36.5 % of the
epochs of no early stopping (target <= 40 %): met" and its median best loss 0.0650 is within none's spread
[0.0594, 0.0850]; with η = 3 (the tutorial's default) 43.2 %: missed, best loss within. Why η = 3 stays above
40 % with 24 individuals is read below (the first runs of each worker pass the rungs while they hold fewer
than η results, and the evolutionary search breeds better individuals than the early records); the rest of
the gap was the records' lag, measured next.

Measured earlier on 2026-11-26 on this machine: 2 cores (AMD EPYC, virtual), CPU only, shared with another
engineer's tests (1-minute load average 4.1 to 10.9 when the runs started); Python 3.11.7, torch 2.14.1 (1
thread per rank), MPICH 5.0.2; the library of commit 0550e8b, before successive halving shared its rung
results when a run reaches the rung (69cdcf3). 4 workers of 1 rank, 6 generations (24 individuals per run), up
to 8 epochs, ``η = 3`` (rungs at epochs 1 and 3), seeds 100, 200 and 300; 49 minutes in all::

    nice -n 15 python benchmarks/multifidelity.py --data-root ../shared/data --epochs 8 --generations 6 \\
        --eta 3 --seeds 100 200 300 --methods none static asha --train-batches 125

``--train-batches 125`` trains on half of the 8,000 training images per epoch (125 batches of 32, drawn
afresh every epoch) and validates on all 2,000: with whole epochs the loaded machine needed about two hours.

======  ===============  ========================  =========================  ==============
method  epochs trained   share of none's           best validation loss       wall s
======  ===============  ========================  =========================  ==============
none    192 [192, 192]   100.0 % [100.0, 100.0 %]  0.0799 [0.0594, 0.0883]    546 [342, 688]
static  92 [80, 101]     47.9 % [41.7, 52.6 %]     0.0606 [0.0566, 0.0920]    229 [134, 249]
asha    92 [84, 125]     47.9 % [43.8, 65.1 %]     0.0606 [0.0566, 0.0917]    225 [161, 225]
======  ===============  ========================  =========================  ==============

Median [min, max] over the 3 seeds; per run (none / static / asha): seed 100: 192 / 92 / 125 epochs, best
losses 0.0799 / 0.0566 / 0.0566; seed 200: 192 / 101 / 92, 0.0594 / 0.0606 / 0.0606; seed 300: 192 / 80 /
84, 0.0883 / 0.0920 / 0.0917. The verdicts::

    ASHA trains 47.9 % of the epochs of no early stopping (target <= 40 %): missed
    ASHA's median best validation loss 0.0606 vs none's 0.0799, seed-to-seed spread of none
    [0.0594, 0.0883]: within

Why more than 40 % (i.i.d. configurations judged against all earlier ones would cost
``(1 + 2/3 + 5/9) / 8 = 28 %``): the first run of each worker starts with no record and trains all 8 epochs
(32 of the 192 epochs, 17 points in every run); a worker took in its peers' rung results only between its
evaluations, so a run was judged against the runs that had ended before it started (replaying the rule so
reproduces the epochs of all 72 runs); and the evolutionary search breeds better individuals as it goes,
while its early, poor runs stay in the rung records: in seed 100 the later ReLU networks (loss 0.15 after
one epoch) beat the records of the early tanh and sigmoid runs (0.21 to 2.3) and 13 of 24 ran to the end.
The same rule replayed on the full curves of the ``none`` runs gives 47 / 44 / 50 % as the runs saw their
records, 37 / 35 / 44 % had every run seen all earlier ones, 37 / 30 / 35 % with results shared when a run
reaches the rung (as since 69cdcf3), and 34 % for the same curves in random order. More individuals did not
help seed 100: at 12 generations (48 individuals) it trained 384 / 214 / 245 epochs (ASHA 63.8 %), best
losses 0.0761 / 0.0547 / 0.0545; the other seeds of that run were stopped from outside before they finished.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from propulate import Status

sys.path.insert(0, str(Path(__file__).resolve().parent))
from surrogate_savings import run_tutorial, tutorial_options

METHODS = ("none", "static", "loglinear", "dynamic", "asha")
# The tutorial's options that tutorial_options passes on and this benchmark leaves at their defaults.
TUTORIAL_DEFAULTS = {
    "ranks_per_worker": 1,
    "margin": None,
    "pop_size": None,
    "batch_size": None,
    "num_islands": None,
    "method": None,
}
TARGET_SHARE = 0.40  # of the epochs of no early stopping, for ASHA
STOP_SECONDS = 120.0  # that a run stopped at its timeout may take to end before it is killed


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 200, 300], help="one run per method")
    parser.add_argument(
        "--methods", nargs="+", default=["none", "static", "asha"], choices=METHODS, help="surrogates to run"
    )
    parser.add_argument("--generations", type=int, default=6, help="individuals evaluated per worker")
    parser.add_argument("--epochs", type=int, default=8, help="training epochs of an individual not pruned")
    parser.add_argument("--eta", type=int, default=3, help="ASHA's reduction factor")
    parser.add_argument("--data-root", default=None, help="as in the tutorial; None: the bundled slice")
    parser.add_argument("--ranks", type=int, default=4, help="MPI ranks of each run, one worker each")
    parser.add_argument("--train-batches", type=int, default=None, help="per epoch and rank; None: all")
    parser.add_argument("--val-batches", type=int, default=None, help="of 500 images; None: all")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds after which a run is killed")
    parser.add_argument("--directory", default=None, help="parent of the checkpoint directories")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints and the tutorial's output")
    args = parser.parse_args()
    for name in ("ranks", "generations", "epochs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.eta < 2:
        parser.error(f"--eta must be >= 2, got {args.eta}")
    if args.timeout <= 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout}")
    if len(set(args.seeds)) != len(args.seeds) or len(set(args.methods)) != len(args.methods):
        parser.error("--seeds and --methods must not repeat a value")
    return args


def measure(args: argparse.Namespace, method: str, seed: int, directory: Path) -> dict[str, Any]:
    """Run the tutorial once with ``--surrogate method`` and ``--seed seed``; return the run's figures.

    Raises
    ------
    SystemExit
        If the job fails, runs longer than ``args.timeout`` seconds or leaves no checkpoint.
    """
    checkpoint = directory / f"{method}-seed{seed}"
    options = argparse.Namespace(**{**vars(args), **TUTORIAL_DEFAULTS, "seed": seed})
    tutorial = [*tutorial_options(options, method, checkpoint), "--eta", str(args.eta)]
    job = run_tutorial(args.ranks, tutorial, checkpoint, args.timeout, args.keep, stop_seconds=STOP_SECONDS)
    evaluated = job.evaluated
    completed = [ind for ind in evaluated if ind.status is Status.COMPLETED]
    best = min(completed, key=lambda ind: ind.loss, default=None)
    trained = sum(ind.steps for ind in evaluated)
    pruned_after = Counter(ind.steps for ind in evaluated if ind.status is Status.PRUNED)
    return {
        "method": method,
        "seed": seed,
        "eta": args.eta if method == "asha" else None,
        "workers": args.ranks,
        "generations": args.generations,
        "epochs": args.epochs,
        "evaluated": len(evaluated),
        "completed": len(completed),
        "pruned": sum(pruned_after.values()),
        "failed": sum(ind.status is Status.FAILED for ind in evaluated),
        "epochs_trained": trained,
        "epochs_share": trained / (len(evaluated) * args.epochs) if evaluated else float("nan"),
        "pruned_after": {str(steps): pruned_after[steps] for steps in sorted(pruned_after)},
        "best_val_loss": best.loss if best is not None else float("nan"),
        "best_accuracy": best.metrics.get("accuracy", float("nan")) if best is not None else float("nan"),
        "wall_seconds": round(job.seconds, 1),
        "cpu_seconds": round(job.cpu_seconds, 1),
        "load_before": [round(x, 2) for x in job.load_before],
    }


def percent(fraction: float, digits: int = 1) -> str:
    """Return ``fraction`` as a percentage with ``digits`` decimals, ``"12.5 %"``."""
    return f"{100 * fraction:.{digits}f} %"


def spread(values: list[float]) -> dict[str, float]:
    """Return the median, min and max of ``values``."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: list[dict[str, Any]], methods: list[str]) -> list[dict[str, Any]]:
    """Return, per method, the median, min and max over the seeds of the figures that the verdicts use."""
    summaries = []
    for method in methods:
        mine = [run for run in runs if run["method"] == method]
        summaries.append(
            {
                "summary": method,
                "seeds": [run["seed"] for run in mine],
                **{
                    key: spread([run[key] for run in mine])
                    for key in ("evaluated", "pruned", "epochs_trained", "epochs_share", "best_val_loss")
                },
                "wall_seconds": spread([run["wall_seconds"] for run in mine]),
            }
        )
    return summaries


def table(runs: list[dict[str, Any]], summaries: list[dict[str, Any]]) -> str:
    """Return the runs and the medians [min, max] over the seeds as markdown tables."""
    lines = [
        "| method | seed | evaluated | completed / pruned | pruned after epochs | epochs trained | "
        "share of none's | best validation loss | its accuracy | wall s | CPU s |",
        "| --- |" + " --- |" * 10,
    ]
    for run in runs:
        after = ", ".join(f"{steps}: {count}" for steps, count in run["pruned_after"].items())
        lines.append(
            f"| {run['method']} | {run['seed']} | {run['evaluated']} | "
            f"{run['completed']} / {run['pruned']} | {after} | {run['epochs_trained']} | "
            f"{percent(run['epochs_share'])} | {run['best_val_loss']:.4f} | "
            f"{percent(run['best_accuracy'], 2)} | {run['wall_seconds']:.0f} | {run['cpu_seconds']:.0f} |"
        )
    lines += [
        "",
        "| method | seeds | epochs trained | share of none's | best validation loss | wall s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for summary in summaries:
        epochs, share, loss, wall = (
            summary[key] for key in ("epochs_trained", "epochs_share", "best_val_loss", "wall_seconds")
        )
        lines.append(
            f"| {summary['summary']} | {len(summary['seeds'])} | "
            f"{epochs['median']:g} [{epochs['min']}, {epochs['max']}] | "
            f"{percent(share['median'])} [{percent(share['min'])}, {percent(share['max'])}] | "
            f"{loss['median']:.4f} [{loss['min']:.4f}, {loss['max']:.4f}] | "
            f"{wall['median']:.0f} [{wall['min']:.0f}, {wall['max']:.0f}] |"
        )
    return "\n".join(lines)


def verdicts(summaries: list[dict[str, Any]]) -> list[str]:
    """Return the verdict lines on ASHA's epochs and its best loss (those whose methods were run)."""
    by_method = {summary["summary"]: summary for summary in summaries}
    if "asha" not in by_method:
        return []
    asha = by_method["asha"]
    share = asha["epochs_share"]["median"]
    target = percent(TARGET_SHARE, 0)
    lines = [
        f"ASHA trains {percent(share)} of the epochs of no early stopping (target <= {target}): "
        + ("met" if share <= TARGET_SHARE else "missed")
    ]
    if "none" in by_method:
        loss = asha["best_val_loss"]["median"]
        none = by_method["none"]["best_val_loss"]
        lines.append(
            f"ASHA's median best validation loss {loss:.4f} vs none's {none['median']:.4f}, seed-to-seed "
            f"spread of none [{none['min']:.4f}, {none['max']:.4f}]: "
            + ("within" if loss <= none["max"] else "not within")
        )
    return lines


def main() -> None:
    args = parse_arguments()
    directory = Path(tempfile.mkdtemp(prefix="multifidelity_", dir=args.directory))
    try:
        runs = []
        for seed in args.seeds:
            for method in args.methods:
                runs.append(measure(args, method, seed, directory))
                print(json.dumps(runs[-1]), flush=True)
        summaries = summarize(runs, args.methods)
        for summary in summaries:
            print(json.dumps(summary), flush=True)
        print()
        print(table(runs, summaries))
        print()
        print("\n".join(verdicts(summaries)))
    finally:
        if args.keep:
            print(f"checkpoints and output kept in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
