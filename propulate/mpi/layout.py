"""Who is which worker and island: every communicator of a run is built here, once.

Ranks of ``COMM_WORLD`` are grouped into workers of ``ranks_per_worker`` consecutive ranks; the first rank
of each worker is its *root*. Worker roots are grouped into islands of contiguous workers. A worker root
takes part in three communicators: its worker, its island (roots of the island's workers) and the
propulate communicator (all worker roots). Other ranks of a worker (sub-ranks) only take part in their
worker's communicator and see ``MPI.COMM_NULL`` for the others.

Before splitting ``COMM_WORLD``, :func:`build_layout` checks that the processes form one MPI job
(:func:`check_launcher_world`): started by ``torchrun``, or by ``srun`` with an MPI that does not speak
SLURM's PMI, every process is an MPI job of its own and would run a search of its own.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from ..errors import LayoutError

__all__ = [
    "Layout",
    "build_layout",
    "check_launcher_world",
    "island_sizes_for",
    "known_node_local_rank",
    "known_node_size",
    "layout_of",
    "node_local_rank",
]

log = logging.getLogger("propulate")

# This rank's node-local rank in COMM_WORLD and the number of COMM_WORLD ranks on its node, recorded by
# build_layout (collective, all ranks present) so that code running later inside a loss function (GPU
# choice) needs no collective over COMM_WORLD.
_world_node_local_rank: int | None = None
_world_node_size: int | None = None

SKIP_LAUNCH_CHECK = "PROPULATE_SKIP_LAUNCH_CHECK"

# Launchers that tell each process how many processes they started: (launcher, size variable, rank variable).
# A size is trusted only together with its rank variable, so that a stray WORLD_SIZE alone means nothing.
# SLURM_STEP_NUM_TASKS is the size of the srun step; SLURM_NTASKS stands in for it only where it is missing.
_LAUNCHER_WORLDS = (
    ("srun", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"),
    ("srun", "SLURM_NTASKS", "SLURM_PROCID"),
    ("torchrun", "WORLD_SIZE", "RANK"),
    ("Open MPI's mpirun", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
    ("a PMI launcher (MPICH or Intel MPI mpiexec, srun --mpi=pmi2)", "PMI_SIZE", "PMI_RANK"),
)
# SLURM_STEP_ID values of the batch script and the extern step, whose SLURM_NTASKS describes the allocation.
_SLURM_NON_TASK_STEPS = {"4294967294", "4294967295", "batch", "extern"}


def node_local_rank(comm: MPI.Comm = MPI.COMM_WORLD) -> int:
    """Return this rank's index among the ranks of ``comm`` that share its node.

    Collective over ``comm``: the ranks are split by shared memory (``MPI.COMM_TYPE_SHARED``).

    Parameters
    ----------
    comm : MPI.Comm
        The communicator whose ranks are counted; default ``MPI.COMM_WORLD``.

    Returns
    -------
    int
        The rank in ``comm.Split_type(MPI.COMM_TYPE_SHARED)``, in ``[0, ranks on this node)``.
    """
    return _node_placement(comm)[0]


def _node_placement(comm: MPI.Comm) -> tuple[int, int]:
    """Return this rank's index among ``comm``'s ranks on its node, and their number (collective)."""
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return int(local.Get_rank()), int(local.Get_size())
    finally:
        local.Free()


def known_node_local_rank() -> int | None:
    """Return the node-local rank in ``COMM_WORLD`` recorded by :func:`build_layout`, or ``None``."""
    return _world_node_local_rank


def known_node_size() -> int | None:
    """Return the number of ``COMM_WORLD`` ranks on this node (see :func:`known_node_local_rank`)."""
    return _world_node_size


def _launcher_disagreement(world_size: int) -> str | None:
    """Describe the first launcher variable that counts more processes than ``world_size``, or ``None``."""
    step = os.environ.get("SLURM_STEP_ID")
    in_srun_step = step is not None and step not in _SLURM_NON_TASK_STEPS
    for launcher, size_var, rank_var in _LAUNCHER_WORLDS:
        if launcher == "srun" and not in_srun_step:
            continue
        if size_var == "SLURM_NTASKS" and "SLURM_STEP_NUM_TASKS" in os.environ:
            continue
        size, rank = os.environ.get(size_var, ""), os.environ.get(rank_var, "")
        if size.isdigit() and rank.isdigit() and int(rank) < int(size) and int(size) > world_size:
            return (
                f"{size_var}={size} (with {rank_var}={rank}) says that {launcher} started {size} processes, "
                f"but MPI's COMM_WORLD has {world_size} rank(s)"
            )
    return None


def check_launcher_world(world: MPI.Comm) -> None:
    """Raise on every rank if the launcher started more processes than ``world`` has ranks.

    Collective over ``world`` (normally ``COMM_WORLD``). A process started by ``torchrun``, or by ``srun``
    with an MPI that does not speak SLURM's PMI, is an MPI job of its own (``COMM_WORLD.size == 1``) while the
    launcher's variables count all of its processes; each process would then run a search of its own and
    overwrite the others' checkpoints. The variables read are, each only together with its rank variable:
    ``SLURM_STEP_NUM_TASKS`` or ``SLURM_NTASKS`` with ``SLURM_PROCID`` (only inside an ``srun`` step, i.e.
    with ``SLURM_STEP_ID`` set: in the batch script ``SLURM_NTASKS`` describes the allocation, and ``mpirun``
    there is fine), ``WORLD_SIZE`` with ``RANK`` (``torchrun``), ``OMPI_COMM_WORLD_SIZE`` with
    ``OMPI_COMM_WORLD_RANK`` and ``PMI_SIZE`` with ``PMI_RANK``. A launcher world *smaller* than ``world``
    is accepted: it is an enclosing launch, such as the per-node daemons that ``mpirun`` starts with
    ``srun``. Setting ``PROPULATE_SKIP_LAUNCH_CHECK=1`` skips the check on the ranks where it is set.

    Parameters
    ----------
    world : MPI.Comm
        The communicator of all ranks of the run.

    Raises
    ------
    LayoutError
        On every rank of ``world`` alike, if any rank sees a launcher variable that counts more processes
        than ``world`` has ranks; the message names the variable, its value, the size of ``world`` and
        what to do.
    """
    found = None if os.environ.get(SKIP_LAUNCH_CHECK) == "1" else _launcher_disagreement(world.size)
    reports = world.allgather(None if found is None else (world.rank, socket.gethostname(), found))
    first = next((report for report in reports if report is not None), None)
    if first is None:
        return
    rank, host, found = first
    raise LayoutError(
        f"launch: on rank {rank} ({host}), {found}. The processes do not form one MPI job, and each would "
        f"run a search of its own. Start them with mpirun/mpiexec, or with srun --mpi=pmix (or pmi2) and an "
        f"MPI that SLURM supports, not with torchrun; or build mpi4py against the cluster's MPI "
        f"(pip install --no-binary mpi4py mpi4py after loading its module). Set "
        f"{SKIP_LAUNCH_CHECK}=1 to skip this check."
    )


@dataclass(frozen=True)
class Layout:
    """The communicators and indices of one rank.

    Attributes
    ----------
    worker_comm : MPI.Comm
        The ranks of this rank's worker.
    island_comm : MPI.Comm
        The roots of this island's workers; ``COMM_NULL`` on sub-ranks.
    propulate_comm : MPI.Comm
        The roots of all workers; ``COMM_NULL`` on sub-ranks.
    island_index : int
        This rank's island.
    island_displs, island_counts : numpy.ndarray
        For each island, the ``propulate_comm`` rank of its first worker and its number of workers;
        shape ``(num_islands,)``.
    """

    worker_comm: MPI.Comm
    island_comm: MPI.Comm
    propulate_comm: MPI.Comm
    island_index: int
    island_displs: np.ndarray
    island_counts: np.ndarray


def island_sizes_for(num_workers: int, num_islands: int, island_sizes: Sequence[int] | None) -> np.ndarray:
    """Return the number of workers of each island, checked.

    Parameters
    ----------
    num_workers : int
        Total number of workers.
    num_islands : int >= 1
        Number of islands (ignored when ``island_sizes`` is given). More islands than workers give one
        island per worker: Propulate 1.2.2 left the islands beyond the workers empty, so that a script
        written for a cluster (e.g. a tutorial's default of 2 islands) also runs on one rank.
    island_sizes : sequence of int, optional
        Explicit sizes, each >= 1, summing to ``num_workers``. Default: sizes as equal as possible.

    Raises
    ------
    LayoutError
        (a ``ValueError``) if ``num_islands`` is not a positive int, or explicit sizes do not add up or
        leave an island empty.
    """
    if island_sizes is None:
        if isinstance(num_islands, bool) or not isinstance(num_islands, (int, np.integer)) or num_islands < 1:
            raise LayoutError(f"num_islands: expected an int >= 1, got {num_islands!r}")
        num_islands = min(int(num_islands), num_workers)
        return np.array([len(part) for part in np.array_split(np.arange(num_workers), num_islands)])
    sizes = np.asarray(island_sizes)
    if sizes.ndim != 1 or sizes.size == 0 or not np.issubdtype(sizes.dtype, np.integer):
        raise LayoutError(f"island_sizes: expected a 1-D array of ints, got {island_sizes!r}")
    if (sizes < 1).any() or sizes.sum() != num_workers:
        raise LayoutError(
            f"island_sizes: each island needs >= 1 worker and the sizes must sum to the number of workers "
            f"({num_workers}), got {sizes.tolist()}"
        )
    return sizes.astype(int)


def build_layout(
    world: MPI.Comm, ranks_per_worker: int, num_islands: int, island_sizes: Sequence[int] | None
) -> Layout:
    """Split ``world`` into workers and islands (collective over ``world``).

    When ``world`` is ``COMM_WORLD`` (or congruent to it), the launch is checked first
    (:func:`check_launcher_world`) and this rank's place on its node is recorded
    (:func:`known_node_local_rank`, :func:`known_node_size`).

    Raises
    ------
    LayoutError
        On every rank alike, if the launcher started more processes than ``COMM_WORLD`` has ranks, if
        ``world.size`` is not divisible by ``ranks_per_worker``, or if the island sizes are invalid (see
        :func:`island_sizes_for`).
    """
    if (
        isinstance(ranks_per_worker, bool)
        or not isinstance(ranks_per_worker, (int, np.integer))
        or ranks_per_worker < 1
    ):
        raise LayoutError(f"ranks_per_worker: expected an int >= 1, got {ranks_per_worker!r}")
    is_world = world.Compare(MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT)
    if is_world:
        check_launcher_world(world)
    if world.size % ranks_per_worker != 0:
        raise LayoutError(
            f"ranks_per_worker: the {world.size} ranks cannot be split into workers of "
            f"{ranks_per_worker} ranks"
        )
    global _world_node_local_rank, _world_node_size
    if is_world:
        _world_node_local_rank, _world_node_size = _node_placement(world)
    num_workers = world.size // ranks_per_worker
    counts = island_sizes_for(num_workers, num_islands, island_sizes)
    if island_sizes is None and len(counts) < num_islands and world.rank == 0:
        log.warning(
            f"num_islands={num_islands}, but there are only {num_workers} worker(s): running "
            f"{len(counts)} island(s), one per worker."
        )
    displs = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(int)
    worker_index = world.rank // ranks_per_worker
    island_index = int(np.searchsorted(displs, worker_index, side="right") - 1)
    worker_comm = world.Split(worker_index, world.rank)
    is_root = worker_comm.rank == 0
    propulate_comm = world.Split(0 if is_root else MPI.UNDEFINED, world.rank)
    if is_root:
        island_comm = propulate_comm.Split(island_index, propulate_comm.rank)
    else:
        island_comm = MPI.COMM_NULL
    return Layout(worker_comm, island_comm, propulate_comm, island_index, displs, counts)


def layout_of(
    island_index: int,
    island_comm: MPI.Comm,
    propulate_comm: MPI.Comm,
    worker_comm: MPI.Comm,
    island_displs: Any = None,
    island_counts: Any = None,
) -> Layout:
    """Return the layout of communicators built by the caller (Propulate 1.2.2's ``Propulator`` arguments).

    Collective over ``propulate_comm`` on worker roots (the first rank of ``worker_comm``) when
    ``island_displs`` or ``island_counts`` is not given: every root then tells its island. The other ranks
    of a worker hold empty arrays for them.

    Parameters
    ----------
    island_index : int
        This rank's island.
    island_comm, propulate_comm, worker_comm : MPI.Comm
        As the :class:`Layout`'s.
    island_displs, island_counts : array_like of int, optional
        For each island, the ``propulate_comm`` rank of its first worker and its number of workers.
    """
    if island_displs is None or island_counts is None:
        if worker_comm.rank == 0:
            islands = np.asarray(propulate_comm.allgather(int(island_index)))
            island_counts = np.bincount(islands)
            island_displs = np.concatenate(([0], np.cumsum(island_counts)[:-1]))
        else:
            island_counts = island_displs = np.zeros(0, dtype=int)
    displs = np.asarray(island_displs, dtype=int)
    counts = np.asarray(island_counts, dtype=int)
    return Layout(worker_comm, island_comm, propulate_comm, int(island_index), displs, counts)
