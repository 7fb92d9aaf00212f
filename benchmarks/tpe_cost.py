"""What a proposal of the TPE propagator costs, by the number of results it has learned from.

A worker's proposal is part of every evaluation: the loop breeds, then evaluates. This script gives a
:class:`propulate.propagators.TPE` ``n`` results in a 20-dimensional mixed search space (8 floats, two of
them on a log scale, 4 integers, one on a log scale, 2 stepped floats and 6 categorical parameters of 3 to 5
choices), tells it that 7 peers are evaluating something (``pending``), and times ``--proposals`` proposals
(the call that returns an individual, as the loop makes it). Also the time to learn one result
(``observe``), and how many results the model holds (its ``window`` of the latest results plus the good
ones of the whole run: the cost stops growing there). One process, no MPI. Usage::

    python benchmarks/tpe_cost.py                       # 100, 1,000 and 10,000 results
    python benchmarks/tpe_cost.py --results 100 100000

Prints one JSON line per size: ``results``, ``held`` (results the model keeps), ``proposal_ms`` (median and
90th percentile over the proposals), ``observe_us`` (mean per result), then a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np

from propulate import Categorical, Float, Individual, Integer
from propulate.individual import Status
from propulate.propagators import TPE
from propulate.space import SearchSpace

LIMITS = {
    **{f"x{i}": (-5.0, 5.0) for i in range(6)},
    "lr": Float(1e-5, 1e-1, log=True),
    "weight_decay": Float(1e-6, 1e-2, log=True),
    **{f"n{i}": (1, 16) for i in range(3)},
    "width": Integer(8, 1024, log=True),
    "dropout": Float(0.0, 0.5, step=0.05),
    "momentum": Float(0.8, 0.99, step=0.01),
    "act": ("relu", "tanh", "gelu"),
    "opt": ("sgd", "adam", "adamw", "rmsprop"),
    "norm": ("batch", "layer", "none"),
    "pool": ("max", "avg", "none"),
    "init": ("xavier", "kaiming", "normal", "uniform", "orthogonal"),
    "flag": Categorical((True, False, None)),
}


def loss(ind: Individual) -> float:
    """A mixed test function: a sphere in the floats, plus costs of the integers and categories."""
    values = ind.params()
    total = sum(values[f"x{i}"] ** 2 for i in range(6))
    total += (np.log10(values["lr"]) + 3) ** 2 + sum(abs(values[f"n{i}"] - 8) for i in range(3))
    return float(total + (values["act"] != "gelu") + (values["opt"] != "adamw") + values["dropout"])


def measure(results: int, proposals: int, seed: int) -> dict:
    space = SearchSpace.of(LIMITS)
    rng = random.Random(seed)
    propagator = TPE(LIMITS, rng=random.Random(seed + 1))
    individuals = []
    for _ in range(results):
        ind = Individual(space.sample(rng), space)
        ind.loss, ind.status = loss(ind), Status.COMPLETED
        individuals.append(ind)
    start = time.perf_counter()
    for ind in individuals:
        propagator.observe(ind)
    observe_us = (time.perf_counter() - start) / results * 1e6
    pending = np.array([space.sample(rng) for _ in range(7)])
    times = []
    for _ in range(proposals):
        start = time.perf_counter()
        propagator.pending(pending)
        propagator([])
        times.append(time.perf_counter() - start)
    ms = np.array(times) * 1e3
    return {
        "results": results,
        "held": len(propagator._losses),
        "dimensions": len(LIMITS),
        "proposal_ms": {"median": float(np.median(ms)), "p90": float(np.percentile(ms, 90))},
        "observe_us": observe_us,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--proposals", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = []
    for results in args.results:
        row = measure(results, args.proposals, args.seed)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print()
    print("| results | held by the model | proposal, median (90th percentile) | observe, per result |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        p = row["proposal_ms"]
        print(
            f"| {row['results']:,} | {row['held']:,} | {p['median']:.2f} ms ({p['p90']:.2f} ms) | "
            f"{row['observe_us']:.0f} µs |"
        )


if __name__ == "__main__":
    main()
