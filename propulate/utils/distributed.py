"""PyTorch process groups for multi-rank workers.

A multi-rank worker is a block of MPI ranks that evaluates one individual together, typically by training
one network with ``DistributedDataParallel``. :func:`init_worker_process_group` turns the worker's MPI
communicator (the ``subgroup_comm`` handed to the loss function) into a ``torch.distributed`` process group.
The worker's first rank hosts the rendezvous itself, a ``torch.distributed.TCPStore`` on a port that the
operating system picks and that stays bound from then on, and broadcasts its address over MPI: no other
process can take the port between its choice and its use, and several workers on one node never collide.
The group is created once per worker and process and reused by every later evaluation;
:func:`destroy_worker_process_group` tears it down, :func:`abort_worker_process_group` does so without
waiting for the worker's other ranks. Either puts back the environment variables that the group's creation
set. A process group that the caller created with ``torch.distributed`` is never taken over or torn down.

With NCCL, each rank computes on the GPU of its node-local rank in ``COMM_WORLD``, modulo the number of GPUs
it sees (so a launcher that gives each rank its own GPU, e.g. ``srun --gpus-per-task=1``, works). Two ranks
of one worker never share a GPU; ranks of different workers share one only when asked to
(``share_gpus=True`` or ``PROPULATE_SHARE_GPUS=1``); see :func:`init_worker_process_group`.

Every method rendezvouses through the ``TCPStore`` of the worker's first rank.

Methods
-------
``"auto"``
    NCCL when CUDA is available, gloo otherwise.
``"nccl-slurm"``
    NCCL.
``"nccl-openmpi"``
    NCCL; in addition ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (the
    rank among the worker's ranks on this node) are exported for code that reads them, until teardown.
``"gloo"``
    gloo (CPU tensors).

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
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from ..errors import LayoutError
from ..lifecycle import on_release
from ..mpi.layout import known_node_local_rank, known_node_size, node_local_rank

if TYPE_CHECKING:
    import torch

__all__ = [
    "WorkerGroup",
    "abort_worker_process_group",
    "current_worker_group",
    "destroy_worker_process_group",
    "init_worker_process_group",
    "node_local_rank",
]

log = logging.getLogger("propulate")

METHODS = ("auto", "nccl-slurm", "nccl-openmpi", "gloo")

SHARE_GPUS = "PROPULATE_SHARE_GPUS"

# The variables that method "nccl-openmpi" exports; teardown puts back what they held before.
EXPORTED_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")

# Per-process environment variables that MPI launchers set: (world rank, node-local rank, ranks on the node).
# Each triple is trusted only when its world rank equals the MPI world rank, so that values inherited from an
# enclosing job step (e.g. ``mpirun`` inside ``sbatch``) are ignored.
_LAUNCHER_LOCAL_RANK = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),  # Open MPI
    ("PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),  # MPICH / Intel MPI (Hydra)
    ("SLURM_PROCID", "SLURM_LOCALID", None),  # srun
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
        TCP port of the rendezvous, picked by the operating system and bound by the worker's first rank for
        the life of the group.
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
    process_group: Any  # the default process group created here, to tell it from one created by the caller
    saved_environ: dict[str, str | None]  # what the exported variables held before (None: unset)
    # gloo: the group's connections to its partners, as {file descriptor: socket inode}.
    connections: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Placement:
    """Where one rank of a worker would compute with NCCL, as exchanged over the worker's communicator."""

    rank: int  # in the worker
    host: str
    node_local_rank: int  # in COMM_WORLD
    node_size: int | None  # COMM_WORLD ranks on the node, if known without communication
    visible_gpus: int
    index: int  # the GPU, as this rank numbers its visible GPUs
    gpu: str  # the GPU's identity on its node (its UUID where torch tells it)
    crowded: bool  # the node has more ranks than GPUs, and this rank sees all of them


