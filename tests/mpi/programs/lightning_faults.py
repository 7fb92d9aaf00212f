"""Lightning trainings on multi-rank workers that fail, are pruned or meet a time limit (test_lightning.py).

A small classifier on synthetic data, ``--batches`` batches per epoch, trained by
:func:`propulate.integrations.lightning.lightning_loss_fn`. Modes (``--mode``):

- ``train``: nothing goes wrong;
- ``--prune-at k``: a surrogate cancels every run at its k-th interim loss;
- ``raise``: world rank ``--failing-rank`` raises in ``training_step`` in the middle of the second epoch of
  its worker's first evaluation, while its partners wait for it in DDP's all-reduce.

Every rank appends ``uid epoch rank`` to ``<checkpoint>/epochs.txt`` as it begins each epoch and touches
``evaluating-<rank>`` when it trains. Prints ``RESULT {json}`` on rank 0: the statuses of the individuals,
the seconds ``propulate()`` took on each rank, the interim losses of each individual and how many
interrupted evaluations are pending. Every rank appends
``rank uid port`` to ``groups.txt`` when it builds a module: the rendezvous port of its worker's group.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path

import lightning.pytorch as pl
import torch
from mpi4py import MPI
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import propulate
from propulate import Islands, Status, load_checkpoint
from propulate.integrations.lightning import lightning_loss_fn
from propulate.surrogate import NullSurrogate, SuccessiveHalving, Surrogate
from propulate.utils import get_default_propagator
from propulate.utils.distributed import current_worker_group

warnings.filterwarnings("ignore", module="lightning")
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
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
parser.add_argument("--grace", type=float, default=None)
parser.add_argument("--asha", action="store_true")
parser.add_argument(
    "--finish",
    action="store_true",
    help="resume the checkpoint's run to one generation past its furthest worker",
)
parser.add_argument(
    "--prune-at", type=int, default=0, help="cancel every run at this interim loss (0: never)"
)
args = parser.parse_args()
if args.finish:
    reached = [info.generation_end for info in load_checkpoint(args.checkpoint).writers.values()]
    args.generations = max(reached) + 1
checkpoint = Path(args.checkpoint)
evaluations = {"count": 0}


def synthetic(samples: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, 16, generator=generator)
    return TensorDataset(inputs, (inputs[:, 0] + inputs[:, 1] > 0).long())


class Model(pl.LightningModule):
    def __init__(self, lr: float, uid: int, fail: bool) -> None:
        super().__init__()
        self.network = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
        self.lr, self.uid, self.fail = lr, uid, fail

    def training_step(self, batch, batch_idx):
        if self.fail and self.current_epoch == 1 and batch_idx == args.batches // 2:
            raise ValueError(f"injected failure on rank {world.rank}")
        time.sleep(args.batch_sleep)
        inputs, labels = batch
        return nn.functional.cross_entropy(self.network(inputs), labels)

    def validation_step(self, batch, batch_idx):
        inputs, labels = batch
        self.log("val_loss", nn.functional.cross_entropy(self.network(inputs), labels), sync_dist=True)

    def on_train_epoch_start(self) -> None:
        with open(checkpoint / "epochs.txt", "a") as epochs:
            epochs.write(f"{self.uid} {self.current_epoch} {world.rank}\n")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Data(pl.LightningDataModule):
    def train_dataloader(self):
        return DataLoader(synthetic(16 * args.batches * args.ranks_per_worker, 0), batch_size=16)

    def val_dataloader(self):
        return DataLoader(synthetic(64, 1), batch_size=32)


class PruneAt(Surrogate):
    """Cancels every run at its ``--prune-at``-th interim loss: pruning without chance."""

    def start_run(self, ind) -> None:
        self.steps = 0

    def cancel(self, loss: float) -> bool:
        self.steps += 1
        return self.steps == args.prune_at

    def data(self):
        return None


def surrogate() -> Surrogate:
    if args.asha:
        return SuccessiveHalving(1, 2, args.epochs)
    return PruneAt() if args.prune_at else NullSurrogate()


def build(params) -> Model:
    evaluations["count"] += 1
    (checkpoint / f"evaluating-{world.rank}").touch()
    uid = propulate.evaluation_checkpoint().uid
    group = current_worker_group()
    with open(checkpoint / "groups.txt", "a") as groups:
        groups.write(f"{world.rank} {uid} {group.master_port if group is not None else -1}\n")
    fail = args.mode == "raise" and world.rank == args.failing_rank and evaluations["count"] == 1
    torch.manual_seed(0)
    return Model(params["lr"], uid, fail)


loss_fn = lightning_loss_fn(
    build,
    datamodule=Data(),
    trainer_kwargs={
        "max_epochs": args.epochs,
        "num_sanity_val_steps": 0,
        "limit_train_batches": args.batches,
    },
    method="gloo",
)
limits = {"lr": (0.01, 0.5)}
islands = Islands(
    loss_fn,
    get_default_propagator(4, limits, rng=7),
    7,
    generations=args.generations,
    ranks_per_worker=args.ranks_per_worker,
    checkpoint_path=checkpoint,
    surrogate_factory=surrogate,
    failure_timeout=args.failure_timeout,
    time_limit=args.time_limit,
    grace_period=args.grace,
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
