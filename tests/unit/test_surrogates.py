"""Surrogates: contract tests run against every implementation, then model-specific behaviour.

The contract (SPEC §3): ``start_run`` before an evaluation, ``cancel`` after each interim loss, ``update``
after a run that was not cancelled, ``data`` after every run, ``merge`` on the island's other workers. Merging
commutes, and a fresh surrogate that merges every run's ``data()`` decides like the one that recorded them
(how surrogates are rebuilt on resume). Learning curves are synthetic exponential decays with seeded noise.
"""

from __future__ import annotations

import builtins
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from propulate import Individual
from propulate.surrogate import (
    DynamicSurrogate,
    LogLinearSurrogate,
    NullSurrogate,
    StaticSurrogate,
    Surrogate,
)

LIMITS: dict[str, tuple[Any, ...]] = {"lr": (0.0, 1.0), "act": ("relu", "tanh"), "layers": (1, 4)}
STEPS = 10

FACTORIES: dict[str, Callable[[], Surrogate]] = {
    "static": StaticSurrogate,
    "loglinear": LogLinearSurrogate,
    "dynamic": lambda: DynamicSurrogate(LIMITS, min_runs=3, max_runs=6),
}


def decay(asymptote: float, rng: np.random.Generator, steps: int = STEPS, noise: float = 0.01) -> list[float]:
    """A learning curve falling from 2 towards ``asymptote``."""
    k = np.arange(steps)
    return (asymptote + (2.0 - asymptote) * np.exp(-k / 2.0) + rng.normal(0.0, noise, steps)).tolist()


def individual(lr: float, generation: int = 0, rank: int = 0) -> Individual:
    return Individual({"lr": lr, "act": "relu", "layers": 2}, LIMITS, generation=generation, rank=rank)


def evaluate(surrogate: Surrogate, ind: Individual, curve: Sequence[float]) -> int | None:
    """Run one evaluation as the worker does; return the step it was cancelled at, or None."""
    surrogate.start_run(ind)
    for k, loss in enumerate(curve):
        if surrogate.cancel(loss):
            return k
    surrogate.update(curve[-1])
    return None


def probe(surrogate: Surrogate, ind: Individual, curve: Sequence[float]) -> int | None:
    """The step at which ``curve`` would be cancelled, without teaching the surrogate anything."""
    surrogate.start_run(ind)
    return next((k for k, loss in enumerate(curve) if surrogate.cancel(loss)), None)


def history(seed: int, n_runs: int = 10, generation: int = 0) -> list[tuple[Individual, list[float]]]:
    """Runs whose final loss grows with ``lr`` (0.1 + 0.8 lr), with lr in [0.1, 1]."""
    rng = np.random.default_rng(seed)
    runs = []
    for i, lr in enumerate(rng.uniform(0.1, 1.0, n_runs)):
        # Generations count up and the rank is the seed, so runs of different histories are distinct.
        runs.append((individual(float(lr), generation + i, seed), decay(0.1 + 0.8 * lr, rng)))
    return runs


def trained(factory: Callable[[], Surrogate], seed: int = 0) -> tuple[Surrogate, list[Any]]:
    """A surrogate that evaluated a history of runs, and the ``data()`` of each run."""
    surrogate = factory()
    records = []
    for ind, curve in history(seed):
        evaluate(surrogate, ind, curve)
        records.append(surrogate.data())
    return surrogate, records


PROBES = [(0.0, 0.02), (0.3, 0.4), (0.9, 0.95), (1.0, 1.5)]


def decisions(surrogate: Surrogate, seed: int = 99) -> list[int | None]:
    rng = np.random.default_rng(seed)
    return [probe(surrogate, individual(lr), decay(asym, rng)) for lr, asym in PROBES]


# ----------------------------------------------------------------------------------------- contract


@pytest.fixture(params=list(FACTORIES))
def factory(request: pytest.FixtureRequest) -> Callable[[], Surrogate]:
    return FACTORIES[request.param]