_state: _State | None = None
_atexit_registered = False
# Groups given up on by abort_worker_process_group, with their stores, kept for the life of the process:
# releasing a gloo group with an operation still in flight waits for its partners.
_aborted: list[tuple[Any, Any]] = []


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


def _world_node_placement() -> tuple[int, int | None]:
    """Return this rank's node-local rank in ``COMM_WORLD`` and the number of ranks on its node, if known.

    :class:`propulate.Islands` records both with a shared-memory split while every rank is present. Without
    it (a ``Propulator`` built by hand), the launcher's per-process variables give them without
    communication; only when none is trustworthy does this fall back to :func:`node_local_rank`, which is
    collective over ``COMM_WORLD``.
    """
    known = known_node_local_rank()
    if known is not None:
        return known, known_node_size()
    world_rank = MPI.COMM_WORLD.Get_rank()
    for rank_var, local_var, size_var in _LAUNCHER_LOCAL_RANK:
        rank, local = os.environ.get(rank_var, ""), os.environ.get(local_var, "")
        if rank.isdigit() and local.isdigit() and int(rank) == world_rank:
            size = os.environ.get(size_var, "") if size_var is not None else ""
            return int(local), int(size) if size.isdigit() else None
    return node_local_rank(MPI.COMM_WORLD), None


def _gpu_identity(torch: Any, index: int) -> str:
    """Return what tells GPU ``index`` apart from the node's other GPUs, whatever each rank is shown."""
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is not None:
        return str(uuid)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return str(index) if visible is None else visible.split(",")[index]


def _placement_problem(placements: list[_Placement], share_gpus: bool) -> str | None:
    """Say what is wrong with a worker's GPU placement, or return ``None`` (pure; same on every rank)."""
    by_gpu: dict[tuple[str, str], list[_Placement]] = {}
    for placement in placements:
        by_gpu.setdefault((placement.host, placement.gpu), []).append(placement)
    for (host, _), sharing in by_gpu.items():
        if len(sharing) > 1:
            first = sharing[0]
            on_node = sum(p.host == host for p in placements)
            everyone = "" if first.node_size is None else f", {first.node_size} rank(s) in all"
            return (
                f"GPU placement: ranks {', '.join(str(p.rank) for p in sharing)} of this worker would share "
                f"GPU {first.index} on node {host}, which runs {on_node} rank(s) of the worker{everyone} "
                f"but shows them {first.visible_gpus} GPU(s); two ranks of one worker never share a GPU: "
                f"{_placement_advice(first.visible_gpus)}"
            )
    crowded = next((p for p in placements if p.crowded), None)
    if crowded is None or share_gpus:
        return None
    known = crowded.node_size is not None
    ranks = f"{crowded.node_size}" if known else f"at least {crowded.node_local_rank + 1}"
    return (
        f"GPU placement: rank {crowded.rank} of this worker is rank {crowded.node_local_rank} of node "
        f"{crowded.host}, which runs {ranks} rank(s) but shows them {crowded.visible_gpus} GPU(s), so it "
        f"would share GPU {crowded.index} with another worker. If workers may share GPUs, pass "
        f"share_gpus=True to init_worker_process_group() or set {SHARE_GPUS}=1; otherwise "
        f"{_placement_advice(crowded.visible_gpus)}"
    )


def _placement_advice(visible_gpus: int) -> str:
    """Return what to do when a node runs more ranks than it has GPUs."""
    return (
        f"run at most {visible_gpus} rank(s) per node (srun --ntasks-per-node={visible_gpus}, mpirun "
        f"--map-by ppr:{visible_gpus}:node), or give each rank its own GPU (CUDA_VISIBLE_DEVICES per rank, "
        f"srun --gpus-per-task=1)."
    )


