"""PyTorch process groups for multi-rank workers.

A multi-rank worker is a block of MPI ranks that evaluates one individual together, typically by training
one network with ``DistributedDataParallel``. :func:`init_worker_process_group` turns the worker's MPI
communicator (the ``subgroup_comm`` handed to the loss function) into a ``torch.distributed`` process group:
the worker's first rank hosts the rendezvous on a free port and broadcasts its address over MPI, so several
workers on one node never collide on a port. The group is created once per worker and process and reused by
every later evaluation; :func:`destroy_worker_process_group` tears it down.

Methods
-------
``"auto"``
    NCCL with a ``TCPStore`` rendezvous when CUDA is available, gloo with a ``TCPStore`` rendezvous otherwise.
``"nccl-slurm"``
    NCCL; rendezvous through a ``torch.distributed.TCPStore`` hosted by the worker's first rank.
``"nccl-openmpi"``
    NCCL; environment rendezvous (``init_method="env://"``): ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK`` and
    ``WORLD_SIZE`` are set from MPI.
``"gloo"``
    gloo (CPU tensors); ``TCPStore`` rendezvous.

NCCL requested on a machine without CUDA falls back to gloo with a warning.

torch is imported lazily: this module imports without it, and its functions raise ``ImportError`` naming the
``propulate[torch]`` extra when it is missing.
"""

from __future__ import annotations

import atexit
import datetime
import logging
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from ..mpi.layout import known_node_local_rank, node_local_rank

if TYPE_CHECKING:
    import torch

__all__ = [
    "WorkerGroup",
    "current_worker_group",
    "destroy_worker_process_group",
    "init_worker_process_group",
    "node_local_rank",
]

log = logging.getLogger("propulate")

METHODS = ("auto", "nccl-slurm", "nccl-openmpi", "gloo")

# Per-process environment variables that MPI launchers set: (world rank variable, node-local rank variable).
# Each pair is trusted only when its world rank equals the MPI world rank, so that values inherited from an
# enclosing job step (e.g. ``mpirun`` inside ``sbatch``) are ignored.
_LAUNCHER_LOCAL_RANK = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),  # Open MPI
    ("PMI_RANK", "MPI_LOCALRANKID"),  # MPICH / Intel MPI (Hydra)
    ("SLURM_PROCID", "SLURM_LOCALID"),  # srun
)


@dataclass(frozen=True)
class WorkerGroup:
    """The ``torch.distributed`` process group of one worker, as seen by one of its ranks.

    Attributes
    ----------
    backend : str
        ``"nccl"`` or ``"gloo"``.
    rank : int
        This rank's index in the group, equal to its rank in the worker's MPI communicator.
    world_size : int
        Number of ranks in the group, equal to the size of the worker's MPI communicator.
    device : torch.device or str
        The device this rank computes on: ``cuda:<i>`` with NCCL, ``cpu`` with gloo.
    master_addr : str
        Host name or address of the rendezvous, hosted by the worker's first rank.
    master_port : int
        TCP port of the rendezvous, chosen free by the worker's first rank.
    """

    backend: str
    rank: int
    world_size: int
    device: torch.device | str
    master_addr: str
    master_port: int


@dataclass
class _State:
    """What this module created in this process: at most one group at a time."""

    group: WorkerGroup
    world_ranks: tuple[int, ...]  # the worker's COMM_WORLD ranks, in order, to recognize it on later calls
    store: Any  # the TCPStore client (or server, on the first rank); alive as long as the group


_state: _State | None = None
_atexit_registered = False