def test_clearly_worse_curve_is_cancelled_and_better_one_is_not(factory: Callable[[], Surrogate]) -> None:
    surrogate, _ = trained(factory)
    rng = np.random.default_rng(1)
    assert probe(surrogate, individual(1.0), decay(1.5, rng)) is not None
    assert probe(surrogate, individual(0.0), decay(0.02, rng)) is None


def test_nothing_is_cancelled_before_a_run_completed(factory: Callable[[], Surrogate]) -> None:
    surrogate = factory()
    rng = np.random.default_rng(2)
    assert probe(surrogate, individual(1.0), decay(5.0, rng)) is None
    assert surrogate.data()["loss"] is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_interim_loss_cancels(factory: Callable[[], Surrogate], bad: float) -> None:
    for surrogate in (factory(), trained(factory)[0]):
        assert probe(surrogate, individual(0.0), [1.0, 0.5, bad, 0.1]) == 2
        assert surrogate.data()["pruned"] is True


def test_merge_commutes(factory: Callable[[], Surrogate]) -> None:
    _, mine = trained(factory, seed=3)
    _, theirs = trained(factory, seed=4)
    records = mine + theirs
    forward, backward = factory(), factory()
    for data in records:
        forward.merge(data)
    for data in reversed(records):
        backward.merge(data)
    assert decisions(forward) == decisions(backward)
    assert forward.data() == backward.data()
    assert any(step is not None for step in decisions(forward))
    if isinstance(forward, StaticSurrogate):
        assert isinstance(backward, StaticSurrogate)
        assert forward.baseline == backward.baseline


def test_merge_is_idempotent(factory: Callable[[], Surrogate]) -> None:
    _, records = trained(factory, seed=5)
    once, twice = factory(), factory()
    for data in records:
        once.merge(data)
        twice.merge(data)
        twice.merge(data)
    assert decisions(once) == decisions(twice)


def test_rebuild_from_every_runs_data_decides_alike(factory: Callable[[], Surrogate]) -> None:
    """A worker evaluates and merges as in a run; a fresh surrogate rebuilt from all records agrees."""
    worker = factory()
    records = []
    others = iter(trained(factory, seed=6)[1])
    rng = np.random.default_rng(7)
    for i, (ind, curve) in enumerate(history(8, n_runs=12, generation=100)):
        # Some runs are clearly bad, so that the worker prunes some of its own.
        evaluate(worker, ind, decay(2.5, rng) if i % 3 == 2 else curve)
        records.append(worker.data())
        data = next(others, None)
        worker.merge(data)
        records.append(data)
    assert any(data["pruned"] for data in records if data is not None)
    rebuilt = factory()
    for i in np.random.default_rng(9).permutation(len(records)):
        rebuilt.merge(records[i])
    assert decisions(rebuilt) == decisions(worker)


def test_data_survives_a_strict_json_round_trip(factory: Callable[[], Surrogate]) -> None:
    _, records = trained(factory, seed=10)
    pruned = factory()
    probe(pruned, individual(0.5), [1.0, math.nan])
    records.append(pruned.data())
    direct, via_json = factory(), factory()
    for data in records:
        direct.merge(data)
        via_json.merge(json.loads(json.dumps(data, allow_nan=False)))
    assert decisions(direct) == decisions(via_json)


def test_data_describes_only_the_latest_run(factory: Callable[[], Surrogate]) -> None:
    _, records = trained(factory, seed=11)
    assert all(len(data["curve"]) <= STEPS for data in records)
    assert len(json.dumps(records[-1])) < 2000


def test_merge_ignores_none(factory: Callable[[], Surrogate]) -> None:
    surrogate, _ = trained(factory, seed=12)
    before = decisions(surrogate)
    surrogate.merge(None)
    assert decisions(surrogate) == before


def test_merge_rejects_foreign_data(factory: Callable[[], Surrogate]) -> None:
    with pytest.raises(ValueError, match="data"):
        factory().merge({"something": "else"})


def test_pruned_runs_teach_nothing(factory: Callable[[], Surrogate]) -> None:
    """A pruned run's interim losses can be lower than any final loss; they must not count as one."""
    surrogate, _ = trained(factory, seed=13)
    before = decisions(surrogate)
    reference = factory()
    probe(reference, individual(0.0, generation=500), [0.001, 0.0005, math.nan])
    surrogate.merge(reference.data())
    assert decisions(surrogate) == before


