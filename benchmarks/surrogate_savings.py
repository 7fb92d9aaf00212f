"""What early stopping saves on the MNIST tutorial: the same search with and without a surrogate.

Runs ``tutorials/surrogate_example.py`` twice under ``mpiexec`` (found next to this Python interpreter),
first with ``--surrogate none`` and then with ``--surrogate static`` (or the one given by ``--surrogate``),
each in a fresh checkpoint directory, with the same seed, ranks, workers, generations and epochs, so both
runs evaluate the same number of individuals. For each run it prints one JSON line, read from the run's
checkpoint (``propulate.load_checkpoint``; every evaluated individual once, migrated copies left out) and
from the job itself:

- ``evaluated``, ``completed``, ``pruned``, ``failed``: individuals by status;
- ``epochs_trained``: training epochs run in total, the sum of ``ind.steps``;
- ``best_val_loss``, ``best_accuracy``, ``best_params``: the completed individual of lowest validation loss;
- ``job_seconds``: wall-clock time of the whole ``mpiexec`` job (start-up and data loading included);
- ``search_seconds``: from the first evaluation's start to the last one's end;
- ``evaluation_seconds``: the evaluations' wall-clock times (``ind.evalperiod``), summed over workers;
- ``cpu_seconds``: user and system CPU time of all ranks of the job (less sensitive to other jobs on the
  machine than the wall-clock times);
- ``load_before``, ``load_after``: the machine's 1, 5 and 15 minute load averages around the run.

A last JSON line compares the two: the saving in epochs and in each time, as a fraction of the run without
early stopping, the best validation loss of both, and how many of the surrogate run's individuals were also
evaluated, with the same parameters, by the run without. That number shows the caveat of the comparison:
the workers are asynchronous and breed from whatever results have arrived, so once pruning changes the
population (and the timing) the two runs evaluate different individuals after their first generations;
"same seeds, same number of individuals" is not "same individuals". A markdown table of the two runs ends
the output. Usage, from the repository root::

    python benchmarks/surrogate_savings.py --ranks 4 --data-root ../shared/data --generations 8 --epochs 5
    python benchmarks/surrogate_savings.py --ranks 4 --ranks-per-worker 2 --data-root ../shared/data

Options not listed here (``--margin``, ``--pop-size``, ``--train-batches``, ``--val-batches``,
``--batch-size``, ``--num-islands``, ``--method``) are passed on to the tutorial; ``--keep`` keeps the
checkpoint directories and the tutorial's output (``output.txt`` in each) under ``--directory``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from propulate import Individual, Status, load_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mpijob

REPO = Path(__file__).resolve().parents[1]
TUTORIAL = REPO / "tutorials" / "surrogate_example.py"
PASSED_ON = ("margin", "pop_size", "train_batches", "val_batches", "batch_size", "num_islands", "method")
TIMES = ("job_seconds", "search_seconds", "evaluation_seconds", "cpu_seconds")


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4, help="MPI ranks of each run")
    parser.add_argument("--ranks-per-worker", type=int, default=1, help="2 trains each network with DDP")
    parser.add_argument("--generations", type=int, default=8, help="individuals evaluated per worker")
    parser.add_argument("--epochs", type=int, default=5, help="training epochs of an individual not pruned")
    parser.add_argument("--seed", type=int, default=42, help="the same in both runs")
    parser.add_argument("--surrogate", default="static", choices=("static", "loglinear", "dynamic"))
    parser.add_argument("--data-root", default=None, help="as in the tutorial; default: the bundled slice")
    parser.add_argument("--directory", default=None, help="parent of the checkpoint directories")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints and the tutorial's output")
    parser.add_argument("--timeout", type=float, default=7200.0, help="seconds after which a run is killed")
    parser.add_argument("--margin", type=float)
    parser.add_argument("--pop-size", type=int)
    parser.add_argument("--train-batches", type=int)
    parser.add_argument("--val-batches", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--num-islands", type=int)
    parser.add_argument("--method")
    args = parser.parse_args()
    if args.ranks < 1 or args.ranks_per_worker < 1 or args.ranks % args.ranks_per_worker:
        parser.error(
            f"--ranks ({args.ranks}) must be a positive multiple of "
            f"--ranks-per-worker ({args.ranks_per_worker})"
        )
    return args


def tutorial_options(args: argparse.Namespace, surrogate: str, checkpoint: Path) -> list[str]:
    """Return the tutorial's command-line options of one run."""
    options = [
        "--surrogate",
        surrogate,
        "--checkpoint",
        str(checkpoint),
        "--ranks-per-worker",
        str(args.ranks_per_worker),
        "--generations",
        str(args.generations),
        "--epochs",
        str(args.epochs),
        "--seed",
        str(args.seed),
    ]
    if args.data_root is not None:
        options += ["--data-root", args.data_root]
    for name in PASSED_ON:
        value = getattr(args, name)
        if value is not None:
            options += [f"--{name.replace('_', '-')}", str(value)]
    return options


