"""Island news relayed over several hops (``propulate.mpi.dissemination``) under mpiexec.

The default radix keeps islands of up to 8 workers direct, so these cases set a radix of 2 or 3: news
then reaches most workers through one or two others. ``programs/island_model.py`` asserts collectively
what the island model guarantees (exact counts, identical populations within each island, migration
conserving active individuals, pollination replacing one individual per immigrant); the messages each
worker sends per generation are bounded by its fingers, not by the island's size.
"""

from __future__ import annotations

import json

import pytest

from propulate.mpi import dissemination

from .conftest import Cases

ONE_ISLAND = [(3, 2), (4, 2), (5, 2), (8, 2), (8, 3)]
EXCHANGES = ["migration", "pollination"]

# Every case names its radix: the program sets dissemination.RADIX, which stays set for the cases after it
# in the same launch. The direct case gives the default.
CASES: dict[str, tuple[int, list[str]]] = {}
for ranks, radix in ONE_ISLAND:
    CASES[f"one-island-{ranks}-{radix}"] = (ranks, ["--generations", "40", "--relay-radix", str(radix)])
CASES["direct"] = (8, ["--generations", "60", "--relay-radix", str(dissemination.RADIX)])
CASES["relayed"] = (8, ["--generations", "60", "--relay-radix", "2"])
for exchange in EXCHANGES:
    args = ["--generations", "40", "--num-islands", "2", "--relay-radix", "2"]
    CASES[f"two-islands-{exchange}"] = (8, [*args, *(["--pollination"] if exchange == "pollination" else [])])
CASES["two-rank-workers"] = (8, ["--generations", "25", "--ranks-per-worker", "2", "--relay-radix", "2"])
args = ["--generations", "30", "--num-islands", "3", "--island-sizes", "1,2,5", "--relay-radix", "2"]
CASES["uneven"] = (8, args)
for case, (ranks, args) in CASES.items():
    CASES[case] = (ranks, [*args, "--checkpoint", f"{{tmp}}/{case}"])


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Cases:
    """The island_model.py cases above, in one launch per rank count (4 launches instead of 11)."""
    return Cases("island_model.py", CASES, tmp_path_factory.mktemp("relay"), timeout=180)


def result_of(output: str) -> dict:
    line = next(line for line in output.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def island_model(cases: Cases, name: str) -> dict:
    out = cases(name)
    assert out.returncode == 0, f"exit code {out.returncode}; output:\n{out.stdout[-8000:]}"
    return result_of(out.stdout)


@pytest.mark.parametrize(("ranks", "radix"), ONE_ISLAND)
def test_one_island_relayed(cases, ranks, radix):
    result = island_model(cases, f"one-island-{ranks}-{radix}")
    assert result["islands"][0][3] == 40 * ranks


def test_relayed_messages_per_generation_are_bounded_by_the_fingers(cases):
    direct = island_model(cases, "direct")
    relayed = island_model(cases, "relayed")
    # 7 peers directly; 3 fingers (1, 2, 4) relayed, one message each per generation (3.08 measured).
    assert direct["messages_per_generation"] >= 7
    assert relayed["messages_per_generation"] < 4, relayed


@pytest.mark.parametrize("exchange", EXCHANGES)
def test_two_islands_of_four_relayed(cases, exchange):
    result = island_model(cases, f"two-islands-{exchange}")
    assert result["immigrants"] > 0


def test_two_ranks_per_worker_relayed(cases):
    island_model(cases, "two-rank-workers")


def test_uneven_islands_relayed(cases):
    island_model(cases, "uneven")


def test_rung_results_relayed(mpirun, tmp_path):
    # Successive halving shares each rung result with the island at once: relayed like the news.
    out = mpirun("asha_run.py", 4, "--checkpoint", str(tmp_path / "ckpt"), "--relay-radix", "2", timeout=180)
    result = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["problems"] == []
    assert result["records_equal"] and result["rebuilt_equal"] and result["decisions_agree"]
    assert result["evaluations"] == 4 * 10


def test_news_is_passed_on_while_the_relaying_worker_evaluates(mpirun, tmp_path):
    # 4 workers, radix 2, 1-second evaluations ending at staggered moments: a worker two hops from a
    # sender gets its news through a worker that is busy evaluating. Relayed only between evaluations, half
    # the breedings missed a result that had ended 0.15 s before; relayed by the watchdog thread, none.
    def freshness(*flags):
        checkpoint = tmp_path / ("background" if flags else "between")
        out = mpirun("relay_freshness.py", 4, "--checkpoint", str(checkpoint), *flags, timeout=120)
        return result_of(out.stdout)

    between = freshness()
    background = freshness("--background")
    assert between["stale"] > 0, between  # the check sees stale news when there is some
    assert background["stale"] == 0, background
