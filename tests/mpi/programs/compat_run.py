"""What Propulate 1.2.2 scripts rely on, checked collectively: the checkpoint is there at construction, and
``_``-prefixed entries of individuals travel.

1. A run whose propagator marks every child with ``_``-prefixed entries (one JSON-friendly, one a tuple that
   JSON cannot hold exactly): every worker ends with those entries on every individual, its own, its island
   peers' (messages) and immigrants (migration, pollination).
2. A second optimizer built on the same checkpoint, never run, has the same population (every attribute,
   the entries included) and generation counter on every rank, sub-ranks of multi-rank workers too, and its
   ``summarize()`` returns what the first one's did — as a 1.2.2 script that rebuilds the optimizer to read
   its results.
3. A third one asked for more generations runs only those, and :func:`propulate.checkpoint.load_checkpoint`
   gives back the entries of every individual.
4. A fourth one built with ``resume=False`` starts empty, writes nothing until it runs, then sets the earlier
   files aside once, and a second ``propulate()`` call on it continues the first.

``--direct`` builds ``Propulator`` itself on ``COMM_WORLD`` (one island), as 1.2.2's ``test_propulator.py``
does; otherwise ``Islands``, which builds a ``Pollinator`` or a ``Migrator`` as 1.2.2 does.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
from _verdict import verdict
from mpi4py import MPI

import propulate
from propulate import Individual, Islands, Migrator, Pollinator, Propulator
from propulate.checkpoint import load_checkpoint
from propulate.propagators import Compose, Propagator
from propulate.report import load_dataframe
from propulate.utils import get_default_propagator
from propulate.utils.benchmark_functions import get_function_search_space

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=12)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--pollination", action="store_true")
parser.add_argument("--direct", action="store_true")
parser.add_argument("--topology", action="store_true", help="pass 1.2.2's tutorials' topology explicitly")
args = parser.parse_args()

function, limits = get_function_search_space("sphere")


class MarkOrigin(Propagator):
    """Marks each child with who bred it: the way 1.2.2's custom propagators annotate individuals."""

    def __init__(self) -> None:
        super().__init__(1, 1)

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        child = inds[0]
        child["_origin"] = {"rank": world.rank, "note": "bred"}
        child["_pair"] = (world.rank, 1)  # a tuple: JSON would give back a list
        return [child]


def loss(params: dict[str, float], comm: MPI.Comm = MPI.COMM_SELF) -> float:
    if comm.size > 1:
        comm.Barrier()  # a collective inside the loss, as DDP runs them
    return function(params)


# As 1.2.2's islands tutorial builds it: one migrant from every island to every other.
topology = 1 - np.eye(args.num_islands, dtype=int) if args.topology else None


def build(generations: int, resume: bool = True) -> Propulator:
    rng = random.Random(11 + world.rank)
    propagator = Compose([get_default_propagator(4, limits, rng=rng), MarkOrigin()])
    if args.direct:
        return Propulator(
            loss, propagator, rng, generations=generations, checkpoint_path=args.checkpoint, resume=resume
        )
    islands = Islands(
        loss,
        propagator,
        rng,
        generations=generations,
        num_islands=args.num_islands,
        migration_probability=0.9,
        pollination=args.pollination,
        checkpoint_path=args.checkpoint,
        ranks_per_worker=args.ranks_per_worker,
        migration_topology=topology,
        resume=resume,
    )
    return islands.propulator


def attributes(ind: Individual) -> tuple[Any, ...]:
    """Everything an individual holds, as comparable values."""
    return (
        ind.uid,
        ind.position.tobytes(),
        None if ind.velocity is None else ind.velocity.tobytes(),
        ind.loss,
        int(ind.status),
        ind.active,
        ind.generation,
        ind.rank,
        ind.island,
        ind.current,
        ind.migration_steps,
        ind.migration_history,
        ind.evaltime,
        ind.evalperiod,
        ind.steps,
        repr(ind.surrogate_data),
        sorted(ind.metrics.items()),
        repr(sorted(ind.extras.items())),
    )


failures: list[str] = []
comm = world.Dup()

first = build(args.generations)
expected_class = Propulator if args.direct else (Pollinator if args.pollination else Migrator)
if not isinstance(first, expected_class):
    failures.append(f"rank {world.rank}: built a {type(first).__name__}, not a {expected_class.__name__}")
