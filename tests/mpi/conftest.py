"""Launch MPI test programs under ``mpiexec`` with a hard timeout; mark every test of this folder ``mpi``.

Each test in this folder starts a small program from ``tests/mpi/programs`` under ``mpiexec -n N`` through
``benchmarks/mpijob.py``, the launcher the benchmarks use too. The program makes its own collective
assertions and exits non-zero on failure; a hang is killed with the job's whole process tree after
``timeout`` seconds and fails the test instead of stalling CI.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks import mpijob
from benchmarks.mpijob import kill_job

__all__ = ["PROGRAMS", "REPO", "find_mpiexec", "finish_job", "kill_job", "launch", "start_job"]

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"
REPO = mpijob.REPO


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``mpi`` every test collected from this folder (``-m "not mpi"`` leaves them out)."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.mpi)


def find_mpiexec() -> str:
    """Return the jobs' ``mpiexec`` (next to the running interpreter, else on ``PATH``); skip if none."""
    try:
        return mpijob.find_mpiexec()
    except FileNotFoundError as missing:
        pytest.skip(str(missing))


def start_job(
    program: str | Path,
    n: int,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    capture: bool = True,
) -> subprocess.Popen[str]:
    """Start ``program`` (a path relative to ``programs/``, or absolute) on ``n`` ranks in the background."""
    find_mpiexec()
    return mpijob.start(PROGRAMS / program, n, args, env=env, cwd=cwd, capture=capture)


def finish_job(job: subprocess.Popen[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Wait for a started job; fail the test, after killing the job's tree, past ``timeout`` seconds."""
    done = mpijob.finish(job, timeout)
    if done.timed_out:
        command = " ".join(done.command)
        pytest.fail(f"{command} hung for more than {timeout} s; output:\n{done.output[-5000:]}")
    return subprocess.CompletedProcess(done.command, done.returncode, done.output, "")


def launch(
    program: str | Path,
    n: int,
    *args: str,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``program`` on ``n`` ranks to its end; fail the test if it runs past ``timeout`` seconds."""
    return finish_job(start_job(program, n, *args, env=env, cwd=cwd), timeout)


@pytest.fixture
def mpirun() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Return a launcher that asserts a zero exit code and returns the completed process."""

    def run(program: str | Path, n: int, *args: str, timeout: float = 120.0, **kwargs: object):
        result = launch(program, n, *args, timeout=timeout, **kwargs)  # type: ignore[arg-type]
        assert result.returncode == 0, f"exit code {result.returncode}; output:\n{result.stdout[-8000:]}"
        return result

    return run


@pytest.fixture
def mpilaunch() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Return the raw launcher, for tests that expect a failure."""
    return launch
