"""How the suite shares out among pytest-xdist workers: the tests that launch MPI jobs form two groups.

The README's test command is ``pytest -n 2 --dist loadgroup``: the tests under ``tests/mpi`` and the SLURM
scripts' (:data:`MPI_TESTS`) form two groups, each run by one worker one after the other, each job of up to
8 ranks sharing the machine with at most one job of the other group: the jobs of the trainer integrations
and tutorials (:data:`TRAINER_TESTS`, whose ranks spend seconds importing PyTorch, Lightning or
Transformers) and the library's own jobs. The two groups take about as long; a worker that finishes its
group runs the other tests (pure objects in one process, the docs), one at a time. Many MPI jobs wait (for
timeouts, signals, sleeping losses) rather than compute, so with all of them in one group the other worker
would stand idle for most of the run. The groups are chosen by path, in a scheduler of our own, rather than
with ``xdist_group`` marks: pytest 9.2 names a test by an attribute that pytest-xdist 3.8 does not rename,
so its marks group nothing.

It also builds the docs once for the suite's checks of them (the ``docs_html`` fixture). A session fixture
is built once per worker, so the tests that read the build (:data:`DOCS_TESTS`) form one unit: one worker
runs them all, and the docs are built once (about 25 s of processor time), not once on each worker.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Seconds a build of the docs may take: about 25 s of processor time here, room for a slow CI machine.
DOCS_BUILD_TIMEOUT = 300

#: The tests that launch jobs under ``mpiexec`` (paths relative to the repository, as in their node ids).
MPI_TESTS = ("tests/mpi/", "tests/test_slurm_scripts.py")
#: Of those, the ones whose jobs import PyTorch and the trainers on every rank: one group of their own.
TRAINER_TESTS = tuple(
    f"tests/mpi/test_{name}.py"
    for name in ("lightning", "hf_trainer", "distributed", "pbt", "stops", "tutorial_cli")
)
#: The tests that read the suite's build of the docs (the ``docs_html`` fixture): one unit, built once.
DOCS_TESTS = ("tests/test_docs.py", "tests/test_docs_rendering.py")


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: two work units of the MPI tests, one of the docs', every other test alone.

    pytest-xdist hands out the units with the most tests first, one to each worker: the two MPI groups.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class MPIGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(TRAINER_TESTS):
                return "mpi-trainers"
            if nodeid.startswith(DOCS_TESTS):
                return "docs"
            return "mpi" if nodeid.startswith(MPI_TESTS) else nodeid

    return MPIGroups(config, log)


@pytest.fixture(scope="session")
def docs_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build ``docs/`` as CI does (``python -m sphinx -W --keep-going -b html docs OUT``); the HTML folder.

    Once per test process: the build checks and the browser checks read the same pages. Sphinx runs in a
    subprocess, so autodoc imports this checkout of propulate.
    """
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    out = tmp_path_factory.mktemp("docs") / "html"
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "docs", str(out)]
    try:
        build = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=DOCS_BUILD_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"sphinx-build did not finish within {DOCS_BUILD_TIMEOUT} s: {' '.join(command)}")
    assert build.returncode == 0, f"sphinx-build -W failed:\n{build.stderr[-6000:]}\n{build.stdout[-2000:]}"
    return out
