"""Tune the MNIST network with early stopping: a loss that reports every epoch, and a surrogate that prunes.

The network, search space and data are those of ``torch_ddp_example.py`` (3x3 convolution layers with 10
channels: their number, their activation, the Adam learning rate and its per-epoch decay). The loss function
here is a generator: after each training epoch it validates the network and yields the validation loss
(with the accuracy as a metric). After each interim loss the worker's surrogate decides whether the run is
worth finishing; a cancelled individual is marked pruned, keeps its last interim loss and its number of
epochs run (``ind.steps``), and the worker breeds the next individual at once. ``--surrogate``:

- ``static`` (default): cancel a run whose validation loss after epoch ``k`` is worse than that of the best
  completed run after epoch ``k`` by more than ``1 / margin - 1`` of it (25 % with ``--margin 0.8``);
- ``loglinear``: extrapolate the run's curve as ``a + b log(epoch)`` and compare with the best final loss;
- ``dynamic``: a Gaussian process predicts the final loss (needs scikit-learn; ``--margin`` is not used);
- ``asha``: asynchronous successive halving (Li et al., MLSys 2020): at epochs 1, ``η``, ``η²``, ... a run
  continues only if its loss is among the best ``1 / η`` recorded at that epoch by the island's workers
  (``--eta``, default 3; ``--margin`` is not used);
- ``none``: every run trains all ``--epochs`` epochs (the baseline that early stopping saves on).

With ``--ranks-per-worker 2`` every worker is two MPI ranks that train one network together with
``DistributedDataParallel`` (gloo on CPU, NCCL with GPUs, as in ``torch_ddp_example.py``): each rank
validates its half of the validation set, the sums are reduced over the worker, so both ranks yield the
same loss after every epoch and leave the training loop together when the surrogate cancels.

Run it from the repository root (``mpiexec`` from the ``mpich`` package, or ``srun`` on a cluster)::

    # 4 workers of 1 rank, static surrogate, the MNIST slice bundled in tutorials/data
    mpiexec -n 4 python tutorials/surrogate_example.py

    # the offline subset in torchvision's layout (8,000 training and 2,000 validation images)
    mpiexec -n 4 python tutorials/surrogate_example.py --data-root ../shared/data

    # 2 workers of 2 DDP ranks each
    mpiexec -n 4 python tutorials/surrogate_example.py --ranks-per-worker 2

    # the same search without early stopping, in its own checkpoint folder
    mpiexec -n 4 python tutorials/surrogate_example.py --surrogate none --checkpoint checkpoints/no_surrogate

    # what early stopping saves: both searches with the same seeds, compared
    python benchmarks/surrogate_savings.py --ranks 4 --data-root ../shared/data

Each worker evaluates ``--generations`` individuals; progress is checkpointed in ``--checkpoint`` (with the
log, ``surrogate_example.log``), so the same command resumes an interrupted search. Every epoch the worker's
first rank also saves the network, optimizer and schedule into the individual's own folder
(:func:`propulate.evaluation_checkpoint`), which the epoch's interim loss commits: a training stopped by the
end of a job (``scancel``, a time limit) continues in the next from its last epoch, on every rank, and the
surrogate judges each epoch's loss once, whatever the number of jobs (successive halving keeps its rungs). At
the end, rank 0 prints how many individuals were completed and pruned, how many epochs were trained out of how
many a search without early stopping would have trained, and the best completed individuals.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import torch
from mnist_data import prepare_mnist  # tutorials/ is on the path when this runs as a script
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler
from torch_ddp_example import (
    LIMITS,
    build_network,
    check_ranks_fit,
    epoch_decay,
    load_mnist,
    load_training_state,
    save_training_state,
    train_epoch,
    validate,
)

import propulate
from propulate import Individual, Islands, Status
from propulate.surrogate import (
    DynamicSurrogate,
    LogLinearSurrogate,
    NullSurrogate,
    StaticSurrogate,
    SuccessiveHalving,
    Surrogate,
)
from propulate.utils import get_default_propagator, set_logger_config
from propulate.utils.distributed import init_worker_process_group

log = logging.getLogger("propulate")

SURROGATES = ("static", "loglinear", "dynamic", "asha", "none")
VALIDATION_BATCH_SIZE = 500


def parse_arguments(argv: list[str] | None = None, comm: MPI.Comm = MPI.COMM_WORLD) -> argparse.Namespace:
    """Read the command line (``argv``, default ``sys.argv[1:]``); check that ``comm`` fills whole workers."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--surrogate", default="static", choices=SURROGATES, help="early-stopping rule")
    parser.add_argument(
        "--margin",
        type=float,
        default=0.8,
        help="static and loglinear: in (0, 1]; 1 cancels any run behind the best, 0.8 tolerates 25 %%",
    )
    parser.add_argument(
        "--eta",
        type=int,
        default=3,
        help="asha: the reduction factor; a rung keeps the best 1/eta of its runs",
    )
    parser.add_argument("--epochs", type=int, default=5, help="training epochs of an individual not pruned")
    parser.add_argument("--generations", type=int, default=8, help="individuals evaluated per worker")
    parser.add_argument("--ranks-per-worker", type=int, default=1, help="MPI ranks (DDP replicas) per worker")
    parser.add_argument("--num-islands", type=int, default=1, help="number of islands")
    parser.add_argument("--pop-size", type=int, default=4, help="breeding population size per island")
    parser.add_argument("--seed", type=int, default=42, help="random seed")
    parser.add_argument(
        "--data-root",
        default=None,
        help="folder holding MNIST/raw (e.g. ../shared/data); an empty folder downloads MNIST there; "
        "None: the slice bundled in tutorials/data",
    )
    parser.add_argument(
        "--checkpoint", default="./checkpoints/surrogate_example", help="folder for checkpoints and the log"
    )
    parser.add_argument(
        "--method",
        default="auto",
        choices=("auto", "gloo", "nccl-slurm", "nccl-openmpi"),
        help="how each worker creates its torch.distributed group (auto: NCCL with CUDA, else gloo)",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="training batch size per rank")
    parser.add_argument(
        "--train-batches", type=int, default=None, help="training batches per epoch and rank; None: all"
    )
    parser.add_argument(
        "--val-batches",
        type=int,
        default=None,
        help=f"validation batches of {VALIDATION_BATCH_SIZE} images per epoch and rank; None: all",
    )
    parser.add_argument("--top-n", type=int, default=3, help="number of best individuals to print")
    parser.add_argument("--verbosity", type=int, default=1, help="debug level of Propulate's own logging")
    args = parser.parse_args(argv)
    for name in ("epochs", "generations", "ranks_per_worker", "num_islands", "pop_size", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("train_batches", "val_batches"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1 or left out, got {getattr(args, name)}")
    if not 0 < args.margin <= 1:
        parser.error(f"--margin must be in (0, 1], got {args.margin}")
    if args.eta < 2:
        parser.error(f"--eta must be >= 2, got {args.eta}")
    check_ranks_fit(parser, args.ranks_per_worker, comm)
    return args


def surrogate_factory(name: str, margin: float, eta: int = 3, epochs: int = 5) -> Callable[[], Surrogate]:
    """Return the factory of the surrogate called ``name`` (one of :data:`SURROGATES`).

    ``margin`` is the static and log-linear surrogates' tolerance, ``eta`` successive halving's reduction
    factor, and ``epochs`` its maximum resource (no decision at the last epoch).

    Raises
    ------
    ValueError
        If ``name`` is not one of :data:`SURROGATES`.
    """
    factories: dict[str, Callable[[], Surrogate]] = {
        "static": lambda: StaticSurrogate(margin),
        "loglinear": lambda: LogLinearSurrogate(margin),
        "dynamic": lambda: DynamicSurrogate(LIMITS),
        "asha": lambda: SuccessiveHalving(min_resource=1, reduction_factor=eta, max_resource=epochs),
        "none": NullSurrogate,
    }
    if name not in factories:
        raise ValueError(f"surrogate: expected one of {', '.join(SURROGATES)}; got {name!r}")
    return factories[name]


def make_loss_fn(
    args: argparse.Namespace, data_root: str
) -> Callable[[Mapping, MPI.Comm], Iterator[dict[str, float]]]:
    """Return the loss function: a generator of the validation loss (and accuracy) after every epoch."""

    def loss_fn(params: Mapping, subgroup_comm: MPI.Comm = MPI.COMM_SELF) -> Iterator[dict[str, float]]:
        # One process group per worker (world size 1 with one rank per worker), created at the worker's first
        # individual and reused afterwards; it also picks this rank's GPU, if there are any.
        group = init_worker_process_group(subgroup_comm, method=args.method)
        device = torch.device(group.device)
        train_set, val_set = load_mnist(data_root)

        # Every individual starts from the same weights, drawn from a generator seeded here alone, so the
        # global torch random state is left as it was; DDP also broadcasts the weights from rank 0.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(args.seed)
            model = build_network(params["conv_layers"], params["activation"]).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=params["lr"])

        # Each rank trains and validates on its own shard (the validation shards split 2,000 and 10,000
        # images evenly over 1 or 2 ranks; otherwise DistributedSampler repeats a few to even them out).
        train_sampler: DistributedSampler[int] = DistributedSampler(train_set, shuffle=True, seed=args.seed)
        train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
        val_sampler: DistributedSampler[int] = DistributedSampler(val_set, shuffle=False)
        val_loader = DataLoader(val_set, batch_size=VALIDATION_BATCH_SIZE, sampler=val_sampler)
        batches_per_epoch = min(len(train_loader), args.train_batches or len(train_loader))
        scheduler = epoch_decay(optimizer, params["gamma"], batches_per_epoch)

        # This individual's own folder: a training an earlier job began continues from its last epoch (the
        # epoch whose interim loss was reported last), so the surrogate never sees an epoch twice.
        checkpoint = propulate.evaluation_checkpoint()
        start = load_training_state(checkpoint, model, optimizer, scheduler, device)
        ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
        curve: list[float] = []
        try:
            for epoch in range(start, args.epochs):
                train_sampler.set_epoch(epoch)
                batches = itertools.islice(train_loader, batches_per_epoch)
                train_epoch(ddp, optimizer, scheduler, batches, device)
                val_loss, val_acc = validate(ddp, itertools.islice(val_loader, args.val_batches), device)
                curve.append(val_loss)
                if group.rank == 0:
                    save_training_state(checkpoint.path, epoch + 1, model, optimizer, scheduler)
                # Every rank of the worker yields once per epoch: the interim loss commits the state saved
                # for it, and the surrogate may end the loop here (at a stop, so does the library).
                yield {"loss": val_loss, "accuracy": val_acc}
        finally:
            # Runs when the training ends and also when the surrogate cancels it (Propulate then closes the
            # generator, which raises GeneratorExit at the yield): the place to free memory or files.
            if group.rank == 0:
                losses = ", ".join(f"{loss:.4f}" for loss in curve)
                resumed = f" (continued after epoch {start})" if start else ""
                log.info(
                    f"{dict(params)}: epochs {start + 1}-{start + len(curve)} of {args.epochs}{resumed}, "
                    f"validation losses {losses}"
                )

    return loss_fn


def tally(individuals: Iterable[Individual], epochs: int) -> dict[str, float]:
    """Count what a search evaluated and trained.

    Parameters
    ----------
    individuals : iterable of Individual
        Every individual that a worker evaluated, once (no migrated copies).
    epochs : int
        Epochs of a run that is not cancelled.

    Returns
    -------
    dict
        ``evaluated``, ``completed``, ``pruned`` and ``failed`` individuals; ``epochs_trained`` (sum of
        ``ind.steps``) and ``epochs_without_pruning`` (``epochs`` per evaluated individual); ``epochs_saved``
        (their difference, as a fraction of the latter, in [0, 1]).
    """
    evaluated = list(individuals)
    trained = sum(ind.steps for ind in evaluated)
    budget = epochs * len(evaluated)
    return {
        "evaluated": len(evaluated),
        "completed": sum(ind.status is Status.COMPLETED for ind in evaluated),
        "pruned": sum(ind.status is Status.PRUNED for ind in evaluated),
        "failed": sum(ind.status is Status.FAILED for ind in evaluated),
        "epochs_trained": trained,
        "epochs_without_pruning": budget,
        "epochs_saved": 1.0 - trained / budget if budget else 0.0,
    }


def report(
    individuals: list[Individual], best: list[Individual], args: argparse.Namespace, seconds: float
) -> None:
    """Print what the search did (``individuals``: all evaluated) and its ``best`` completed individuals."""
    counts = tally(individuals, args.epochs)
    how = "without a surrogate" if args.surrogate == "none" else f"with the {args.surrogate} surrogate"
    print(
        f"Search {how}: {counts['evaluated']} individuals evaluated, "
        f"{counts['completed']} completed, {counts['pruned']} pruned, {counts['failed']} failed; "
        f"this session ran {seconds:.1f} s."
    )
    print(
        f"Epochs trained: {counts['epochs_trained']} of {counts['epochs_without_pruning']} "
        f"({counts['epochs_saved']:.0%} saved by early stopping)."
    )
    print(f"Best {len(best)} completed individual(s) on {args.data_root or 'the bundled MNIST slice'}:")
    for place, individual in enumerate(best, start=1):
        accuracy = individual.metrics.get("accuracy", float("nan"))
        print(
            f"{place}. validation loss {individual.loss:.4f}, accuracy {accuracy:.2%}: {individual.params()}"
        )


def main() -> None:
    """Run the search and print its outcome on world rank 0."""
    comm = MPI.COMM_WORLD
    args = parse_arguments(comm=comm)
    torch.set_num_threads(1)  # several ranks share each core
    set_logger_config(level=logging.INFO, log_file=str(Path(args.checkpoint) / "surrogate_example.log"))
    data_root = prepare_mnist(args.data_root, comm)

    rng = random.Random(args.seed + comm.rank)  # each rank breeds differently
    islands = Islands(
        make_loss_fn(args, data_root),
        get_default_propagator(pop_size=args.pop_size, limits=LIMITS, rng=rng),
        rng,
        generations=args.generations,
        num_islands=args.num_islands,
        ranks_per_worker=args.ranks_per_worker,
        checkpoint_path=args.checkpoint,
        surrogate_factory=surrogate_factory(args.surrogate, args.margin, args.eta, args.epochs),
    )
    start = time.perf_counter()
    islands.propulate(logging_interval=1, debug=args.verbosity)
    seconds = time.perf_counter() - start

    # Every rank holds its island's population; an individual evaluated on this island has not migrated.
    populations = comm.gather(islands.propulator.population, root=0)
    if comm.rank == 0:
        assert populations is not None
        evaluated = {
            ind.uid: ind for population in populations for ind in population if not ind.migration_steps
        }
        # The run's best distinct completed individuals, all islands, best first: held by every rank.
        report(list(evaluated.values()), islands.top(args.top_n), args, seconds)


if __name__ == "__main__":
    main()
