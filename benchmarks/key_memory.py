"""What the no-repeat keys cost a long run: memory and time per key, ``KeySet`` against a Python set.

A worker on an island without migration keeps a few thousand individuals in memory and the key
(:meth:`propulate.SearchSpace.key`, a 64-bit hash) of every configuration its island evaluated
(:class:`propulate.population.Population`). This script adds ``--keys`` individuals of a 10-D float space
to one ``Population`` the way the loop does (releasing all but 200 whenever 8,192 are held), once with the
keys in :class:`propulate.population.KeySet` and once in a plain ``set``, and prints one JSON line per
store:

- ``add_us``: microseconds per ``Population.add`` (release included), without ``tracemalloc``;
- ``knows_us``: microseconds per ``Population.knows`` of a key it holds (100,000 look-ups);
- ``held_bytes_per_key`` and ``peak_bytes_per_key``: the Python heap the run leaves allocated and its peak
  (``tracemalloc``, a second pass), divided by the keys; both include the 200 kept individuals.

Usage::

    python benchmarks/key_memory.py --keys 1000000
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc

import numpy as np

from propulate import Individual
from propulate.population import KeySet, Population

HELD = 8192
KEEP = 200


def individuals(n: int) -> list[Individual]:
    limits = {f"x{i}": (-5.0, 5.0) for i in range(10)}
    template = Individual(dict.fromkeys(limits, 0.0), limits)
    rng = np.random.default_rng(0)
    made = []
    for uid in range(n):
        ind = template.child()
        ind.position = rng.uniform(-0.5, 0.5, 10)
        ind.uid, ind.loss, ind.active = uid, float(uid % 1000), True
        made.append(ind)
    return made


def fill(store: str, inds: list[Individual]) -> Population:
    population = Population()
    if store == "set":
        population._keys = set()  # type: ignore[assignment]
    else:
        population._keys = KeySet()
    for ind in inds:
        population.add(ind)
        if len(population) >= HELD:
            population.release(KEEP)
    return population


def measure(store: str, inds: list[Individual]) -> dict[str, object]:
    start = time.perf_counter()
    population = fill(store, inds)
    add_us = (time.perf_counter() - start) / len(inds) * 1e6
    keys = [ind.space.key(ind.position) for ind in inds[:: max(1, len(inds) // 100_000)]]
    start = time.perf_counter()
    assert all(population.knows(key) for key in keys)
    knows_us = (time.perf_counter() - start) / len(keys) * 1e6
    del population
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    population = fill(store, inds)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert population.n_distinct == len(inds)
    return {
        "benchmark": "key_memory",
        "store": store,
        "keys": len(inds),
        "add_us": round(add_us, 3),
        "knows_us": round(knows_us, 3),
        "held_bytes_per_key": round((held - base) / len(inds), 1),
        "peak_bytes_per_key": round((peak - base) / len(inds), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000, help="individuals added")
    args = parser.parse_args()
    inds = individuals(args.keys)
    for store in ("set", "keyset"):
        print(json.dumps(measure(store, inds)), flush=True)


if __name__ == "__main__":
    main()
