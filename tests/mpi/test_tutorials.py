"""The tutorials run unchanged under mpiexec and report their best individuals."""

from __future__ import annotations

import pytest

from .conftest import REPO

pytestmark = pytest.mark.mpi

TUTORIALS = REPO / "tutorials"


@pytest.mark.parametrize(
    ("script", "ranks", "extra"),
    [
        ("propulator_example.py", 1, []),
        ("propulator_example.py", 4, ["--function", "rosenbrock"]),
        ("islands_example.py", 4, ["--num_islands", "2"]),
        ("islands_example.py", 8, ["--num_islands", "2", "--pollination"]),
        ("multi_rank_workers_example.py", 4, ["--ranks_per_worker", "2", "--num_islands", "1"]),
        ("multi_rank_workers_example.py", 8, ["--ranks_per_worker", "2", "--num_islands", "2"]),
        ("pso_example.py", 4, ["--variant", "Constriction", "--num_islands", "2"]),
        ("nm_example.py", 4, ["--function", "rosenbrock"]),
        ("cmaes_example.py", 4, ["--function", "sphere", "--adapter", "active"]),
    ],
)
def test_benchmark_tutorial(mpirun, tmp_path, script, ranks, extra):
    args = ["--generations", "15", "--checkpoint", str(tmp_path), "--top_n", "2", *extra]
    out = mpirun(TUTORIALS / script, ranks, *args, timeout=180).stdout
    assert "Top 2 result(s) on island 0" in out, out[-3000:]
    assert (tmp_path / f"{script[:-3]}.log").exists()
