"""ParallelNelderMead under Propulator and Islands: convergence, one serial trajectory, resume, migration.

Each case runs ``programs/nm_run.py``, which checks collectively that every individual lies inside the
limits, that every worker of an island holds the same population, that the island evaluated ``generations``
times its workers individuals, that all workers of an island hold the same state of the serial Nelder–Mead
method, and that this state is one the serial method reaches when it runs alone (so the parallel run, a
resumed one, and islands that exchange individuals follow its trajectory).

Worker 0 evaluates the point the serial method needs next, unless a peer evaluates it already (the loop then
rejects it as a duplicate and worker 0 takes the next likely point), so after ``G`` generations the method has
made about ``G`` steps or more, and the best loss is about that of the serial method after ``G`` evaluations
(column "serial bound"): the thresholds rest on that bound. With more ranks than cores a worker far ahead of
its peers waits for them holding its result back, and the steps can fall short of ``G`` (see
:data:`STEP_SHARE`). Measured on 2 oversubscribed cores shared with
other jobs, 4 ranks, starts (3, -4, ...) for sphere and (-1.2, 1, ...) for Rosenbrock, with the loop that
rejects duplicates and the propagator that learns through ``observe`` (before both, the rows read: 4.1e-22 to
1.6e-18 and 102 to 135 steps; 6.5e-23 to 1.6e-21, 213 to 235; 3.1e-7 to 7.2e-7, 586 to 667; 1.9e-6 to
1.2e-5, 3262 to 3322 in 14 to 18 s):

===================  ===========  ============  ======================  ============  ==========  =========
function             generations  serial bound  best, 4 ranks (runs)    serial steps  seconds     threshold
===================  ===========  ============  ======================  ============  ==========  =========
sphere 2-D           100          1.8e-12       4.5e-16 to 8.8e-15 (5)  118 to 127    1.2 to 1.4  1e-10
rosenbrock 2-D       200          3.2e-12       9.9e-23 to 7.7e-20 (5)  253 to 274    1.4 to 1.5  1e-10
sphere 10-D          500          2.7e-5        3.9e-9 to 6.2e-9 (5)    879 to 927    2.1 to 2.3  1e-4
rosenbrock 10-D (*)  2500         0.24          7.9e-24 to 1.8e-22 (3)  4859 to 4945  5.8 to 6.0  1
===================  ===========  ============  ======================  ============  ==========  =========

(*) initial edge 0.25 of the range. With the default (the whole range) the method heads, from this start, for
the local minimum of the 10-D Rosenbrock function at f = 3.99 (4.3 to 4.7 after 500 generations, 3 runs).
"""

from __future__ import annotations

import json
import math

import pytest

from .conftest import Cases

#: Serial steps the replicas must make per generation of a worker, at least. Worker 0 evaluates the point
#: the serial method needs next, so an idle machine gives about one step per generation or more (the table
#: above); with more ranks than cores a worker far ahead waits for late peers holding its own result back
#: (see Propulator._await_peers), and 4 ranks on 2 cores made 90 to 111 steps in 100 generations of the 2-D
#: sphere (8 launches; CI failed on 97 twice).
STEP_SHARE = 0.8


CONVERGENCE = [
    ("sphere", 2, 100, 1.0, 1e-10),
    ("rosenbrock", 2, 200, 1.0, 1e-10),
    ("sphere", 10, 500, 1.0, 1e-4),
    ("rosenbrock", 10, 2500, 0.25, 1.0),
]
# Resumed onto 2 ranks, the 600 generations done count 300 per worker: 450 means 150 more each.
RESUMED = [(4, 300), (2, 450)]
ISLANDS = [(ranks, exchange) for ranks in (4, 8) for exchange in ("migration", "pollination")]


def convergence_args(function: str, dim: int, generations: int, scale: float) -> list[str]:
    return [
        "--function",
        function,
        "--dim",
        str(dim),
        "--generations",
        str(generations),
        "--scale",
        str(scale),
    ]


CASES: dict[str, tuple[int, list[str]]] = {}
for function, dim, generations, scale, _ in CONVERGENCE:
    CASES[f"converge-{function}-{dim}"] = (4, convergence_args(function, dim, generations, scale))
for ranks, generations in RESUMED:
    # The first session on 4 ranks, then the resumed one, on one checkpoint and in that order.
    args = ["--function", "sphere", "--dim", "10", "--checkpoint", f"{{tmp}}/resume-{ranks}"]
    CASES[f"resume-{ranks}-first"] = (4, [*args, "--generations", "150"])
    CASES[f"resume-{ranks}-second"] = (ranks, [*args, "--generations", str(generations)])
