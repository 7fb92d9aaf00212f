"""Trade the validation error of a small MNIST network against its size: a Pareto front with NSGA-II.

A single loss asks for the most accurate network; a deployment usually also cares about its size. Here each
worker trains a multilayer perceptron on MNIST for ``--epochs`` epochs and the loss function returns two
objectives, both minimized (``objectives={"error": "minimize", "parameters": "minimize"}``): the validation
error (the fraction of misclassified images) and the number of trainable parameters, which follows from the
configuration alone. The validation cross-entropy travels along as a metric.
:class:`propulate.propagators.NSGA2` breeds the configurations, and the result is not one best network but
the Pareto front: every configuration that no other evaluated configuration beats in both error and size.

Search space: the input resolution (the 28x28 images average-pooled to 14x14 or 7x7, which costs no
parameters but shrinks the first layer), the number of hidden layers (1 to 3), their width (4 to 256,
searched on a log scale), their activation (ReLU, GELU or tanh) and the Adam learning rate (1e-4 to 1e-1,
log scale). A network has ``r^2 w + w + (d - 1)(w^2 + w) + 10 w + 10`` parameters for resolution ``r``,
``d`` hidden layers of width ``w`` and 10 classes: from 250 (7x7, one layer of 4) to 335,114 (28x28, three
layers of 256).

Run it from the repository root (``mpiexec`` from the ``mpich`` package, or ``srun`` on a cluster)::

    # 4 workers, the MNIST slice bundled in tutorials/data (8,000 training, 2,000 validation images)
    mpiexec -n 4 python tutorials/mnist_multi_objective.py

    # the same search continued from its checkpoint, to 100 networks per worker
    mpiexec -n 4 python tutorials/mnist_multi_objective.py --generations 100

    # two islands that exchange their best networks by Pareto rank, in a checkpoint folder of their own
    mpiexec -n 4 python tutorials/mnist_multi_objective.py --num-islands 2 --checkpoint checkpoints/mo_islands

Every rank is one worker that trains one network at a time (on the CPU, or on the GPU of its node-local rank
if there is one); each trains ``--generations`` networks, the first ``--pop-size`` of an island drawn at
random. With the defaults (4 workers x 50 networks, 3 epochs each) a two-core laptop took 25 s and 52 s in
two runs, plus 7 to 13 s to start: a network takes 0.2 to 1 s, more for wide ones at 28x28. The first run's
front held 16 of its 200 networks, from 250 parameters (7x7 input, one hidden layer of 4: 20.4 % error) over
550 (7x7, 9 wide: 9.2 %), 1,630 (7x7, 27 wide: 6.3 %) and 3,970 (7x7, 66 wide: 5.7 %) to 17,555 (14x14,
three layers of 55: 4.2 %); the second's reached 3.7 % with 110,298 parameters (14x14, two layers of 244).
Your fronts will differ with the timing of the workers.

At the end the first rank prints the front as a table sorted by size (error, parameters, configuration).
The checkpoint and the log ``mnist_multi_objective.log`` go to ``--checkpoint``; the same command resumes an
interrupted search. Afterwards, without MPI::

    python -m propulate report ./checkpoints/mnist_multi_objective  # the front, the hypervolume over time
    python -m propulate plot ./checkpoints/mnist_multi_objective    # writes front.png, hypervolume.png, ...
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from mnist_data import prepare_mnist  # tutorials/ is on the path when this runs as a script
from mpi4py import MPI
from torch import nn
from torch_ddp_example import load_mnist

from propulate import Categorical, Float, Individual, Integer, Islands
from propulate.propagators import NSGA2
from propulate.utils import rank_rng, set_logger_config

log = logging.getLogger("propulate")

LIMITS = {
    "resolution": Categorical((28, 14, 7)),
    "layers": (1, 3),
    "width": Integer(4, 256, log=True),
    "activation": ("relu", "gelu", "tanh"),
    "lr": Float(1e-4, 1e-1, log=True),
}
#: The two objectives, in the order of ``Individual.losses`` and of the checkpoint's ``values_<i>`` columns.
OBJECTIVES = {"error": "minimize", "parameters": "minimize"}
ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}
VALIDATION_BATCH_SIZE = 500


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Read the command line (``argv``, default ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--generations", type=int, default=50, help="networks trained per worker")
    parser.add_argument(
        "--pop-size", type=int, default=24, help="NSGA-II population per island; as many are drawn at random"
    )
    parser.add_argument("--epochs", type=int, default=3, help="training epochs per network")
    parser.add_argument("--num-islands", type=int, default=1, help="number of islands")
    parser.add_argument("--seed", type=int, default=42, help="random seed")
    parser.add_argument(
        "--data-root",
        default=None,
        help="folder holding MNIST/raw (e.g. ../shared/data); an empty folder downloads MNIST there; "
        "None: the slice bundled in tutorials/data",
    )
    parser.add_argument(
        "--checkpoint",
        default="./checkpoints/mnist_multi_objective",
        help="folder for checkpoints and the log",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="training batch size")
    parser.add_argument(
        "--train-batches", type=int, default=None, help="training batches per epoch; None: all"
    )
    parser.add_argument(
        "--val-batches",
        type=int,
        default=None,
        help=f"validation batches of {VALIDATION_BATCH_SIZE} images; None: all",
    )
    parser.add_argument("--verbosity", type=int, default=1, help="debug level of Propulate's own logging")
    args = parser.parse_args(argv)
    for name in ("generations", "epochs", "num_islands", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    if args.pop_size < 2:
        parser.error(f"--pop-size must be >= 2, got {args.pop_size}")
    for name in ("train_batches", "val_batches"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1 or left out, got {getattr(args, name)}")
    return args


def build_network(resolution: int, layers: int, width: int, activation: str) -> nn.Sequential:
    """Return the perceptron: average pooling to ``resolution`` pixels square, ``layers`` hidden layers.

    Its trainable parameters number ``r^2 w + w + (d - 1)(w^2 + w) + 10 w + 10`` (``r`` the resolution, ``d``
    the layers, ``w`` the width); the pooling has none.
    """
    modules: list[nn.Module] = [nn.AvgPool2d(28 // resolution), nn.Flatten()]
    inputs = resolution * resolution
    for _ in range(layers):
        modules += [nn.Linear(inputs, width), ACTIVATIONS[activation]()]
        inputs = width
    return nn.Sequential(*modules, nn.Linear(inputs, 10))


def count_parameters(model: nn.Module) -> int:
    """Return the number of trainable parameters of ``model`` (weights and biases)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def choose_device(comm: MPI.Intracomm = MPI.COMM_WORLD) -> torch.device:
    """Return the GPU of this rank's node-local rank (modulo the GPUs it sees), or the CPU without one."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return torch.device("cuda", node.rank % torch.cuda.device_count())
    finally:
        node.Free()


def make_loss_fn(
    args: argparse.Namespace, data_root: str, device: torch.device
) -> Callable[[Mapping], dict[str, float]]:
    """Return the loss function: the validation error and the size of the network ``params`` describes."""

    def loss_fn(params: Mapping) -> dict[str, float]:
        train_set, val_set = load_mnist(data_root)
        train_images, train_labels = train_set.tensors
        # The same configuration gets the same initial weights and batches, so its error is reproducible;
        # the generator seeded here leaves the global torch random state alone.
        generator = torch.Generator().manual_seed(args.seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(args.seed)
            model = build_network(
                params["resolution"], params["layers"], params["width"], params["activation"]
            )
        model = model.to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=params["lr"])

        model.train()
        for _ in range(args.epochs):
            order = torch.randperm(len(train_labels), generator=generator).split(args.batch_size)
            for batch in order[: args.train_batches]:
                optimizer.zero_grad()
                logits = model(train_images[batch].to(device))
                nn.functional.cross_entropy(logits, train_labels[batch].to(device)).backward()
                optimizer.step()

        wrong, total, cross_entropy = 0, 0, 0.0
        val_images, val_labels = val_set.tensors
        model.eval()
        with torch.no_grad():
            for batch in torch.arange(len(val_labels)).split(VALIDATION_BATCH_SIZE)[: args.val_batches]:
                logits = model(val_images[batch].to(device))
                labels = val_labels[batch].to(device)
                wrong += int((logits.argmax(dim=1) != labels).sum())
                total += len(batch)
                cross_entropy += float(nn.functional.cross_entropy(logits, labels, reduction="sum"))
        size = count_parameters(model)
        log.info(f"{dict(params)}: {size} parameters, validation error {wrong / total:.2%}")
        # The two objectives by name; any further number is a metric of the individual.
        return {"error": wrong / total, "parameters": size, "val_loss": cross_entropy / total}

    return loss_fn


def print_front(front: Sequence[Individual]) -> None:
    """Print the Pareto front as a table, smallest network first."""
    rows = []
    for ind in front:
        assert ind.losses is not None  # every completed individual of a run with objectives has them
        error, size = ind.losses  # both objectives are minimized: the values as the loss function returned
        rows.append((int(size), error, ind.params()))
    rows.sort(key=lambda row: row[:2])
    print(f"Pareto front: {len(rows)} network(s), smallest first")
    print(f"{'error':>8}  {'parameters':>10}  configuration")
    for size, error, params in rows:
        print(f"{error:8.4f}  {size:10d}  {params}")


def main() -> None:
    """Run the search and print the Pareto front on world rank 0."""
    comm = MPI.COMM_WORLD
    args = parse_arguments()
    torch.set_num_threads(1)  # several ranks share each core
    set_logger_config(level=logging.INFO, log_file=str(Path(args.checkpoint) / "mnist_multi_objective.log"))
    data_root = prepare_mnist(args.data_root, comm)

    # Each rank draws from streams of its own: one for NSGA-II's breeding, one for the islands' migration.
    islands = Islands(
        make_loss_fn(args, data_root, choose_device(comm)),
        NSGA2(LIMITS, pop_size=args.pop_size, rng=rank_rng(args.seed, stream=0)),
        rank_rng(args.seed, stream=1),
        generations=args.generations,
        num_islands=args.num_islands,
        checkpoint_path=args.checkpoint,
        objectives=OBJECTIVES,
    )
    start = time.perf_counter()
    islands.propulate(logging_interval=1, debug=args.verbosity)
    seconds = time.perf_counter() - start
    islands.summarize(debug=args.verbosity)  # logs each island's front

    if comm.rank == 0:  # every rank holds the run's front; the first prints it
        print(f"This session ran {seconds:.1f} s on {comm.size} worker(s).")
        print_front(islands.pareto_front)


if __name__ == "__main__":
    main()
