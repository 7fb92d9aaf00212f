"""Tune a small convolutional network on MNIST with multi-rank workers that train it with PyTorch DDP.

Every worker of this run is a block of ``--ranks-per-worker`` MPI ranks (two by default). The recommended
search (:func:`propulate.utils.get_tpe_propagator`, a tree-structured Parzen estimator that keeps away from
what the other workers evaluate at the moment) proposes one set of hyperparameters per worker, and
Propulate calls the loss function on all of the worker's ranks with the same parameters and the worker's
MPI communicator. The loss function turns that communicator into a
``torch.distributed`` process group (once per worker, reused for every later individual), trains the network
with ``DistributedDataParallel`` on disjoint shards of the training data, evaluates it on disjoint shards of
the validation data and reduces the validation loss and accuracy over the worker. The validation loss is
minimized; the accuracy travels along as a metric of each individual and shows up in the summary.

Search space: the number of 3x3 convolution layers with 10 channels (2 to 10), their activation (ReLU,
sigmoid or tanh), the Adam learning rate (1e-4 to 1e-2, searched on a log scale) and ``gamma``, the factor
by which the learning rate decays over one epoch (0.1 to 1), applied a little after every batch. At the end,
the first rank prints the best individuals of the run.

Run it from the repository root (``mpiexec`` from the ``mpich`` package, or ``srun`` on a cluster)::

    # the MNIST slice bundled in tutorials/data (decompressed once per node into a cache folder)
    mpiexec -n 4 python tutorials/torch_ddp_example.py

    # the offline MNIST subset in torchvision's layout, 8,000 training and 2,000 validation images
    mpiexec -n 4 python tutorials/torch_ddp_example.py --data-root ../shared/data

    # longer training per individual
    mpiexec -n 4 python tutorials/torch_ddp_example.py --data-root ../shared/data --epochs 2

    # the full MNIST data set, downloaded by the first rank into an empty folder (needs internet access)
    mpiexec -n 4 python tutorials/torch_ddp_example.py --data-root ./mnist

    # SLURM, 4 nodes with 4 GPUs each: 16 ranks, 8 workers of 2 GPUs, NCCL
    srun -N 4 --ntasks-per-node=4 --gpus-per-node=4 python tutorials/torch_ddp_example.py --method nccl-slurm

The number of MPI ranks must be a multiple of ``--ranks-per-worker``. Each worker evaluates
``--generations`` individuals in total: progress is checkpointed in ``--checkpoint`` (with the log,
``torch_ddp.log``), so running the same command again after an interruption resumes the search, also with
another number of ranks.

Trainings survive the end of a job too. After every epoch the worker's first rank saves the network, the
optimizer and the learning-rate schedule into the individual's own folder
(:func:`propulate.evaluation_checkpoint`) and every rank commits it; at a stop (``scancel``, a SLURM time
limit near, Ctrl-C) the training ends at the next commit, and in the next job every rank of whichever
worker takes the individual over loads that state and trains the remaining epochs only. At the end the
first rank says how many epochs this job trained and how many trainings it continued.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torchvision
from mnist_data import prepare_mnist  # tutorials/ is on the path when this runs as a script
from mpi4py import MPI
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import propulate
from propulate import Float, Islands
from propulate.utils import get_tpe_propagator, set_logger_config
from propulate.utils.distributed import init_worker_process_group

log = logging.getLogger("propulate")

LIMITS = {
    "conv_layers": (2, 10),
    "activation": ("relu", "sigmoid", "tanh"),
    "lr": Float(1e-4, 1e-2, log=True),
    "gamma": (0.1, 1.0),
}
ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}
# Mean and standard deviation of MNIST's pixel intensities in [0, 1].
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
STATE_FILE = "training_state.pt"
#: What this process trained in this job, on the first rank of its worker: epochs, and trainings continued.
TRAINED = {"epochs": 0, "continued": 0}


def check_ranks_fit(parser: argparse.ArgumentParser, ranks_per_worker: int, comm: MPI.Comm) -> None:
    """Exit with status 2 on every rank, rank 0 saying why, unless the ranks of ``comm`` fill workers."""
    if ranks_per_worker >= 1 and comm.size % ranks_per_worker == 0:
        return
    if comm.rank == 0:
        if ranks_per_worker < 1:
            parser.error(f"--ranks-per-worker must be >= 1, got {ranks_per_worker}")
        parser.error(
            f"--ranks-per-worker {ranks_per_worker} does not divide the {comm.size} rank(s) of this job: "
            f"start a multiple of {ranks_per_worker} ranks (mpiexec -n {ranks_per_worker} ...), or pass "
            "--ranks-per-worker 1 to train each network on one rank"
        )
    sys.exit(2)


def parse_arguments(comm: MPI.Comm = MPI.COMM_WORLD) -> argparse.Namespace:
    """Read the command line and check that the ranks of ``comm`` fill whole workers."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--data-root",
        default=None,
        help="folder holding MNIST/raw (e.g. ../shared/data); an empty folder downloads MNIST there; "
        "None: the slice bundled in tutorials/data",
    )
    parser.add_argument("--generations", type=int, default=8, help="individuals evaluated per worker")
    parser.add_argument("--epochs", type=int, default=1, help="training epochs per individual")
    parser.add_argument("--ranks-per-worker", type=int, default=2, help="MPI ranks (DDP replicas) per worker")
    parser.add_argument("--num-islands", type=int, default=1, help="number of islands")
    parser.add_argument(
        "--n-startup", type=int, default=4, help="evaluations of the initial design before the model proposes"
    )
    parser.add_argument("--seed", type=int, default=42, help="random seed")
    parser.add_argument(
        "--method",
        default="auto",
        choices=("auto", "gloo", "nccl-slurm", "nccl-openmpi"),
        help="how each worker creates its torch.distributed group (auto: NCCL with CUDA, else gloo)",
    )
    parser.add_argument(
        "--checkpoint", default="./checkpoints/torch_ddp", help="folder for checkpoints and the log"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="training batch size per rank")
    parser.add_argument(
        "--train-batches", type=int, default=None, help="training batches per epoch and rank; None: all"
    )
    parser.add_argument("--top-n", type=int, default=3, help="number of best individuals to report")
    parser.add_argument("--verbosity", type=int, default=1, help="debug level of Propulate's own logging")
    args = parser.parse_args()
    if args.train_batches is not None and args.train_batches < 1:
        parser.error(f"--train-batches must be >= 1 or left out, got {args.train_batches}")
    check_ranks_fit(parser, args.ranks_per_worker, comm)
    return args


