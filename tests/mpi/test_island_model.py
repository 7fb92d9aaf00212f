"""The asynchronous loop and the island model under mpiexec at 1, 2, 4 and 8 ranks.

Each case runs ``programs/island_model.py`` (one launch per rank count runs its cases one after the
other), which asserts collectively: exact evaluation counts, identical populations within islands,
migration conserving active individuals, pollination replacing one individual per immigrant, in-bounds
individuals and a summary identical on every rank.
"""

from __future__ import annotations

import json
import re

import pytest

from .conftest import Cases, launch

RPW = [(ranks, islands) for ranks in (2, 4, 8) for islands in (1, 2)]


def checkpoint(name: str) -> list[str]:
    return ["--checkpoint", f"{{tmp}}/{name}"]


CASES: dict[str, tuple[int, list[str]]] = {}
for ranks in (1, 2, 4, 8):
    CASES[f"one-island-{ranks}"] = (ranks, ["--generations", "30", *checkpoint(f"one-island-{ranks}")])
for ranks in (2, 4, 8):
    for pollination in (False, True):
        name = f"two-islands-{ranks}-{pollination}"
        args = ["--generations", "40", "--num-islands", "2", "--migration-probability", "0.9"]
        CASES[name] = (ranks, [*args, *(["--pollination"] if pollination else []), *checkpoint(name)])
for ranks, islands in RPW:
    if ranks // 2 >= islands:
        name = f"rpw-{ranks}-{islands}"
        args = ["--generations", "25", "--ranks-per-worker", "2", "--num-islands", str(islands)]
        CASES[name] = (ranks, [*args, *checkpoint(name)])
args = ["--generations", "25", "--ranks-per-worker", "4", "--num-islands", "2", "--pollination"]
CASES["four-rpw-pollination"] = (8, [*args, *checkpoint("four-rpw-pollination")])
args = ["--generations", "30", "--num-islands", "3", "--island-sizes", "1,2,5"]
CASES["uneven"] = (8, [*args, *checkpoint("uneven")])
# Island 1 sends nothing but still has to replace on arrival.
args = ["--generations", "30", "--num-islands", "2", "--pollination", "--topology", "[[0, 2], [0, 0]]"]
CASES["one-way"] = (4, [*args, *checkpoint("one-way")])
args = ["--generations", "20", "--num-islands", "1", "--migration-probability", "1.0"]
CASES["one-island-migrating"] = (4, [*args, *checkpoint("one-island-migrating")])
for ranks in (1, 4):
    args = ["--generations", "0", "--num-islands", str(min(ranks, 2))]
    CASES[f"zero-{ranks}"] = (ranks, [*args, *checkpoint(f"zero-{ranks}")])
CASES["top-n"] = (4, ["--generations", "3", "--top-n", "50", *checkpoint("top-n")])
args = ["--generations", "30", "--function", "categorical", "--num-islands", "2"]
CASES["categorical"] = (4, [*args, *checkpoint("categorical")])


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Cases:
    """The cases above, in one launch per rank count (4 launches instead of 23)."""
    return Cases("island_model.py", CASES, tmp_path_factory.mktemp("island_model"), timeout=120)


def result_of(output: str) -> dict:
    line = next(line for line in output.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def run(cases: Cases, name: str) -> dict:
    out = cases(name)
    assert out.returncode == 0, f"exit code {out.returncode}; output:\n{out.stdout[-8000:]}"
    return result_of(out.stdout)


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_one_island(cases, ranks):
    result = run(cases, f"one-island-{ranks}")
    assert result["islands"][0][3] == 30 * ranks  # every evaluation is active on the only island
    assert result["immigrants"] == 0


@pytest.mark.parametrize("ranks", [2, 4, 8])
@pytest.mark.parametrize("pollination", [False, True], ids=["migration", "pollination"])
def test_two_islands(cases, ranks, pollination):
    result = run(cases, f"two-islands-{ranks}-{pollination}")
    assert result["immigrants"] > 0, "no migration happened at probability 0.9"


@pytest.mark.parametrize(("ranks", "islands"), RPW)
def test_two_ranks_per_worker(cases, ranks, islands):
    if ranks // 2 < islands:
        pytest.skip("fewer workers than islands")
    run(cases, f"rpw-{ranks}-{islands}")


def test_four_ranks_per_worker_with_pollination(cases):
    run(cases, "four-rpw-pollination")


def test_uneven_island_sizes(cases):
    result = run(cases, "uneven")
    assert [island[0] for island in result["islands"]] == [0, 1, 2]


def test_one_way_topology_pollination(cases):
    result = run(cases, "one-way")
    by_island = {island: immigrants for island, immigrants, *_ in result["islands"]}
    assert by_island[0] == 0 and by_island[1] > 0


def test_one_island_with_migration_enabled(cases):
    result = run(cases, "one-island-migrating")
    assert result["immigrants"] == 0


@pytest.mark.parametrize("ranks", [1, 4])
def test_zero_generations(cases, ranks):
    result = run(cases, f"zero-{ranks}")
    assert result["best"] is None


def test_summary_with_more_than_exists(cases):
    result = run(cases, "top-n")
    assert result["islands"][0][3] == 12


def test_space_without_floats(cases):
    result = run(cases, "categorical")
    assert result["best"] <= 2  # the optimum is 0; 120 evaluations of 11 * 3 * 11 points get close


def test_high_to_low_ranges(mpirun, tmp_path):
    # A launch of its own: the warning is given once per process.
    out = mpirun(
        "island_model.py", 2, "--generations", "20", "--function", "reversed", "--checkpoint", str(tmp_path)
    )
    assert out.stdout.count("high-to-low") >= 1


BAD_INPUT = {
    "limits-nan": "limits['a']",
    "limits-one-tuple": "limits['b']",
    "limits-mixed": "limits['a']",
    "limits-empty": "limits",
    "pop-size": "pop_size",
    "probability": "crossover_prob",
    "island-sizes": "island_sizes",
    "ranks-per-worker": "ranks_per_worker",
    "topology": "migration_topology",
    "topology-negative": "migration_topology",
    "generations": "generations",
    "migration-probability": "migration_probability",
    "loss-signature": "loss_fn",
    "on-failure": "on_failure",
    "time-limit": "time_limit",
    "grace-period": "grace_period",
    "mutation-probability": "mutation_prob",
    "trackers": "trackers",
}


@pytest.fixture(scope="module")
def bad_input_output() -> str:
    """The output of one job that runs every case of ``BAD_INPUT`` on 4 ranks, one after the other."""
    result = launch("bad_input.py", 4, *sorted(BAD_INPUT), timeout=120)
    assert result.returncode != 0, result.stdout
    return result.stdout


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_raises_on_every_rank(bad_input_output, case):
    ranks = 4
    tag = re.escape(f"[{case}]")
    took = re.findall(rf"{tag} rank \d+ took ([0-9.]+) s", bad_input_output)
    assert len(took) == ranks and max(map(float, took)) < 30, bad_input_output
    # Lines of different ranks may interleave; each report ends with a newline of its own.
    reports = re.findall(
        rf"{tag} rank (\d+) raised (\w+): (.*?)(?=\[[\w-]+\] rank \d+ |\n|$)", bad_input_output
    )
    assert sorted(int(rank) for rank, _, _ in reports) == list(range(ranks)), bad_input_output
    assert all(BAD_INPUT[case] in message for _, _, message in reports), bad_input_output
    assert all(
        kind in ("SearchSpaceError", "LayoutError", "ValueError", "TypeError") for _, kind, _ in reports
    )