def _choose_gpu(torch: Any, worker_comm: MPI.Intracomm, share_gpus: bool) -> int:
    """Return this rank's GPU index, checked against the worker's other ranks (collective over the worker).

    Raises
    ------
    LayoutError
        On every rank of the worker alike, if two of its ranks would share a GPU, if ranks of different
        workers would and ``share_gpus`` is false, or if a rank could not tell its GPU.
    """
    mine: _Placement | str
    try:
        visible = torch.cuda.device_count()
        local, node_size = _world_node_placement()
        index = local % visible
        # The node's ranks that see all its GPUs take GPU (node-local rank % visible): this rank's GPU is
        # also that of node-local rank local - visible, of this worker or another.
        crowded = local >= visible and "CUDA_VISIBLE_DEVICES" not in os.environ
        host = MPI.Get_processor_name()
        mine = _Placement(
            worker_comm.Get_rank(),
            host,
            local,
            node_size,
            visible,
            index,
            _gpu_identity(torch, index),
            crowded,
        )
    except Exception as err:  # reported on every rank below, instead of leaving the others waiting
        failed = f"{type(err).__name__}: {err}"
        mine = (
            f"GPU placement: rank {worker_comm.Get_rank()} of this worker could not choose its GPU: {failed}"
        )
    placements = worker_comm.allgather(mine)
    failure = next((p for p in placements if isinstance(p, str)), None)
    problem = failure if failure is not None else _placement_problem(placements, share_gpus)
    if problem is not None:
        raise LayoutError(problem)
    assert isinstance(mine, _Placement)
    return mine.index


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


def _raise_on_every_rank(comm: MPI.Intracomm, problem: str | None) -> None:
    """Raise a RuntimeError on every rank of ``comm`` if any rank has a ``problem`` (collective)."""
    problems = comm.allgather(None if problem is None else (comm.Get_rank(), socket.gethostname(), problem))
    first = next((p for p in problems if p is not None), None)
    if first is not None:
        rank, host, problem = first
        raise RuntimeError(f"on rank {rank} of the worker ({host}): {problem}")


def _open_rendezvous(
    comm: MPI.Intracomm, hosts: list[str], timeout: datetime.timedelta
) -> tuple[str, int, Any]:
    """Host the rendezvous on the worker's first rank and connect the others; return ``(host, port, store)``.

    The first rank binds a ``TCPStore`` to port 0, so the operating system picks a free port that stays
    bound, and broadcasts the port; the other ranks connect to it as clients. A failure on the first rank
    is broadcast so that every rank of the worker raises instead of waiting for an address that never comes.
    """
    import torch.distributed as dist

    rank, size = comm.Get_rank(), comm.Get_size()
    # The other ranks reach the first one over loopback when they all share its node.
    host = "127.0.0.1" if len(set(hosts)) == 1 else socket.gethostname()
    store = None
    message: tuple[str, int] | str = ""
    if rank == 0:
        try:
            store = dist.TCPStore(host, 0, size, True, timeout=timeout, wait_for_workers=False)
            message = (host, int(store.port))
        except Exception as err:
            message = f"on {socket.gethostname()}: {type(err).__name__}: {err}"
    message = comm.bcast(message, root=0)
    if isinstance(message, str):
        raise RuntimeError(f"the worker's first rank could not open the rendezvous {message}")
    host, port = message
    if rank != 0:
        store = dist.TCPStore(host, port, size, False, timeout=timeout)
    return host, port, store