# ------------------------------------------------------------------------------------- base and null


def test_base_class_requires_only_cancel() -> None:
    with pytest.raises(TypeError):
        Surrogate()  # type: ignore[abstract]

    class Never(Surrogate):
        def cancel(self, loss: float) -> bool:
            return False

    never = Never()
    never.start_run(individual(0.5))
    never.update(1.0)
    never.merge({"anything": 1})
    assert never.data() is None


def test_null_surrogate_never_cancels() -> None:
    null = NullSurrogate()
    rng = np.random.default_rng(14)
    for lr, asym in [(0.0, 0.1), (1.0, 5.0)]:
        assert evaluate(null, individual(lr), decay(asym, rng)) is None
    assert probe(null, individual(1.0), [1.0, math.nan, math.inf, 1e30]) is None
    assert null.data() is None
    null.merge(json.loads(json.dumps(null.data())))


# ------------------------------------------------------------------------------------------ static


def test_static_margin_rule_is_relative_to_the_baseline() -> None:
    surrogate = StaticSurrogate(margin=0.8)
    evaluate(surrogate, individual(0.5), [1.0, -1.0, 0.0])
    # Tolerance (1 / 0.8 - 1) * |b_k| = 25 % of the baseline's magnitude, also for negative losses.
    assert probe(surrogate, individual(0.5), [1.25]) is None
    assert probe(surrogate, individual(0.5), [1.26]) == 0
    assert probe(surrogate, individual(0.5), [1.0, -0.76]) is None
    assert probe(surrogate, individual(0.5), [1.0, -0.74]) == 1
    assert probe(surrogate, individual(0.5), [1.0, -1.0, 1e-9]) == 2


def test_static_margin_one_cancels_anything_worse() -> None:
    surrogate = StaticSurrogate(margin=1.0)
    evaluate(surrogate, individual(0.5), [1.0, 0.5])
    assert probe(surrogate, individual(0.5), [1.0, 0.5]) is None
    assert probe(surrogate, individual(0.5), [1.0, 0.5 + 1e-12]) == 1


@pytest.mark.parametrize("margin", [0, -0.5, 1.01, math.nan, math.inf, True, "0.8", None])
def test_static_margin_outside_zero_one_is_rejected(margin: Any) -> None:
    with pytest.raises(ValueError, match=r"margin.*\(0, 1\]"):
        StaticSurrogate(margin=margin)


def test_static_merge_keeps_the_better_baseline() -> None:
    """Propulate 1.2.2 kept the worse baseline on merge (SPEC §4 item 6)."""
    good, bad = StaticSurrogate(), StaticSurrogate()
    evaluate(good, individual(0.1), [2.0, 1.0, 0.2])
    evaluate(bad, individual(0.9), [2.0, 1.5, 0.9])
    good_data, bad_data = good.data(), bad.data()
    good.merge(bad_data)
    bad.merge(good_data)
    assert good.baseline == bad.baseline == [2.0, 1.0, 0.2]
    # The worse run, evaluated locally after the better one was merged, does not replace it either.
    evaluate(bad, individual(0.9), [2.0, 1.5, 1.9])
    assert bad.baseline == [2.0, 1.0, 0.2]


def test_static_baseline_is_judged_by_the_final_loss() -> None:
    surrogate = StaticSurrogate()
    evaluate(surrogate, individual(0.1), [1.0, 0.5, 0.4])
    # Better early on, worse at the end: not the better run.
    surrogate.merge({"curve": [0.1, 0.1, 0.45], "loss": 0.45, "pruned": False})
    assert surrogate.baseline == [1.0, 0.5, 0.4]


def test_static_equal_final_losses_give_one_baseline_in_any_order() -> None:
    a = {"curve": [2.0, 1.0, 0.3], "loss": 0.3, "pruned": False}
    b = {"curve": [1.5, 1.2, 0.3], "loss": 0.3, "pruned": False}
    ab, ba = StaticSurrogate(), StaticSurrogate()
    ab.merge(a)
    ab.merge(b)
    ba.merge(b)
    ba.merge(a)
    assert ab.baseline == ba.baseline


