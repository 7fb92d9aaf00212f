"""Start a Python program under ``mpiexec`` with a hard timeout: the one launcher of the benchmarks and tests.

A job runs in a session of its own, with this repository first on ``PYTHONPATH`` and unbuffered output, its
standard error joined to its standard output unless asked otherwise. A job that runs past its timeout is
killed with its whole process tree (the launcher, Hydra's proxies and the ranks, which each start a session
of their own and so escape a kill of the launcher's process group), as a node failure would; with a
``grace`` period it is first sent SIGTERM, which ``mpiexec`` forwards to every rank.

The benchmark scripts import this module as ``mpijob`` (their own folder is on ``sys.path`` when they run),
the tests as ``benchmarks.mpijob`` (the repository's root is on ``sys.path`` under pytest). It uses the
standard library only, so that importing it costs nothing and needs no MPI.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

REPO = Path(__file__).resolve().parents[1]

#: One thread per BLAS library in each rank: the benchmarks' setting, so that ranks do not oversubscribe.
ONE_BLAS_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Finished:
    """A job that ended, or was killed at its timeout.

    ``output`` holds standard output and standard error together, unless the job was started with
    ``errors_apart``; then standard error is in ``errors``. ``seconds`` is wall-clock time from the start.
    """

    command: list[str]
    returncode: int
    output: str
    errors: str
    seconds: float
    timed_out: bool


def find_mpiexec(python: str | Path | None = None) -> str:
    """Return the ``mpiexec`` next to ``python`` (default: the running interpreter), else the one on ``PATH``.

    Next to the interpreter is where the PyPI MPI runtime puts it, in the interpreter's virtual environment.

    Raises
    ------
    FileNotFoundError
        If there is neither.
    """
    interpreter = Path(python or sys.executable)
    beside = interpreter.parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError(f"no mpiexec next to {interpreter} nor on PATH")
    return found


def command(
    program: str | Path, ranks: int, args: Sequence[str] = (), python: str | Path | None = None
) -> list[str]:
    """Return the command line that runs ``program`` with ``args`` on ``ranks`` ranks.

    ``python`` is the ranks' interpreter (default: the running one), started by :func:`find_mpiexec`'s
    ``mpiexec`` for it.
    """
    interpreter = str(python or sys.executable)
    return [find_mpiexec(interpreter), "-n", str(ranks), interpreter, str(program), *map(str, args)]


def environment(env: Mapping[str, str] | None = None, repo_on_path: bool = True) -> dict[str, str]:
    """Return the job's environment: this process's, then this repository on ``PYTHONPATH``, then ``env``.

    With ``repo_on_path`` false, ``PYTHONPATH`` is left out altogether (for an interpreter that imports a
    propulate installed in its own environment).
    """
    full = dict(os.environ)
    if repo_on_path:
        full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    else:
        full.pop("PYTHONPATH", None)
    full["PYTHONUNBUFFERED"] = "1"
    full.update(env or {})
    return full


def start(
    program: str | Path,
    ranks: int,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    python: str | Path | None = None,
    repo_on_path: bool = True,
    capture: bool = True,
    errors_apart: bool = False,
) -> subprocess.Popen[str]:
    """Start ``program`` on ``ranks`` ranks in a session of its own; return the running launcher.

    ``env`` adds to or overrides the environment of :func:`environment`. With ``capture`` false the job's
    output is discarded (for a job that is polled, not read: a full pipe would block it).
    """
    sink = subprocess.PIPE if capture else subprocess.DEVNULL
    return subprocess.Popen(
        command(program, ranks, args, python),
        stdout=sink,
        stderr=subprocess.PIPE if capture and errors_apart else (subprocess.STDOUT if capture else sink),
        text=True,
        env=environment(env, repo_on_path),
        cwd=cwd,
        start_new_session=True,
    )


def finish(job: subprocess.Popen[str], timeout: float, grace: float = 0.0) -> Finished:
    """Wait at most ``timeout`` seconds for ``job``; past it, kill the job's whole tree (:func:`kill_job`).

    With ``grace`` seconds, the job is first sent SIGTERM and given that long to end by itself.
    ``seconds`` counts from this call, so call it right after :func:`start`.
    """
    began = time.perf_counter()
    timed_out = False
    output: str | None
    errors: str | None
    try:
        output, errors = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        output, errors = _stop(job, grace)
    return Finished(
        command=[str(part) for part in cast("list[str]", job.args)],  # as start() built it
        returncode=job.returncode,
        output=output or "",
        errors=errors or "",
        seconds=time.perf_counter() - began,
        timed_out=timed_out,
    )


def _stop(job: subprocess.Popen[str], grace: float) -> tuple[str | None, str | None]:
    """End a job that ran over: SIGTERM and ``grace`` seconds first if ``grace``, then the tree's kill."""
    if grace > 0:
        job.send_signal(signal.SIGTERM)
        try:
            return job.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    kill_job(job)
    return job.communicate()


def run(
    program: str | Path,
    ranks: int,
    args: Sequence[str] = (),
    *,
    timeout: float,
    grace: float = 0.0,
    **options: Any,
) -> Finished:
    """Run ``program`` on ``ranks`` ranks to its end or timeout: :func:`start`, then :func:`finish`."""
    return finish(start(program, ranks, args, **options), timeout, grace)


def descendants(pid: int) -> list[int]:
    """Return the pids of every process below ``pid``, deepest first (read from ``/proc``)."""
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


def kill_job(job: subprocess.Popen[str]) -> None:
    """SIGKILL a started job: the ranks, their proxies and the launcher, as a node failure would.

    The processes are stopped first, parents before children, until no new one appears: a process forked
    after the tree was listed would otherwise escape, reparented away from the tree by its parent's death.
    """
    stopped: list[int] = []
    while True:
        new = [pid for pid in [job.pid, *descendants(job.pid)[::-1]] if pid not in stopped]
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