def _import_torch() -> Any:
    """Import torch and torch.distributed, or raise an ImportError that names the extra to install."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as err:
        raise ImportError(
            'PyTorch is needed for multi-rank workers with torch.distributed: pip install "propulate[torch]"'
        ) from err
    if not dist.is_available():
        raise ImportError("this PyTorch build has no torch.distributed support")
    return torch


def _device_index(device_count: int) -> int:
    """Pick this rank's GPU from its node-local rank in ``COMM_WORLD``.

    :class:`propulate.Islands` records the node-local rank with a shared-memory split while every rank is
    present. Without it (a ``Propulator`` built by hand), the launcher's per-process variables give the
    node-local rank without communication; only when none is trustworthy does this fall back to
    :func:`node_local_rank`, which is collective over ``COMM_WORLD``.
    """
    known = known_node_local_rank()
    if known is not None:
        return known % device_count
    world_rank = MPI.COMM_WORLD.Get_rank()
    for rank_var, local_var in _LAUNCHER_LOCAL_RANK:
        rank, local = os.environ.get(rank_var), os.environ.get(local_var)
        if rank is not None and local is not None and rank.isdigit() and local.isdigit():
            if int(rank) == world_rank:
                return int(local) % device_count
    return node_local_rank(MPI.COMM_WORLD) % device_count


def _world_ranks(comm: MPI.Comm) -> tuple[int, ...]:
    """Return the ``COMM_WORLD`` ranks of ``comm``'s ranks, in ``comm``'s order (local, no communication)."""
    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        return tuple(int(r) for r in MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world))
    finally:
        group.Free()
        world.Free()


def _resolve_backend(torch: Any, method: str) -> str:
    """Return the backend for ``method``: ``"nccl"`` or ``"gloo"``, falling back to gloo without CUDA."""
    import torch.distributed as dist

    if method == "gloo":
        return "gloo"
    cuda = torch.cuda.is_available() and dist.is_nccl_available()
    if method == "auto":
        return "nccl" if cuda else "gloo"
    if not cuda:
        log.warning(f"init_worker_process_group: method={method!r} needs CUDA and NCCL; falling back to gloo")
        return "gloo"
    return "nccl"


def _free_port() -> int:
    """Return a TCP port that was free a moment ago (the environment rendezvous binds it itself)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def _rendezvous_host(comm: MPI.Intracomm) -> str:
    """Return the address the worker's other ranks reach its first rank at (loopback if all share a node)."""
    hosts = comm.allgather(MPI.Get_processor_name())
    if len(set(hosts)) == 1:
        return "127.0.0.1"
    return socket.gethostname()


def _open_rendezvous(comm: MPI.Intracomm, method: str, timeout: datetime.timedelta) -> tuple[str, int, Any]:
    """Choose and broadcast the rendezvous address; return ``(host, port, store)``.

    The first rank hosts a ``TCPStore`` on a free port (``store`` is ``None`` with ``"nccl-openmpi"``, where
    torch hosts it from the environment). A failure on the first rank is broadcast so that every rank of the
    worker raises instead of waiting for an address that never comes.
    """
    import torch.distributed as dist

    rank, size = comm.Get_rank(), comm.Get_size()
    host = _rendezvous_host(comm)
    store = None
    message: tuple[str, int] | str
    if rank == 0:
        try:
            if method == "nccl-openmpi":
                port = _free_port()
            else:
                store = dist.TCPStore(host, 0, size, True, timeout=timeout, wait_for_workers=False)
                port = int(store.port)
            message = (host, port)
        except Exception as err:
            message = f"on {socket.gethostname()}: {type(err).__name__}: {err}"
    else:
        message = ""
    message = comm.bcast(message, root=0)
    if isinstance(message, str):
        raise RuntimeError(f"the worker's first rank could not open the rendezvous {message}")
    host, port = message
    if rank != 0 and method != "nccl-openmpi":
        store = dist.TCPStore(host, port, size, False, timeout=timeout)
    return host, port, store


