"""Who is which worker and island: every communicator of a run is built here, once.

Ranks of ``COMM_WORLD`` are grouped into workers of ``ranks_per_worker`` consecutive ranks; the first rank
of each worker is its *root*. Worker roots are grouped into islands of contiguous workers. A worker root
takes part in three communicators: its worker, its island (roots of the island's workers) and the
propulate communicator (all worker roots). Other ranks of a worker (sub-ranks) only take part in their
worker's communicator and see ``MPI.COMM_NULL`` for the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ..errors import LayoutError

__all__ = ["Layout", "build_layout", "island_sizes_for", "known_node_local_rank", "node_local_rank"]

# This rank's node-local rank in COMM_WORLD, recorded by build_layout (collective, all ranks present) so that
# code running later inside a loss function (GPU choice) needs no collective over COMM_WORLD.
_world_node_local_rank: int | None = None


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
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return int(local.Get_rank())
    finally:
        local.Free()


def known_node_local_rank() -> int | None:
    """Return the node-local rank in ``COMM_WORLD`` recorded by :func:`build_layout`, or ``None``."""
    return _world_node_local_rank


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
        Number of islands (ignored when ``island_sizes`` is given).
    island_sizes : sequence of int, optional
        Explicit sizes, each >= 1, summing to ``num_workers``. Default: sizes as equal as possible.

    Raises
    ------
    LayoutError
        (a ``ValueError``) if the sizes do not add up, an island is empty, or there are more islands than
        workers.
    """
    if island_sizes is None:
        if isinstance(num_islands, bool) or not isinstance(num_islands, (int, np.integer)) or num_islands < 1:
            raise LayoutError(f"num_islands: expected an int >= 1, got {num_islands!r}")
        if num_islands > num_workers:
            raise LayoutError(
                f"num_islands: {num_islands} islands need at least as many workers, "
                f"but there are {num_workers}"
            )
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

    Raises
    ------
    LayoutError
        On every rank alike, if ``world.size`` is not divisible by ``ranks_per_worker`` or the island sizes
        are invalid (see :func:`island_sizes_for`).
    """
    if (
        isinstance(ranks_per_worker, bool)
        or not isinstance(ranks_per_worker, (int, np.integer))
        or ranks_per_worker < 1
    ):
        raise LayoutError(f"ranks_per_worker: expected an int >= 1, got {ranks_per_worker!r}")
    if world.size % ranks_per_worker != 0:
        raise LayoutError(
            f"ranks_per_worker: the {world.size} ranks cannot be split into workers of "
            f"{ranks_per_worker} ranks"
        )
    global _world_node_local_rank
    if world.Compare(MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT):
        _world_node_local_rank = node_local_rank(world)
    num_workers = world.size // ranks_per_worker
    counts = island_sizes_for(num_workers, num_islands, island_sizes)
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
