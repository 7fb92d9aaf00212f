"""torch.distributed groups for multi-rank workers (``propulate.utils.distributed``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.mpi, pytest.mark.torch]


@pytest.mark.parametrize(
    ("n", "ranks_per_worker"),
    [(1, 1), (2, 1), (2, 2), (4, 1), (4, 2)],
)
def test_worker_process_groups(mpirun, n: int, ranks_per_worker: int) -> None:
    pytest.importorskip("torch")
    result = mpirun("distributed_group.py", n, str(ranks_per_worker), timeout=180)
    assert f"distributed_group OK: {n} ranks" in result.stdout
    assert f"world size {min(n, ranks_per_worker)}, rank 0, backend gloo, device cpu" in result.stdout


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )


def test_imports_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from mpi4py import MPI\n"
        "from propulate.utils import distributed as d\n"
        "assert d.current_worker_group() is None\n"
        "d.destroy_worker_process_group()\n"
        "try:\n"
        "    d.init_worker_process_group(MPI.COMM_SELF, method='gloo')\n"
        "except ImportError as err:\n"
        "    assert 'pip install \"propulate[torch]\"' in str(err), err\n"
        "else:\n"
        "    raise AssertionError('no ImportError')\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr


def test_unknown_method_is_rejected() -> None:
    code = (
        "from mpi4py import MPI\n"
        "from propulate.utils.distributed import init_worker_process_group\n"
        "init_worker_process_group(MPI.COMM_SELF, method='mpi')\n"
    )
    result = run_python(code)
    assert result.returncode != 0
    assert "ValueError" in result.stderr and "method" in result.stderr and "'nccl-slurm'" in result.stderr


def test_torch_ddp_tutorial(mpirun, tmp_path: Path) -> None:
    """The main job in small: 2 workers of 2 DDP ranks, 2 individuals each, on the bundled slice."""
    pytest.importorskip("torchvision")
    result = mpirun(
        REPO / "tutorials" / "torch_ddp_example.py",
        4,
        "--generations",
        "2",
        "--top-n",
        "2",
        "--checkpoint",
        str(tmp_path / "checkpoints"),
        timeout=300,
        env={"PROPULATE_DATA_CACHE": str(tmp_path / "cache")},
        cwd=REPO,
    )
    assert result.stdout.count("DDP world size 2") == 4  # one line per evaluation, from each worker's root
    assert "Best 2 individual(s) on the bundled MNIST slice" in result.stdout
    best = [
        line
        for line in result.stdout.splitlines()
        if line.startswith(("1. validation loss", "2. validation"))
    ]
    assert len(best) == 2 and all("accuracy" in line for line in best), result.stdout[-2000:]
    assert (tmp_path / "cache" / "mnist-slice" / "MNIST" / "raw" / "train-images-idx3-ubyte").is_file()
