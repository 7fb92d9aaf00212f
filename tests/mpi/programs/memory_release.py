"""Run an island past its memory limit and check collectively that releasing individuals changed nothing.

One island of all ranks (or ``--num-islands`` islands with pollination, where nothing may be released) runs
``--generations`` per worker on Rastrigin with ``PROPULATE_MEMORY_LIMIT`` as the test sets it; with
``--resume`` a second ``Propulator`` continues from the checkpoint to ``--generations`` twice over (the
restored population, above the limit, is released as it is taken in, before the worker's other ranks get
it); ``--ranks-per-worker 2`` makes workers of two ranks (the loss is computed on both, the first's counts).
The loss function reads the worker's ``population`` at every call, as a user's loss may: during the run
that gives what the worker holds in memory (reading the checkpoint files the island is writing would fail
or crash). Checks on every rank:

- whether the worker released individuals (``--expect-release``) and, if so, that it holds at most what
  the loop allows (``max(limit, 2 * retained)`` before the next release, retained ``2 * max(pool, 100)``);
- ``population`` (read back from the checkpoint where released) holds every evaluation of the island, once,
  the same uids on every worker of the island, with as many distinct configurations;
- the run's counts by status add up to the evaluations;
- the best ``pop_size`` active individuals in memory are those of the whole population (what breeding
  reads), and ``summarize`` returns the distinct best of the whole population, for a ``top_n`` within what
  stays in memory and for one beyond it.

Rank 0 prints ``OK`` with per-rank figures (individuals in memory, released).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

from mpi4py import MPI

from propulate import Islands
from propulate.individual import loss_order
from propulate.population import distinct_best
from propulate.utils import get_default_propagator
from propulate.utils.benchmark_functions import get_function_search_space

sys.path.insert(0, str(Path(__file__).parent))
from _verdict import verdict

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--generations", type=int, default=100)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--expect-release", action="store_true")
parser.add_argument("--resume", action="store_true")
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--limit", type=int, required=True, help="PROPULATE_MEMORY_LIMIT, as the test sets it")
args = parser.parse_args()

POP_SIZE = 8
RETAINED = 2 * max(POP_SIZE, 100)
rastrigin, limits = get_function_search_space("rastrigin")
directory = world.bcast(tempfile.mkdtemp() if world.rank == 0 else None)


# The worker's Propulator, for the loss function; and the most individuals it saw in the population.
PROPULATOR = None
SEEN_DURING_RUN = [0]


def loss(params: dict, comm: MPI.Comm = MPI.COMM_SELF) -> float:
    if PROPULATOR is not None:
        SEEN_DURING_RUN[0] = max(SEEN_DURING_RUN[0], len(PROPULATOR.population))
    return rastrigin(params)


def build(generations: int) -> Islands:
    rng = random.Random(11 + world.rank)
    return Islands(
        loss,
        get_default_propagator(POP_SIZE, limits, rng=rng),
        rng,
        generations=generations,
        num_islands=args.num_islands,
        migration_probability=0.3 if args.num_islands > 1 else 0.0,
        pollination=True,
        checkpoint_path=directory,
        ranks_per_worker=args.ranks_per_worker,
    )


failures: list[str] = []
where = f"rank {world.rank}"
islands = build(args.generations)
PROPULATOR = islands.propulator
islands.propulate(debug=0)
generations = args.generations
if args.resume:
    generations = 2 * args.generations
    islands = build(generations)
    restored = islands.propulator._population
    if not restored.released or len(restored) > max(args.limit, 2 * RETAINED):
        failures.append(
            f"{where}: {len(restored)} restored individuals in memory, {restored.released} released"
        )
    PROPULATOR = islands.propulator
    islands.propulate(debug=0)
propulator = islands.propulator
store = propulator._population

released = store.released > 0
if released != args.expect_release:
    failures.append(
        f"{where}: released {store.released} individuals, expected release: {args.expect_release}"
    )
if released and SEEN_DURING_RUN[0] > max(args.limit, 2 * RETAINED):
    failures.append(f"{where}: the loss function saw {SEEN_DURING_RUN[0]} individuals, not those in memory")
if released and len(store) > max(args.limit, 2 * RETAINED):
    failures.append(f"{where}: {len(store)} individuals in memory, more than {max(args.limit, 2 * RETAINED)}")

population = propulator.population
island = propulator.island_idx
workers = int(islands.layout.island_counts[island])  # workers, not ranks
evaluated = [ind for ind in population if ind.migration_steps == 0]
if len(evaluated) != generations * workers or len({ind.uid for ind in evaluated}) != len(evaluated):
    failures.append(
        f"{where}: {len(evaluated)} evaluations in the population, expected {generations * workers}"
    )
if len(population) != store.n_known:
    failures.append(f"{where}: population of {len(population)}, but {store.n_known} known")
keys = {ind.space.key(ind.position) for ind in evaluated}
if len(keys) != len(evaluated):
    failures.append(f"{where}: {len(evaluated) - len(keys)} repeated configurations")
island_comm = world.Split(island, world.rank)  # every rank of the island's workers
uids = sorted(ind.uid for ind in population)
if island_comm.allgather(uids) != [uids] * island_comm.size:
    failures.append(f"{where}: the workers of island {island} hold different populations")
island_comm.Free()

results = propulator._results
assert results is not None
if sum(results.counts.values()) != generations * len(islands.layout.island_counts) * workers:
    failures.append(f"{where}: the run counts {results.counts_text()}")

active = sorted((ind for ind in population if ind.active), key=lambda ind: (loss_order(ind), ind.uid))
pool = [ind.uid for ind in store.best(POP_SIZE)]
if pool != [ind.uid for ind in active[:POP_SIZE]]:
    failures.append(f"{where}: breeding pool {pool}, the population's best {[i.uid for i in active[:8]]}")

for top_n in (5, 3 * RETAINED):
    summary = propulator.summarize(top_n=top_n, debug=0)
    mine = [ind.uid for ind in summary[world.rank // args.ranks_per_worker]]  # one list per worker
    expected = [ind.uid for ind in distinct_best(population, top_n)]
    if args.num_islands == 1 and mine != expected:
        failures.append(f"{where}: summarize(top_n={top_n}) gave {mine[:5]}..., expected {expected[:5]}...")

verdict(world.Dup(), failures, in_memory=len(store), released=store.released)
