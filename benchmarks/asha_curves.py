"""Early stopping on synthetic learning curves with known final losses: who survives, and at what cost.

Each configuration ``i`` has the learning curve ``L_i(t) = final_i + (start_i - final_i) * t ** -a_i`` for
epochs ``t = 1 .. R`` (``R = --epochs``), with ``final`` uniform in [0.05, 1], ``start`` in [1.5, 3] and ``a``
log-uniform in [0.1, 3]: fast and slow learners, so curves cross and a slow learner can end best. Interim
losses carry Gaussian noise (``--noise``, standard deviation); the true final loss ``L_i(R)`` is known.

For each seed, ``--configs`` configurations are evaluated by ``--workers`` simulated asynchronous workers,
each with a surrogate of its own, driven as the worker's loop drives it (``start_run``, ``cancel`` after each
interim loss, ``update``, ``data``); every epoch takes one time unit, and what ``interim_data()`` returns
after an interim loss (a rung result) is merged into the other workers' surrogates at once, and a finished
run's ``data()`` when it ends, as the island's workers exchange them. ``--share-at-end`` holds the interim
records back until the run ends (how records travelled before rung results were sent at once). A
configuration's generation is its index on its worker (Hyperband brackets cycle over it). Printed, over
``--seeds`` seeds, for no early stopping, the static surrogate and successive halving with several ``η``:

- ``best_survives``: how often the configuration with the truly lowest final loss ran to ``R``;
- ``top3_survives``: how often one of the three truly best ran to ``R``;
- ``regret``: mean of (true final loss of the best run that reached ``R``) - (true best final loss);
- ``resource``: epochs trained as a share of ``configs * R``, no early stopping being 1.

Usage, from the repository root (about a minute on one core)::

    python benchmarks/asha_curves.py --seeds 100
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import numpy as np

from propulate import Individual
from propulate.surrogate import NullSurrogate, StaticSurrogate, SuccessiveHalving, Surrogate

LIMITS = {"i": (0, 1_000_000)}


def make_curves(
    rng: np.random.Generator, configs: int, epochs: int, noise: float
) -> tuple[np.ndarray, np.ndarray]:
    """Return the observed curves, shape (configs, epochs), and the true final losses, shape (configs,)."""
    final = rng.uniform(0.05, 1.0, configs)
    start = rng.uniform(1.5, 3.0, configs)
    a = np.exp(rng.uniform(math.log(0.1), math.log(3.0), configs))
    t = np.arange(1, epochs + 1)
    true = final[:, None] + (start - final)[:, None] * t[None, :] ** -a[:, None]
    return true + rng.normal(0.0, noise, true.shape), true[:, -1]


def simulate(
    factory: Callable[[], Surrogate], curves: np.ndarray, workers: int, share_at_end: bool = False
) -> np.ndarray:
    """Evaluate every curve with asynchronous workers; return the epochs each configuration ran."""
    configs, epochs = curves.shape
    surrogates = [factory() for _ in range(workers)]
    ran = np.zeros(configs, dtype=int)
    queue = list(range(configs))
    current: list[int | None] = [None] * workers
    started = [0] * workers
    while queue or any(c is not None for c in current):
        for w in range(workers):
            if current[w] is None:
                if not queue:
                    continue
                i = current[w] = queue.pop(0)
                ind = Individual({"i": i}, LIMITS, generation=started[w], rank=w)
                ind.uid = i
                started[w] += 1
                surrogates[w].start_run(ind)
            i = current[w]
            assert i is not None
            loss = float(curves[i, ran[i]])
            ran[i] += 1
            stop = surrogates[w].cancel(loss)
            interim = None if share_at_end else surrogates[w].interim_data()
            if interim is not None:
                for other in surrogates:
                    if other is not surrogates[w]:
                        other.merge(interim)
            if not stop and ran[i] < epochs:
                continue
            if not stop:
                surrogates[w].update(loss)
            data = surrogates[w].data()
            for other in surrogates:
                if other is not surrogates[w]:
                    other.merge(data)
            current[w] = None
    return ran


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--configs", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=27)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--noise", type=float, default=0.01)
    parser.add_argument("--share-at-end", action="store_true", help="rung results only when a run ends")
    args = parser.parse_args()
    r_max = args.epochs
    methods: dict[str, Callable[[], Surrogate]] = {
        "none": NullSurrogate,
        "static (margin 0.8)": StaticSurrogate,
        "ASHA eta=2": lambda: SuccessiveHalving(1, 2, r_max),
        "ASHA eta=3": lambda: SuccessiveHalving(1, 3, r_max),
        "ASHA eta=4": lambda: SuccessiveHalving(1, 4, r_max),
    }
    s_max = SuccessiveHalving(1, 3, r_max).s_max
    methods[f"ASHA eta=3, {s_max + 1} Hyperband brackets"] = lambda: SuccessiveHalving(1, 3, r_max, s_max + 1)
    figures: dict[str, list[tuple[bool, bool, float, float]]] = {name: [] for name in methods}
    for seed in range(args.seeds):
        curves, final = make_curves(np.random.default_rng(seed), args.configs, r_max, args.noise)
        order = np.argsort(final)
        for name, factory in methods.items():
            ran = simulate(factory, curves, args.workers, args.share_at_end)
            full = ran == r_max
            regret = float(final[full].min() - final[order[0]]) if full.any() else math.inf
            figures[name].append(
                (bool(full[order[0]]), bool(full[order[:3]].any()), regret, ran.sum() / ran.size / r_max)
            )
    print(
        f"{args.seeds} seeds, {args.configs} configurations, R = {r_max} epochs, {args.workers} workers, "
        f"noise {args.noise}{', rung results shared when runs end' if args.share_at_end else ''}"
    )
    print("| method | best survives | a top-3 survives | mean regret | resource |")
    print("|---|---|---|---|---|")
    for name, rows in figures.items():
        best, top3, regret, resource = (np.array(column, dtype=float) for column in zip(*rows, strict=True))
        print(
            f"| {name} | {best.mean():.0%} | {top3.mean():.0%} | {regret.mean():.4f} "
            f"| {resource.mean():.1%} |"
        )


if __name__ == "__main__":
    main()
