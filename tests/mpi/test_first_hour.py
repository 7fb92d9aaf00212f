"""A new user's first hour (issue 21): the log tells the truth about resumes, failures and stops, once.

Each test failed before the change it checks: a finished run resumed logged nothing about it (finding 1), a
run whose every evaluation failed exited 0 with twelve full tracebacks and no counts (2), a Ctrl-C was
announced by every rank, one island was said to pollinate, and the progress line left out what the
island's other workers had finished meanwhile (4).
"""

from __future__ import annotations

import re

import pytest

PROGRAM = "first_hour.py"


def lines_with(out: str, text: str) -> list[str]:
    return [line for line in out.splitlines() if text in line]


def test_a_new_search_and_a_resume_say_what_the_checkpoint_holds_and_what_is_left(mpirun, tmp_path):
    out = mpirun(PROGRAM, 2, "ok", str(tmp_path), "3", timeout=60).stdout
    assert len(lines_with(out, "Run: a new search in")) == 1, out
    assert "2 worker(s) x 3 generation(s) = 6 evaluation(s) planned" in out
    assert len(lines_with(out, "Done: 6/6 evaluations")) == 1 and "6 completed, 0 failed" in out, out

    again = mpirun(PROGRAM, 2, "ok", str(tmp_path), "3", timeout=60).stdout
    (resumed,) = lines_with(again, "Run: resuming from")
    assert "6 individual(s)" in resumed and "6 done, 0 left" in resumed, resumed
    (nothing,) = lines_with(again, "WARNING: Run: nothing left to do")
    assert "resume=False" in nothing and "PROPULATE_RESUME=0" in nothing, nothing

    more = mpirun(PROGRAM, 2, "ok", str(tmp_path), "5", timeout=60).stdout
    assert "6 done, 4 left" in more, more
    (changed,) = lines_with(more, "WARNING: Run: settings differ from the checkpoint's")
    assert "generations 3 -> 5" in changed, changed
    assert not lines_with(more, "nothing left to do")


def test_a_run_whose_every_evaluation_fails_raises_on_every_rank_with_counts(mpirun, tmp_path):
    out = mpirun(PROGRAM, 2, "fail", str(tmp_path), "3", timeout=60).stdout
    raised = lines_with(out, "RAISED on rank ")
    assert len(raised) == 2 and all("RunFailedError" in line for line in raised), out
    assert all("0 completed, 6 failed, 0 pruned, 0 interrupted" in line for line in raised), out
    (done,) = lines_with(out, "Done: 6/6 evaluations")
    assert done.endswith("0 completed, 6 failed, 0 pruned, 0 interrupted."), done
    # One traceback per worker for the same error; the repeats are one line each.
    assert out.count("Traceback (most recent call last)") == 2, out
    assert out.count("ValueError: this loss always fails (as before; traceback not repeated)") == 4, out


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_stop_signal_to_every_rank_is_announced_once(mpirun, tmp_path, ranks):
    out = mpirun(PROGRAM, ranks, "signal", str(tmp_path), "20", "2", timeout=90).stdout
    announced = lines_with(out, "SIGINT received; stopping")
    assert len(announced) == 1 and announced[0].startswith("[rank 0]"), out
    assert len(lines_with(out, "stopped early")) == 1, out
    assert not lines_with(out, "RAISED"), out


def test_one_island_is_not_said_to_migrate_or_pollinate(mpirun, tmp_path):
    out = mpirun(PROGRAM, 2, "ok", str(tmp_path), "2", timeout=60).stdout
    (layout,) = lines_with(out, "Islands: 2 ranks")
    assert "no migration (one island)" in layout and "probability" not in layout, layout
    two = mpirun(PROGRAM, 2, "ok", str(tmp_path / "two"), "2", "2", timeout=60).stdout
    (layout,) = lines_with(two, "Islands: 2 ranks")
    assert re.search(r"pollination with probability 0\.9\.$", layout), layout


def test_the_progress_line_counts_what_the_islands_peers_finished_meanwhile(mpirun, tmp_path):
    """Rank 0 evaluates for a second while rank 1 finishes all three of its evaluations: rank 0's first line
    counts them (it used to say 1/6, taking in its peer's results only when it bred next)."""
    env = {"PROPULATE_PROGRESS_INTERVAL": "0.001"}
    out = mpirun(PROGRAM, 2, "lag", str(tmp_path), "3", timeout=60, env=env).stdout
    first = lines_with(out, "Progress: ")[0]
    assert "Progress: 4/6 evaluations" in first, out
