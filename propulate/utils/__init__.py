"""Compatibility surface of Propulate 1.2: the default propagator and the logger set-up.

Its modules :mod:`~propulate.utils.benchmark_functions` and :mod:`~propulate.utils.distributed` (which needs
torch) are reachable as attributes of this package once used, as in 1.2.2.
"""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Mapping, Sequence
from importlib import import_module
from pathlib import Path
from typing import Any, ClassVar

from mpi4py import MPI

from ..propagators import (
    Compose,
    Conditional,
    CrossoverUniform,
    InitUniform,
    IntervalMutationNormal,
    PointMutation,
    Propagator,
    SelectMin,
    SelectUniform,
)
from ..propagators.tpe import TPE
from ..space import SearchSpace
from ..validation import check_int, check_probability, check_real

__all__ = ["get_default_propagator", "get_tpe_propagator", "rank_rng", "set_logger_config", "warm_start"]

_SUBMODULES = frozenset({"benchmark_functions", "distributed"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def rank_rng(seed: int, stream: int = 0, comm: MPI.Comm | None = None) -> random.Random:
    """Return this rank's generator for a run seeded with ``seed``: independent of every other rank's.

    The usual ``random.Random(seed + rank)`` gives rank 1 of the run seeded 1 the stream of rank 0 of the
    run seeded 2; here each (seed, rank, stream) draws its own state from numpy's ``SeedSequence``
    (entropy ``seed``, spawn key ``(rank, stream)``), so runs with different seeds share no stream and the
    same seed reproduces the same streams on the same number of ranks.

    Parameters
    ----------
    seed : int >= 0
        The run's seed, the same on every rank.
    stream : int >= 0
        Which of the rank's generators: a propagator and the optimizer that passes ``seed`` to both get
        streams 0 and 1.
    comm : MPI.Comm, optional
        Whose rank counts (default ``MPI.COMM_WORLD``).

    Returns
    -------
    random.Random

    Raises
    ------
    ValueError
        If ``seed`` or ``stream`` is not a non-negative int.

    Examples
    --------
    >>> rng = rank_rng(42)  # in place of random.Random(42 + MPI.COMM_WORLD.rank)
    """
    import numpy as np

    check_int("seed", seed, 0)
    check_int("stream", stream, 0)
    rank = (comm if comm is not None else MPI.COMM_WORLD).rank
    state = np.random.SeedSequence(seed, spawn_key=(rank, stream)).generate_state(4, dtype=np.uint64)
    return random.Random(int.from_bytes(state.tobytes(), "little"))


def get_default_propagator(
    pop_size: int,
    limits: Mapping[str, Any],
    crossover_prob: float = 0.7,
    mutation_prob: float = 0.4,
    random_init_prob: float = 0.1,
    sigma_factor: float = 0.05,
    rng: random.Random | int | None = None,
) -> Propagator:
    """Return the default genetic propagator: Propulate 1.2.2's, configured as 1.2.2's code configures it.

    Until ``pop_size`` individuals are active, every individual is drawn uniformly from the search space.
    Then each child is bred in these steps:

    1. take the ``pop_size`` active individuals of lowest loss and pick two of them uniformly, in random
       order;
    2. uniform crossover, always: each parameter comes from the first parent with probability
       ``crossover_prob``, else from the second;
    3. with probability ``mutation_prob``, one parameter, drawn uniformly, is redrawn uniformly from its
       range (point mutation);
    4. if the search space has a float parameter: one float parameter, drawn uniformly, gets a Gaussian step
       of standard deviation ``sigma_factor`` times its range, clipped to the range — on every child;
    5. with probability ``random_init_prob`` the child is replaced by one drawn uniformly from the space.

    The loop never evaluates a child whose parameter values the island already knows: it breeds again
    (see :mod:`propulate.breeding`).

    This is what Propulate 1.2.2's code does, and it differs from that function's docstring, which calls
    ``crossover_prob`` "the uniform-crossover probability" and suggests the steps 2 and 4 happen with a
    probability: 1.2.2 passes ``crossover_prob`` as ``CrossoverUniform``'s first argument,
    ``relative_parent_contribution``, with the default ``probability=1.0``, and builds
    ``IntervalMutationNormal`` with ``probability=1.0``. We follow the code, because the behaviour of
    1.2.2's runs is what its users tuned their settings against, and because a reading of the docstring
    (crossover with probability 0.7, the Gaussian step with 0.4) lets about a quarter of the children pass
    through as unchanged copies of a parent: evaluations spent on configurations already evaluated.

    Parameters
    ----------
    pop_size : int >= 2
        Size of the breeding pool (two parents are drawn from it).
    limits : dict or SearchSpace
        The search space.
    crossover_prob : float in [0, 1]
        Probability that a parameter of the child comes from the first parent (1.2.2's
        ``relative_parent_contribution``).
    mutation_prob : float in [0, 1]
        Probability of the point mutation of step 3.
    random_init_prob : float in [0, 1]
        Probability of replacing the child by a uniform draw (step 5).
    sigma_factor : float > 0
        Standard deviation of the Gaussian step as a fraction of the parameter's range.
    rng : random.Random or int, optional
        The generator shared by the operators; an int is a seed, the same on every rank, from which each
        rank derives its own generator (:func:`rank_rng`, stream 0).

    Returns
    -------
    Propagator
        ``Conditional(pop_size, Compose([...]), InitUniform(limits))``.

    Raises
    ------
    ValueError
        If ``pop_size`` < 2, a probability is outside [0, 1], ``sigma_factor`` is not positive, or
        ``limits`` is invalid.
    """
    check_int("pop_size", pop_size, 2, "an int >= 2 (the crossover needs two parents)")
    check_probability("crossover_prob", crossover_prob)
    check_probability("mutation_prob", mutation_prob)
    check_probability("random_init_prob", random_init_prob)
    if not check_real("sigma_factor", sigma_factor) > 0:
        raise ValueError(f"sigma_factor: expected a positive number, got {sigma_factor!r}")
    space = SearchSpace.of(limits)
    if isinstance(rng, int):  # a seed (rank_rng refuses a bool, naming the seed)
        rng = rank_rng(rng)
    rng = rng if rng is not None else random.Random()
    steps: list[Propagator] = [
        SelectMin(pop_size),
        SelectUniform(2, rng=rng),
        CrossoverUniform(relative_parent_contribution=crossover_prob, probability=1.0, rng=rng),
        PointMutation(space, probability=mutation_prob, rng=rng),
    ]
    if space.has_float:
        steps.append(IntervalMutationNormal(space, sigma_factor=sigma_factor, probability=1.0, rng=rng))
    steps.append(InitUniform(space, parents=1, probability=random_init_prob, rng=rng))
    return Conditional(pop_size, Compose(steps), InitUniform(space, rng=rng))


def get_tpe_propagator(
    limits: Mapping[str, Any],
    rng: random.Random | int | None = None,
    n_startup: int = 10,
    enqueue: Sequence[Mapping[str, Any]] = (),
) -> TPE:
    """Return the recommended search: a tree-structured Parzen estimator made for asynchronous workers.

    A model of the island's results proposes each configuration (Bergstra et al., NeurIPS 2011; Watanabe
    2023), keeping away from what the island's other workers evaluate at the moment, after an initial
    design of a scrambled Sobol sequence shared out over the workers (:class:`propulate.propagators.TPE`,
    whose docstring gives the algorithm). At budgets of 50 to 500 evaluations it finds better
    configurations than :func:`get_default_propagator` (see ``docs/choosing.rst`` for the measurements).

    Parameters
    ----------
    limits : dict or SearchSpace
        The search space, any parameter types.
    rng : random.Random or int, optional
        This worker's generator, or an int seed, the same on every rank (recommended: each rank derives its
        own generator, :func:`rank_rng`, stream 0, and the seed seeds the initial design, which then
        differs between runs; with a generator the design is derived from the search space).
    n_startup : int >= 1
        How many results the initial design gathers before the model proposes (the equivalent of
        :func:`get_default_propagator`'s ``pop_size``).
    enqueue : sequence of dict, optional
        Configurations evaluated first, e.g. known good settings or :func:`warm_start` of an earlier run.

    Returns
    -------
    TPE

    Raises
    ------
    ValueError
        For an out-of-range argument or an ``enqueue`` entry that does not fit ``limits``.
    """
    if isinstance(rng, int):  # a seed (rank_rng refuses a bool, naming the seed)
        return TPE(limits, rng=rank_rng(rng), n_startup=n_startup, enqueue=enqueue, seed=rng)
    return TPE(limits, rng=rng, n_startup=n_startup, enqueue=enqueue)


def warm_start(
    checkpoint_path: str | Path, k: int = 10, limits: Mapping[str, Any] | None = None
) -> list[dict]:
    """Return the parameters of the ``k`` best completed evaluations of an earlier run's checkpoint.

    For ``enqueue`` of :func:`get_tpe_propagator` (a transfer from a related problem: another data set, a
    smaller model), or for a fresh run of the same problem with other settings. Reads the checkpoint
    without MPI.

    Parameters
    ----------
    checkpoint_path : str or pathlib.Path
        The earlier run's ``checkpoint_path``.
    k : int >= 1
        How many configurations, best first (fewer if fewer completed).
    limits : dict or SearchSpace, optional
        The new search space: parameters it does not have are dropped, and a configuration with a value
        outside it is skipped (default: the earlier run's space).

    Returns
    -------
    list of dict
        Parameter values, best loss first; distinct.

    Raises
    ------
    ValueError
        If ``k`` is not a positive int, or the checkpoint holds no completed evaluation.
    propulate.checkpoint.CheckpointError
        If the checkpoint cannot be read.
    """
    from ..checkpoint import load_checkpoint
    from ..individual import Status

    check_int("k", k, 1)
    checkpoint = load_checkpoint(checkpoint_path)
    completed = (
        []
        if checkpoint is None
        else [ind for ind in checkpoint.population if ind.status is Status.COMPLETED and ind.losses is None]
    )
    if not completed:
        raise ValueError(f"checkpoint_path: no completed evaluation in {checkpoint_path}")
    space = None if limits is None else SearchSpace.of(limits)
    chosen: list[dict] = []
    seen: set[int] = set()
    for ind in sorted(completed, key=lambda ind: ind.loss):
        params = ind.params()
        if space is not None:
            params = {name: params[name] for name in space.names if name in params}
            try:
                position = space.encode(params)
                space.check_inside(position)
            except ValueError:
                continue
            key = space.key(position)
        else:
            key = ind.space.key(ind.position)
        if key not in seen:
            seen.add(key)
            chosen.append(params)
        if len(chosen) == k:
            break
    return chosen


class _RankFilter(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank_prefix = self.prefix
        return True


class _ColorFormatter(logging.Formatter):
    _COLORS: ClassVar[dict[int, str]] = {
        logging.DEBUG: "\033[36m",
        logging.INFO: "",
        logging.WARNING: "\033[33m",
        logging.ERROR: "\033[31m",
        logging.CRITICAL: "\033[1;31m",
    }

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        color = self._COLORS.get(record.levelno, "")
        return f"{color}{text}\033[0m" if color else text


_HANDLER_MARK = "_propulate_handler"


def set_logger_config(
    level: int = logging.INFO,
    log_file: str | Path | None = None,
    log_to_stdout: bool | str = True,
    log_rank: bool = False,
    colors: bool = True,
) -> None:
    """Configure the ``"propulate"`` logger; calling it again replaces the previous configuration.

    Parameters
    ----------
    level : int
        Logging level, e.g. ``logging.INFO``.
    log_file : str or pathlib.Path, optional
        File to append to; its directory is created. A ``{rank}`` in the name is replaced by the
        ``COMM_WORLD`` rank, giving one file per rank (``"logs/propulate-{rank}.log"``); without it every
        rank appends to the same file.
    log_to_stdout : bool or {"first"}
        Also log to standard output: on every rank (``True``), on none (``False``), or only on the first
        rank of ``COMM_WORLD`` (``"first"``; with per-rank log files, the other ranks then write only there,
        so that 1,000 ranks do not flood the job's output).
    log_rank : bool
        Prefix every message with the ``COMM_WORLD`` rank.
    colors : bool
        Color warnings and errors on standard output when it is a terminal.
    """
    logger = logging.getLogger("propulate")
    for handler in [h for h in logger.handlers if getattr(h, _HANDLER_MARK, False)]:
        logger.removeHandler(handler)
        handler.close()
    logger.setLevel(level)
    logger.propagate = False
    prefix = f"[rank {MPI.COMM_WORLD.rank}] " if log_rank else ""
    pattern = "%(rank_prefix)s%(asctime)s %(levelname)s: %(message)s"
    if log_to_stdout not in (True, False, "first"):
        raise ValueError(f"log_to_stdout: expected True, False or 'first', got {log_to_stdout!r}")
    handlers: list[logging.Handler] = []
    if log_to_stdout is True or (log_to_stdout == "first" and MPI.COMM_WORLD.rank == 0):
        stream = logging.StreamHandler(sys.stdout)
        use_colors = colors and sys.stdout.isatty()
        stream.setFormatter((_ColorFormatter if use_colors else logging.Formatter)(pattern))
        handlers.append(stream)
    if log_file is not None:
        path = Path(str(log_file).replace("{rank}", str(MPI.COMM_WORLD.rank)))
        path.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(path)
        file_handler.setFormatter(logging.Formatter(pattern))
        handlers.append(file_handler)
    for handler in handlers:
        setattr(handler, _HANDLER_MARK, True)
        handler.addFilter(_RankFilter(prefix))
        logger.addHandler(handler)
