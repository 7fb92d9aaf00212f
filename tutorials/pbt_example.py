"""Population-based training of the DDP tutorial's MNIST network, with multi-rank workers.

Population-based training (PBT; Jaderberg et al., "Population Based Training of Neural Networks", 2017)
optimizes a schedule of hyperparameters while it trains, instead of training every candidate from scratch.
Every worker of this run (a block of ``--ranks-per-worker`` MPI ranks, two by default, that train with
PyTorch DDP) trains one member of the population: the network of ``torch_ddp_example.py`` with
``--conv-layers`` ReLU convolutions. Each evaluation is one interval of ``--interval`` epochs, continued
from the member's last committed state. Between two intervals, without waiting for the others, a member in
the bottom quarter of the members' validation losses after as many epochs copies the network and optimizer
state and the hyperparameters of a member in the top quarter (exploit), and perturbs the hyperparameters
(explore): the Adam learning rate ``lr`` (1e-4 to 1e-2, a log scale, multiplied by 1.2 or 0.8, or drawn
anew) and ``gamma``, the factor by which it decays over each epoch (0.1 to 1).

The state travels through each interval's own folder (:func:`propulate.evaluation_checkpoint`): the worker's
first rank saves the network and the optimizer after every epoch, the yield of the validation loss commits
it, and every rank of the worker loads the state its interval starts from, the member's own or, after an
exploit, the donor's. At the end the first rank prints the schedule that trained the best member's network
(following its state back through the members it was copied from), each member's lineage, and how many
epochs the run trained in all.

Run it from the repository root (``mpiexec`` from the ``mpich`` package, or ``srun`` on a cluster)::

    # 2 members of 2 ranks each, on the MNIST slice bundled in tutorials/data
    mpiexec -n 4 python tutorials/pbt_example.py

    # 4 members of 1 rank each, 6 intervals of 1 epoch, on the offline MNIST subset
    mpiexec -n 4 python tutorials/pbt_example.py --ranks-per-worker 1 --generations 6 \
        --data-root ../shared/data

    # SLURM, 4 nodes with 4 GPUs each: 8 members of 2 GPUs, NCCL
    srun -N 4 --ntasks-per-node=4 --gpus-per-node=4 python tutorials/pbt_example.py --method nccl-slurm

Each worker trains ``--generations`` intervals; progress is checkpointed in ``--checkpoint``, so running the
same command again after an interruption continues every member from its last committed epoch.
"""

from __future__ import annotations

import argparse
import itertools
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from mnist_data import prepare_mnist  # tutorials/ is on the path when this runs as a script
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler
from torch_ddp_example import build_network, check_ranks_fit, epoch_decay, load_mnist, train_epoch, validate

import propulate
from propulate import Float, Islands
from propulate.pbt import PopulationBasedTraining, histories, schedule
from propulate.utils import rank_rng, set_logger_config
from propulate.utils.distributed import init_worker_process_group

log = logging.getLogger("propulate")

LIMITS = {"lr": Float(1e-4, 1e-2, log=True), "gamma": (0.1, 1.0)}
STATE_FILE = "member_state.pt"
#: Epochs this process trained, on the first rank of its worker.
TRAINED = {"epochs": 0}