if first.population or first.generation:
    failures.append(f"rank {world.rank}: a fresh optimizer has {len(first.population)} individuals")
first.propulate(debug=0)
before = sorted(map(attributes, first.population))
summary = [[attributes(ind) for ind in worker] for worker in first.summarize(top_n=3, debug=0)]
unmarked = [ind for ind in first.population if "_origin" not in ind or ind["_pair"][1] != 1]
if unmarked or not before:
    failures.append(f"rank {world.rank}: {len(unmarked)} of {len(before)} individuals lack their entries")
if any(isinstance(ind["_pair"], list) for ind in first.population):
    failures.append(f"rank {world.rank}: a tuple entry came back as a list")
foreign = sum(ind["_origin"]["rank"] != world.rank for ind in first.population)

rebuilt = build(args.generations)
if sorted(map(attributes, rebuilt.population)) != before:
    failures.append(f"rank {world.rank}: the rebuilt optimizer's population differs from the run's")
if rebuilt.generation != args.generations:
    failures.append(f"rank {world.rank}: rebuilt generation {rebuilt.generation}, not {args.generations}")
rebuilt_summary = [[attributes(ind) for ind in worker] for worker in rebuilt.summarize(top_n=3, debug=0)]
if rebuilt_summary != summary:
    failures.append(f"rank {world.rank}: the rebuilt optimizer summarizes differently")
del rebuilt

more = build(args.generations + 3)
size_before = len(more.population)
more.propulate(debug=0)
workers = world.size // args.ranks_per_worker
# Rows added on each island, counted once per island (by its first worker's root); collective over all ranks.
head = more.is_worker_root and more.island_rank == 0
added = comm.allreduce(len(more.population) - size_before if head else 0)
if added < 3 * workers:
    failures.append(f"rank {world.rank}: only {added} individuals added by 3 more generations per worker")
# Migration moves individuals between islands and pollination copies them: with one island, the uids of the
# evaluations (only the evaluating worker mints one) count them exactly.
total = len({ind.uid for ind in more.population}) if args.num_islands == 1 else None
if total is not None and total != (args.generations + 3) * workers:
    failures.append(f"rank {world.rank}: {total} evaluations after the extension, not {3 * workers} more")
if any("_origin" not in ind for ind in more.population):
    failures.append(f"rank {world.rank}: individuals of the extension lack their entries")

if world.rank == 0:
    checkpoint = load_checkpoint(args.checkpoint)
    loaded = [ind for population in checkpoint.populations.values() for ind in population]
    lacking = [ind for ind in loaded if ind.extras.get("_pair") != (ind["_origin"]["rank"], 1)]
    if not loaded or lacking:
        failures.append(f"load_checkpoint: {len(lacking)} of {len(loaded)} individuals lack their entries")
    frame = load_dataframe(args.checkpoint)
    if frame["user_attrs__origin"].isna().any() or frame["user_attrs__pair"].map(type).ne(tuple).any():
        failures.append("load_dataframe: the user_attrs__origin and user_attrs__pair columns are incomplete")

# 4. A fresh start writes nothing at construction, sets the earlier files aside when it runs, and a second
# propulate() call on the same object continues from the first instead of setting that aside too.
fresh = build(2, resume=False)
comm.Barrier()
kept = sorted(path.name for path in Path(args.checkpoint).glob("*.h5"))
if fresh.population or not kept:
    failures.append(
        f"rank {world.rank}: resume=False built with {len(fresh.population)} individuals, files {kept}"
    )
fresh.propulate(debug=0)
first_uids = sorted(ind.uid for ind in fresh.population)
fresh.propulate(debug=0)
if sorted(ind.uid for ind in fresh.population) != first_uids or fresh.generation != 2:
    failures.append(f"rank {world.rank}: a second propulate() after resume=False did not continue the first")
comm.Barrier()
if len(list(Path(args.checkpoint).glob("previous-*"))) != 1:
    failures.append(f"rank {world.rank}: the earlier files were not set aside exactly once")

if "mpi4py.MPI" not in sys.modules or not hasattr(propulate, "utils"):
    failures.append("import propulate: the package's modules are not reachable")
verdict(comm, failures, foreign=foreign, total=total)
