"""Create torch.distributed groups for multi-rank workers and check them collectively.

Usage: ``mpiexec -n N python distributed_group.py RANKS_PER_WORKER``. COMM_WORLD is split into workers of
``RANKS_PER_WORKER`` consecutive ranks (the last one may be smaller). Exits non-zero (MPI Abort) on failure.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist
from mpi4py import MPI

from propulate.errors import LayoutError
from propulate.utils import distributed
from propulate.utils.distributed import (
    METHODS,
    abort_worker_process_group,
    current_worker_group,
    destroy_worker_process_group,
    init_worker_process_group,
    node_local_rank,
)

world = MPI.COMM_WORLD


class Recorder(logging.Handler):
    """Keep the messages of the "propulate" logger."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


recorder = Recorder()


def check_group(worker: MPI.Comm, method: str) -> None:
    group = init_worker_process_group(worker, method=method)
    assert (group.world_size, group.rank) == (worker.size, worker.rank), group
    assert (dist.get_world_size(), dist.get_rank()) == (worker.size, worker.rank)
    assert group.backend == "gloo", group  # no CUDA on the test machines: "auto" picks gloo
    assert str(group.device) == "cpu", group
    assert current_worker_group() is group

    # The group sums over exactly this worker's ranks.
    value = torch.tensor([float(world.rank + 1)])
    dist.all_reduce(value)
    assert value.item() == sum(worker.allgather(world.rank + 1)), value

    # Reuse: the same, or a congruent, communicator gives back the same group without a new rendezvous.
    assert init_worker_process_group(worker, method=method) is group
    dup = worker.Dup()
    assert init_worker_process_group(dup, method=method) is group
    dup.Free()

    # A different communicator while the group exists is refused (checked locally, before any collective).
    other = MPI.COMM_SELF if worker.size > 1 else world
    if MPI.Comm.Compare(other, worker) not in (MPI.IDENT, MPI.CONGRUENT):
        try:
            init_worker_process_group(other, method=method)
        except RuntimeError:
            pass
        else:
            raise AssertionError("a second communicator was accepted")

    # One rendezvous per worker: same address within a worker, distinct ports between workers on a host.
    color = world.rank // int(sys.argv[1])
    seen = world.allgather((color, group.master_addr, group.master_port))
    by_worker = {c: (addr, port) for c, addr, port in seen}
    assert all(by_worker[c] == (addr, port) for c, addr, port in seen), seen
    endpoints = list(by_worker.values())
    assert len(set(endpoints)) == len(endpoints), seen

    # DDP on the group keeps the replicas' gradients equal.
    torch.manual_seed(world.rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
    model(torch.randn(4, 3)).sum().backward()
    grads = worker.allgather(model.module.weight.grad.numpy().tolist())
    assert all(g == grads[0] for g in grads), grads


class GrabbingComm(MPI.Intracomm):
    """A worker communicator on which each rank tries to take the rendezvous port as soon as it is known."""

    refused = 0

    def bcast(self, obj: object, root: int = 0) -> object:
        obj = super().bcast(obj, root)
        if isinstance(obj, tuple):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("", obj[1]))
                except OSError as err:
                    assert err.errno == errno.EADDRINUSE, err
                    GrabbingComm.refused += 1
                else:
                    raise AssertionError(f"the rendezvous port {obj[1]} was free for anyone to take")
        return obj


def check_port_is_held(worker: MPI.Comm) -> None:
    """Between the broadcast of the port and its use, no other socket can bind it, whatever the method."""
    for method in METHODS:
        GrabbingComm.refused = 0
        group = init_worker_process_group(GrabbingComm(worker), method=method)
        value = torch.tensor([float(world.rank + 1)])
        dist.all_reduce(value)
        assert value.item() == sum(worker.allgather(world.rank + 1)), value
        assert GrabbingComm.refused == 1 and group.master_port > 0
        destroy_worker_process_group()


def check_environment_is_restored(worker: MPI.Comm) -> None:
    names = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    for name in names:
        os.environ.pop(name, None)
    os.environ["MASTER_ADDR"] = "before"
    os.environ["WORLD_SIZE"] = "123"
    before = {name: os.environ.get(name) for name in names}
    group = init_worker_process_group(worker, method="nccl-openmpi")
    exported = {name: os.environ.get(name) for name in names}
    assert exported == {
        "MASTER_ADDR": group.master_addr,
        "MASTER_PORT": str(group.master_port),
        "RANK": str(worker.rank),
        "WORLD_SIZE": str(worker.size),
        "LOCAL_RANK": str(worker.rank),  # one host
    }, exported
    destroy_worker_process_group()
    assert {name: os.environ.get(name) for name in names} == before
    for name in names:
        os.environ.pop(name, None)


def check_abort(worker: MPI.Comm) -> None:
    """The first rank aborts with an all_reduce of its own pending; afterwards a new group works."""
    init_worker_process_group(worker, method="gloo")
    if worker.rank == 0:
        dist.all_reduce(torch.ones(1), async_op=True)  # its partners never join this one
        start = time.monotonic()
        abort_worker_process_group()
        assert time.monotonic() - start < 10, "abort waited for the partners"
    worker.Barrier()
    if worker.rank != 0:
        abort_worker_process_group()
    assert current_worker_group() is None and not dist.is_initialized()
    abort_worker_process_group()  # no-op without a group
    init_worker_process_group(worker, method="gloo")
    value = torch.tensor([float(world.rank + 1)])
    dist.all_reduce(value)
    assert value.item() == sum(worker.allgather(world.rank + 1)), value
    destroy_worker_process_group()


