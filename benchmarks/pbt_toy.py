"""The toy problem of the PBT paper (Jaderberg et al. 2017, Figure 2): PBT against its ablations.

Maximize ``Q(θ) = 1.2 - (θ₀² + θ₁²)`` with gradient steps on the surrogate
``Q̂(θ|h) = 1.2 - (h₀θ₀² + h₁θ₁²)``: two members, θ starting at (0.9, 0.9), h at (1, 0) and (0, 1), so that
each member alone only ever shrinks one coordinate (with ``--members 4``, two members start at each). Every
interval is ``--interval`` steps
``θ ← θ - η ∇θ(-Q̂) = θ (1 - 2 η h)``; a member's loss is ``-Q(θ)`` (the true objective, as the paper
evaluates members). The members run in lockstep (all end an interval, then each breeds in turn). Four
variants as in the paper's figure, and PB2:

- ``pbt``: :class:`propulate.pbt.PopulationBasedTraining` breeds each interval (exploit and explore,
  Ray's defaults: ``quantile_fraction=0.25``, ``resample_probability=0.25``, ``perturbation_factors=(1.2,
  0.8)``; h in [0, 1]);
- ``exploit``: the same propagator with ``resample_probability=0`` and ``perturbation_factors=(1.0,)``:
  the worse member copies θ and h of the better, unchanged;
- ``explore``: each member perturbs its own h with :func:`propulate.pbt.explore` after every interval and
  keeps its own θ (no copying);
- ``grid``: h stays as it started;
- ``pb2``: :class:`propulate.pbt.PB2` with the knobs of ``pbt``: the same exploit, its explore a GP-UCB
  choice of h (each member that breeds after another in the same round is told that one's new h as
  pending);
- ``pb2-k1``: the same with a constant confidence width ``kappa=1`` instead of the schedule.

Printed for each variant over ``--seeds`` seeds: how often a member reached ``Q >= 1.19`` within
``--max-steps`` steps, the median and quartiles of the steps it took (``inf`` where it did not), and for
``pb2`` and ``pb2-k1`` the two-sided Mann-Whitney U test against ``pbt`` (a seed that did not reach the
target counts as the most steps).

Usage, from the repository root (a few seconds for PBT, about a minute with PB2)::

    python benchmarks/pbt_toy.py --seeds 20 --members 2
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable

import numpy as np

from propulate import Individual, Status
from propulate.pbt import PB2, PopulationBasedTraining, explore
from propulate.pbt.lineage import DONOR, INTERVAL, MEMBER, PARENT, PREVIOUS, START, UNTIL

LIMITS = {"h0": (0.0, 1.0), "h1": (0.0, 1.0)}
VARIANTS = ("pbt", "exploit", "explore", "grid")
BANDITS = ("pb2", "pb2-k1")
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


Breed = Callable[[list[Individual], list[Individual]], Individual]


def breeder(variant: str, member: int, seed: int, interval: int, members: int = 2) -> Breed:
    """Return how ``member`` breeds its next interval from the population and the intervals under way."""
    rng = random.Random(1000 * seed + member)
    if variant.startswith("pb2"):
        pb2 = PB2(LIMITS, rng, perturbation_interval=interval, kappa=1.0 if variant == "pb2-k1" else None)
        pb2.bind(member, members)

        def bandit(population: list[Individual], running: list[Individual]) -> Individual:
            pb2.pending(np.array([ind.position for ind in running]).reshape(len(running), len(LIMITS)))
            return pb2(population)[0]

        return bandit
    if variant in ("pbt", "exploit"):
        knobs = {} if variant == "pbt" else {"resample_probability": 0.0, "perturbation_factors": (1.0,)}
        pbt = PopulationBasedTraining(LIMITS, rng, perturbation_interval=interval, **knobs)
        pbt.bind(member, members)
        return lambda population, running: pbt(population)[0]
    template = PopulationBasedTraining(LIMITS, rng, perturbation_interval=interval)
    template.bind(member, members)

    def own(population: list[Individual]) -> Individual:
        ind = template(population)[0]  # continues its own training (no exploit in a copy of one member)
        if variant == "explore":
            params = explore(ind.params(), ind.space, rng)
            for key, value in params.items():
                ind[key] = value
        return ind

    return lambda population, running: own([i for i in population if i.extras[MEMBER] == member])


def simulate(
    variant: str, seed: int, eta: float = 0.05, interval: int = 4, max_steps: int = 400, members: int = 2
) -> float:
    """Return the steps until a member reaches ``Q >= 1.19`` (``inf`` if none within ``max_steps``)."""
    breed = [breeder(variant, m, seed, interval, members) for m in range(members)]
    starts = ((1.0, 0.0), (0.0, 1.0))
    running = [first_interval(m, starts[m % 2], interval) for m in range(members)]
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
        running = []
        for m in range(members):
            running.append(breed[m](population, running))
    return float("inf")


def main() -> None:
    from scipy.stats import mannwhitneyu

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--members", type=int, default=2, help="members of the population (the paper: 2)")
    parser.add_argument("--eta", type=float, default=0.05, help="gradient step size")
    parser.add_argument("--interval", type=int, default=4, help="steps per interval")
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS + BANDITS, default=list(VARIANTS + BANDITS))
    args = parser.parse_args()
    print(
        f"steps to Q >= {TARGET}, {args.seeds} seeds, {args.members} members, eta {args.eta}, "
        f"interval {args.interval}"
    )
    print(f"{'variant':>8} {'reached':>8} {'median':>7} {'25 %':>6} {'75 %':>6} {'p vs pbt':>9}")
    found: dict[str, np.ndarray] = {}
    for variant in args.variants:
        steps = np.array(
            [
                simulate(variant, seed, args.eta, args.interval, args.max_steps, args.members)
                for seed in range(args.seeds)
            ]
        )
        found[variant] = steps
        q1, median, q3 = np.percentile(steps, [25, 50, 75], method="nearest")  # inf where not reached
        reached = int(np.isfinite(steps).sum())
        p = ""
        if variant.startswith("pb2") and "pbt" in found:
            # Not reached: more steps than any that reached (ranks only matter to the test).
            ranked = [np.where(np.isfinite(x), x, args.max_steps + 1) for x in (steps, found["pbt"])]
            p = f"{mannwhitneyu(*ranked, alternative='two-sided').pvalue:.3g}"
        print(f"{variant:>8} {reached:>5}/{args.seeds:<2} {median:>7.0f} {q1:>6.0f} {q3:>6.0f} {p:>9}")


if __name__ == "__main__":
    main()
