"""Benchmark functions for testing optimizers, and the tutorials' command line.

Every benchmark function takes a mapping of parameter values (a ``dict`` or a :class:`propulate.Individual`)
and returns the loss as a Python ``float``. Values are read in the mapping's order, which is the key order of
the limits returned by :func:`get_function_search_space`, so any parameter names work. All functions are to
be minimized.

The functions follow the definitions collected in

- K. A. De Jong (1975): An analysis of the behavior of a class of genetic adaptive systems. PhD thesis,
  University of Michigan (sphere, rosenbrock, step, quartic: De Jong's F1 to F4);
- M. Jamil & X.-S. Yang (2013): A literature survey of benchmark functions for global optimization problems.
  International Journal of Mathematical Modelling and Numerical Optimisation 4(2), 150-194
  (rastrigin, griewank, schwefel, bukin, eggcrate, himmelblau, keane, leon);
- M. Lunacek, D. Whitley & A. Sutton (2008): The impact of global structure on search. PPSN X, LNCS 5199,
  498-507 (bisphere, birastrigin).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np
from mpi4py import MPI

__all__ = [
    "birastrigin",
    "bisphere",
    "bukin",
    "eggcrate",
    "get_function_search_space",
    "griewank",
    "himmelblau",
    "keane",
    "leon",
    "parse_arguments",
    "quartic",
    "rastrigin",
    "rosenbrock",
    "schwefel",
    "sphere",
    "step",
]

Params = Mapping[str, Any]

# Owned noise source of the quartic function; the global ``np.random`` state is never touched.
_QUARTIC_NOISE = np.random.default_rng()


def _vector(params: Params) -> np.ndarray:
    """Return the parameter values as a float array, in the mapping's order."""
    return np.fromiter(params.values(), dtype=float)


def _pair(params: Params) -> tuple[float, float]:
    """Return the two values of a two-dimensional function's parameters."""
    x = _vector(params)
    if x.size != 2:
        raise ValueError(f"params must hold exactly 2 values for this function, got {x.size}")
    return float(x[0]), float(x[1])


def sphere(params: Params) -> float:
    r"""Sphere function (De Jong's F1): continuous, convex, separable, unimodal.

    .. math:: f(x) = \sum_{i=1}^n x_i^2

    Domain :math:`x_i \in [-5.12, 5.12]` (2-D in the search space). Global minimum :math:`f = 0` at
    :math:`x = 0`. Source: De Jong (1975).

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x_1, \dots, x_n`.

    Returns
    -------
    float
        The function value.
    """
    x = _vector(params)
    return float(np.sum(x**2))


def rosenbrock(params: Params) -> float:
    r"""Rosenbrock's valley (De Jong's F2): continuous, non-convex, unimodal, with a narrow curved valley.

    .. math:: f(x) = \sum_{i=1}^{n-1} \left[100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2\right]

    Domain :math:`x_i \in [-2.048, 2.048]` (2-D in the search space). Global minimum :math:`f = 0` at
    :math:`x = (1, \dots, 1)`. Source: H. H. Rosenbrock (1960), The Computer Journal 3(3), 175-184;
    De Jong (1975).

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x_1, \dots, x_n`, :math:`n \geq 2`.

    Returns
    -------
    float
        The function value.
    """
    x = _vector(params)
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))


def step(params: Params) -> float:
    r"""Step function (De Jong's F3): discontinuous, piecewise constant, separable.

    .. math:: f(x) = \sum_{i=1}^n \operatorname{trunc}(x_i)

    where :math:`\operatorname{trunc}` rounds toward zero (Python's ``int``), as in the Propulate paper.
    Domain :math:`x_i \in [-5.12, 5.12]` (5-D in the search space). Global minimum :math:`f = -5n`
    (:math:`-25` in 5-D), attained on the whole plateau :math:`x_i \in [-5.12, -5]`. Source: De Jong (1975).

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x_1, \dots, x_n`.

    Returns
    -------
    float
        The function value.
    """
    x = _vector(params)
    return float(np.sum(np.trunc(x)))