def check_abort_releases_blocked_ranks(worker: MPI.Comm) -> None:
    """A rank that leaves and aborts releases its partners blocked in DDP's backward(); a rank blocked in
    backward() is released by an abort from another thread (what the watchdog does at a stop)."""
    if worker.size == 1:
        return
    for who_aborts in ("the one that left", "the blocked ones"):
        init_worker_process_group(worker, method="gloo")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
        model(torch.randn(4, 3)).sum().backward()
        worker.Barrier()
        start = time.monotonic()
        if worker.rank == 0:  # leaves before the next all-reduce
            if who_aborts == "the one that left":
                time.sleep(0.5)
                abort_worker_process_group()
        else:
            if who_aborts == "the blocked ones":
                threading.Timer(0.5, abort_worker_process_group).start()
            try:
                model(torch.randn(4, 3)).sum().backward()
            except RuntimeError as err:
                assert "closed" in str(err).lower(), err
            else:
                raise AssertionError("backward() returned without its partner")
            assert time.monotonic() - start < 10, f"released after {time.monotonic() - start:.1f} s"
        worker.Barrier()
        if worker.rank == 0 and who_aborts == "the blocked ones":
            abort_worker_process_group()
        if worker.rank != 0 and who_aborts == "the one that left":
            abort_worker_process_group()
        assert current_worker_group() is None
        del model
    init_worker_process_group(worker, method="gloo")
    value = torch.tensor([float(world.rank + 1)])
    dist.all_reduce(value)
    assert value.item() == sum(worker.allgather(world.rank + 1)), value
    destroy_worker_process_group()


class BoundError(Exception):
    """Raised instead of binding a simulated GPU."""


def check_gpu_placement(worker: MPI.Comm) -> None:
    """One visible GPU per rank (simulated): never two ranks of a worker on it; other workers if asked."""
    saved = (torch.cuda.is_available, torch.cuda.device_count, torch.cuda.set_device, dist.is_nccl_available)
    saved_identity = distributed._gpu_identity
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    dist.is_nccl_available = lambda: True
    distributed._gpu_identity = lambda torch, index: f"GPU-{index}"

    def bind(device: object) -> None:
        raise BoundError(str(device))

    torch.cuda.set_device = bind
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    try:
        for share in (False, True):
            try:
                init_worker_process_group(worker, method="nccl-slurm", share_gpus=share)
            except LayoutError as err:
                outcome = str(err)
            except BoundError as err:
                outcome = f"bound {err}"
            outcomes = worker.allgather(outcome)
            # Node-local ranks are world ranks here (one host); rank 0 alone has the GPU to itself.
            if worker.size > 1:
                expected = "ranks 0, 1 of this worker would share GPU 0"
            elif share or world.rank == 0:
                expected = "bound cuda:0"
            else:
                expected = (
                    f"rank {world.rank} of node {MPI.Get_processor_name()}, which runs {world.size} rank(s)"
                )
            assert all(expected in o for o in outcomes), (share, expected, outcomes)
            assert current_worker_group() is None and not dist.is_initialized()
    finally:
        torch.cuda.is_available, torch.cuda.device_count, torch.cuda.set_device, dist.is_nccl_available = (
            saved
        )
        distributed._gpu_identity = saved_identity


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=f"[{world.rank}] %(message)s")
    logging.getLogger("propulate").addHandler(recorder)
    ranks_per_worker = int(sys.argv[1])
    assert node_local_rank(world) == world.rank  # one host in the tests
    worker = world.Split(world.rank // ranks_per_worker, world.rank)

    try:
        init_worker_process_group(worker, method="nccl")
    except ValueError as err:
        assert "method" in str(err) and "gloo" in str(err), err
    else:
        raise AssertionError("an unknown method was accepted")

    for method in ("gloo", "auto", "nccl-slurm", "nccl-openmpi"):
        recorder.messages.clear()
        check_group(worker, method)
        fell_back = any("falling back to gloo" in m for m in recorder.messages)
        assert fell_back == method.startswith("nccl"), (method, recorder.messages)
        destroy_worker_process_group()
        assert current_worker_group() is None and not dist.is_initialized()
        destroy_worker_process_group()  # no-op without a group

    check_port_is_held(worker)
    check_environment_is_restored(worker)
    check_abort(worker)
    check_abort_releases_blocked_ranks(worker)
    check_gpu_placement(worker)

    # After a destroy, a group over another communicator may be created; left for the exit handler.
    group = init_worker_process_group(world, method="gloo")
    assert (group.world_size, group.rank) == (world.size, world.rank)
    value = torch.ones(1)
    dist.all_reduce(value)
    assert value.item() == world.size
    worker.Free()
    world.Barrier()
    if world.rank == 0:
        print(f"distributed_group OK: {world.size} ranks, {ranks_per_worker} per worker", flush=True)


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        world.Abort(1)
        os._exit(1)  # this MPICH's MPI_Abort may return