@dataclass
class TutorialRun:
    """One run of the tutorial: its output, what it cost and the individuals it evaluated."""

    output: str
    seconds: float  # wall-clock time of the whole job, start-up and data loading included
    cpu_seconds: float  # user and system CPU time of all its ranks
    load_before: tuple[float, float, float]  # the machine's 1, 5 and 15 minute load averages at its start
    evaluated: list[Individual]  # every individual it evaluated, once (migrated copies left out)


def run_tutorial(
    ranks: int, options: list[str], checkpoint: Path, timeout: float, keep: bool, stop_seconds: float = 120.0
) -> TutorialRun:
    """Run the tutorial with ``options`` on ``ranks`` ranks into ``checkpoint``; read what it evaluated.

    Past ``timeout`` seconds the job is sent SIGTERM (``mpiexec`` passes it on to the ranks), and killed with
    all its processes if it has not ended ``stop_seconds`` later (:func:`mpijob.finish`). With ``keep``, its
    output is saved as ``output.txt`` in ``checkpoint``.

    Raises
    ------
    SystemExit
        If the job fails, runs longer than ``timeout`` seconds or leaves no checkpoint.
    """
    load_before = os.getloadavg()
    # The job's ranks are waited for by its launcher, so their CPU time ends up in this process's children's.
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = mpijob.run(TUTORIAL, ranks, options, timeout=timeout, grace=stop_seconds)
    command, output, seconds = " ".join(done.command), done.output, done.seconds
    if done.timed_out:
        sys.exit(f"{command} ran for more than {timeout} s:\n{output[-5000:]}")
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if keep:
        checkpoint.mkdir(parents=True, exist_ok=True)
        (checkpoint / "output.txt").write_text(output)
    if done.returncode != 0:
        sys.exit(f"{command} exited with {done.returncode}:\n{output[-5000:]}")
    loaded = load_checkpoint(checkpoint)
    if loaded is None:
        sys.exit(f"{command} left no checkpoint in {checkpoint}")
    # Unique uids; a migrated or pollinated copy has a uid of its own and migration_steps > 0.
    evaluated = list({ind.uid: ind for ind in loaded.population if ind.migration_steps == 0}.values())
    cpu_seconds = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    return TutorialRun(output, seconds, cpu_seconds, load_before, evaluated)


