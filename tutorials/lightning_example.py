"""Tune a PyTorch Lightning model on MNIST: each worker's ranks are one ``Trainer``'s DDP world, ASHA prunes.

Each worker is a block of ``--ranks-per-worker`` MPI ranks (two by default). For every individual,
:func:`propulate.integrations.lightning.lightning_loss_fn` builds the ``LightningModule`` below on each rank
of the worker and trains it with a Lightning ``Trainer`` whose DDP world is the worker's process group (gloo
on CPUs, NCCL on GPUs). After every epoch's validation the validation loss is reported to Propulate as an
interim loss: asynchronous successive halving (``--surrogate asha``, the default) stops the worse runs at its
rungs, on all of the worker's ranks at the same epoch, and Lightning's own checkpoint is committed into the
individual's folder, so that a search stopped by ``scancel`` or a time limit continues every training from its
last epoch in the next job (``trainer.fit(..., ckpt_path=...)``).

Search space: the width of the hidden layer (16 to 128), its activation, the dropout before the output
(0 to 0.5) and the Adam learning rate (1e-4 to 1e-2, log scale).

Run it from the repository root::

    # 2 workers of 2 ranks, gloo, the MNIST slice bundled in tutorials/data
    mpiexec -n 4 python tutorials/lightning_example.py

    # one rank per worker, the static surrogate
    mpiexec -n 4 python tutorials/lightning_example.py --ranks-per-worker 1 --surrogate static

    # SLURM, 2 nodes with 4 GPUs each: 4 workers of 2 GPUs, NCCL
    srun -N 2 --ntasks-per-node=4 --gpus-per-task=1 python tutorials/lightning_example.py

At the end, the first rank prints the best individuals, how many were pruned, and the epochs trained by this
job (and how many trainings it continued from an earlier job's checkpoint).
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torchvision
from mnist_data import prepare_mnist  # tutorials/ is on the path when this runs as a script
from mpi4py import MPI
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import propulate
from propulate import Float, Islands, Status
from propulate.integrations.lightning import lightning_loss_fn
from propulate.surrogate import NullSurrogate, StaticSurrogate, SuccessiveHalving, Surrogate
from propulate.utils import get_default_propagator, set_logger_config

log = logging.getLogger("propulate")

LIMITS = {
    "hidden": (16, 128),
    "activation": ("relu", "tanh", "gelu"),
    "dropout": (0.0, 0.5),
    "lr": Float(1e-4, 1e-2, log=True),
}
ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}
SURROGATES = ("asha", "static", "none")
# Mean and standard deviation of MNIST's pixel intensities in [0, 1].
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
#: What this process trained in this job, counted on the first rank of each worker.
TRAINED = {"epochs": 0, "continued": 0}


def parse_arguments(comm: MPI.Comm = MPI.COMM_WORLD) -> argparse.Namespace:
    """Read the command line; exit on every rank if the ranks of ``comm`` do not fill whole workers."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--surrogate", default="asha", choices=SURROGATES, help="early-stopping rule")
    parser.add_argument("--eta", type=int, default=2, help="asha: a rung keeps the best 1/eta of its runs")
    parser.add_argument("--epochs", type=int, default=4, help="training epochs of an individual not pruned")
    parser.add_argument("--generations", type=int, default=4, help="individuals evaluated per worker")
    parser.add_argument("--ranks-per-worker", type=int, default=2, help="MPI ranks (DDP replicas) per worker")
    parser.add_argument("--pop-size", type=int, default=4, help="breeding population size")
    parser.add_argument("--seed", type=int, default=42, help="random seed")
    parser.add_argument(
        "--data-root",
        default=None,
        help="folder holding MNIST/raw (e.g. ../shared/data); None: the slice bundled in tutorials/data",
    )
    parser.add_argument(
        "--checkpoint", default="./checkpoints/lightning_example", help="folder for checkpoints and the log"
    )
    parser.add_argument(
        "--method",
        default="auto",
        choices=("auto", "gloo", "nccl-slurm", "nccl-openmpi"),
        help="how each worker creates its torch.distributed group (auto: NCCL with CUDA, else gloo)",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="training batch size per rank")
    parser.add_argument(
        "--train-batches", type=int, default=None, help="training batches per epoch and rank; None: all"
    )
    parser.add_argument("--top-n", type=int, default=3, help="number of best individuals to print")
    parser.add_argument("--verbosity", type=int, default=1, help="debug level of Propulate's own logging")
    parser.add_argument(
        "--epoch-log",
        default=None,
        help="file to which every rank appends 'uid epoch rank' for each epoch it begins (for tests)",
    )
    args = parser.parse_args()
    for name in ("epochs", "generations", "ranks_per_worker", "pop_size", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.train_batches is not None and args.train_batches < 1:
        parser.error(f"--train-batches must be >= 1 or left out, got {args.train_batches}")
    if args.eta < 2:
        parser.error(f"--eta must be >= 2, got {args.eta}")
    if comm.size % args.ranks_per_worker != 0:
        if comm.rank == 0:
            parser.error(
                f"--ranks-per-worker {args.ranks_per_worker} does not divide the {comm.size} rank(s) of "
                f"this job: start a multiple of {args.ranks_per_worker} ranks (mpiexec -n "
                f"{args.ranks_per_worker} ...), or pass --ranks-per-worker 1 to train each model on one rank"
            )
        sys.exit(2)
    return args


@functools.lru_cache(maxsize=1)
def load_mnist(root: str) -> tuple[TensorDataset, TensorDataset]:
    """Return the normalized training and validation sets as tensors; read once per process."""

    def as_tensors(train: bool) -> TensorDataset:
        data = torchvision.datasets.MNIST(root, train=train, download=False)
        images = (data.data.float().div(255.0) - MNIST_MEAN) / MNIST_STD
        return TensorDataset(images.flatten(1), data.targets)

    return as_tensors(train=True), as_tensors(train=False)


class MNISTData(pl.LightningDataModule):
    """The MNIST tensors as data loaders; Lightning shards them over the worker's ranks (DDP)."""

    def __init__(self, root: str, batch_size: int) -> None:
        super().__init__()
        self.root, self.batch_size = root, batch_size

    def train_dataloader(self) -> DataLoader:
        """Return the training batches, reshuffled every epoch."""
        return DataLoader(load_mnist(self.root)[0], batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        """Return the validation batches."""
        return DataLoader(load_mnist(self.root)[1], batch_size=500)


class Classifier(pl.LightningModule):
    """A one-hidden-layer network on the flattened 28x28 images; logs validation loss and accuracy.

    ``epoch_log``, if given, is a file to which each rank appends ``uid epoch rank`` as it begins an epoch.
    """

    def __init__(
        self, hidden: int, activation: str, dropout: float, lr: float, uid: int, epoch_log: str | None
    ) -> None:
        super().__init__()
        self.network = nn.Sequential(
            nn.Linear(28 * 28, hidden), ACTIVATIONS[activation](), nn.Dropout(dropout), nn.Linear(hidden, 10)
        )
        self.lr, self.uid, self.epoch_log = lr, uid, epoch_log

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        """Return the cross-entropy of one batch (DDP averages its gradients over the worker)."""
        images, labels = batch
        return nn.functional.cross_entropy(self.network(images), labels)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        """Log the validation loss (the monitored metric) and the accuracy of one batch."""
        images, labels = batch
        logits = self.network(images)
        # Averaged over the worker's ranks, so that every rank reports the same validation loss.
        self.log("val_loss", nn.functional.cross_entropy(logits, labels), sync_dist=True)
        self.log("accuracy", (logits.argmax(dim=1) == labels).float().mean(), sync_dist=True)

    def on_train_epoch_start(self) -> None:
        """Count the epoch, and note it in the epoch log."""
        # Counted at its start: a training resumed from a checkpoint taken after an epoch's validation runs
        # that epoch's end hooks once more, not its batches.
        if self.global_rank == 0:
            TRAINED["epochs"] += 1
        if self.epoch_log is not None:
            with open(self.epoch_log, "a") as log_file:
                log_file.write(f"{self.uid} {self.current_epoch} {self.global_rank}\n")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Return Adam with the individual's learning rate."""
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def make_module_factory(args: argparse.Namespace) -> Callable[[Mapping[str, Any]], Classifier]:
    """Return the factory of an individual's module: every rank of a worker builds the same weights."""

    def build(params: Mapping[str, Any]) -> Classifier:
        checkpoint = propulate.evaluation_checkpoint()
        if checkpoint.resuming and MPI.COMM_WORLD.rank % args.ranks_per_worker == 0:
            TRAINED["continued"] += 1
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(args.seed)
            return Classifier(
                params["hidden"],
                params["activation"],
                params["dropout"],
                params["lr"],
                checkpoint.uid,
                args.epoch_log,
            )

    return build


def surrogate_factory(name: str, eta: int, epochs: int) -> Callable[[], Surrogate]:
    """Return the factory of the surrogate called ``name``: one interim loss per epoch's validation."""
    if name == "asha":
        return lambda: SuccessiveHalving(min_resource=1, reduction_factor=eta, max_resource=epochs)
    if name == "static":
        return StaticSurrogate
    return NullSurrogate


def main() -> None:
    """Run the search and print its outcome on world rank 0."""
    comm = MPI.COMM_WORLD
    args = parse_arguments(comm)
    torch.set_num_threads(1)  # several ranks share each core
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="lightning")
    set_logger_config(level=logging.INFO, log_file=str(Path(args.checkpoint) / "lightning_example.log"))
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # one line per Trainer otherwise
    data_root = prepare_mnist(args.data_root, comm)

    trainer_kwargs: dict[str, Any] = {"max_epochs": args.epochs, "num_sanity_val_steps": 0}
    if args.train_batches is not None:
        trainer_kwargs["limit_train_batches"] = args.train_batches
    loss_fn = lightning_loss_fn(
        make_module_factory(args),
        datamodule=MNISTData(data_root, args.batch_size),
        monitor="val_loss",
        trainer_kwargs=trainer_kwargs,
        method=args.method,
    )
    islands = Islands(
        loss_fn,
        get_default_propagator(pop_size=args.pop_size, limits=LIMITS, rng=args.seed),
        args.seed,
        generations=args.generations,
        ranks_per_worker=args.ranks_per_worker,
        checkpoint_path=args.checkpoint,
        surrogate_factory=surrogate_factory(args.surrogate, args.eta, args.epochs),
    )
    islands.propulate(logging_interval=1, debug=args.verbosity)

    epochs = comm.reduce(TRAINED["epochs"], root=0)
    continued = comm.reduce(TRAINED["continued"], root=0)
    populations = comm.gather(islands.propulator.population, root=0)
    if comm.rank == 0:
        assert populations is not None
        evaluated = {ind.uid: ind for population in populations for ind in population}.values()
        pruned = sum(ind.status is Status.PRUNED for ind in evaluated)
        print(
            f"This job trained {epochs} epoch(s) and continued {continued} training(s) that an earlier job "
            f"had begun; {pruned} of {len(evaluated)} individual(s) pruned by the {args.surrogate} surrogate."
        )
        best = islands.top(args.top_n)
        print(f"Best {len(best)} individual(s) on {args.data_root or 'the bundled MNIST slice'}:")
        for place, individual in enumerate(best, start=1):
            accuracy = individual.metrics.get("accuracy", float("nan"))
            print(
                f"{place}. validation loss {individual.loss:.4f}, accuracy {accuracy:.2%}, "
                f"{individual.steps} epoch(s): {individual.params()}"
            )


if __name__ == "__main__":
    main()