def test_static_pruned_run_never_becomes_the_baseline() -> None:
    """Propulate 1.2.2 could adopt a pruned run as the baseline (SPEC §4 item 6)."""
    surrogate = StaticSurrogate()
    evaluate(surrogate, individual(0.5), [2.0, 1.0, 0.5])
    # A run pruned at step 1 whose last interim loss (0.4) is below the baseline's final loss (0.5).
    assert probe(surrogate, individual(0.9), [2.0, 2.6, 0.1]) == 1
    pruned = surrogate.data()
    assert pruned == {"curve": [2.0, 2.6], "loss": None, "pruned": True}
    pruned["curve"] = [2.0, 0.4]
    surrogate.merge(pruned)
    assert surrogate.baseline == [2.0, 1.0, 0.5]
    # Without any baseline, a pruned run's record does not become one either (and neither does a
    # cancelled run followed by a stray update()).
    fresh = StaticSurrogate()
    fresh.merge(pruned)
    assert probe(fresh, individual(0.5), [0.1, math.nan]) == 1
    fresh.update(0.1)
    assert fresh.baseline == []
    assert probe(fresh, individual(0.5), [5.0, 5.0, 5.0]) is None


def test_static_runs_longer_than_the_baseline_compare_with_its_last_value() -> None:
    surrogate = StaticSurrogate(margin=0.8)
    evaluate(surrogate, individual(0.5), [2.0, 1.0, 0.4])
    assert probe(surrogate, individual(0.5), [2.0, 1.0, 0.4, 0.45, 0.5, 0.5]) is None
    assert probe(surrogate, individual(0.5), [2.0, 1.0, 0.4, 0.45, 0.5, 0.51]) == 5
    # A longer completed run with a better final loss becomes the baseline, all of its steps included.
    evaluate(surrogate, individual(0.5), [2.0, 1.0, 0.4, 0.3, 0.2])
    assert surrogate.baseline == [2.0, 1.0, 0.4, 0.3, 0.2]


def test_static_runs_without_interim_losses_are_not_a_baseline() -> None:
    surrogate = StaticSurrogate()
    surrogate.start_run(individual(0.5))
    surrogate.update(0.1)
    assert surrogate.baseline == []


# --------------------------------------------------------------------------------------- log-linear


def test_loglinear_extrapolates_to_the_longest_completed_curve() -> None:
    surrogate = LogLinearSurrogate(margin=1.0, min_steps=3)
    evaluate(surrogate, individual(0.5), [3.0, 2.0, 1.5, 1.2, 1.1, 1.0, 0.9, 0.85, 0.8, 0.5])
    # y = 2 - 0.5 log(t + 1) predicts 2 - 0.5 log(10) = 0.849 at the horizon's last step (t = 9).
    exact = [2.0 - 0.5 * math.log(t + 1) for t in range(3)]
    surrogate.start_run(individual(0.5))
    for loss in exact:
        surrogate.cancel(loss)
    assert surrogate.predict() == pytest.approx(2.0 - 0.5 * math.log(10))
    assert probe(surrogate, individual(0.5), exact) == 2
    assert probe(surrogate, individual(0.5), [2.0 - 1.0 * math.log(t + 1) for t in range(3)]) is None


def test_loglinear_does_not_extrapolate_a_rising_curve_upwards() -> None:
    surrogate = LogLinearSurrogate()
    evaluate(surrogate, individual(0.5), [2.0] * 20 + [1.0])
    surrogate.start_run(individual(0.5))
    for loss in [0.5, 0.6, 0.7]:
        surrogate.cancel(loss)
    fitted_now = surrogate.predict()
    assert 0.6 < fitted_now < 0.7


def test_loglinear_waits_for_min_steps() -> None:
    surrogate = LogLinearSurrogate(min_steps=4)
    evaluate(surrogate, individual(0.5), [2.0, 1.0, 0.5, 0.1])
    assert probe(surrogate, individual(0.5), [9.0, 9.0, 9.0, 9.0]) == 3