def _export_environment(variables: dict[str, str]) -> dict[str, str | None]:
    """Set ``variables`` in ``os.environ``; return what they held before (``None``: unset)."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    return saved


def _restore_environment(saved: dict[str, str | None]) -> None:
    """Put back the values (or the absence) of the variables recorded by :func:`_export_environment`."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def init_worker_process_group(
    worker_comm: MPI.Comm,
    method: str = "auto",
    timeout: datetime.timedelta = datetime.timedelta(minutes=10),
    *,
    share_gpus: bool = False,
) -> WorkerGroup:
    """Create (once) and return the ``torch.distributed`` process group of this rank's worker.

    Collective over ``worker_comm``: every rank of the worker calls it, typically at the start of the loss
    function with the ``subgroup_comm`` it was given. The first call creates the group (the default process
    group of ``torch.distributed``) with ``worker_comm``'s ranks and size, checks it with a one-element
    ``all_reduce`` and logs one line; later calls with the same communicator, or any communicator of the same
    ranks in the same order (a ``Dup()``), return the same :class:`WorkerGroup` without touching
    ``torch.distributed`` (their other arguments are not used).

    A process group that the caller created with ``torch.distributed.init_process_group`` is left alone: this
    function neither creates a second default group over it nor takes it over (its ranks cannot be told to
    be the worker's), but raises on every rank of the worker, and the teardown functions never destroy it.
    Either let this function create the group, or keep your own and do not call this function.

    With NCCL, each rank binds (``torch.cuda.set_device``) GPU ``node-local rank % visible GPUs``, where the
    node-local rank is the rank's index among the ``COMM_WORLD`` ranks on its node; it comes from
    :class:`propulate.Islands`, else from the MPI launcher's environment, else from a collective over
    ``COMM_WORLD`` (every rank then calls this function once). The worker's ranks then compare the GPUs they
    chose (by UUID): two ranks of one worker on one GPU are an error. A rank that sees all its node's GPUs
    (no ``CUDA_VISIBLE_DEVICES``) on a node with more ranks than GPUs would share its GPU with a rank of
    another worker: an error too, unless ``share_gpus`` is true or ``PROPULATE_SHARE_GPUS=1``.

    Parameters
    ----------
    worker_comm : MPI.Comm
        The worker's intracommunicator, of any size (one rank gives a group of world size 1).
    method : str
        ``"auto"``, ``"nccl-slurm"``, ``"nccl-openmpi"`` or ``"gloo"``; see the module documentation.
    timeout : datetime.timedelta
        How long the rendezvous and the group's collective operations may wait.
    share_gpus : bool
        Whether ranks of different workers may compute on the same GPU (several small workers per GPU).
        Also enabled by the environment variable ``PROPULATE_SHARE_GPUS=1``.

    Returns
    -------
    WorkerGroup
        This rank's view of the worker's process group.

    Raises
    ------
    ValueError
        If ``method`` is not one of the allowed values.
    TypeError
        If ``worker_comm`` is not an MPI intracommunicator, ``timeout`` not a ``datetime.timedelta`` or
        ``share_gpus`` not a bool.
    RuntimeError
        If a group for a different communicator exists (destroy it first); on every rank of the worker, if
        ``torch.distributed`` was initialized by the caller on any of them or the rendezvous fails; if the
        sanity check fails.
    LayoutError
        (a ``ValueError``) on every rank of the worker, if its ranks' GPUs are shared as described above; the
        message names the node, its ranks, its visible GPUs and what to do.
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
    if not isinstance(share_gpus, bool):
        raise TypeError(f"share_gpus must be a bool; got {type(share_gpus).__name__}")
    torch = _import_torch()
    import torch.distributed as dist

    if _state is not None and not _owns_default_group(dist):
        # Someone destroyed our group with torch.distributed directly: forget it.
        _forget()
    if _state is not None:
        if _world_ranks(worker_comm) == _state.world_ranks:
            return _state.group
        raise RuntimeError(
            "a worker process group for a different communicator exists in this process; "
            "call destroy_worker_process_group() first"
        )
    _raise_on_every_rank(worker_comm, _callers_group(dist))

    backend = _resolve_backend(torch, method)
    rank, size = worker_comm.Get_rank(), worker_comm.Get_size()
    if backend == "nccl":
        index = _choose_gpu(torch, worker_comm, share_gpus or os.environ.get(SHARE_GPUS) == "1")
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    hosts = worker_comm.allgather(MPI.Get_processor_name())
    host, port, store = _open_rendezvous(worker_comm, hosts, timeout)
    saved: dict[str, str | None] = {}
    try:
        if method == "nccl-openmpi":
            local_rank = hosts[:rank].count(hosts[rank])
            saved = _export_environment(
                {
                    "MASTER_ADDR": host,
                    "MASTER_PORT": str(port),
                    "RANK": str(rank),
                    "WORLD_SIZE": str(size),
                    "LOCAL_RANK": str(local_rank),
                }
            )
        options: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
        before = _sockets()
        dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=timeout, **options)
        process_group = dist.group.WORLD
        # gloo connects every pair of ranks while the group is created: the sockets that appeared are its.
        connections = _connections(before) if backend == "gloo" else {}
        check = torch.ones(1, device=device)
        dist.all_reduce(check)
        if int(check.item()) != size:
            raise RuntimeError(
                f"process group sanity check failed: all_reduce of ones gave {check.item()}, not {size}"
            )
    except BaseException:
        # The caller had no group (checked above), so one that exists now is ours; its partners may be gone.
        if dist.is_initialized():
            _aborted.append((dist.group.WORLD, store))
            _abort_default_group(dist)
        _restore_environment(saved)
        raise

    group = WorkerGroup(backend, rank, size, device, host, port)
    _state = _State(group, _world_ranks(worker_comm), store, process_group, saved, connections)
    if not _atexit_registered:
        atexit.register(_destroy_at_exit)
        _atexit_registered = True
    log.info(
        f"torch.distributed worker group ready: world size {size}, rank {rank}, backend {backend}, "
        f"device {device}, rendezvous {host}:{port}"
    )
    return group


def _callers_group(dist: Any) -> str | None:
    """Describe the process group the caller created with ``torch.distributed``, or return ``None``."""
    if not dist.is_initialized():
        return None
    return (
        f"torch.distributed is already initialized by the caller (backend {dist.get_backend()}, rank "
        f"{dist.get_rank()} of {dist.get_world_size()}), not by init_worker_process_group(), which creates "
        f"the default process group itself and neither takes over nor destroys yours. Either drop your "
        f"init_process_group() call and let init_worker_process_group() create the worker's group, or keep "
        f"your group and do not call init_worker_process_group()"
    )


def _owns_default_group(dist: Any) -> bool:
    """Whether the default process group is the one this module created (not destroyed or replaced)."""
    return _state is not None and dist.is_initialized() and dist.group.WORLD is _state.process_group


def _forget() -> None:
    """Drop this module's record of its group and put back the environment it changed."""
    global _state
    if _state is not None:
        saved, _state = _state.saved_environ, None
        _restore_environment(saved)