def parse_arguments(comm: MPI.Comm = MPI.COMM_WORLD) -> argparse.Namespace:
    """Read the command line and check that the ranks of ``comm`` fill whole workers."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--data-root", default=None, help="folder holding MNIST/raw; None: the bundled slice")
    parser.add_argument("--generations", type=int, default=4, help="intervals trained per member")
    parser.add_argument("--interval", type=int, default=1, help="epochs per interval (perturbation_interval)")
    parser.add_argument("--conv-layers", type=int, default=2, help="convolution layers of the network")
    parser.add_argument("--ranks-per-worker", type=int, default=2, help="MPI ranks (DDP replicas) per member")
    parser.add_argument("--seed", type=int, default=42, help="random seed")
    parser.add_argument(
        "--method",
        default="auto",
        choices=("auto", "gloo", "nccl-slurm", "nccl-openmpi"),
        help="how each worker creates its torch.distributed group (auto: NCCL with CUDA, else gloo)",
    )
    parser.add_argument(
        "--checkpoint", default="./checkpoints/pbt", help="folder for checkpoints and the log"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="training batch size per rank")
    parser.add_argument(
        "--train-batches", type=int, default=None, help="training batches per epoch and rank; None: all"
    )
    parser.add_argument("--verbosity", type=int, default=1, help="debug level of Propulate's own logging")
    args = parser.parse_args()
    if args.train_batches is not None and args.train_batches < 1:
        parser.error(f"--train-batches must be >= 1 or left out, got {args.train_batches}")
    check_ranks_fit(parser, args.ranks_per_worker, comm)
    return args


def make_loss_fn(args: argparse.Namespace, data_root: str) -> Callable[..., Iterator[dict[str, float]]]:
    """Return the loss function: trains a member epoch by epoch, yielding the validation loss of each."""

    def loss_fn(params: Mapping, subgroup_comm: MPI.Comm = MPI.COMM_SELF) -> Iterator[dict[str, float]]:
        group = init_worker_process_group(subgroup_comm, method=args.method)
        device = torch.device(group.device)
        train_set, val_set = load_mnist(data_root)
        torch.manual_seed(args.seed)  # a member's first interval: the same initial weights on every rank
        model = build_network(args.conv_layers, "relu").to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=params["lr"])
        sampler: DistributedSampler[int] = DistributedSampler(train_set, shuffle=True, seed=args.seed)
        loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
        batches_per_epoch = min(len(loader), args.train_batches or len(loader))
        val_loader = DataLoader(val_set, batch_size=500, sampler=DistributedSampler(val_set, shuffle=False))

        # The state this interval starts from: the member's own, or its donor's after an exploit. Every
        # rank of the worker loads it.
        checkpoint = propulate.evaluation_checkpoint()
        epoch = 0
        if checkpoint.latest is not None:
            state: dict[str, Any] = torch.load(checkpoint.latest / STATE_FILE, map_location=device)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            epoch = int(state["epoch"])
        for param_group in optimizer.param_groups:  # this interval's learning rate, perhaps explored
            param_group["lr"] = params["lr"]
        scheduler = epoch_decay(optimizer, params["gamma"], batches_per_epoch)
        ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
        while True:  # the library ends the generator after the interval's last epoch
            sampler.set_epoch(epoch)
            train_epoch(ddp, optimizer, scheduler, itertools.islice(loader, batches_per_epoch), device)
            epoch += 1
            if group.rank == 0:
                TRAINED["epochs"] += 1
                state = {"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
                torch.save(state, checkpoint.path / STATE_FILE)
            val_loss, val_acc = validate(ddp, val_loader, device)
            if group.rank == 0:
                log.info(
                    f"DDP world size {dist.get_world_size()}: epoch {epoch}, lr {params['lr']:.2e}, "
                    f"gamma {params['gamma']:.2f} -> validation loss {val_loss:.4f}, accuracy {val_acc:.2%}"
                )
            yield {"loss": val_loss, "accuracy": val_acc}  # commits the state saved above

    return loss_fn


def describe(params: Mapping[str, Any]) -> str:
    """Return the hyperparameters of one interval as text."""
    return f"lr {params['lr']:.2e}, gamma {params['gamma']:.2f}"


def main() -> None:
    """Train the population and print the best member's schedule and lineage on world rank 0."""
    comm = MPI.COMM_WORLD
    args = parse_arguments(comm)
    torch.set_num_threads(1)  # several ranks share each core
    set_logger_config(level=logging.INFO, log_file=str(Path(args.checkpoint) / "pbt.log"))
    data_root = prepare_mnist(args.data_root, comm)

    pbt = PopulationBasedTraining(LIMITS, rng=rank_rng(args.seed), perturbation_interval=args.interval)
    islands = Islands(
        make_loss_fn(args, data_root),
        pbt,
        args.seed,
        generations=args.generations,
        ranks_per_worker=args.ranks_per_worker,
        checkpoint_path=args.checkpoint,
    )
    islands.propulate(logging_interval=1, debug=args.verbosity)
    epochs = comm.reduce(TRAINED["epochs"], root=0)
    if comm.rank != 0:
        return
    population = islands.propulator.population  # the island's, on every worker
    best = schedule(population)
    print(f"Schedule of the best member's network (validation loss {best[-1].loss:.4f}):")
    for segment in best:
        copied = f", copied from member {segment.donor}" if segment.donor >= 0 else ""
        print(
            f"  epochs {segment.start}-{segment.until}: {describe(segment.params)} "
            f"(member {segment.member}{copied}) -> {segment.loss:.4f}"
        )
    print("Lineage of every member:")
    for member, history in histories(population).items():
        steps = [
            f"{s.until}: {describe(s.params)}{f' <- {s.donor}' if s.donor >= 0 else ''} -> {s.loss:.4f}"
            for s in history
        ]
        print(f"  member {member}: " + " | ".join(steps))
    print(f"Epochs trained in all: {epochs} (this job)")


if __name__ == "__main__":
    main()
