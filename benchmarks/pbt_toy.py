"""The toy problem of the PBT paper (Jaderberg et al. 2017, Figure 2): PBT against its ablations.

Maximize ``Q(θ) = 1.2 - (θ₀² + θ₁²)`` with gradient steps on the surrogate
``Q̂(θ|h) = 1.2 - (h₀θ₀² + h₁θ₁²)``: two members, θ starting at (0.9, 0.9), h at (1, 0) and (0, 1), so that
each member alone only ever shrinks one coordinate. Every interval is ``--interval`` steps
``θ ← θ - η ∇θ(-Q̂) = θ (1 - 2 η h)``; a member's loss is ``-Q(θ)`` (the true objective, as the paper
evaluates members). The two members run in lockstep (both end an interval, then both breed). Four variants,
as in the paper's figure:

- ``pbt``: :class:`propulate.pbt.PopulationBasedTraining` breeds each interval (exploit and explore,
  Ray's defaults: ``quantile_fraction=0.25``, ``resample_probability=0.25``, ``perturbation_factors=(1.2,
  0.8)``; h in [0, 1]);
- ``exploit``: the same propagator with ``resample_probability=0`` and ``perturbation_factors=(1.0,)``:
  the worse member copies θ and h of the better, unchanged;
- ``explore``: each member perturbs its own h with :func:`propulate.pbt.explore` after every interval and
  keeps its own θ (no copying);
- ``grid``: h stays as it started.

Printed for each variant over ``--seeds`` seeds: how often a member reached ``Q >= 1.19`` within
``--max-steps`` steps, and the median and quartiles of the steps it took (``inf`` where it did not).

Usage, from the repository root (a second)::

    python benchmarks/pbt_toy.py --seeds 20
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable

import numpy as np

from propulate import Individual, Status
from propulate.pbt import PopulationBasedTraining, explore
from propulate.pbt.lineage import DONOR, INTERVAL, MEMBER, PARENT, PREVIOUS, START, UNTIL

LIMITS = {"h0": (0.0, 1.0), "h1": (0.0, 1.0)}
VARIANTS = ("pbt", "exploit", "explore", "grid")
TARGET = 1.19


def q(theta: np.ndarray) -> float:
    """The true objective."""
    return 1.2 - float(theta @ theta)


def first_interval(member: int, h: tuple[float, float], interval: int) -> Individual:
    """The member's first interval, with the paper's h (a propagator would draw it)."""
    ind = Individual({"h0": h[0], "h1": h[1]}, LIMITS)
    ind[MEMBER], ind[INTERVAL], ind[DONOR], ind[PARENT], ind[PREVIOUS] = member, 0, -1, -1, -1
    ind[START], ind[UNTIL] = 0, interval
    return ind


def breeder(variant: str, member: int, seed: int, interval: int) -> Callable[[list[Individual]], Individual]:
    """Return how ``member`` breeds its next interval from the population in ``variant``."""
    rng = random.Random(1000 * seed + member)
    if variant in ("pbt", "exploit"):
        knobs = {} if variant == "pbt" else {"resample_probability": 0.0, "perturbation_factors": (1.0,)}
        pbt = PopulationBasedTraining(LIMITS, rng, perturbation_interval=interval, **knobs)
        pbt.bind(member, 2)
        return lambda population: pbt(population)[0]
    template = PopulationBasedTraining(LIMITS, rng, perturbation_interval=interval)
    template.bind(member, 2)

    def own(population: list[Individual]) -> Individual:
        ind = template(population)[0]  # continues its own training (no exploit in a copy of one member)
        if variant == "explore":
            params = explore(ind.params(), ind.space, rng)
            for key, value in params.items():
                ind[key] = value
        return ind

    return lambda population: own([i for i in population if i.extras[MEMBER] == member])


def simulate(variant: str, seed: int, eta: float = 0.05, interval: int = 4, max_steps: int = 400) -> float:
    """Return the steps until a member reaches ``Q >= 1.19`` (``inf`` if none within ``max_steps``)."""
    breed = [breeder(variant, m, seed, interval) for m in range(2)]
    running = [first_interval(0, (1.0, 0.0), interval), first_interval(1, (0.0, 1.0), interval)]
    thetas: dict[int, np.ndarray] = {}  # the state each completed interval committed, by uid
    population: list[Individual] = []
    uid = 0
    for step in range(0, max_steps, interval):
        for ind in running:
            ind.uid, uid = uid, uid + 1
            parent = ind.extras[PARENT]
            theta = thetas[parent].copy() if parent >= 0 else np.array([0.9, 0.9])
            h = np.array([ind["h0"], ind["h1"]])
            for k in range(interval):
                theta = theta * (1.0 - 2.0 * eta * h)
                if q(theta) >= TARGET:
                    return float(step + k + 1)
            thetas[ind.uid] = theta
            ind.loss, ind.status, ind.steps = -q(theta), Status.COMPLETED, ind.extras[UNTIL]
        population += running
        running = [breed[m](population) for m in range(2)]
    return float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--eta", type=float, default=0.05, help="gradient step size")
    parser.add_argument("--interval", type=int, default=4, help="steps per interval")
    parser.add_argument("--max-steps", type=int, default=400)
    args = parser.parse_args()
    print(f"steps to Q >= {TARGET}, {args.seeds} seeds, eta {args.eta}, interval {args.interval}")
    print(f"{'variant':>8} {'reached':>8} {'median':>7} {'25 %':>6} {'75 %':>6}")
    for variant in VARIANTS:
        steps = np.array(
            [simulate(variant, seed, args.eta, args.interval, args.max_steps) for seed in range(args.seeds)]
        )
        q1, median, q3 = np.percentile(steps, [25, 50, 75], method="nearest")  # inf where not reached
        reached = int(np.isfinite(steps).sum())
        print(f"{variant:>8} {reached:>5}/{args.seeds:<2} {median:>7.0f} {q1:>6.0f} {q3:>6.0f}")


if __name__ == "__main__":
    main()
