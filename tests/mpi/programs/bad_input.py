"""Build an optimizer from bad input; every rank must raise, report and exit non-zero without hanging.

Usage: ``mpiexec -n N python bad_input.py CASE [CASE ...]``. The cases run one after the other in the same
job; each rank prints ``[CASE] rank R raised KIND: MESSAGE`` (or ``raised nothing``) and ``[CASE] rank R took
SECONDS s``. The job exits non-zero if any rank raised in any case.
"""

from __future__ import annotations

import random
import sys
import time

import numpy as np
from mpi4py import MPI

from propulate import Islands, Propulator
from propulate.utils import get_default_propagator
from propulate.utils.benchmark_functions import sphere

world = MPI.COMM_WORLD
good_limits = {"a": (-1.0, 1.0), "b": (-1.0, 1.0)}
rng = random.Random(world.rank)


def build(case: str) -> None:
    if case == "limits-nan":
        get_default_propagator(4, {"a": (0.0, float("nan"))}, rng=rng)
    elif case == "limits-one-tuple":
        get_default_propagator(4, {"a": (0.0, 1.0), "b": (3.0,)}, rng=rng)
    elif case == "limits-mixed":
        get_default_propagator(4, {"a": (0.0, "x")}, rng=rng)
    elif case == "limits-empty":
        get_default_propagator(4, {}, rng=rng)
    elif case == "pop-size":
        get_default_propagator(1, good_limits, rng=rng)
    elif case == "probability":
        get_default_propagator(4, good_limits, crossover_prob=1.5, rng=rng)
    elif case == "island-sizes":
        Islands(
            sphere,
            get_default_propagator(4, good_limits, rng=rng),
            rng,
            generations=1,
            island_sizes=[1, 1, 1, 5],
        )
    elif case == "ranks-per-worker":
        Islands(
            sphere, get_default_propagator(4, good_limits, rng=rng), rng, generations=1, ranks_per_worker=3
        )
    elif case == "topology":
        Islands(
            sphere,
            get_default_propagator(4, good_limits, rng=rng),
            rng,
            generations=1,
            num_islands=2,
            migration_topology=np.ones((3, 3), dtype=int),
        )
    elif case == "topology-negative":
        Islands(
            sphere,
            get_default_propagator(4, good_limits, rng=rng),
            rng,
            generations=1,
            num_islands=2,
            migration_topology=np.array([[0, -1], [1, 0]]),
        )
    elif case == "generations":
        Propulator(sphere, get_default_propagator(4, good_limits, rng=rng), rng, generations=-2)
    elif case == "migration-probability":
        Islands(sphere, get_default_propagator(4, good_limits, rng=rng), rng, migration_probability=2.0)
    elif case == "on-failure":
        Islands(sphere, get_default_propagator(4, good_limits, rng=rng), rng, on_failure="ignore")
    elif case == "time-limit":
        Islands(sphere, get_default_propagator(4, good_limits, rng=rng), rng, time_limit=0)
    elif case == "grace-period":
        Islands(sphere, get_default_propagator(4, good_limits, rng=rng), rng, grace_period=-1)
    elif case == "mutation-probability":
        get_default_propagator(4, good_limits, mutation_prob=-0.1, rng=rng)
    elif case == "loss-signature":
        Islands(lambda params: 0.0, get_default_propagator(4, good_limits, rng=rng), rng, ranks_per_worker=2)
    elif case == "trackers":
        Islands(sphere, get_default_propagator(4, good_limits, rng=rng), rng, trackers=["tensorboard"])
    else:
        raise SystemExit(f"unknown case {case}")


raised = False
for case in sys.argv[1:]:
    world.Barrier()
    start = time.monotonic()
    try:
        build(case)
    except (ValueError, TypeError) as err:
        print(f"[{case}] rank {world.rank} raised {type(err).__name__}: {err}", flush=True)
        raised = True
    else:
        print(f"[{case}] rank {world.rank} raised nothing", flush=True)
    print(f"[{case}] rank {world.rank} took {time.monotonic() - start:.3f} s", flush=True)
# Everyone reports before anyone exits, so the launcher sees every rank's message.
world.Barrier()
sys.exit(1 if raised else 0)
