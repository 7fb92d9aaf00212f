"""Create torch.distributed groups for multi-rank workers and check them collectively.

Usage: ``mpiexec -n N python distributed_group.py RANKS_PER_WORKER``. COMM_WORLD is split into workers of
``RANKS_PER_WORKER`` consecutive ranks (the last one may be smaller). Exits non-zero (MPI Abort) on failure.
"""

from __future__ import annotations

import logging
import sys
import traceback

import torch
import torch.distributed as dist
from mpi4py import MPI

from propulate.utils.distributed import (
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
