"""Island news relayed over several hops (``propulate.mpi.dissemination``) under mpiexec.

The default radix keeps islands of up to 8 workers direct, so these launches set a radix of 2 or 3: news
then reaches most workers through one or two others. ``programs/island_model.py`` asserts collectively
what the island model guarantees (exact counts, identical populations within each island, migration
conserving active individuals, pollination replacing one individual per immigrant); the messages each
worker sends per generation are bounded by its fingers, not by the island's size.
"""

from __future__ import annotations

import json

import pytest


def result_of(output: str) -> dict:
    line = next(line for line in output.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def island_model(mpirun, ranks, tmp_path, *args):
    out = mpirun("island_model.py", ranks, *args, "--checkpoint", str(tmp_path), timeout=180)
    return result_of(out.stdout)


@pytest.mark.parametrize(("ranks", "radix"), [(3, 2), (4, 2), (5, 2), (8, 2), (8, 3)])
def test_one_island_relayed(mpirun, ranks, radix, tmp_path):
    result = island_model(mpirun, ranks, tmp_path, "--generations", "40", "--relay-radix", str(radix))
    assert result["islands"][0][3] == 40 * ranks


def test_relayed_messages_per_generation_are_bounded_by_the_fingers(mpirun, tmp_path):
    direct = island_model(mpirun, 8, tmp_path / "direct", "--generations", "60")
    relayed = island_model(mpirun, 8, tmp_path / "relayed", "--generations", "60", "--relay-radix", "2")
    # 7 peers directly; 3 fingers (1, 2, 4) relayed, one message each per generation (3.08 measured).
    assert direct["messages_per_generation"] >= 7
    assert relayed["messages_per_generation"] < 4, relayed


@pytest.mark.parametrize("pollination", [False, True], ids=["migration", "pollination"])
def test_two_islands_of_four_relayed(mpirun, pollination, tmp_path):
    args = ["--generations", "40", "--num-islands", "2", "--relay-radix", "2"]
    result = island_model(mpirun, 8, tmp_path, *args, *(["--pollination"] if pollination else []))
    assert result["immigrants"] > 0


def test_two_ranks_per_worker_relayed(mpirun, tmp_path):
    island_model(mpirun, 8, tmp_path, "--generations", "25", "--ranks-per-worker", "2", "--relay-radix", "2")


def test_uneven_islands_relayed(mpirun, tmp_path):
    args = ["--generations", "30", "--num-islands", "3", "--island-sizes", "1,2,5", "--relay-radix", "2"]
    island_model(mpirun, 8, tmp_path, *args)


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
