"""Population-based training against successive halving and the default propagator on MNIST, equal epochs.

Four searches over the learning rate ``lr`` and its per-epoch decay ``gamma`` of the MNIST network of
``tutorials/torch_ddp_example.py`` (2 ReLU convolutions, the network of ``tutorials/pbt_example.py``), each
on ``--ranks`` ranks of 1-rank workers (gloo on the CPU), each worker training ``--budget`` epochs:

- ``pbt``: :class:`propulate.pbt.PopulationBasedTraining` with Ray's defaults, one member per worker,
  ``--budget`` intervals of one epoch (the loss function of ``tutorials/pbt_example.py``);
- ``pb2``: :class:`propulate.pbt.PB2`, the same with its Gaussian-process bandit as the explore step;
- ``asha``: the default propagator with asynchronous successive halving (``SuccessiveHalving``, the
  ``--surrogate asha`` path of ``tutorials/surrogate_example.py``: rungs at epochs 1, ``η``, ... below
  ``--epochs``, ``--eta`` 3), its individuals trained up to ``--epochs`` epochs;
- ``default``: the default propagator (:func:`propulate.utils.get_default_propagator`, population 4) with
  every individual trained ``--epochs`` epochs (``--budget / --epochs`` of them per worker).

Every network is validated on the whole validation set after each epoch. A worker that has trained
``--budget`` epochs trains no more: an individual it would go on with fails (so successive halving, whose
number of epochs depends on what it prunes, gets exactly the budget too; its surplus individuals fail at
once), and every method trains ``ranks * budget`` epochs in all. Each job runs this script under
``mpiexec`` (:mod:`mpijob`) and reports every epoch trained, with its time and validation loss; per run:

- ``best``: the lowest validation loss after any epoch of any network of the run;
- ``epochs``: the epochs the run trained in all;
- ``at best``: how many epochs the run had trained, on all workers together, when the best was reached;
- ``curve``: the run's best validation loss so far after each of its epochs (all workers together, in the
  order the epochs ended).

A second table asks which method gets there first: for each method's median best loss as a target, the
epochs each method's runs trained (all workers together) until their best so far reached it, median and
interquartile range over the runs that did, and how many did.

Per method the table gives the median and interquartile range of each over the seeds, and the two-sided
Mann-Whitney U test's p of PBT's best losses against each other method's (scipy). A network of PBT trains
``--budget`` epochs, one of the other methods at most ``--epochs``. Run from the repository root::

    # the default: the bundled slice, 4 workers, 8 epochs each, 125 batches of 32 per epoch, 5 seeds
    python benchmarks/pbt_mnist.py

    # longer: whole epochs of the offline subset (8,000 training images) and 16 epochs per worker
    python benchmarks/pbt_mnist.py --data-root ../shared/data --train-batches 250 --budget 16 --epochs 8

``--keep`` keeps each job's checkpoint and output under ``--directory``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mpijob

REPO = Path(__file__).resolve().parents[1]
METHODS = ("pbt", "pb2", "asha", "default")
#: The line of a job's output that carries its epochs, as JSON.
MARK = "PBT_MNIST_EPOCHS "
#: The network of the PBT tutorial, fixed for the searches of the other two methods.
NETWORK = {"conv_layers": 2, "activation": "relu"}


class BudgetSpentError(RuntimeError):
    """The worker has trained its epochs: the individual it would go on with fails."""


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4, help="MPI ranks of each run, one per worker")
    parser.add_argument("--budget", type=int, default=8, help="epochs trained per worker, every method")
    parser.add_argument("--epochs", type=int, default=4, help="epochs of a full training (asha, default)")
    parser.add_argument("--eta", type=int, default=3, help="asha: the reduction factor")
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="one run per method each"
    )
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--data-root", default=None, help="as in the tutorials; default: the bundled slice")
    parser.add_argument("--train-batches", type=int, default=125, help="batches of 32 per epoch and worker")
    parser.add_argument("--directory", default=None, help="parent of the checkpoint directories")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints and the jobs' output")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds after which a job is killed")
    parser.add_argument("--job", choices=METHODS, help=argparse.SUPPRESS)  # under mpiexec: one run
    parser.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("ranks", "budget", "epochs", "train_batches"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.budget % args.epochs:
        parser.error(f"--epochs ({args.epochs}) must divide --budget ({args.budget})")
    if "asha" in args.methods and args.epochs < 2:
        parser.error(f"--epochs must be >= 2 for successive halving, got {args.epochs}")
    if args.eta < 2:
        parser.error(f"--eta must be >= 2, got {args.eta}")
    return args


def counted(
    loss_fn: Callable[..., Iterator[dict[str, float]]],
    budget: int,
    trained: list[tuple[float, float]],
    length: int | None = None,
) -> Callable[..., Iterator[dict[str, float]]]:
    """Return ``loss_fn`` on the network of :data:`NETWORK`, noting each epoch's time and loss in ``trained``.

    An individual trains ``length`` epochs at most (without ``length``, until the library ends it). Before
    each epoch the worker's ``budget`` is checked: past it, the individual fails with
    :class:`BudgetSpentError`.
    """
    from mpi4py import MPI

    def loss(params: Mapping, subgroup_comm: MPI.Comm = MPI.COMM_SELF) -> Iterator[dict[str, float]]:
        with contextlib.closing(loss_fn({**NETWORK, **params}, subgroup_comm)) as epochs:
            for _ in itertools.count() if length is None else range(length):
                if len(trained) >= budget:
                    raise BudgetSpentError(f"the worker has trained its {budget} epochs")
                result = next(epochs, None)
                if result is None:
                    return
                trained.append((time.time(), float(result["loss"])))
                yield result

    return loss


def job(args: argparse.Namespace) -> None:
    """Run one search under ``mpiexec``; world rank 0 prints every epoch trained after :data:`MARK`."""
    sys.path.insert(0, str(REPO / "tutorials"))
    import pbt_example
    import surrogate_example
    import torch
    from mnist_data import prepare_mnist
    from mpi4py import MPI

    from propulate import Islands
    from propulate.pbt import PB2, PopulationBasedTraining
    from propulate.utils import get_default_propagator, rank_rng, set_logger_config

    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    set_logger_config(level=logging.WARNING, log_file=str(Path(args.checkpoint) / "pbt_mnist.log"))
    data_root = prepare_mnist(args.data_root, comm)
    # What the tutorials' loss functions read from their command lines.
    options = argparse.Namespace(
        method="gloo", seed=args.seed, batch_size=32, train_batches=args.train_batches, val_batches=None,
        epochs=args.epochs, conv_layers=NETWORK["conv_layers"],
    )  # fmt: skip
    trained: list[tuple[float, float]] = []
    limits = pbt_example.LIMITS
    settings: dict[str, Any] = {"ranks_per_worker": 1, "checkpoint_path": args.checkpoint}
    if args.job in ("pbt", "pb2"):
        loss_fn = counted(pbt_example.make_loss_fn(options, data_root), args.budget, trained)
        kind = PB2 if args.job == "pb2" else PopulationBasedTraining
        pbt = kind(limits, rng=rank_rng(args.seed), perturbation_interval=1)
        islands = Islands(loss_fn, pbt, args.seed, generations=args.budget, **settings)
    else:
        loss_fn = counted(
            surrogate_example.make_loss_fn(options, data_root), args.budget, trained, args.epochs
        )
        rng = random.Random(args.seed + comm.rank)  # as the surrogate tutorial: each rank breeds differently
        propagator = get_default_propagator(pop_size=4, limits=limits, rng=rng)
        if args.job == "asha":  # an individual trains one epoch at least: the budget ends the run
            factory = surrogate_example.surrogate_factory("asha", 1.0, args.eta, args.epochs)
            islands = Islands(
                loss_fn, propagator, rng, generations=args.budget, surrogate_factory=factory, **settings
            )
        else:
            islands = Islands(loss_fn, propagator, rng, generations=args.budget // args.epochs, **settings)
    islands.propulate(logging_interval=1, debug=0)
    epochs = comm.gather(trained, root=0)
    if comm.rank == 0:
        assert epochs is not None
        print(MARK + json.dumps(sorted(epoch for worker in epochs for epoch in worker)), flush=True)


def run(args: argparse.Namespace, method: str, seed: int, directory: Path) -> dict[str, Any]:
    """Run one search as a job of its own; return its best loss, its epochs and the epochs to the best."""
    checkpoint = directory / f"{method}_{seed}"
    options = [
        "--job", method, "--seed", seed, "--checkpoint", checkpoint, "--budget", args.budget,
        "--epochs", args.epochs, "--eta", args.eta, "--train-batches", args.train_batches,
    ]  # fmt: skip
    if args.data_root is not None:
        options += ["--data-root", args.data_root]
    load = os.getloadavg()[0]
    done = mpijob.run(
        Path(__file__).resolve(), args.ranks, [str(o) for o in options], timeout=args.timeout,
        env=mpijob.ONE_BLAS_THREAD,
    )  # fmt: skip
    if args.keep:
        checkpoint.mkdir(parents=True, exist_ok=True)
        (checkpoint / "output.txt").write_text(done.output)
    lines = [line for line in done.output.splitlines() if line.startswith(MARK)]
    if done.timed_out or done.returncode != 0 or not lines:
        sys.exit(f"{' '.join(done.command)} failed ({done.returncode}):\n{done.output[-5000:]}")
    losses = [loss for _, loss in json.loads(lines[-1][len(MARK) :])]  # in the order they were reached
    best = int(np.argmin(losses))
    return {
        "method": method,
        "seed": seed,
        "best": losses[best],
        "epochs": len(losses),
        "at_best": best + 1,
        "curve": [float(v) for v in np.minimum.accumulate(losses)],
        "seconds": round(done.seconds, 1),
        "load": round(load, 2),
    }


def spread(values: list[float], form: str) -> str:
    """Return the median and the interquartile range of ``values`` as ``median [q1, q3]``."""
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return f"{form.format(median)} [{form.format(q1)}, {form.format(q3)}]"


def table(results: list[dict[str, Any]]) -> str:
    """Return the methods' medians and interquartile ranges, and PBT's p against each, as markdown."""
    from scipy.stats import mannwhitneyu

    by_method = {m: [r for r in results if r["method"] == m] for m in METHODS}
    pbt = [r["best"] for r in by_method["pbt"]]
    lines = [
        "| method | runs | best validation loss | epochs in all | epochs at the best | p (PBT vs) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for method, runs in by_method.items():
        if not runs:
            continue
        best, epochs, at_best = ([r[key] for r in runs] for key in ("best", "epochs", "at_best"))
        p = mannwhitneyu(pbt, best, alternative="two-sided").pvalue if method != "pbt" and pbt else None
        lines.append(
            f"| {method} | {len(runs)} | {spread(best, '{:.4f}')} | {spread(epochs, '{:.0f}')} "
            f"| {spread(at_best, '{:.0f}')} | {'' if p is None else f'{p:.3f}'} |"
        )
    return "\n".join(lines)


def epochs_to(curve: list[float], target: float) -> int | None:
    """Return the epochs a run trained until its best so far (``curve``) reached ``target``; None: never."""
    reached = np.flatnonzero(np.asarray(curve) <= target)
    return int(reached[0]) + 1 if reached.size else None


def race(results: list[dict[str, Any]]) -> str:
    """Return, per method's median best loss as a target, the epochs each method needed to reach it."""
    by_method = {m: [r for r in results if r["method"] == m] for m in METHODS}
    present = [m for m, runs in by_method.items() if runs]
    targets = {m: float(np.median([r["best"] for r in by_method[m]])) for m in present}
    header = " | ".join(f"to {m}'s median best {targets[m]:.4f}" for m in present)
    lines = [f"| method | {header} |", "| --- |" + " --- |" * len(present)]
    for method in present:
        cells = []
        for target in targets.values():
            epochs = [epochs_to(r["curve"], target) for r in by_method[method]]
            reached = [e for e in epochs if e is not None]
            text = spread(reached, "{:.0f}") if reached else "never"
            cells.append(f"{text} ({len(reached)} of {len(epochs)})")
        lines.append(f"| {method} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    args = parse_arguments()
    if args.job is not None:
        job(args)
        return
    directory = Path(tempfile.mkdtemp(prefix="pbt_mnist_", dir=args.directory))
    began = time.perf_counter()
    try:
        results = []
        for seed in args.seeds:
            for method in args.methods:
                results.append(run(args, method, seed, directory))
                print(json.dumps(results[-1]), flush=True)
        print(table(results))
        print()
        print(race(results))
        print(f"{len(results)} runs in {time.perf_counter() - began:.0f} s, load {os.getloadavg()}")
    finally:
        if args.keep:
            print(f"checkpoints and output kept in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
