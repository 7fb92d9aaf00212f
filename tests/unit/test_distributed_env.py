"""The torch helper and the launch check on one process: environment, the caller's group, ports, GPUs.

``torch.distributed`` runs with gloo on a world of one rank (``MPI.COMM_SELF``); GPUs are simulated by
replacing ``torch.cuda``'s answers, and launchers by their environment variables.
"""

from __future__ import annotations

import datetime
import errno
import os
import socket
from collections.abc import Iterator
from typing import ClassVar

import pytest
from mpi4py import MPI

from propulate.errors import LayoutError
from propulate.mpi import layout
from propulate.mpi.layout import build_layout, check_launcher_world
from propulate.utils import distributed

try:
    import torch
    import torch.distributed as dist
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")

LAUNCHER_VARIABLES = (
    "SLURM_STEP_ID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "WORLD_SIZE",
    "RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "PMI_SIZE",
    "PMI_RANK",
    "PROPULATE_SKIP_LAUNCH_CHECK",
)


@pytest.fixture
def launcher_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Start from an environment without any launcher's variables."""
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# ---------------------------------------------------------------------------------------------- launch check


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_PROCID": "1"}, "SLURM_NTASKS=2"),
        ({"SLURM_STEP_ID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "0"}, "SLURM_STEP_NUM_TASKS=4"),
        ({"WORLD_SIZE": "4", "RANK": "2"}, "WORLD_SIZE=4"),
        ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_SIZE=2"),
        ({"PMI_SIZE": "8", "PMI_RANK": "5"}, "PMI_SIZE=8"),
    ],
)
def test_a_launcher_world_larger_than_mpis_is_refused(
    launcher_env: pytest.MonkeyPatch, variables: dict[str, str], named: str
) -> None:
    for name, value in variables.items():
        launcher_env.setenv(name, value)
    with pytest.raises(LayoutError) as caught:
        check_launcher_world(MPI.COMM_SELF)
    message = str(caught.value)
    assert named in message and "1 rank(s)" in message, message
    assert "not with torchrun" in message and "srun --mpi=pmix" in message, message
    assert "PROPULATE_SKIP_LAUNCH_CHECK=1" in message, message


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"SLURM_NTASKS": "8", "SLURM_PROCID": "0"},  # the batch script: SLURM_NTASKS is the allocation's
        {"SLURM_STEP_ID": "4294967294", "SLURM_NTASKS": "8", "SLURM_PROCID": "0"},  # the batch step
        {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "8", "SLURM_PROCID": "0"},
        {"WORLD_SIZE": "4"},  # a stray WORLD_SIZE without RANK
        {"WORLD_SIZE": "2", "RANK": "2"},  # a rank outside its world: not a launcher's
        {"WORLD_SIZE": "1", "RANK": "0"},
        {"WORLD_SIZE": "4", "RANK": "1", "PROPULATE_SKIP_LAUNCH_CHECK": "1"},
    ],
)
def test_agreeing_or_untrusted_variables_pass(
    launcher_env: pytest.MonkeyPatch, variables: dict[str, str]
) -> None:
    for name, value in variables.items():
        launcher_env.setenv(name, value)
    check_launcher_world(MPI.COMM_SELF)


def test_build_layout_checks_the_launch_of_comm_world(launcher_env: pytest.MonkeyPatch) -> None:
    launcher_env.setenv("WORLD_SIZE", "2")
    launcher_env.setenv("RANK", "0")
    with pytest.raises(LayoutError, match="torchrun started 2 processes"):
        build_layout(MPI.COMM_WORLD, 2, 1, None)  # the launch error, not the divisibility one
    launcher_env.setenv("PROPULATE_SKIP_LAUNCH_CHECK", "1")
    build_layout(MPI.COMM_WORLD, 1, 1, None)
    assert (layout.known_node_local_rank(), layout.known_node_size()) == (0, 1)


# ------------------------------------------------------------------------------------------- torch groups

EXPORTED = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


@pytest.fixture(autouse=True)
def no_group_left() -> Iterator[None]:
    """Every test starts and ends without a process group."""
    if torch is None:
        yield
        return
    assert not dist.is_initialized()
    yield
    distributed.destroy_worker_process_group()
    if dist.is_initialized():
        dist.destroy_process_group()


def own_group() -> object:
    """Create a world-size-1 gloo group the way a user would, and return it."""
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    return dist.group.WORLD