def current_worker_group() -> WorkerGroup | None:
    """Return the group created by :func:`init_worker_process_group` in this process, or ``None``."""
    return None if _state is None else _state.group


def destroy_worker_process_group() -> None:
    """Destroy the process group created by :func:`init_worker_process_group`, if any.

    A no-op when this module created no group: a group the caller created with ``torch.distributed`` is left
    alone. The environment variables that the group's creation set (method ``"nccl-openmpi"``) get back the
    values they held before, or are removed again. Afterwards :func:`init_worker_process_group` may create a
    new group, for any communicator. It is also run at interpreter exit. ``destroy_process_group`` of
    ``torch.distributed`` may wait for the worker's other ranks; :func:`abort_worker_process_group` does not.
    """
    if _state is None:
        return
    import torch.distributed as dist

    try:
        if _owns_default_group(dist):
            dist.destroy_process_group()
    finally:
        _forget()


def abort_worker_process_group() -> None:
    """Tear down the process group created by :func:`init_worker_process_group` without waiting for partners.

    For a rank whose partners died, were interrupted, or are blocked in a collective that will never
    complete. With gloo it first shuts down the group's connections to its partners: an operation in flight
    fails at once, on this rank (blocked in ``backward()``, say, on another thread) and on every partner
    waiting for this rank, with "Connection closed by peer" (gloo itself cannot cancel it). Then it uses
    ``torch.distributed.distributed_c10d._abort_process_group`` where this torch has it (experimental there,
    documented for NCCL, whose pending operations it ends), else the process group's ``abort()``, and
    destroys the group if neither could. The group is unregistered at once, whatever its partners do; so
    that nothing here waits for them, its resources are kept until the process ends. Like
    :func:`destroy_worker_process_group`, it leaves a group the caller created alone, puts back the
    environment, and lets :func:`init_worker_process_group` create a new group afterwards, over a new
    rendezvous. Never raises for a group that is already broken; safe to call from another thread than the
    one blocked in the group's operation.
    """
    if _state is None:
        return
    import torch.distributed as dist

    try:
        if _owns_default_group(dist):
            _cut(_state.connections)
            _aborted.append((_state.process_group, _state.store))
            _abort_default_group(dist)
    finally:
        _forget()