def quartic(params: Params, rng: np.random.Generator | None = None) -> float:
    r"""Quartic function with noise (De Jong's F4): continuous, convex, separable, **noisy**.

    .. math:: f(x) = \sum_{i=1}^n i \, x_i^4 + \varepsilon, \qquad \varepsilon \sim \mathcal{N}(0, 1)

    Each call draws fresh noise, so two evaluations of the same point differ. Domain
    :math:`x_i \in [-1.28, 1.28]` (30-D in the search space). The noise-free part has its global minimum
    :math:`0` at :math:`x = 0`; the returned value there is :math:`\varepsilon`. Source: De Jong (1975).

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x_1, \dots, x_n`.
    rng : numpy.random.Generator, optional
        Source of the noise. By default a generator owned by this module; pass your own for reproducible
        values. The global ``np.random`` state is never used.

    Returns
    -------
    float
        The function value including noise.
    """
    x = _vector(params)
    noise = (_QUARTIC_NOISE if rng is None else rng).standard_normal()
    return float(np.sum(np.arange(1, x.size + 1) * x**4) + noise)


def rastrigin(params: Params) -> float:
    r"""Rastrigin function: continuous, separable, highly multimodal with a regular lattice of minima.

    .. math:: f(x) = 10 n + \sum_{i=1}^n \left[x_i^2 - 10 \cos(2 \pi x_i)\right]

    Domain :math:`x_i \in [-5.12, 5.12]` (20-D in the search space). Global minimum :math:`f = 0` at
    :math:`x = 0`. Source: Jamil & Yang (2013), function 102.

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x_1, \dots, x_n`.

    Returns
    -------
    float
        The function value.
    """
    x = _vector(params)
    return float(10.0 * x.size + np.sum(x**2 - 10.0 * np.cos(2.0 * np.pi * x)))


def griewank(params: Params) -> float:
    r"""Griewank function: continuous, non-separable, multimodal with many regularly spaced local minima.

    .. math::

        f(x) = 1 + \frac{1}{4000} \sum_{i=1}^n x_i^2 - \prod_{i=1}^n \cos\left(\frac{x_i}{\sqrt{i}}\right)

    Domain :math:`x_i \in [-600, 600]` (10-D in the search space). Global minimum :math:`f = 0` at
    :math:`x = 0`. Source: Jamil & Yang (2013), function 59.

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x_1, \dots, x_n`.

    Returns
    -------
    float
        The function value.
    """
    x = _vector(params)
    i = np.arange(1, x.size + 1)
    return float(1.0 + np.sum(x**2) / 4000.0 - np.prod(np.cos(x / np.sqrt(i))))


def schwefel(params: Params) -> float:
    r"""Schwefel function: continuous, separable, multimodal; the best local minima lie far apart.

    .. math:: f(x) = 418.9829 \, n - \sum_{i=1}^n x_i \sin\left(\sqrt{|x_i|}\right)

    Domain :math:`x_i \in [-500, 500]` (10-D in the search space). Global minimum :math:`f \approx 0`
    (about :math:`1.3 \cdot 10^{-4}` in 10-D, from the rounded constant) at :math:`x_i \approx 420.9687`.
    Source: Jamil & Yang (2013), function 129 (Schwefel 2.26, shifted to a minimum of 0).

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x_1, \dots, x_n`.

    Returns
    -------
    float
        The function value.
    """
    x = _vector(params)
    return float(418.9829 * x.size - np.sum(x * np.sin(np.sqrt(np.abs(x)))))


def _lunacek(x: np.ndarray) -> tuple[float, float]:
    """Return the double-sphere value and the first sphere's centre of Lunacek et al. (2008)."""
    n = x.size
    mu1, d = 2.5, 1.0
    s = 1.0 - 1.0 / (2.0 * np.sqrt(n + 20.0) - 8.2)
    mu2 = -np.sqrt((mu1**2 - d) / s)
    value = min(np.sum((x - mu1) ** 2), d * n + s * np.sum((x - mu2) ** 2))
    return float(value), mu1


def bisphere(params: Params) -> float:
    r"""Lunacek's double-sphere function: two funnels, the better one covering less of the domain.

    .. math::

        f(x) = \min\left(\sum_{i=1}^n (x_i - \mu_1)^2,\; d\,n + s \sum_{i=1}^n (x_i - \mu_2)^2\right)

    with :math:`\mu_1 = 2.5`, :math:`d = 1`, :math:`s = 1 - 1 / (2\sqrt{n + 20} - 8.2)` and
    :math:`\mu_2 = -\sqrt{(\mu_1^2 - d) / s}`. Domain :math:`x_i \in [-5.12, 5.12]` (30-D in the search
    space). Global minimum :math:`f = 0` at :math:`x = (\mu_1, \dots, \mu_1)`; the second funnel bottoms
    out at :math:`d\,n` at :math:`x = (\mu_2, \dots, \mu_2)`. Source: Lunacek, Whitley & Sutton (2008).

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x_1, \dots, x_n`.

    Returns
    -------
    float
        The function value.
    """
    value, _ = _lunacek(_vector(params))
    return value


