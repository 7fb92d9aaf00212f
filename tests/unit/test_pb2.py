"""PB2: population-based training whose explore step is a GP-UCB bandit (propulate.pbt.pb2), one process."""

from __future__ import annotations

import math
import random
import sys

import numpy as np
import pytest

from propulate import Individual, Status
from propulate.parameters import Categorical, Float, Integer
from propulate.pbt import PB2, explore
from propulate.pbt.pb2 import beta
from propulate.space import SearchSpace

pytest.importorskip("sklearn")

LIMITS = {"h": (0.0, 1.0)}
OPTIMUM = 0.7


def interval(
    limits, uid: int, member: int, index: int, loss: float, params: dict, parent: int, step: int = 2
) -> Individual:
    """One completed interval of ``member``, ending at step ``(index + 1) * step``."""
    ind = Individual(params, limits)
    ind.uid, ind.loss, ind.status = uid, loss, Status.COMPLETED
    until = (index + 1) * step
    ind["_member"], ind["_interval"], ind["_start"], ind["_until"] = member, index, until - step, until
    ind["_parent"], ind["_donor"], ind["_previous"] = parent, -1, parent
    ind.steps = until
    return ind


def planted(
    seed: int, members: int = 4, rounds: int = 5, limits=LIMITS, draw=None, signal: str = "h"
) -> list[Individual]:
    """A population whose members improve most per interval where ``h`` is near 0.7.

    Each member trains ``rounds`` intervals with a random configuration each (``draw``, else a uniform
    ``h``); an interval improves the loss by ``1 - 4 (x - 0.7)²`` plus a little noise, ``x`` the parameter
    named ``signal``.
    """
    rng = random.Random(seed)
    inds: list[Individual] = []
    uid = 0
    for member in range(members):
        loss, parent = 10.0, -1
        for index in range(rounds):
            params = draw(rng) if draw else {"h": rng.random()}
            loss -= 1.0 - 4.0 * (params[signal] - OPTIMUM) ** 2 + 0.01 * rng.gauss(0.0, 1.0)
            inds.append(interval(limits, uid, member, index, loss, params, parent))
            parent, uid = uid, uid + 1
    return inds


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"kappa": -1.0}, "kappa"),
        ({"kappa": math.nan}, "kappa"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"max_data": 1}, "max_data"),
        ({"candidates": 0}, "candidates"),
        ({"perturbation_interval": 0}, "perturbation_interval"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        PB2(LIMITS, **kwargs)


def test_without_scikit_learn_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(ImportError, match=r"propulate\[surrogate\]"):
        PB2(LIMITS)


def test_the_beta_schedule_grows_with_the_interval_and_the_dimensions():
    assert beta(1, 1, 0.1) == pytest.approx(2 * math.log(math.pi**2 / 0.3))
    assert beta(10, 1, 0.1) < beta(20, 1, 0.1) and beta(10, 1, 0.1) < beta(10, 3, 0.1)
    assert beta(0, 1, 0.1) == beta(1, 1, 0.1)


def test_the_bandit_lands_near_the_planted_optimum_far_more_often_than_perturbation():
    """Over 12 population draws, GP-UCB's choice from a donor at h = 0.2 is near 0.7; PBT's rarely is."""
    near_pb2 = near_pbt = 0
    space = SearchSpace.of(LIMITS)
    for seed in range(12):
        inds = planted(seed)
        source = planted(seed)[-1]  # a copy of the latest interval, moved away from the optimum
        source["h"] = 0.2
        pb2 = PB2(LIMITS, random.Random(seed))
        near_pb2 += abs(pb2.explored(source, inds, 5)["h"] - OPTIMUM) < 0.1
        near_pbt += abs(explore(source.params(), space, random.Random(seed))["h"] - OPTIMUM) < 0.1
    # Perturbation reaches [0.6, 0.8] only by resampling (probability 0.25 * 0.2 = 0.05 per seed).
    assert near_pb2 >= 10 and near_pbt <= 3, (near_pb2, near_pbt)


def test_explored_values_stay_in_the_space_and_on_their_grid():
    limits = {
        "lr": Float(1e-4, 1e-1, log=True),
        "width": Integer(8, 64, step=8),
        "layers": (1, 5),
        "drop": Float(0.0, 0.5, step=0.1),
    }
    space = SearchSpace.of(limits)

    def draw(rng: random.Random) -> dict:
        return {p.name: space.sample_value(p, rng) for p in space.parameters}

    for seed in range(3):
        inds = planted(seed, limits=limits, draw=draw, signal="drop")
        pb2 = PB2(limits, random.Random(seed), kappa=3.0)
        for _ in range(3):
            params = pb2.explored(inds[-1], inds, 5)
            space.check_inside(space.encode(params))
            assert 1e-4 <= params["lr"] <= 1e-1
            assert params["width"] in range(8, 65, 8) and isinstance(params["width"], int)
            assert params["layers"] in range(1, 6) and isinstance(params["layers"], int)
            assert params["drop"] in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)


def test_with_few_data_it_explores_as_population_based_training():
    inds = planted(0, members=1, rounds=2)  # one interval with a known parent: fewer than min_data = 2
    pb2 = PB2(LIMITS, random.Random(5))
    assert pb2.min_data == 2 and pb2.data(inds, 6) is None
    expected = explore(inds[-1].params(), pb2.space, random.Random(5))
    assert pb2.explored(inds[-1], inds, 2) == expected


def test_categorical_parameters_are_explored_as_population_based_training_explores_them():
    limits = {"h": (0.0, 1.0), "act": Categorical(("relu", "tanh", "gelu"))}
    inds = planted(1, limits=limits, draw=lambda rng: {"h": rng.random(), "act": "tanh"})
    for seed in range(5):
        params = PB2(limits, random.Random(seed), resample_probability=0.0).explored(inds[-1], inds, 5)
        assert params["act"] in ("relu", "gelu")  # a neighbour of "tanh"
        assert abs(params["h"] - OPTIMUM) < 0.15


def test_the_choice_is_deterministic_for_a_seed():
    inds = planted(2)
    first = [PB2(LIMITS, random.Random(7)).explored(inds[-1], inds, 5) for _ in range(2)]
    assert first[0] == first[1]


def test_a_pending_interval_pushes_the_choice_away_from_it():
    """With a wide bound the choice is the least known place; told that a peer trains there, another one."""
    inds = planted(3, draw=lambda rng: {"h": 0.3 * rng.random()})  # data only in [0, 0.3]
    pb2 = PB2(LIMITS, random.Random(0), kappa=5.0)
    alone = pb2.explored(inds[-1], inds, 5)["h"]
    assert alone > 0.6
    pb2.pending(SearchSpace.of(LIMITS).encode({"h": alone})[np.newaxis, :])
    told = pb2.explored(inds[-1], inds, 5)["h"]
    assert abs(told - alone) > 0.15, (alone, told)


def test_a_member_in_the_bottom_exploits_and_the_bandit_chooses_its_configuration():
    inds = planted(4)
    pb2 = PB2(LIMITS, random.Random(0), perturbation_interval=2)
    pb2.bind(0, 4)
    worst = max(range(4), key=lambda m: min(i.loss for i in inds if i["_member"] == m))
    pb2.bind(worst, 4)
    (ind,) = pb2(inds)
    assert ind["_donor"] not in (-1, worst) and ind["_parent"] >= 0
    assert abs(ind["h"] - OPTIMUM) < 0.15
    assert "PB2(" in repr(pb2)