# A stop that interrupts a loss function blocked in a collective of the group aborts it (propulate.lifecycle).
on_release(abort_worker_process_group)


def _sockets() -> dict[int, int]:
    """Return this process's open sockets as ``{file descriptor: inode}`` (empty where /proc is missing)."""
    found: dict[int, int] = {}
    try:
        descriptors = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in descriptors:
        try:
            info = os.fstat(int(name))
        except (OSError, ValueError):
            continue
        if stat.S_ISSOCK(info.st_mode):
            found[int(name)] = info.st_ino
    return found


def _connections(before: dict[int, int]) -> dict[int, int]:
    """Return the connected (not listening) sockets opened since ``before`` was taken."""
    found = {}
    for descriptor, inode in _sockets().items():
        if before.get(descriptor) == inode:
            continue
        try:
            with socket.socket(fileno=os.dup(descriptor)) as sock:
                listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        except OSError:
            continue
        if not listening:
            found[descriptor] = inode
    return found


def _cut(connections: dict[int, int]) -> None:
    """Shut down a gloo group's connections, so that its operations in flight fail now, here and on partners.

    gloo offers no way to cancel an operation in flight: ``abort()`` and destroying the group leave a rank
    blocked in a collective (an all-reduce in DDP's ``backward()``) waiting for a partner that left, until the
    group's timeout. A connection shut down ends it at once on both sides ("Connection closed by peer").
    The group's listening socket is left open (gloo's listener thread ends the process if it fails), and a
    descriptor that now names another socket is left alone.
    """
    for descriptor, inode in connections.items():
        try:
            if os.fstat(descriptor).st_ino != inode:
                continue
            with socket.socket(fileno=os.dup(descriptor)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError as err:  # closed already, or never connected
            log.debug(f"abort_worker_process_group: shutting down socket {descriptor} failed: {err}")


def _abort_default_group(dist: Any) -> None:
    """Abort the default process group, falling back from torch's helper to the group's own abort."""
    from torch.distributed import distributed_c10d

    abort_all = getattr(distributed_c10d, "_abort_process_group", None)
    if abort_all is not None:
        try:
            abort_all()
        except Exception as err:  # the group may be broken already; destroy it below
            log.debug(f"abort_worker_process_group: _abort_process_group failed: {err}")
    if not dist.is_initialized():
        return
    abort_group = getattr(dist.group.WORLD, "abort", None)
    if abort_group is not None:
        try:
            abort_group()
        except Exception as err:
            log.debug(f"abort_worker_process_group: ProcessGroup.abort failed: {err}")
    try:
        dist.destroy_process_group()
    except Exception as err:
        log.debug(f"abort_worker_process_group: destroy_process_group failed: {err}")


def _destroy_at_exit() -> None:
    """Destroy the group at interpreter exit without ever raising (peers may be gone already)."""
    try:
        destroy_worker_process_group()
    except Exception as err:  # an exit handler must not raise
        log.debug(f"destroying the worker process group at exit failed: {err}")