def init_worker_process_group(
    worker_comm: MPI.Comm,
    method: str = "auto",
    timeout: datetime.timedelta = datetime.timedelta(minutes=10),
) -> WorkerGroup:
    """Create (once) and return the ``torch.distributed`` process group of this rank's worker.

    Collective over ``worker_comm``: every rank of the worker calls it, typically at the start of the loss
    function with the ``subgroup_comm`` it was given. The first call creates the group (the default process
    group of ``torch.distributed``) with ``worker_comm``'s ranks and size, checks it with a one-element
    ``all_reduce`` and logs one line; later calls with the same communicator, or any communicator of the same
    ranks in the same order (a ``Dup()``), return the same :class:`WorkerGroup` without touching
    ``torch.distributed`` (their ``method`` and ``timeout`` are not used). With CUDA, each rank binds the GPU
    ``node_local_rank(MPI.COMM_WORLD) % torch.cuda.device_count()`` (``torch.cuda.set_device``); the
    node-local rank comes from the MPI launcher's environment when it can, else from a collective over
    ``COMM_WORLD`` (every rank then calls this function once).

    Parameters
    ----------
    worker_comm : MPI.Comm
        The worker's intracommunicator, of any size (one rank gives a group of world size 1).
    method : str
        ``"auto"``, ``"nccl-slurm"``, ``"nccl-openmpi"`` or ``"gloo"``; see the module documentation.
    timeout : datetime.timedelta
        How long the rendezvous and the group's collective operations may wait.

    Returns
    -------
    WorkerGroup
        This rank's view of the worker's process group.

    Raises
    ------
    ValueError
        If ``method`` is not one of the allowed values.
    TypeError
        If ``worker_comm`` is not an MPI intracommunicator or ``timeout`` not a ``datetime.timedelta``.
    RuntimeError
        If a group for a different communicator exists (destroy it first), if ``torch.distributed`` was
        initialized outside this module, or if the rendezvous or the sanity check fails.
    ImportError
        If torch is not installed.
    """
    global _state, _atexit_registered
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(repr(m) for m in METHODS)}; got {method!r}")
    if not isinstance(worker_comm, MPI.Intracomm):
        raise TypeError(f"worker_comm must be an MPI.Intracomm; got {type(worker_comm).__name__}")
    if not isinstance(timeout, datetime.timedelta):
        raise TypeError(f"timeout must be a datetime.timedelta; got {type(timeout).__name__}")
    torch = _import_torch()
    import torch.distributed as dist

    if _state is not None and not dist.is_initialized():
        # Someone called torch.distributed.destroy_process_group() directly: forget our group.
        _state = None
    if _state is not None:
        if _world_ranks(worker_comm) == _state.world_ranks:
            return _state.group
        raise RuntimeError(
            "a worker process group for a different communicator exists in this process; "
            "call destroy_worker_process_group() first"
        )
    if dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is already initialized, but not by init_worker_process_group(); "
            "destroy that process group first"
        )

    backend = _resolve_backend(torch, method)
    rank, size = worker_comm.Get_rank(), worker_comm.Get_size()
    if backend == "nccl":
        device = torch.device("cuda", _device_index(torch.cuda.device_count()))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    host, port, store = _open_rendezvous(worker_comm, method, timeout)
    if method == "nccl-openmpi":
        os.environ.update(MASTER_ADDR=host, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(size))
        rendezvous: dict[str, Any] = {"init_method": "env://"}
    else:
        rendezvous = {"store": store}
    if backend == "nccl":
        rendezvous["device_id"] = device
    dist.init_process_group(backend, rank=rank, world_size=size, timeout=timeout, **rendezvous)

    check = torch.ones(1, device=device)
    dist.all_reduce(check)
    if int(check.item()) != size:
        dist.destroy_process_group()
        raise RuntimeError(
            f"process group sanity check failed: all_reduce of ones gave {check.item()}, not {size}"
        )

    group = WorkerGroup(backend, rank, size, device, host, port)
    _state = _State(group, _world_ranks(worker_comm), store)
    if not _atexit_registered:
        atexit.register(_destroy_at_exit)
        _atexit_registered = True
    log.info(
        f"torch.distributed worker group ready: world size {size}, rank {rank}, backend {backend}, "
        f"device {device}, rendezvous {host}:{port}"
    )
    return group


def current_worker_group() -> WorkerGroup | None:
    """Return the group created by :func:`init_worker_process_group` in this process, or ``None``."""
    return None if _state is None else _state.group


def destroy_worker_process_group() -> None:
    """Destroy the process group created by :func:`init_worker_process_group`, if any.

    A no-op when this module created no group (a group created directly with ``torch.distributed`` is left
    alone). Afterwards :func:`init_worker_process_group` may create a new group, for any communicator.
    It is also run at interpreter exit.
    """
    global _state
    if _state is None:
        return
    import torch.distributed as dist

    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    finally:
        _state = None


def _destroy_at_exit() -> None:
    """Destroy the group at interpreter exit without ever raising (peers may be gone already)."""
    try:
        destroy_worker_process_group()
    except Exception as err:  # an exit handler must not raise
        log.debug(f"destroying the worker process group at exit failed: {err}")