@functools.lru_cache(maxsize=1)
def load_mnist(root: str) -> tuple[TensorDataset, TensorDataset]:
    """Return the normalized training and validation sets as tensors; read once per process."""

    def as_tensors(train: bool) -> TensorDataset:
        data = torchvision.datasets.MNIST(root, train=train, download=False)
        images = (data.data.float().div(255.0) - MNIST_MEAN) / MNIST_STD
        return TensorDataset(images.unsqueeze(1), data.targets)

    return as_tensors(train=True), as_tensors(train=False)


def build_network(conv_layers: int, activation: str) -> nn.Module:
    """Return ``conv_layers`` 3x3 convolutions with 10 channels each, then a linear layer to the 10 digits."""
    layers: list[nn.Module] = []
    channels = 1
    for _ in range(conv_layers):
        layers += [nn.Conv2d(channels, 10, kernel_size=3, padding=1), ACTIVATIONS[activation]()]
        channels = 10
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(10 * 28 * 28, 10))


def epoch_decay(
    optimizer: torch.optim.Optimizer, gamma: float, batches_per_epoch: int
) -> torch.optim.lr_scheduler.ExponentialLR:
    """Return a scheduler that multiplies the learning rate by ``gamma`` over ``batches_per_epoch`` steps.

    Stepped after every batch: the learning rate falls smoothly within each epoch, so that ``gamma`` matters
    from the first epoch on.
    """
    return torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=gamma ** (1.0 / batches_per_epoch))


def train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
) -> None:
    """Train ``model`` for one pass over ``batches``, stepping ``scheduler`` after every batch.

    With DDP the gradients are averaged over the worker.
    """
    model.train()
    for images, labels in batches:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(images.to(device)), labels.to(device)).backward()
        optimizer.step()
        scheduler.step()


def save_training_state(
    folder: Path,
    epoch: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> None:
    """Save what training needs to go on after ``epoch`` epochs into ``folder`` (the worker's first rank)."""
    state = {
        "epoch": epoch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    }
    torch.save(state, folder / STATE_FILE)


def load_training_state(
    checkpoint: propulate.EvaluationCheckpoint,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    device: torch.device,
) -> int:
    """Load the state an earlier job committed for this individual, if any; return the epochs it had trained.

    Every rank of the worker loads it (DDP would also broadcast the weights from the first rank, but not the
    optimizer's moments or the schedule).
    """
    if checkpoint.latest is None:
        return 0
    state: dict[str, Any] = torch.load(checkpoint.latest / STATE_FILE, map_location=device)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return int(state["epoch"])


def validate(
    model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], device: torch.device
) -> tuple[float, float]:
    """Return the mean cross-entropy and the accuracy of ``model`` over the worker's validation shards.

    Collective over the worker's process group: each rank sums over its own shard, the sums are reduced.
    """
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # summed loss, correct, count
    model.eval()
    with torch.no_grad():
        for images, labels in batches:
            images, labels = images.to(device), labels.to(device)
            logits = model(images)
            totals[0] += nn.functional.cross_entropy(logits, labels, reduction="sum").item()
            totals[1] += (logits.argmax(dim=1) == labels).sum().item()
            totals[2] += labels.numel()
    dist.all_reduce(totals)
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()


