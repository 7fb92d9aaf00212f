"""Tune a tiny vision transformer with Hugging Face's ``Trainer``: a worker's ranks are its DDP world.

The model is built from its configuration (nothing is downloaded): a vision transformer (ViT) of one to three
layers that cuts an 8x8 image of scikit-learn's handwritten digits (shipped with scikit-learn) into 16 patches
of 2x2 pixels and classifies it. Each worker is a block of
``--ranks-per-worker`` MPI ranks (two by default); for every individual
:func:`propulate.integrations.hf_trainer.hf_trainer_loss_fn` builds the model on each rank of the worker and
trains it with a ``Trainer`` whose DDP world is the worker's process group (gloo on CPUs, NCCL on GPUs). After
every epoch the ``Trainer`` evaluates, saves its checkpoint into the individual's folder, and the evaluation
loss is reported to Propulate: asynchronous successive halving (``--surrogate asha``, the default) stops the
worse runs at its rungs, on all of the worker's ranks at the same epoch, and a search stopped by ``scancel``
or a time limit continues every training from its last epoch in the next job
(``trainer.train(resume_from_checkpoint=...)``).

Search space: the learning rate (1e-3 to 2e-2, log scale), the hidden size (16, 32 or 64), the number of
layers (1 to 3) and the weight decay (0 to 0.1).

Run it from the repository root::

    # 2 workers of 2 ranks, gloo
    mpiexec -n 4 python tutorials/hf_trainer_example.py

    # SLURM, 2 nodes with 4 GPUs each: 4 workers of 2 GPUs, NCCL
    srun -N 2 --ntasks-per-node=4 --gpus-per-task=1 python tutorials/hf_trainer_example.py

At the end, the first rank prints the best individuals, how many were pruned, and the epochs trained by this
job (and how many trainings it continued from an earlier job's checkpoint).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # several ranks share each core; read by Accelerate too
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is built from its configuration: nothing to fetch

import argparse
import logging
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from mpi4py import MPI
from sklearn.datasets import load_digits
from torch.utils.data import Dataset
from transformers import TrainerCallback, ViTConfig, ViTForImageClassification

import propulate
from propulate import Float, Islands, Status
from propulate.integrations.hf_trainer import hf_trainer_loss_fn
from propulate.surrogate import NullSurrogate, StaticSurrogate, SuccessiveHalving, Surrogate
from propulate.utils import get_default_propagator, set_logger_config

LIMITS = {
    "learning_rate": Float(1e-3, 2e-2, log=True),
    "hidden_size": ("16", "32", "64"),
    "layers": (1, 3),
    "weight_decay": (0.0, 0.1),
}
SURROGATES = ("asha", "static", "none")
GREY_LEVELS = 16  # the digits' pixels take the values 0 to 16
#: What this process trained in this job, counted on the first rank of each worker.
TRAINED = {"epochs": 0, "continued": 0}


def parse_arguments(comm: MPI.Comm = MPI.COMM_WORLD) -> argparse.Namespace:
    """Read the command line; exit on every rank if the ranks of ``comm`` do not fill whole workers."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--surrogate", default="asha", choices=SURROGATES, help="early-stopping rule")
    parser.add_argument("--eta", type=int, default=2, help="asha: a rung keeps the best 1/eta of its runs")
    parser.add_argument("--epochs", type=int, default=5, help="training epochs of an individual not pruned")
    parser.add_argument("--generations", type=int, default=4, help="individuals evaluated per worker")
    parser.add_argument("--ranks-per-worker", type=int, default=2, help="MPI ranks (DDP replicas) per worker")
    parser.add_argument("--pop-size", type=int, default=4, help="breeding population size")
    parser.add_argument("--seed", type=int, default=42, help="random seed")
    parser.add_argument(
        "--checkpoint", default="./checkpoints/hf_trainer_example", help="folder for checkpoints and the log"
    )
    parser.add_argument(
        "--method",
        default="auto",
        choices=("auto", "gloo", "nccl-slurm", "nccl-openmpi"),
        help="how each worker creates its torch.distributed group (auto: NCCL with CUDA, else gloo)",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="training batch size per rank")
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


