"""Hugging Face Trainer runs on multi-rank workers that are pruned, fail or meet a time limit.

A small classifier (a torch module whose forward returns the loss, as the ``Trainer`` expects) on synthetic
data, ``--batches`` steps per epoch and rank, trained by :func:`propulate.integrations.hf_trainer.
hf_trainer_loss_fn`. ``--prune-at k``: a surrogate cancels every run at its k-th interim loss; ``--mode
raise``: world rank ``--failing-rank`` raises in the middle of the second epoch of its worker's first
evaluation. Every rank appends ``uid epoch rank`` to ``<checkpoint>/epochs.txt`` for each epoch it begins and
``rank uid port`` to ``groups.txt`` per evaluation (its worker group's rendezvous port). Prints ``RESULT
{json}`` on rank 0: the statuses, the seconds ``propulate()`` took per rank, the interim losses per
individual, and the pending (interrupted) evaluations.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import transformers
from mpi4py import MPI
from torch import nn
from torch.utils.data import Dataset
from transformers import TrainerCallback

import propulate
from propulate import Islands, Status, load_checkpoint
from propulate.integrations.hf_trainer import hf_trainer_loss_fn
from propulate.surrogate import NullSurrogate, Surrogate
from propulate.utils import get_default_propagator
from propulate.utils.distributed import current_worker_group

os.environ.setdefault("OMP_NUM_THREADS", "1")
transformers.logging.set_verbosity_error()
torch.set_num_threads(1)
world = MPI.COMM_WORLD

parser = argparse.ArgumentParser()
parser.add_argument("--mode", default="train", choices=("train", "raise"))
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=2)
parser.add_argument("--ranks-per-worker", type=int, default=2)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batches", type=int, default=8)
parser.add_argument("--batch-sleep", type=float, default=0.0)
parser.add_argument("--failing-rank", type=int, default=1)
parser.add_argument("--failure-timeout", type=float, default=300.0)
parser.add_argument("--time-limit", type=float, default=None)
parser.add_argument("--finish", action="store_true", help="resume to one generation past the furthest worker")
parser.add_argument(
    "--prune-at", type=int, default=0, help="cancel every run at this interim loss (0: never)"
)
args = parser.parse_args()
if args.finish:
    args.generations = (
        max(info.generation_end for info in load_checkpoint(args.checkpoint).writers.values()) + 1
    )
checkpoint = Path(args.checkpoint)
evaluations = {"count": 0}


class Synthetic(Dataset):
    def __init__(self, samples: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.inputs = torch.randn(samples, 16, generator=generator)
        self.labels = (self.inputs[:, 0] + self.inputs[:, 1] > 0).long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"inputs": self.inputs[index], "labels": self.labels[index]}


class Model(nn.Module):
    def __init__(self, fail: bool) -> None:
        super().__init__()
        self.network = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
        self.fail = fail
        self.calls = 0

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.training:
            self.calls += 1
            if self.fail and self.calls == args.batches + args.batches // 2:
                raise ValueError(f"injected failure on rank {world.rank}")
            time.sleep(args.batch_sleep)
        logits = self.network(inputs)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


class EpochLog(TrainerCallback):
    def __init__(self, uid: int) -> None:
        self.uid = uid

    def on_epoch_begin(self, args, state, control, **kwargs) -> None:
        with open(checkpoint / "epochs.txt", "a") as epochs:
            epochs.write(f"{self.uid} {round(state.epoch)} {world.rank}\n")


class PruneAt(Surrogate):
    """Cancels every run at its ``--prune-at``-th interim loss: pruning without chance."""

    def start_run(self, ind) -> None:
        self.steps = 0

    def cancel(self, loss: float) -> bool:
        self.steps += 1
        return self.steps == args.prune_at

    def data(self):
        return None


def build(params) -> Model:
    evaluations["count"] += 1
    (checkpoint / f"evaluating-{world.rank}").touch()
    group = current_worker_group()
    uid = propulate.evaluation_checkpoint().uid
    with open(checkpoint / "groups.txt", "a") as groups:
        groups.write(f"{world.rank} {uid} {group.master_port if group is not None else -1}\n")
    torch.manual_seed(0)
    return Model(args.mode == "raise" and world.rank == args.failing_rank and evaluations["count"] == 1)


loss_fn = hf_trainer_loss_fn(
    build,
    train_dataset=Synthetic(16 * args.batches * args.ranks_per_worker, 0),
    eval_dataset=Synthetic(64, 1),
    training_args=lambda params: {
        "learning_rate": params["lr"],
        "num_train_epochs": args.epochs,
        "per_device_train_batch_size": 16,
        "logging_strategy": "no",
    },
    trainer_kwargs=lambda params: {"callbacks": [EpochLog(propulate.evaluation_checkpoint().uid)]},
    method="gloo",
)
islands = Islands(
    loss_fn,
    get_default_propagator(4, {"lr": (0.01, 0.5)}, rng=7),
    7,
    generations=args.generations,
    ranks_per_worker=args.ranks_per_worker,
    checkpoint_path=checkpoint,
    surrogate_factory=PruneAt if args.prune_at else NullSurrogate,
    failure_timeout=args.failure_timeout,
    time_limit=args.time_limit,
)
started = time.monotonic()
islands.propulate(logging_interval=1, debug=1)
elapsed = world.gather(time.monotonic() - started, root=0)
populations = world.gather(islands.propulator.population, root=0)
if world.rank == 0:
    evaluated = {ind.uid: ind for population in populations for ind in population}.values()
    statuses = {status.name: sum(ind.status is status for ind in evaluated) for status in Status}
    steps = {str(ind.uid): ind.steps for ind in evaluated}
    pending = sum(len(inds) for inds in load_checkpoint(checkpoint).pending.values())
    result = {"statuses": statuses, "elapsed": elapsed, "steps": steps, "pending": pending}
    print("RESULT " + json.dumps(result))