def birastrigin(params: Params) -> float:
    r"""Lunacek's bi-Rastrigin function: the double sphere overlaid with Rastrigin's ruggedness.

    .. math:: f(x) = f_\text{bisphere}(x) + 10 \sum_{i=1}^n \left[1 - \cos(2 \pi (x_i - \mu_1))\right]

    with :math:`f_\text{bisphere}` and :math:`\mu_1 = 2.5` as in :func:`bisphere`. Domain
    :math:`x_i \in [-5.12, 5.12]` (30-D in the search space). Global minimum :math:`f = 0` at
    :math:`x = (\mu_1, \dots, \mu_1)`. Source: Lunacek, Whitley & Sutton (2008).

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x_1, \dots, x_n`.

    Returns
    -------
    float
        The function value.
    """
    x = _vector(params)
    value, mu1 = _lunacek(x)
    return float(value + 10.0 * np.sum(1.0 - np.cos(2.0 * np.pi * (x - mu1))))


def bukin(params: Params) -> float:
    r"""Bukin function N.6: continuous, non-differentiable, with a ridge of local minima.

    .. math:: f(x, y) = 100 \sqrt{|y - 0.01 x^2|} + 0.01 |x + 10|

    Domain :math:`x \in [-15, -5]`, :math:`y \in [-3, 3]`. Global minimum :math:`f = 0` at
    :math:`(x, y) = (-10, 1)`. Source: Jamil & Yang (2013), function 28.

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x` and :math:`y`, in this order.

    Returns
    -------
    float
        The function value.
    """
    x, y = _pair(params)
    return float(100.0 * np.sqrt(abs(y - 0.01 * x**2)) + 0.01 * abs(x + 10.0))


def eggcrate(params: Params) -> float:
    r"""Egg-crate function: continuous, separable, multimodal.

    .. math:: f(x, y) = x^2 + y^2 + 25 \left(\sin^2 x + \sin^2 y\right)

    Domain :math:`x, y \in [-5, 5]`. Global minimum :math:`f = 0` at :math:`(x, y) = (0, 0)`.
    Source: Jamil & Yang (2013), function 52.

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x` and :math:`y`, in this order.

    Returns
    -------
    float
        The function value.
    """
    x, y = _pair(params)
    return float(x**2 + y**2 + 25.0 * (np.sin(x) ** 2 + np.sin(y) ** 2))


def himmelblau(params: Params) -> float:
    r"""Himmelblau's function: continuous, non-convex, with four global minima.

    .. math:: f(x, y) = (x^2 + y - 11)^2 + (x + y^2 - 7)^2

    Domain :math:`x, y \in [-6, 6]`. Global minimum :math:`f = 0` at :math:`(3, 2)`,
    :math:`(-2.805118, 3.131312)`, :math:`(-3.779310, -3.283186)` and :math:`(3.584428, -1.848126)`.
    Source: D. M. Himmelblau (1972), Applied Nonlinear Programming, McGraw-Hill.

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x` and :math:`y`, in this order.

    Returns
    -------
    float
        The function value.
    """
    x, y = _pair(params)
    return float((x**2 + y - 11.0) ** 2 + (x + y**2 - 7.0) ** 2)


def keane(params: Params) -> float:
    r"""Keane's function: continuous, non-separable, multimodal, with two symmetric global minima.

    .. math:: f(x, y) = -\frac{\sin^2(x - y) \sin^2(x + y)}{\sqrt{x^2 + y^2}}

    At the origin, where the quotient is undefined, :math:`f = 0`, its limit. Domain :math:`x, y \in [0, 10]`.
    Global minimum :math:`f \approx -0.673668` at :math:`(1.393249, 0)` and :math:`(0, 1.393249)`.
    Source: Jamil & Yang (2013), function 69.

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x` and :math:`y`, in this order.

    Returns
    -------
    float
        The function value.
    """
    x, y = _pair(params)
    radius = np.hypot(x, y)
    if radius == 0.0:
        return 0.0
    return float(-(np.sin(x - y) ** 2) * np.sin(x + y) ** 2 / radius)