@pytest.mark.parametrize(("kwargs", "name"), [({"margin": 0.0}, "margin"), ({"min_steps": 1}, "min_steps")])
def test_loglinear_arguments_are_validated(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        LogLinearSurrogate(**kwargs)


# ------------------------------------------------------------------------------------------ dynamic


def test_dynamic_without_enough_completed_runs_never_cancels() -> None:
    surrogate = DynamicSurrogate(LIMITS, min_runs=5)
    for ind, curve in history(15, n_runs=4):
        evaluate(surrogate, ind, curve)
    rng = np.random.default_rng(16)
    assert probe(surrogate, individual(1.0), decay(50.0, rng)) is None
    evaluate(surrogate, individual(0.5, generation=99), decay(0.5, rng))
    assert probe(surrogate, individual(1.0), decay(50.0, rng)) is not None


def test_dynamic_training_set_is_bounded_and_keeps_the_best() -> None:
    surrogate = DynamicSurrogate(LIMITS, min_runs=2, max_runs=4)
    runs = history(17, n_runs=20)
    for ind, curve in runs:
        surrogate.merge(
            {
                "curve": curve,
                "loss": curve[-1],
                "pruned": False,
                "position": ind.position.tolist(),
                "generation": ind.generation,
                "rank": ind.rank,
            }
        )
    kept = surrogate._kept
    assert len(kept) == 4
    by_loss = sorted(runs, key=lambda run: run[1][-1])
    assert sorted(entry[4] for entry in kept)[:2] == [by_loss[0][1][-1], by_loss[1][1][-1]]
    # The other half are the most recent runs (highest generations) that are not among the best two.
    best_two = {by_loss[0][0].generation, by_loss[1][0].generation}
    recent = [g for g in range(19, -1, -1) if g not in best_two][:2]
    assert {entry[0] for entry in kept} == best_two | set(recent)


def test_dynamic_fits_lazily() -> None:
    surrogate = DynamicSurrogate(LIMITS, min_runs=2)
    fits: list[int] = []
    fit = surrogate._fit_regressor

    def counted(features: np.ndarray, targets: np.ndarray) -> Any:
        fits.append(len(features))
        return fit(features, targets)

    surrogate._fit_regressor = counted
    _, records = trained(lambda: DynamicSurrogate(LIMITS), seed=18)
    for data in records:
        surrogate.merge(data)
    assert fits == []
    rng = np.random.default_rng(19)
    decisions_now = [probe(surrogate, individual(lr), decay(0.5, rng)) for lr in (0.2, 0.8)]
    assert len(fits) == 1
    assert fits[0] <= 10 * surrogate.steps_per_run
    assert len(decisions_now) == 2


def test_dynamic_handles_fixed_ranges_and_checks_the_individual() -> None:
    limits = {"x": (0.0, 1.0), "fixed": (7, 7)}
    surrogate = DynamicSurrogate(limits, min_runs=1)
    evaluate(surrogate, Individual({"x": 0.5, "fixed": 7}, limits), [1.0, 0.5])
    surrogate.start_run(Individual({"x": 0.4, "fixed": 7}, limits))
    mean, std = surrogate.predict(1, 0.5)
    assert math.isfinite(mean) and math.isfinite(std)
    with pytest.raises(ValueError, match="ind"):
        surrogate.start_run(individual(0.5))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"min_runs": 0}, "min_runs"),
        ({"min_runs": 40, "max_runs": 32}, "min_runs"),
        ({"max_runs": 0}, "max_runs"),
        ({"steps_per_run": 0}, "steps_per_run"),
        ({"kappa": -1.0}, "kappa"),
        ({"kappa": math.nan}, "kappa"),
    ],
)
def test_dynamic_arguments_are_validated(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        DynamicSurrogate(LIMITS, **kwargs)


def test_dynamic_without_scikit_learn_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_sklearn(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("sklearn"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    with pytest.raises(ImportError, match=r'pip install "propulate\[surrogate\]"'):
        DynamicSurrogate(LIMITS)
