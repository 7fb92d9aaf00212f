"""Run an island model over a migration topology and check, collectively, who sent whom how many immigrants.

Usage: ``topology_run.py --num-islands I [--topology NAME] [--as-array] [--migration] [--resumed] --checkpoint
DIR``. ``--as-array`` passes the array the name builds for ``I`` islands instead of the name, as scripts of
versions without names did. A topology that ``Islands`` refuses makes every rank print ``rank R raised
<error>: <message>`` and exit 1.

Every worker counts its migration events (calls of its policy's ``targets()``, one per event). After the
run, each island's first worker counts the immigrants of its island by the island they came from (the last
hop of ``migration_history``). Rank 0 checks that immigrants came only along the topology's non-zero
entries, that with pollination (a copy always exists to be sent) island ``j`` received exactly
``events[i] * topology[i, j]`` immigrants from island ``i``, and with migration at most that many, and that
the checkpoint stores the topology that was used: its name, or the array given. Every worker checks that
its policy keeps a name as a name (no array of the islands). ``--resumed`` (a run continuing a checkpoint
written with another topology) skips the immigrant checks, which the earlier session's immigrants would
upset. Rank 0 prints ``RESULT {json}`` with the topology, the events and the immigrant counts.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

import numpy as np
from mpi4py import MPI

from propulate import Islands
from propulate.checkpoint import load_checkpoint
from propulate.migration import (
    DEFAULT_TOPOLOGY,
    TOPOLOGIES,
    MigrationPolicy,
    check_topology,
    messages_per_round,
)
from propulate.utils import get_default_propagator, set_logger_config
from propulate.utils.benchmark_functions import get_function_search_space

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--num-islands", type=int, required=True)
parser.add_argument("--topology", default=None, help="a name; the default (None) if not given")
parser.add_argument("--as-array", action="store_true", help="pass the array the name builds instead")
parser.add_argument("--generations", type=int, default=30)
parser.add_argument("--migration-probability", type=float, default=0.9)
parser.add_argument("--migration", action="store_true", help="migration instead of pollination")
parser.add_argument("--resumed", action="store_true")
parser.add_argument("--checkpoint", required=True)
args = parser.parse_args()
set_logger_config()

function, limits = get_function_search_space("sphere")
try:
    islands = Islands(
        function,
        get_default_propagator(4, limits, rng=7),
        7,
        generations=args.generations,
        num_islands=args.num_islands,
        migration_topology=(
            TOPOLOGIES[args.topology or DEFAULT_TOPOLOGY](args.num_islands)
            if args.as_array
            else args.topology
        ),
        migration_probability=args.migration_probability,
        pollination=not args.migration,
        checkpoint_path=args.checkpoint,
    )
except ValueError as err:  # a bad topology: every rank reports, then all exit
    print(f"rank {world.rank} raised {type(err).__name__}: {err}", flush=True)
    world.Barrier()
    sys.exit(1)
layout = islands.layout
propulator = islands.propulator
num_islands = len(layout.island_counts)
expected = check_topology(args.topology, num_islands)

events = 0
policy = propulator.migration
if isinstance(policy, MigrationPolicy):
    assert (policy.topology.array is not None) == args.as_array, policy.topology
    targets = policy.targets

    def counted_targets() -> list[tuple[int, int]]:
        global events
        events += 1
        return targets()

    policy.targets = counted_targets  # type: ignore[method-assign]

islands.propulate(debug=0)

result = {}
if propulator.is_worker_root:
    island_comm, propulate_comm = layout.island_comm, layout.propulate_comm
    island_events = island_comm.allreduce(events)
    sources: Counter[int] = Counter()
    for ind in propulator.population:
        if ind.migration_steps > 0:
            *_, source, here = (int(hop) for hop in ind.migration_history.split("-"))
            assert here == layout.island_index, (here, layout.island_index, ind.migration_history)
            sources[source] += 1
    rows = propulate_comm.gather(
        (layout.island_index, island_events, dict(sources)) if island_comm.rank == 0 else None
    )
    if rows is not None:  # the first worker
        rows = sorted(row for row in rows if row is not None)
        assert [island for island, *_ in rows] == list(range(num_islands)), rows
        sent = np.array([island_events for _, island_events, _ in rows])
        received = np.zeros((num_islands, num_islands), dtype=int)  # (source, target)
        for target, _, by_source in rows:
            for source, count in by_source.items():
                received[source, target] = count
        edges = expected > 0
        if not args.resumed:
            assert not received[~edges].any(), f"immigrants off the topology:\n{received}\n{expected}"
            most = sent[:, np.newaxis] * expected
            if args.migration:
                assert (received <= most).all(), (received, most)
            else:
                assert np.array_equal(received, most), (received, most)
        checkpoint = load_checkpoint(args.checkpoint)
        assert checkpoint is not None
        config = checkpoint.config
        stored = expected.tolist() if args.as_array else (args.topology or DEFAULT_TOPOLOGY)
        assert config["migration_topology"] == stored, config["migration_topology"]
        result = {
            "topology": expected.tolist(),
            "events": sent.tolist(),
            "received": received.tolist(),
            "messages": int((sent[:, np.newaxis] * edges).sum()),
            "expected_messages": messages_per_round(expected, args.migration_probability) * args.generations,
        }

if world.rank == 0:
    print("RESULT " + json.dumps(result), flush=True)
sys.stdout.flush()