def run(args: argparse.Namespace, surrogate: str, directory: Path) -> tuple[dict[str, Any], list[Individual]]:
    """Run the tutorial once; return its figures and the individuals it evaluated."""
    checkpoint = directory / f"checkpoint_{surrogate}"
    job = run_tutorial(
        args.ranks, tutorial_options(args, surrogate, checkpoint), checkpoint, args.timeout, args.keep
    )
    evaluated = job.evaluated
    completed_inds = [ind for ind in evaluated if ind.status is Status.COMPLETED]
    best = min(completed_inds, key=lambda ind: ind.loss, default=None)
    figures: dict[str, Any] = {
        "surrogate": surrogate,
        "ranks": args.ranks,
        "ranks_per_worker": args.ranks_per_worker,
        "workers": args.ranks // args.ranks_per_worker,
        "generations": args.generations,
        "epochs": args.epochs,
        "seed": args.seed,
        "evaluated": len(evaluated),
        "completed": len(completed_inds),
        "pruned": sum(ind.status is Status.PRUNED for ind in evaluated),
        "failed": sum(ind.status is Status.FAILED for ind in evaluated),
        "epochs_trained": sum(ind.steps for ind in evaluated),
        "best_val_loss": best.loss if best is not None else math.nan,
        "best_accuracy": best.metrics.get("accuracy", math.nan) if best is not None else math.nan,
        "best_params": dict(best.items()) if best is not None else None,
        "job_seconds": job.seconds,
        "search_seconds": max(ind.evaltime for ind in evaluated)
        - min(ind.evaltime - ind.evalperiod for ind in evaluated),
        "evaluation_seconds": sum(ind.evalperiod for ind in evaluated),
        "cpu_seconds": job.cpu_seconds,
        "load_before": [round(x, 2) for x in job.load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    return figures, evaluated


def compare(
    without: dict[str, Any],
    with_: dict[str, Any],
    evaluated_without: list[Individual],
    evaluated_with: list[Individual],
) -> dict[str, Any]:
    """Return the savings of the run ``with_`` a surrogate over the run ``without``, as fractions."""
    positions = {tuple(ind.position.tolist()) for ind in evaluated_without}
    comparison: dict[str, Any] = {
        "comparison": f"{with_['surrogate']} vs none",
        "individuals": [without["evaluated"], with_["evaluated"]],
        "individuals_in_common": sum(tuple(ind.position.tolist()) in positions for ind in evaluated_with),
        "epochs_trained": [without["epochs_trained"], with_["epochs_trained"]],
        "epochs_saving": 1.0 - with_["epochs_trained"] / without["epochs_trained"],
        "pruned": with_["pruned"],
        "best_val_loss": [without["best_val_loss"], with_["best_val_loss"]],
    }
    for key in TIMES:
        comparison[key] = [round(without[key], 1), round(with_[key], 1)]
        comparison[key.replace("_seconds", "_time_saving")] = 1.0 - with_[key] / without[key]
    return comparison


def table(without: dict[str, Any], with_: dict[str, Any], comparison: dict[str, Any]) -> str:
    """Return the two runs and the saving as a markdown table."""
    rows = [
        ("individuals evaluated", "evaluated", "{}"),
        ("completed / pruned / failed", None, ""),
        ("epochs trained", "epochs_trained", "{}"),
        ("job wall time, s", "job_seconds", "{:.0f}"),
        ("search wall time, s", "search_seconds", "{:.0f}"),
        ("evaluation time summed over workers, s", "evaluation_seconds", "{:.0f}"),
        ("CPU time of all ranks, s", "cpu_seconds", "{:.0f}"),
        ("best validation loss (completed)", "best_val_loss", "{:.4f}"),
        ("its accuracy", "best_accuracy", "{:.2%}"),
    ]
    savings = {
        "epochs_trained": comparison["epochs_saving"],
        **{key: comparison[key.replace("_seconds", "_time_saving")] for key in TIMES},
    }
    lines = [
        f"| | no surrogate | {with_['surrogate']} surrogate | saving |",
        "| --- | --- | --- | --- |",
    ]
    for label, key, form in rows:
        if key is None:
            cells = [f"{run['completed']} / {run['pruned']} / {run['failed']}" for run in (without, with_)]
        else:
            cells = [form.format(run[key]) for run in (without, with_)]
        saving = f"{savings[key]:.0%}" if key in savings else ""
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {saving} |")
    return "\n".join(lines)


def main() -> None:
    args = parse_arguments()
    directory = Path(tempfile.mkdtemp(prefix="surrogate_savings_", dir=args.directory))
    try:
        results = []
        for surrogate in ("none", args.surrogate):
            figures, evaluated = run(args, surrogate, directory)
            print(json.dumps(figures), flush=True)
            results.append((figures, evaluated))
        (without, evaluated_without), (with_, evaluated_with) = results
        comparison = compare(without, with_, evaluated_without, evaluated_with)
        print(json.dumps(comparison), flush=True)
        print(table(without, with_, comparison))
    finally:
        if args.keep:
            print(f"checkpoints and output kept in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
