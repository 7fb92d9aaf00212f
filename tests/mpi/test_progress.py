"""The progress line under mpiexec: one line for the whole run on the first rank, per-rank log files."""

from __future__ import annotations

import re

import pytest


def run_logged(mpirun, tmp_path, n, num_islands, generations, interval):
    """Run ``progress_run.py``, progress lines every ``interval`` s; its ``[rank ...]`` lines and process."""
    out = mpirun(
        "progress_run.py",
        n,
        "--checkpoint",
        str(tmp_path / "ckpt"),
        "--logs",
        str(tmp_path / "logs"),
        "--generations",
        str(generations),
        "--num-islands",
        str(num_islands),
        env={"PROPULATE_PROGRESS_INTERVAL": str(interval)},
        timeout=120,
    )
    return [line for line in out.stdout.splitlines() if line.startswith("[rank")], out


@pytest.mark.parametrize(("n", "num_islands"), [(1, 1), (2, 1), (4, 2), (8, 4)])
def test_progress_line_on_first_rank_and_per_rank_logs(mpirun, tmp_path, n, num_islands):
    generations = 30
    lines, out = run_logged(mpirun, tmp_path, n, num_islands, generations, 0.01)
    # Standard output: the first rank only.
    assert lines and all(line.startswith("[rank 0]") for line in lines), out.stdout
    progress = [line for line in lines if "Progress: " in line]
    assert progress, out.stdout
    planned = n * generations
    for line in progress:
        done, total = map(int, re.search(r"Progress: ([\d,]+)/([\d,]+) evaluations", line).groups())
        assert total == planned and 1 <= done <= planned
    done_line = next(line for line in lines if "Done: " in line)
    assert f"Done: {planned:,}/{planned:,} evaluations (100.0 %)" in done_line
    assert re.search(r"best loss [0-9.e+-]+", done_line)
    # Every rank has its own file; only the first rank's has the progress lines.
    logs = {p.name: p.read_text() for p in (tmp_path / "logs").iterdir()}
    assert sorted(logs) == sorted(f"rank-{r}.log" for r in range(n))
    assert "Done: " in logs["rank-0.log"]
    assert all("Progress: " not in text for name, text in logs.items() if name != "rank-0.log")


@pytest.mark.parametrize(("n", "num_islands"), [(2, 2), (4, 2), (8, 4)])
def test_done_line_counts_every_island_from_the_final_reports(mpirun, tmp_path, n, num_islands):
    # An interval longer than the run: each island reports once, after its first evaluation, and not again
    # during the run, so the final counts on the first rank come only from the report each island head
    # sends between the two end-of-run drains.
    generations = 20
    lines, out = run_logged(mpirun, tmp_path, n, num_islands, generations, 3600)
    assert sum("Progress: " in line for line in lines) == 1, out.stdout  # the first line, at the start
    planned = n * generations
    done_line = next(line for line in lines if "Done: " in line)
    assert f"Done: {planned:,}/{planned:,} evaluations (100.0 %)" in done_line, done_line