@needs_torch
@pytest.mark.parametrize("teardown", ["destroy", "abort"])
def test_teardown_puts_the_environment_back(monkeypatch: pytest.MonkeyPatch, teardown: str) -> None:
    monkeypatch.setenv("MASTER_ADDR", "elsewhere")
    monkeypatch.setenv("RANK", "7")
    for name in ("MASTER_PORT", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    before = {name: os.environ.get(name) for name in EXPORTED}

    group = distributed.init_worker_process_group(MPI.COMM_SELF, method="nccl-openmpi")
    exported = {name: os.environ.get(name) for name in EXPORTED}
    assert exported == {
        "MASTER_ADDR": group.master_addr,
        "MASTER_PORT": str(group.master_port),
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
    }
    getattr(distributed, f"{teardown}_worker_process_group")()
    assert not dist.is_initialized() and distributed.current_worker_group() is None
    assert {name: os.environ.get(name) for name in EXPORTED} == before


@needs_torch
def test_other_methods_leave_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in EXPORTED:
        monkeypatch.delenv(name, raising=False)
    distributed.init_worker_process_group(MPI.COMM_SELF, method="gloo")
    assert not any(name in os.environ for name in EXPORTED)


@needs_torch
def test_a_failed_init_puts_the_environment_back(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in EXPORTED:
        monkeypatch.delenv(name, raising=False)

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no group today")

    monkeypatch.setattr(dist, "init_process_group", refuse)
    with pytest.raises(RuntimeError, match="no group today"):
        distributed.init_worker_process_group(MPI.COMM_SELF, method="nccl-openmpi")
    assert not any(name in os.environ for name in EXPORTED)
    assert distributed.current_worker_group() is None


@needs_torch
def test_the_callers_group_is_refused_and_left_alone() -> None:
    users = own_group()
    with pytest.raises(RuntimeError, match="already initialized by the caller") as caught:
        distributed.init_worker_process_group(MPI.COMM_SELF, method="gloo")
    assert "do not call init_worker_process_group()" in str(caught.value)
    distributed.destroy_worker_process_group()
    distributed.abort_worker_process_group()
    assert dist.is_initialized() and dist.group.WORLD is users
    value = torch.ones(1)
    dist.all_reduce(value)
    assert value.item() == 1.0


@needs_torch
def test_a_group_that_replaced_ours_is_not_destroyed() -> None:
    distributed.init_worker_process_group(MPI.COMM_SELF, method="gloo")
    dist.destroy_process_group()
    users = own_group()
    distributed.destroy_worker_process_group()
    assert dist.is_initialized() and dist.group.WORLD is users
    assert distributed.current_worker_group() is None


@needs_torch
def test_abort_then_init_again() -> None:
    first = distributed.init_worker_process_group(MPI.COMM_SELF, method="gloo")
    distributed.abort_worker_process_group()
    assert not dist.is_initialized() and distributed.current_worker_group() is None
    distributed.abort_worker_process_group()  # no-op without a group
    second = distributed.init_worker_process_group(MPI.COMM_SELF, method="gloo")
    assert second is not first
    value = torch.full((1,), 3.0)
    dist.all_reduce(value)
    assert value.item() == 3.0


class GrabbingComm(MPI.Intracomm):
    """A communicator on which another socket tries to take the rendezvous port as soon as it is known."""

    grabbed: ClassVar[
        list[tuple[int, int]]
    ] = []  # (port, errno of the refused bind; 0 if the bind succeeded)
    sockets: ClassVar[list[socket.socket]] = []

    def bcast(self, obj: object, root: int = 0) -> object:
        obj = super().bcast(obj, root)
        if isinstance(obj, tuple):
            _, port = obj
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("", port))
            except OSError as err:
                sock.close()
                self.grabbed.append((port, err.errno))
            else:
                self.sockets.append(sock)  # keep it: a rendezvous that needs the port now fails
                self.grabbed.append((port, 0))
        return obj


@needs_torch
@pytest.mark.parametrize("method", distributed.METHODS)
def test_no_other_process_can_take_the_rendezvous_port(method: str) -> None:
    GrabbingComm.grabbed.clear()
    comm = GrabbingComm(MPI.COMM_SELF)
    try:
        group = distributed.init_worker_process_group(comm, method=method)
        value = torch.full((1,), 2.0)
        dist.all_reduce(value)
        assert value.item() == 2.0
    finally:
        for sock in GrabbingComm.sockets:
            sock.close()
        GrabbingComm.sockets.clear()
    assert GrabbingComm.grabbed == [(group.master_port, errno.EADDRINUSE)]


@needs_torch
def test_init_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="share_gpus"):
        distributed.init_worker_process_group(MPI.COMM_SELF, method="gloo", share_gpus=1)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------- GPUs


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch):
    """Simulate GPUs: return a function that sets the visible count and this rank's place on its node."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("PROPULATE_SHARE_GPUS", raising=False)
    monkeypatch.setattr(distributed, "_gpu_identity", lambda torch, index: f"GPU-{index}")

    def simulate(visible: int, node_local_rank: int, node_size: int | None) -> None:
        monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
        monkeypatch.setattr(layout, "_world_node_local_rank", node_local_rank)
        monkeypatch.setattr(layout, "_world_node_size", node_size)

    return simulate


@needs_torch
def test_each_rank_of_a_node_gets_its_own_gpu(gpus) -> None:
    gpus(4, 2, 4)
    assert distributed._choose_gpu(torch, MPI.COMM_SELF, False) == 2


@needs_torch
def test_more_ranks_than_gpus_on_a_node_is_refused_unless_sharing_is_asked_for(
    gpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpus(2, 3, 4)
    with pytest.raises(LayoutError) as caught:
        distributed._choose_gpu(torch, MPI.COMM_SELF, False)
    message = str(caught.value)
    host = MPI.Get_processor_name()
    assert f"rank 3 of node {host}, which runs 4 rank(s) but shows them 2 GPU(s)" in message, message
    assert "share_gpus=True" in message and "PROPULATE_SHARE_GPUS=1" in message, message
    assert "--ntasks-per-node=2" in message and "CUDA_VISIBLE_DEVICES" in message, message
    assert distributed._choose_gpu(torch, MPI.COMM_SELF, True) == 1

    # The public path: the placement is checked before a GPU is bound.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    with pytest.raises(LayoutError, match="would share GPU 1 with another worker"):
        distributed.init_worker_process_group(MPI.COMM_SELF, method="nccl-slurm")

    class BoundError(Exception):
        pass

    def bind(device: object) -> None:
        raise BoundError(str(device))

    monkeypatch.setattr(torch.cuda, "set_device", bind)
    monkeypatch.setenv("PROPULATE_SHARE_GPUS", "1")
    with pytest.raises(BoundError, match="cuda:1"):
        distributed.init_worker_process_group(MPI.COMM_SELF, method="nccl-slurm")
    monkeypatch.delenv("PROPULATE_SHARE_GPUS")
    with pytest.raises(BoundError, match="cuda:1"):
        distributed.init_worker_process_group(MPI.COMM_SELF, method="auto", share_gpus=True)
    assert not dist.is_initialized()


@needs_torch
def test_a_launcher_that_binds_one_gpu_per_rank_is_fine(gpus, monkeypatch: pytest.MonkeyPatch) -> None:
    gpus(1, 3, 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # srun --gpus-per-task=1: each rank sees its own GPU
    assert distributed._choose_gpu(torch, MPI.COMM_SELF, False) == 0


def placement(rank: int, host: str, local: int, gpu: str, crowded: bool = False) -> object:
    return distributed._Placement(rank, host, local, 4, 2, local % 2, gpu, crowded)


@needs_torch
def test_two_ranks_of_one_worker_never_share_a_gpu() -> None:
    worker = [placement(0, "n1", 0, "GPU-a"), placement(1, "n1", 2, "GPU-a", crowded=True)]
    for share in (False, True):
        message = distributed._placement_problem(worker, share)
        assert message is not None
        assert "ranks 0, 1 of this worker would share GPU 0 on node n1" in message, message
        assert "2 rank(s) of the worker, 4 rank(s) in all but shows them 2 GPU(s)" in message, message
        assert "run at most 2 rank(s) per node" in message, message


@needs_torch
def test_the_same_gpu_name_on_different_nodes_is_no_conflict() -> None:
    worker = [placement(0, "n1", 0, "GPU-0"), placement(1, "n2", 0, "GPU-0")]
    assert distributed._placement_problem(worker, False) is None