class Digits(Dataset):
    """scikit-learn's 8x8 digits as one-channel images with intensities in [0, 1]."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.pixel_values = torch.as_tensor(images / GREY_LEVELS, dtype=torch.float32).view(-1, 1, 8, 8)
        self.labels = torch.as_tensor(labels, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.pixel_values[index], "labels": self.labels[index]}


def load_data(seed: int) -> tuple[Digits, Digits]:
    """Return the training (80 %) and evaluation (20 %) splits of the 1,797 digits, shuffled by ``seed``."""
    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    cut = int(0.8 * len(order))
    train, held_out = order[:cut], order[cut:]
    return Digits(digits.data[train], digits.target[train]), Digits(
        digits.data[held_out], digits.target[held_out]
    )


def accuracy(prediction: Any) -> dict[str, float]:
    """Return the accuracy of the ``Trainer``'s evaluation predictions (gathered over the worker)."""
    return {"accuracy": float((np.argmax(prediction.predictions, axis=-1) == prediction.label_ids).mean())}


class EpochLog(TrainerCallback):
    """Counts the epochs the first rank of a worker begins; appends ``uid epoch rank`` to a file if asked."""

    def __init__(self, uid: int, path: str | None) -> None:
        self.uid, self.path = uid, path

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Count the epoch (the state's epoch is that of the checkpoint a resumed training starts from)."""
        if state.is_world_process_zero:
            TRAINED["epochs"] += 1
        if self.path is not None:
            with open(self.path, "a") as log_file:
                log_file.write(f"{self.uid} {round(state.epoch)} {MPI.COMM_WORLD.rank}\n")


def make_model_factory(args: argparse.Namespace) -> Callable[[Mapping[str, Any]], ViTForImageClassification]:
    """Return the factory of an individual's model: every rank of a worker builds the same weights."""

    def build(params: Mapping[str, Any]) -> ViTForImageClassification:
        if propulate.evaluation_checkpoint().resuming and MPI.COMM_WORLD.rank % args.ranks_per_worker == 0:
            TRAINED["continued"] += 1
        hidden = int(params["hidden_size"])
        config = ViTConfig(
            image_size=8,
            patch_size=2,
            num_channels=1,
            hidden_size=hidden,
            num_hidden_layers=params["layers"],
            num_attention_heads=2,
            intermediate_size=2 * hidden,
            num_labels=10,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(args.seed)
            return ViTForImageClassification(config)

    return build


def surrogate_factory(name: str, eta: int, epochs: int) -> Callable[[], Surrogate]:
    """Return the factory of the surrogate called ``name``: one interim loss per epoch's evaluation."""
    if name == "asha":
        return lambda: SuccessiveHalving(min_resource=1, reduction_factor=eta, max_resource=epochs)
    if name == "static":
        return StaticSurrogate
    return NullSurrogate


def main() -> None:
    """Run the search and print its outcome on world rank 0."""
    comm = MPI.COMM_WORLD
    args = parse_arguments(comm)
    torch.set_num_threads(1)
    set_logger_config(level=logging.INFO, log_file=str(Path(args.checkpoint) / "hf_trainer_example.log"))
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # the model's checkpoint shards, written every epoch
    train_set, eval_set = load_data(args.seed)

    def training_args(params: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "learning_rate": params["learning_rate"],
            "weight_decay": params["weight_decay"],
            "num_train_epochs": args.epochs,
            "per_device_train_batch_size": args.batch_size,
            "per_device_eval_batch_size": 128,
            "logging_strategy": "no",
            "seed": args.seed,
        }

    def trainer_kwargs(params: Mapping[str, Any]) -> dict[str, Any]:
        uid = propulate.evaluation_checkpoint().uid
        return {"compute_metrics": accuracy, "callbacks": [EpochLog(uid, args.epoch_log)]}

    loss_fn = hf_trainer_loss_fn(
        make_model_factory(args),
        train_dataset=train_set,
        eval_dataset=eval_set,
        training_args=training_args,
        trainer_kwargs=trainer_kwargs,
        monitor="eval_loss",
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
        print(f"Best {len(best)} individual(s) on scikit-learn's digits:")
        for place, individual in enumerate(best, start=1):
            accuracy_ = individual.metrics.get("eval_accuracy", float("nan"))
            print(
                f"{place}. evaluation loss {individual.loss:.4f}, accuracy {accuracy_:.2%}, "
                f"{individual.steps} epoch(s): {individual.params()}"
            )


if __name__ == "__main__":
    main()
