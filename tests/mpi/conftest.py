"""Launch MPI test programs under ``mpiexec`` with a hard timeout.

Each test in this folder starts a small program from ``tests/mpi/programs`` under ``mpiexec -n N``. The
program makes its own collective assertions and exits non-zero on failure; a hang is killed after
``timeout`` seconds and fails the test instead of stalling CI.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"
REPO = Path(__file__).resolve().parents[2]


def find_mpiexec() -> str:
    """Prefer the ``mpiexec`` next to the running interpreter (the PyPI MPI runtime)."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        pytest.skip("no mpiexec on PATH")
    return found


def descendants(pid: int) -> list[int]:
    """Return the pids of every process below ``pid``, deepest first.

    Hydra's proxies and the ranks each start a session of their own, so killing the launcher's process
    group or session does not reach them.
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found[::-1]


def kill_job(proc: subprocess.Popen) -> None:
    """SIGKILL a launched job: the ranks, their proxies and the launcher, as a node failure would.

    The processes are stopped first, parents before children, until no new one appears: a process forked
    after the tree was listed would otherwise escape, reparented away from the tree by its parent's death.
    """
    stopped: list[int] = []
    while True:
        new = [pid for pid in [proc.pid, *descendants(proc.pid)[::-1]] if pid not in stopped]
        if not new:
            break
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
            stopped.append(pid)
    for pid in stopped[::-1]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def launch(
    program: str | Path,
    n: int,
    *args: str,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``program`` on ``n`` ranks; kill the whole process group after ``timeout`` seconds."""
    path = Path(program)
    if not path.is_absolute():
        path = PROGRAMS / path
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **(env or {})}
    cmd = [find_mpiexec(), "-n", str(n), sys.executable, str(path), *args]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_job(proc)
        out, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} hung for more than {timeout} s; output:\n{out[-5000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


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