for ranks, exchange in ISLANDS:
    args = ["--function", "rosenbrock", "--generations", "200", "--num-islands", "2"]
    args += ["--migration-probability", "0.3", *(["--pollination"] if exchange == "pollination" else [])]
    CASES[f"islands-{ranks}-{exchange}"] = (ranks, args)


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Cases:
    """The cases above, in one launch per rank count (3 launches instead of 12)."""
    return Cases("nm_run.py", CASES, tmp_path_factory.mktemp("nm"), timeout=120)


def result_of(output: str) -> dict:
    line = next(line for line in output.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def nm_run(cases: Cases, name: str) -> dict:
    out = cases(name)
    assert out.returncode == 0, f"exit code {out.returncode}; output:\n{out.stdout[-8000:]}"
    return result_of(out.stdout)


@pytest.mark.parametrize(("function", "dim", "generations", "scale", "threshold"), CONVERGENCE)
def test_converges_with_4_ranks(cases, mpirun, function, dim, generations, scale, threshold):
    result = nm_run(cases, f"converge-{function}-{dim}")
    assert result["n"] == 4 * generations, result
    steps = math.ceil(STEP_SHARE * generations)
    if result["serial_steps"] < steps or result["best"] >= threshold:
        # How far the replicas get depends on the order in which results arrive, which the load of the whole
        # test suite changes (one launch of many in CI was a step short). One more launch must make it.
        args = convergence_args(function, dim, generations, scale)
        result = result_of(mpirun("nm_run.py", 4, *args, timeout=120).stdout)
        assert result["n"] == 4 * generations, result
    assert result["serial_steps"] >= steps, result
    assert result["best"] < threshold, result


@pytest.mark.parametrize(("ranks", "generations"), RESUMED, ids=["same layout", "2 ranks after 4"])
def test_resume_continues_the_trajectory(cases, ranks, generations):
    first = nm_run(cases, f"resume-{ranks}-first")
    second = nm_run(cases, f"resume-{ranks}-second")
    # nm_run.py asserted that both sessions' replicas lie on the serial trajectory, the second one
    # restored from the saved state (same layout) or replayed from the population (another layout).
    assert second["n"] == first["n"] + 150 * ranks, (first, second)
    assert second["serial_steps"] >= first["serial_steps"] + 150, (first, second)
    assert second["best"] <= first["best"], (first, second)


@pytest.mark.parametrize(("ranks", "exchange"), ISLANDS)
def test_two_islands_exchanging_individuals(cases, ranks, exchange):
    """Two islands of 2 or 4 workers, 30 % emigration, 2-D Rosenbrock from (-1.2, 1), 200 generations.

    The default emigrant is a worker's best individual, often the newest vertex of its simplex. Before the
    propagator read failures from the status, a worker took its vertex that had emigrated for a failed
    evaluation, and its replica parted from its peers': at 8 ranks with migration, in 20 of 20 launches
    the replicas of both islands differed and were not states of the serial method; the best loss had a
    median of 1.8e-16 (worst 6.8e-9), against 7.4e-23 (worst 3.9e-22) since. On the 10-D function
    (``--dim 10 --scale 0.25``, 1,000 generations) the median went from 7.05 to 1.41 (6 launches each),
    as the replicas made 2,055 steps of the serial method instead of 1,008.

    Both islands start from the same point, so immigrants are often points the receiving island needs
    too. Each island's replica makes at least one step per generation of its worker 0, so each island's
    best is at most the serial bound of the table above (3.2e-12 after 200 evaluations): the threshold
    rests on it. Measured since, 20 launches per case, the worse island's best: 4 ranks 2.7e-19 median
    (worst 9.9e-17) with migration, 8.6e-18 (2.5e-16) with pollination; 8 ranks 2.9e-22 (1.4e-20) and
    7.5e-23 (3.7e-21); 214 to 268 serial steps; 1.3 to 3.6 s a launch.
    """
    result = nm_run(cases, f"islands-{ranks}-{exchange}")
    # nm_run.py checked the populations, the evaluations and the replicas on every island.
    assert result["n"] == ranks * 200, result
    assert result["immigrants"] > 0 and result["deactivated"] > 0, result
    assert result["serial_steps"] >= 200, result
    assert max(result["island_best"]) < 1e-10, result
