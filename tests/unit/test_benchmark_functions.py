"""Benchmark functions and the tutorials' command line (propulate.utils.benchmark_functions)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from propulate.utils.benchmark_functions import get_function_search_space, parse_arguments

# name -> (dimensions, bounds per parameter)
SEARCH_SPACES = {
    "sphere": (2, [(-5.12, 5.12)] * 2),
    "rosenbrock": (2, [(-2.048, 2.048)] * 2),
    "step": (5, [(-5.12, 5.12)] * 5),
    "quartic": (30, [(-1.28, 1.28)] * 30),
    "rastrigin": (20, [(-5.12, 5.12)] * 20),
    "griewank": (10, [(-600.0, 600.0)] * 10),
    "schwefel": (10, [(-500.0, 500.0)] * 10),
    "bisphere": (30, [(-5.12, 5.12)] * 30),
    "birastrigin": (30, [(-5.12, 5.12)] * 30),
    "bukin": (2, [(-15.0, -5.0), (-3.0, 3.0)]),
    "eggcrate": (2, [(-5.0, 5.0)] * 2),
    "himmelblau": (2, [(-6.0, 6.0)] * 2),
    "keane": (2, [(0.0, 10.0)] * 2),
    "leon": (2, [(0.0, 10.0)] * 2),
}

# name -> (a global optimum as a vector, the minimum, absolute tolerance)
OPTIMA = {
    "sphere": ([0.0] * 2, 0.0, 1e-12),
    "rosenbrock": ([1.0] * 2, 0.0, 1e-12),
    "step": ([-5.12] * 5, -25.0, 0.0),
    "rastrigin": ([0.0] * 20, 0.0, 1e-12),
    "griewank": ([0.0] * 10, 0.0, 1e-12),
    "schwefel": ([420.9687] * 10, 0.0, 1e-3),
    "bisphere": ([2.5] * 30, 0.0, 1e-12),
    "birastrigin": ([2.5] * 30, 0.0, 1e-12),
    "bukin": ([-10.0, 1.0], 0.0, 1e-12),
    "eggcrate": ([0.0, 0.0], 0.0, 1e-12),
    "himmelblau": ([3.0, 2.0], 0.0, 1e-12),
    "keane": ([1.393249, 0.0], -0.673668, 1e-6),
    "leon": ([1.0, 1.0], 0.0, 1e-12),
}


def as_params(limits: dict[str, tuple[float, float]], vector: list[float]) -> dict[str, float]:
    return dict(zip(limits, vector, strict=True))


@pytest.mark.parametrize("name", list(SEARCH_SPACES))
def test_search_space_has_documented_dimension_and_bounds(name: str) -> None:
    function, limits = get_function_search_space(name)
    dimensions, bounds = SEARCH_SPACES[name]
    assert callable(function)
    assert len(limits) == dimensions
    assert list(limits.values()) == bounds
    for low, high in limits.values():
        assert type(low) is float and type(high) is float
        assert low < high


@pytest.mark.parametrize("name", list(SEARCH_SPACES))
def test_function_returns_python_float_inside_the_domain(name: str) -> None:
    function, limits = get_function_search_space(name)
    rng = np.random.default_rng(1)
    for _ in range(20):
        params = {key: float(rng.uniform(low, high)) for key, (low, high) in limits.items()}
        value = function(params)
        assert type(value) is float
        assert math.isfinite(value)


@pytest.mark.parametrize("name", list(OPTIMA))
def test_function_at_documented_optimum_gives_documented_minimum(name: str) -> None:
    function, limits = get_function_search_space(name)
    optimum, minimum, tolerance = OPTIMA[name]
    assert function(as_params(limits, optimum)) == pytest.approx(minimum, abs=tolerance)


@pytest.mark.parametrize("name", list(OPTIMA))
def test_documented_minimum_is_not_beaten_by_random_points(name: str) -> None:
    function, limits = get_function_search_space(name)
    _, minimum, tolerance = OPTIMA[name]
    rng = np.random.default_rng(2)
    for _ in range(200):
        params = {key: float(rng.uniform(low, high)) for key, (low, high) in limits.items()}
        assert function(params) >= minimum - tolerance


def test_himmelblau_has_four_global_minima() -> None:
    function, limits = get_function_search_space("himmelblau")
    for point in ([3.0, 2.0], [-2.805118, 3.131312], [-3.779310, -3.283186], [3.584428, -1.848126]):
        assert function(as_params(limits, point)) == pytest.approx(0.0, abs=1e-9)


def test_keane_is_symmetric_and_defined_at_origin() -> None:
    function, limits = get_function_search_space("keane")
    assert function(as_params(limits, [0.0, 1.393249])) == pytest.approx(-0.673668, abs=1e-6)
    assert function(as_params(limits, [0.0, 0.0])) == 0.0


def test_step_truncates_toward_zero() -> None:
    function, limits = get_function_search_space("step")
    assert function(as_params(limits, [-0.9, 0.9, -1.5, 1.5, 4.99])) == 0.0 + 0.0 - 1.0 + 1.0 + 4.0


def test_bisphere_second_funnel_bottoms_out_at_d_times_n() -> None:
    function, limits = get_function_search_space("bisphere")
    n = len(limits)
    s = 1.0 - 1.0 / (2.0 * math.sqrt(n + 20.0) - 8.2)
    mu2 = -math.sqrt((2.5**2 - 1.0) / s)
    assert function(as_params(limits, [mu2] * n)) == pytest.approx(1.0 * n)


def test_functions_read_values_in_order_whatever_the_names() -> None:
    function, _ = get_function_search_space("rosenbrock")
    assert function({"a": 1.0, "b": 1.0}) == 0.0
    assert function({"b": 0.0, "a": 0.0}) == 1.0


def test_quartic_is_noise_free_part_plus_standard_normal_noise() -> None:
    function, limits = get_function_search_space("quartic")
    point = np.linspace(-1.0, 1.0, len(limits))
    noise_free = float(np.sum(np.arange(1, point.size + 1) * point**4))
    expected_noise = np.random.default_rng(7).standard_normal()
    value = function(as_params(limits, point.tolist()), rng=np.random.default_rng(7))
    assert value == pytest.approx(noise_free + expected_noise)


def test_quartic_at_optimum_is_bounded_noise() -> None:
    function, limits = get_function_search_space("quartic")
    values = [function(as_params(limits, [0.0] * len(limits))) for _ in range(200)]
    assert all(abs(v) < 6.0 for v in values)
    assert len(set(values)) > 1  # noisy: repeated evaluations differ


def test_quartic_leaves_global_numpy_random_state_alone() -> None:
    function, limits = get_function_search_space("quartic")
    # The legacy global state is exactly what must stay untouched.
    before = np.random.get_state(legacy=False)  # noqa: NPY002
    for _ in range(10):
        function(as_params(limits, [0.5] * len(limits)))
    after = np.random.get_state(legacy=False)  # noqa: NPY002
    assert isinstance(before, dict) and isinstance(after, dict)
    assert np.array_equal(before["state"]["key"], after["state"]["key"])
    assert before["state"]["pos"] == after["state"]["pos"]
    assert (before["has_gauss"], before["gauss"]) == (after["has_gauss"], after["gauss"])


def test_limits_are_fresh_copies() -> None:
    _, limits = get_function_search_space("sphere")
    limits["x0"] = (0.0, 1.0)
    _, again = get_function_search_space("sphere")
    assert again["x0"] == (-5.12, 5.12)


@pytest.mark.parametrize("name", ["", "Sphere", "ackley", None])
def test_unknown_name_raises_value_error_listing_names(name: object) -> None:
    with pytest.raises(ValueError, match="name") as info:
        get_function_search_space(name)  # type: ignore[arg-type]
    for allowed in SEARCH_SPACES:
        assert allowed in str(info.value)


class FakeComm:
    """Just the communicator attributes parse_arguments reads."""

    def __init__(self, size: int, rank: int = 0) -> None:
        self.size = size
        self.rank = rank


def test_parse_arguments_defaults() -> None:
    config, hp_set = parse_arguments(FakeComm(3), args=[])  # type: ignore[arg-type]
    assert vars(config) == {
        "function": "sphere",
        "generations": 1000,
        "seed": 0,
        "verbosity": 1,
        "checkpoint": "./",
        "pop_size": 6,
        "crossover_probability": 0.7,
        "mutation_probability": 0.4,
        "random_init_probability": 0.1,
        "top_n": 1,
        "logging_interval": 10,
        "logging_level": logging.INFO,
        "num_islands": 2,
        "migration_probability": 0.9,
        "num_migrants": 1,
        "pollination": False,
        "variant": "Basic",
        "inertia": 0.729,
        "cognitive": 1.49445,
        "social": 1.49445,
        "clamping_factor": 0.6,
        "adapter": "basic",
        "ranks_per_worker": 2,
    }
    assert hp_set == {"inertia": False, "cognitive": False, "social": False}


def test_parse_arguments_default_communicator_is_comm_world() -> None:
    from mpi4py import MPI

    config, _ = parse_arguments(args=[])
    assert config.pop_size == 2 * MPI.COMM_WORLD.size


def test_parse_arguments_reads_options() -> None:
    config, _ = parse_arguments(
        FakeComm(1),  # type: ignore[arg-type]
        args=[
            "--function",
            "keane",
            "--generations",
            "-1",
            "--pop_size",
            "5",
            "--pollination",
            "--variant",
            "Canonical",
            "--adapter",
            "active",
            "--logging_level",
            "DEBUG",
            "--ranks_per_worker",
            "1",
        ],
    )
    assert config.function == "keane"
    assert config.generations == -1
    assert config.pop_size == 5
    assert config.pollination is True
    assert config.variant == "Canonical"
    assert config.adapter == "active"
    assert config.logging_level == logging.DEBUG
    assert config.ranks_per_worker == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--inertia", "0.729"], {"inertia": True, "cognitive": False, "social": False}),
        (["--cognitive", "2", "--social", "2"], {"inertia": False, "cognitive": True, "social": True}),
        (
            ["--inertia=0.5", "--cognitive=1", "--social=1"],
            {"inertia": True, "cognitive": True, "social": True},
        ),
        (["--seed", "4"], {"inertia": False, "cognitive": False, "social": False}),
    ],
)
def test_hp_set_marks_explicitly_given_options(args: list[str], expected: dict[str, bool]) -> None:
    config, hp_set = parse_arguments(FakeComm(1), args=args)  # type: ignore[arg-type]
    assert hp_set == expected
    if "--inertia=0.5" in args:
        assert config.inertia == 0.5


@pytest.mark.parametrize(
    "args",
    [
        ["--crossover_probability", "1.5"],
        ["--mutation_probability", "-0.1"],
        ["--random_init_probability", "nan"],
        ["--migration_probability", "2"],
        ["--generations", "-2"],
        ["--pop_size", "0"],
        ["--ranks_per_worker", "0"],
        ["--num_islands", "0"],
        ["--function", "ackley"],
        ["--variant", "basic"],
        ["--adapter", "Basic"],
        ["--logging_level", "LOUD"],
        ["--no_such_option"],
    ],
)
def test_parse_arguments_rejects_invalid_values(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_arguments(FakeComm(1), args=args)  # type: ignore[arg-type]
    assert info.value.code == 2
    # Named as --help shows it (with dashes), whichever spelling was typed.
    err = capsys.readouterr().err
    assert args[0].replace("_", "-") in err or args[0] in err


def test_parse_arguments_prints_errors_on_rank_zero_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_arguments(FakeComm(4, rank=1), args=["--pop_size", "0"])  # type: ignore[arg-type]
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
