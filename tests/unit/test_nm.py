"""ParallelNelderMead: textbook moves, bounds, distinct proposals per worker, state and convergence."""

from __future__ import annotations

import random

import numpy as np
import pytest

from propulate.propagators.nm import (
    ParallelNelderMead,
    centroid,
    contract_inside,
    contract_outside,
    expand,
    reflect,
    shrink,
)
from propulate.utils.benchmark_functions import get_function_search_space

SIMPLEX = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])  # best first, vertex 2 the worst


def test_textbook_moves():
    c = centroid(SIMPLEX, 2)
    assert np.allclose(c, [0.5, 0.0])
    x_r = reflect(c, SIMPLEX[2], 1.0)
    assert np.allclose(x_r, [1.0, -2.0])  # c + alpha (c - x_worst)
    assert np.allclose(expand(c, x_r, 2.0), [1.5, -4.0])  # c + gamma (x_r - c)
    x_c = contract_outside(c, x_r, 0.5)
    x_cc = contract_inside(c, SIMPLEX[2], 0.5)
    assert np.allclose(x_c, [0.75, -1.0])  # c + rho (x_r - c)
    assert np.allclose(x_cc, [0.25, 1.0])  # c - rho (c - x_worst)
    assert not np.allclose(x_c, x_cc)


def test_shrink_moves_every_vertex_towards_the_best():
    shrunk = shrink(SIMPLEX, 0.5)
    assert np.allclose(shrunk, [[0.0, 0.0], [0.5, 0.0], [0.0, 1.0]])
    before = np.linalg.norm(SIMPLEX[1:] - SIMPLEX[0], axis=1)
    after = np.linalg.norm(shrunk[1:] - SIMPLEX[0], axis=1)
    assert np.all(after < before)
    assert np.array_equal(shrunk[0], SIMPLEX[0])


def test_rejects_non_float_limits_and_bad_coefficients():
    with pytest.raises(ValueError, match="limits"):
        ParallelNelderMead({"x": (0.0, 1.0), "n": (1, 5)}, random.Random(0))
    with pytest.raises(ValueError, match="rho"):
        ParallelNelderMead({"x": (0.0, 1.0)}, random.Random(0), rho=1.5)
    with pytest.raises(ValueError, match="start"):
        ParallelNelderMead({"x": (0.0, 1.0)}, random.Random(0), start=[2.0])


def run(fn, limits, generations, workers=1, start=None, check=None, make=ParallelNelderMead):
    """Synchronous rounds of ``workers`` propagators on one shared population."""
    props = []
    for rank in range(workers):
        prop = make(limits, random.Random(rank), start=start)
        prop.bind(rank)
        props.append(prop)
    population = []
    for _ in range(generations):
        batch = []
        for prop in props:
            given = list(population)
            snapshot = [ind.position.copy() for ind in given]
            child = prop(given)
            assert len(child) == 1 and child[0] not in given
            assert all(np.array_equal(a, ind.position) for a, ind in zip(snapshot, given, strict=True))
            batch.append(child[0])
        if check is not None:
            check(batch)
        for ind in batch:
            ind.loss = fn(ind.params())
            population.append(ind)
    return population


def test_offspring_inside_limits_and_distinct_per_rank():
    fn, limits = get_function_search_space("rosenbrock")
    lower, upper = np.array([-2.048] * 2), np.array([2.048] * 2)

    def check(batch):
        positions = [ind.position for ind in batch]
        for x in positions:
            assert np.all(x >= lower) and np.all(x <= upper)

    run(fn, limits, 60, workers=4, start={"x0": 2.0, "x1": -2.0}, check=check)


def test_ranks_propose_different_points_on_the_same_population():
    fn, limits = get_function_search_space("rosenbrock")
    for generations in (1, 2):  # the initial design (moves cut by the boundary may coincide)
        population = run(fn, limits, generations, start=[-1.2, 1.0])
        points = []
        for rank in range(4):
            prop = ParallelNelderMead(limits, random.Random(0), start=[-1.2, 1.0])
            prop.bind(rank)
            points.append(prop(population)[0].position.tobytes())
        assert len(set(points)) == 4


def test_state_round_trip():
    fn, limits = get_function_search_space("rosenbrock")
    population = run(fn, limits, 7, start=[1.5, 1.5])
    a = ParallelNelderMead(limits, random.Random(0), start=[1.5, 1.5])
    a.bind(1)
    for _ in range(5):
        child = a(population)[0]
        child.loss = fn(child.params())
        population.append(child)
    b = ParallelNelderMead(limits, random.Random(0), start=[1.5, 1.5])
    b.bind(1)
    b.load_state_dict(a.state_dict())
    assert np.array_equal(a(population)[0].position, b(population)[0].position)


@pytest.mark.parametrize("name", ["sphere", "rosenbrock"])
@pytest.mark.parametrize("workers", [1, 4])
def test_converges(name, workers):
    fn, limits = get_function_search_space(name)
    start = {"sphere": [3.0, -4.0], "rosenbrock": [-1.2, 1.0]}[name]
    population = run(fn, limits, 300, workers=workers, start=start)
    assert min(ind.loss for ind in population) < 1e-6


def test_adaptive_coefficients():
    prop = ParallelNelderMead.adaptive({f"x{i}": (-1.0, 1.0) for i in range(10)}, random.Random(0))
    assert (prop.gamma, prop.rho, prop.sigma) == pytest.approx((1.2, 0.7, 0.9))
