"""torch.distributed groups for multi-rank workers (``propulate.utils.distributed``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..browser import launch, open_offline

REPO = Path(__file__).resolve().parents[2]
LAUNCH_CHECK = Path(__file__).parent / "programs" / "launch_check.py"
# Variables of launchers that may surround the test run itself; the launches below set their own.
LAUNCHER_PREFIXES = ("SLURM_", "PMI_", "PMIX_", "OMPI_", "MPI_LOCAL", "HYDRA_")
LAUNCHER_NAMES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "PROPULATE_SKIP_LAUNCH_CHECK")
#: The sections of the HTML report (``propulate.report.html.SECTIONS``), in the order of the page.
REPORT_SECTIONS = [
    "best-loss",
    "top",
    "parallel",
    "parameters",
    "timeline",
    "migration",
    "interim",
    "failures",
]
PLOT_SECTIONS = [name for name in REPORT_SECTIONS if name not in ("top", "failures")]
# True once each plot section holds a plotly figure that plotly has drawn (its svg.main-svg).
PLOTS_RENDERED = """sections => sections.every(id =>
    document.querySelector(`section#${id} .plotly-graph-div svg.main-svg`))"""
# Per section: its plotly figures, how many of them are drawn, the rows of its tables, its text.
SECTION_CONTENTS = """() => [...document.querySelectorAll("section[id]")].map(section => ({
    id: section.id,
    plots: section.querySelectorAll(".plotly-graph-div").length,
    rendered: [...section.querySelectorAll(".plotly-graph-div")].filter(
        div => div.querySelector("svg.main-svg")).length,
    rows: section.querySelectorAll("table tbody tr").length,
    text: section.innerText,
}))"""

pytestmark = pytest.mark.torch


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


def start_singletons(per_process: list[dict[str, str]]) -> list[subprocess.CompletedProcess[str]]:
    """Start one plain process (an MPI singleton) of ``launch_check.py`` per environment, all at once."""
    base = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(LAUNCHER_PREFIXES) and name not in LAUNCHER_NAMES
    }
    base.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    procs = [
        subprocess.Popen(
            [sys.executable, str(LAUNCH_CHECK)],
            env={**base, **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for extra in per_process
    ]
    results = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            pytest.fail("a singleton process of launch_check.py hung for more than 60 s")
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, ""))
    return results


@pytest.mark.parametrize(
    ("launcher", "named"),
    [
        ({"SLURM_STEP_ID": "0", "SLURM_NTASKS": "2"}, "SLURM_NTASKS=2 (with SLURM_PROCID="),
        ({"WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "WORLD_SIZE=2 (with RANK="),
    ],
)
def test_processes_that_are_not_one_mpi_job_all_fail_fast(launcher: dict[str, str], named: str) -> None:
    """srun without SLURM's PMI, or torchrun: two processes, each an MPI world of one rank."""
    rank_variable = "SLURM_PROCID" if "SLURM_NTASKS" in launcher else "RANK"
    start = time.monotonic()
    results = start_singletons([{**launcher, rank_variable: str(rank)} for rank in range(2)])
    assert time.monotonic() - start < 60
    for result in results:
        assert result.returncode == 3, result.stdout[-3000:]
        assert named in result.stdout and "but MPI's COMM_WORLD has 1 rank(s)" in result.stdout, result.stdout
        assert "not with torchrun" in result.stdout, result.stdout


def test_the_launch_check_can_be_skipped_and_ignores_the_batch_script() -> None:
    results = start_singletons(
        [
            {
                "SLURM_STEP_ID": "0",
                "SLURM_NTASKS": "2",
                "SLURM_PROCID": "0",
                "PROPULATE_SKIP_LAUNCH_CHECK": "1",
            },
            {"SLURM_NTASKS": "2", "SLURM_PROCID": "0"},  # sbatch's script, outside any srun step
        ]
    )
    for result in results:
        assert result.returncode == 0 and "launch ok" in result.stdout, result.stdout[-3000:]


def test_a_disagreement_seen_by_one_rank_fails_every_rank(mpilaunch) -> None:
    result = mpilaunch(LAUNCH_CHECK, 2, "1", timeout=120, env={"PROPULATE_SKIP_LAUNCH_CHECK": ""})
    assert result.returncode != 0
    for rank in range(2):
        assert f"[{rank}] launch error: launch: on rank 1 " in result.stdout, result.stdout[-3000:]
    assert "WORLD_SIZE=4 (with RANK=1) says that torchrun started 4 processes" in result.stdout


def test_torch_ddp_tutorial(mpirun, tmp_path: Path) -> None:
    """The main job in small: 2 workers of 2 DDP ranks, 2 individuals each, on the bundled slice; then the
    HTML report of its checkpoint, every section drawn in headless Chromium offline."""
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

    # The run's HTML report, built as a user would, then read from the page Chromium rendered offline.
    report = tmp_path / "report.html"
    env = {name: value for name, value in os.environ.items() if not name.startswith(LAUNCHER_PREFIXES)}
    build = subprocess.run(
        [sys.executable, "-m", "propulate", "report", str(tmp_path / "checkpoints"), "--html", str(report)],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-4000:]
    with launch() as browser:
        errors: list[str] = []
        page, escaped = open_offline(browser, report, errors)
        page.wait_for_function(PLOTS_RENDERED, arg=PLOT_SECTIONS, timeout=30_000)
        sections = page.evaluate(SECTION_CONTENTS)
        states = page.evaluate("() => JSON.parse(document.getElementById('report-data').textContent).states")
        page.context.close()
    assert not errors, f"the report threw in the browser: {errors}"
    assert not escaped, f"the report tried the network: {escaped}"
    assert [section["id"] for section in sections] == REPORT_SECTIONS, sections
    found = {section["id"]: section for section in sections}
    for name in PLOT_SECTIONS:
        assert found[name]["plots"] == found[name]["rendered"] == 1, found[name]
    assert sum(states.values()) == 4, states
    assert 1 <= found["top"]["rows"] <= states["COMPLETE"], (states, found["top"])
    failures = found["failures"]
    if states.get("FAIL"):
        assert failures["rows"] == min(states["FAIL"], 200), failures
    else:
        assert failures["rows"] == 0 and "No evaluation failed." in failures["text"], failures