def make_loss_fn(args: argparse.Namespace, data_root: str) -> Callable[[Mapping, MPI.Comm], dict[str, float]]:
    """Return the loss function: validation loss (and accuracy) of the network trained with ``params``."""

    def loss_fn(params: Mapping, subgroup_comm: MPI.Comm = MPI.COMM_SELF) -> dict[str, float]:
        # One process group per worker, created at the worker's first individual and reused afterwards.
        group = init_worker_process_group(subgroup_comm, method=args.method)
        device = torch.device(group.device)
        train_set, val_set = load_mnist(data_root)

        # All ranks of the worker start from the same weights; DDP also broadcasts them from rank 0.
        torch.manual_seed(args.seed)
        model = build_network(params["conv_layers"], params["activation"]).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=params["lr"])

        # Each rank trains on its own shard; the gradients are averaged over the worker in backward().
        train_sampler: DistributedSampler[int] = DistributedSampler(train_set, shuffle=True, seed=args.seed)
        train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
        batches_per_epoch = min(len(train_loader), args.train_batches or len(train_loader))
        scheduler = epoch_decay(optimizer, params["gamma"], batches_per_epoch)

        # This individual's own folder: a training that an earlier job began goes on from its last epoch.
        checkpoint = propulate.evaluation_checkpoint()
        start = load_training_state(checkpoint, model, optimizer, scheduler, device)
        if group.rank == 0 and start > 0:
            TRAINED["continued"] += 1
        ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
        for epoch in range(start, args.epochs):
            train_sampler.set_epoch(epoch)  # the same shuffling as an uninterrupted training
            batches = itertools.islice(train_loader, batches_per_epoch)
            train_epoch(ddp, optimizer, scheduler, batches, device)
            if group.rank == 0:
                TRAINED["epochs"] += 1
                save_training_state(checkpoint.path, epoch + 1, model, optimizer, scheduler)
            # Every rank: once all are here, the saved state becomes the latest. At a stop the training
            # ends here, on every rank, and continues from this state in the next job.
            checkpoint.commit()

        # Each rank validates its shard (DistributedSampler pads the last shard with repeated images when
        # the set's size is not a multiple of the world size; 2,000 and 10,000 images split evenly).
        val_loader = DataLoader(val_set, batch_size=500, sampler=DistributedSampler(val_set, shuffle=False))
        val_loss, val_acc = validate(ddp, val_loader, device)

        if group.rank == 0:
            log.info(
                f"DDP world size {dist.get_world_size()} ({group.backend}, {device}): {dict(params)} -> "
                f"validation loss {val_loss:.4f}, accuracy {val_acc:.2%}"
            )
        return {"loss": val_loss, "accuracy": val_acc}

    return loss_fn


def main() -> None:
    """Run the search and print the best individuals on world rank 0."""
    comm = MPI.COMM_WORLD
    args = parse_arguments(comm)
    torch.set_num_threads(1)  # several ranks share each core
    set_logger_config(level=logging.INFO, log_file=str(Path(args.checkpoint) / "torch_ddp.log"))
    data_root = prepare_mnist(args.data_root, comm)

    # The recommended search; the seed is the same on every rank, which derives its own generators from it.
    propagator = get_tpe_propagator(LIMITS, rng=args.seed, n_startup=args.n_startup)
    islands = Islands(
        make_loss_fn(args, data_root),
        propagator,
        args.seed,
        generations=args.generations,
        num_islands=args.num_islands,
        ranks_per_worker=args.ranks_per_worker,
        checkpoint_path=args.checkpoint,
    )
    islands.propulate(logging_interval=1, debug=args.verbosity)
    islands.summarize(top_n=args.top_n, debug=args.verbosity)
    epochs = comm.reduce(TRAINED["epochs"], root=0)
    continued = comm.reduce(TRAINED["continued"], root=0)
    if comm.rank == 0:
        print(
            f"This job trained {epochs} epoch(s) and continued {continued} training(s) that an earlier job "
            "had begun."
        )

    if comm.rank == 0:  # every rank holds the run's results; the first prints them
        best = islands.top(args.top_n)  # the run's best distinct individuals, all islands, best first
        print(f"Best {len(best)} individual(s) on {args.data_root or 'the bundled MNIST slice'}:")
        for place, individual in enumerate(best, start=1):
            accuracy = individual.metrics.get("accuracy", float("nan"))
            print(
                f"{place}. validation loss {individual.loss:.4f}, accuracy {accuracy:.2%}: "
                f"{individual.params()}"
            )


if __name__ == "__main__":
    main()