def leon(params: Params) -> float:
    r"""Leon's function: continuous, non-separable, unimodal, with a curved valley.

    .. math:: f(x, y) = 100 (y - x^3)^2 + (1 - x)^2

    Domain :math:`x, y \in [0, 10]`. Global minimum :math:`f = 0` at :math:`(x, y) = (1, 1)`.
    Source: Jamil & Yang (2013), function 80.

    Parameters
    ----------
    params : Mapping[str, float]
        The values of :math:`x` and :math:`y`, in this order.

    Returns
    -------
    float
        The function value.
    """
    x, y = _pair(params)
    return float(100.0 * (y - x**3) ** 2 + (1.0 - x) ** 2)


def _box(dimensions: int, low: float, high: float) -> dict[str, tuple[float, float]]:
    """Return limits ``x0 .. x{dimensions-1}``, each in ``[low, high]``."""
    return {f"x{i}": (float(low), float(high)) for i in range(dimensions)}


# The names Propulate 1.2.2 gives these two functions.
bukin_n6 = bukin
egg_crate = eggcrate

# Name -> (function, factory of its search space). A factory so that callers may modify their copy.
_BENCHMARKS: dict[str, tuple[Callable[..., float], Callable[[], dict[str, tuple[float, float]]]]] = {
    "sphere": (sphere, lambda: _box(2, -5.12, 5.12)),
    "rosenbrock": (rosenbrock, lambda: _box(2, -2.048, 2.048)),
    "step": (step, lambda: _box(5, -5.12, 5.12)),
    "quartic": (quartic, lambda: _box(30, -1.28, 1.28)),
    "rastrigin": (rastrigin, lambda: _box(20, -5.12, 5.12)),
    "griewank": (griewank, lambda: _box(10, -600.0, 600.0)),
    "schwefel": (schwefel, lambda: _box(10, -500.0, 500.0)),
    "bisphere": (bisphere, lambda: _box(30, -5.12, 5.12)),
    "birastrigin": (birastrigin, lambda: _box(30, -5.12, 5.12)),
    "bukin": (bukin, lambda: {"x0": (-15.0, -5.0), "x1": (-3.0, 3.0)}),
    "eggcrate": (eggcrate, lambda: _box(2, -5.0, 5.0)),
    "himmelblau": (himmelblau, lambda: _box(2, -6.0, 6.0)),
    "keane": (keane, lambda: _box(2, 0.0, 10.0)),
    "leon": (leon, lambda: _box(2, 0.0, 10.0)),
}


def get_function_search_space(name: str) -> tuple[Callable[..., float], dict[str, tuple[float, float]]]:
    """Return a benchmark function and its search space.

    Parameters
    ----------
    name : str
        One of ``sphere``, ``rosenbrock``, ``step``, ``quartic``, ``rastrigin``, ``griewank``, ``schwefel``,
        ``bisphere``, ``birastrigin``, ``bukin``, ``eggcrate``, ``himmelblau``, ``keane``, ``leon``.

    Returns
    -------
    function : Callable[[Mapping[str, float]], float]
        The benchmark function.
    limits : dict[str, tuple[float, float]]
        A fresh copy of its search space: one continuous parameter per dimension, in the order the function
        reads them.

    Raises
    ------
    ValueError
        If ``name`` is not one of the names above.
    """
    try:
        function, make_limits = _BENCHMARKS[name]
    except (KeyError, TypeError):
        allowed = ", ".join(_BENCHMARKS)
        raise ValueError(f"name must be one of {allowed}; got {name!r}") from None
    return function, make_limits()


class _RecordExplicit(argparse.Action):
    """Store an option's value and note that the user gave the option explicitly."""

    def __init__(self, option_strings: Sequence[str], dest: str, given: set[str], **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.given = given

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        self.given.add(self.dest)


class _RootArgumentParser(argparse.ArgumentParser):
    """An argument parser that prints help and errors on rank 0 only; every rank still exits.

    Options are spelled with dashes (``--pop-size``); Propulate 1.2.2's spellings with underscores
    (``--pop_size``) are accepted as aliases without being listed in ``--help``.
    """

    def __init__(self, comm: MPI.Comm, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rank = comm.rank

    def _dashed(self, arg: str) -> str:
        """Return ``arg`` with an underscore spelling of a known option (``--pop_size=4``) in dashes."""
        if not arg.startswith("--") or "_" not in arg:
            return arg
        option, equals, value = arg.partition("=")
        dashed = option.replace("_", "-")
        return dashed + equals + value if dashed in self._option_string_actions else arg

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = sys.argv[1:] if args is None else list(args)
        # Arguments after "--" are positional values, never options.
        end = given.index("--") if "--" in given else len(given)
        dashed = [self._dashed(arg) for arg in given[:end]] + given[end:]
        return super().parse_known_args(dashed, namespace)

    def print_usage(self, file: Any = None) -> None:
        if self.rank == 0:
            super().print_usage(file)

    def print_help(self, file: Any = None) -> None:
        if self.rank == 0:
            super().print_help(file)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        super().exit(status, message if self.rank == 0 else None)


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """Return an argparse type: an integer no smaller than ``minimum``."""

    def convert(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {value}")
        return value

    convert.__name__ = "int"
    return convert


def _float_in(low: float, high: float = np.inf) -> Callable[[str], float]:
    """Return an argparse type: a float in ``[low, high]``."""

    def convert(text: str) -> float:
        value = float(text)
        if not low <= value <= high:
            allowed = f"in [{low}, {high}]" if np.isfinite(high) else f">= {low}"
            raise argparse.ArgumentTypeError(f"must be a float {allowed}, got {text}")
        return value

    convert.__name__ = "float"
    return convert


def _logging_level(text: str) -> int:
    """Return a logging level given as a number (``20``) or a name (``INFO``)."""
    if text.lstrip("-").isdigit():
        return int(text)
    level = logging.getLevelName(text.upper())
    if not isinstance(level, int):
        raise argparse.ArgumentTypeError(f"must be an integer or a level name such as INFO, got {text!r}")
    return level


# The option groups of parse_arguments, by name: the options each adds (as attribute names).
_OPTION_GROUPS: dict[str, tuple[str, ...]] = {
    "function": ("function",),
    "ga": ("pop_size", "crossover_probability", "mutation_probability", "random_init_probability"),
    "islands": ("num_islands", "migration_probability", "pollination"),
    "migrants": ("num_migrants",),
    "pso": ("variant", "inertia", "cognitive", "social", "clamping_factor"),
    "cmaes": ("adapter",),
    "workers": ("ranks_per_worker",),
}


def parse_arguments(
    comm: MPI.Comm = MPI.COMM_WORLD,
    args: list[str] | None = None,
    *,
    groups: Sequence[str] | None = None,
    checkpoint: str = "./",
    description: str = "Run a Propulate optimization of a benchmark function.",
) -> tuple[argparse.Namespace, dict[str, bool]]:
    """Parse the command line shared by the tutorials.

    Options are spelled with dashes (``--pop-size``, as ``--help`` lists them); the spellings of Propulate
    1.2.2 with underscores (``--pop_size``) are accepted too. ``--help`` shows every default.

    Parameters
    ----------
    comm : MPI.Comm
        The communicator of the job; its size sets the default ``--pop-size`` (twice the number of ranks) and
        only its rank 0 prints help and errors.
    args : list[str], optional
        The arguments to parse; ``sys.argv[1:]`` by default.
    groups : Sequence[str], optional
        The option groups to offer besides the common options (``--generations``, ``--seed``,
        ``--verbosity``, ``--checkpoint``, ``--top-n``, ``--logging-interval``, ``--logging-level``), among
        ``function`` (``--function``), ``ga`` (``--pop-size`` and the three probabilities of the default
        propagator), ``islands`` (``--num-islands``, ``--migration-probability``, ``--pollination``),
        ``migrants`` (``--num-migrants``), ``pso`` (``--variant``, ``--inertia``, ``--cognitive``,
        ``--social``, ``--clamping-factor``), ``cmaes`` (``--adapter``) and ``workers``
        (``--ranks-per-worker``). By default all of them, as in 1.2.2; a tutorial names those it uses, so that
        its ``--help`` lists nothing else and any other option is an error.
    checkpoint : str
        The default of ``--checkpoint``, the folder for checkpoints and log files.
    description : str
        The first line of ``--help``.

    Returns
    -------
    config : argparse.Namespace
        The options, named as on the command line without the leading dashes and with underscores
        (``config.pop_size``); only those of the chosen groups and the common ones.
    hp_set : dict[str, bool]
        For ``inertia``, ``cognitive`` and ``social``: whether the user gave the option explicitly, so that a
        particle-swarm variant can tell its own defaults from the user's choice.

    Raises
    ------
    ValueError
        If ``groups`` names a group not listed above.
    SystemExit
        On ``--help`` or an invalid option (every rank exits with status 2, rank 0 prints the error).
    """
    chosen = list(_OPTION_GROUPS) if groups is None else list(groups)
    unknown = sorted(set(chosen) - set(_OPTION_GROUPS))
    if unknown:
        raise ValueError(f"groups: unknown {unknown}; choose from {', '.join(_OPTION_GROUPS)}")
    offered = {name for group in chosen for name in _OPTION_GROUPS[group]}
    given: set[str] = set()
    parser = _RootArgumentParser(
        comm, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    probability = _float_in(0.0, 1.0)
    non_negative = _float_in(0.0)

    def add(name: str, **kwargs: Any) -> None:
        """Add ``--name`` (in dashes) if it is common or its group was chosen."""
        grouped = any(name in names for names in _OPTION_GROUPS.values())
        if not grouped or name in offered:
            parser.add_argument(f"--{name.replace('_', '-')}", dest=name, **kwargs)

    add("function", choices=list(_BENCHMARKS), default="sphere", help="benchmark function to minimize")
    add(
        "generations",
        type=_int_at_least(-1),
        default=1000,
        help="generations per worker; -1 runs until stopped",
    )
    add("seed", type=int, default=0, help="base seed; each rank adds its rank to it")
    add("verbosity", type=_int_at_least(-1), default=1, help="debug level of the optimizer's output")
    add("checkpoint", type=str, default=checkpoint, help="folder for checkpoints and log files")
    add(
        "pop_size",
        type=_int_at_least(1),
        default=2 * comm.size,
        help="breeding pool size; twice the number of ranks unless given",
    )
    add(
        "crossover_probability",
        type=probability,
        default=0.7,
        help="share of a child's parameters taken from its first parent (uniform crossover), in [0, 1]",
    )
    add(
        "mutation_probability",
        type=probability,
        default=0.4,
        help="probability of redrawing one parameter (point mutation), in [0, 1]",
    )
    add(
        "random_init_probability",
        type=probability,
        default=0.1,
        help="probability of breeding a fresh random individual, in [0, 1]",
    )
    add("top_n", type=_int_at_least(1), default=1, help="number of best individuals to summarize")
    add(
        "logging_interval", type=_int_at_least(1), default=10, help="log progress every this many generations"
    )
    add(
        "logging_level",
        type=_logging_level,
        default=logging.INFO,
        help="logging level, as a number or a name (DEBUG, INFO, ...)",
    )
    add("num_islands", type=_int_at_least(1), default=2, help="number of islands")
    add(
        "migration_probability",
        type=probability,
        default=0.9,
        help="probability per island and generation of a migration event, in [0, 1]",
    )
    add(
        "num_migrants",
        type=_int_at_least(0),
        default=1,
        help="individuals each island sends to every other island per migration event",
    )
    add(
        "pollination",
        action="store_true",
        help="send copies (pollination) instead of moving individuals (migration)",
    )
    add(
        "variant",
        choices=["Basic", "VelocityClamping", "Constriction", "Canonical"],
        default="Basic",
        help="particle-swarm variant",
    )
    pso_coefficient: dict[str, Any] = {"action": _RecordExplicit, "given": given}
    add("inertia", type=float, default=0.729, help="particle-swarm inertia weight", **pso_coefficient)
    add(
        "cognitive",
        type=non_negative,
        default=1.49445,
        help="particle-swarm cognitive coefficient c_cognitive, >= 0",
        **pso_coefficient,
    )
    add(
        "social",
        type=non_negative,
        default=1.49445,
        help="particle-swarm social coefficient c_social, >= 0",
        **pso_coefficient,
    )
    add(
        "clamping_factor",
        type=_float_in(0.0),
        default=0.6,
        help="velocity-clamping factor: maximum velocity as a fraction of each range, >= 0",
    )
    add("adapter", choices=["basic", "active"], default="basic", help="CMA-ES covariance adapter")
    add(
        "ranks_per_worker",
        type=_int_at_least(1),
        default=2,
        help="MPI ranks that evaluate one individual together (multi-rank workers)",
    )

    config = parser.parse_args(args)
    hp_set = {name: name in given for name in ("inertia", "cognitive", "social")}
    return config, hp_set
