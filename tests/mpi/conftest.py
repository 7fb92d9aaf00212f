"""Launch MPI test programs under ``mpiexec`` with a hard timeout; mark every test of this folder ``mpi``.

Each test in this folder starts a small program from ``tests/mpi/programs`` under ``mpiexec -n N`` through
``benchmarks/mpijob.py``, the launcher the benchmarks use too. The program makes its own collective
assertions and exits non-zero on failure; a hang is killed with the job's whole process tree after
``timeout`` seconds and fails the test instead of stalling CI.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from benchmarks import mpijob
from benchmarks.mpijob import kill_job

__all__ = ["PROGRAMS", "REPO", "Cases", "find_mpiexec", "finish_job", "kill_job", "launch", "start_job"]

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


#: The most seconds a launch of several cases may take: below pytest-timeout's 600 s per test (pyproject), so
#: that a hung launch is killed here, with its process tree, and fails its cases, rather than left running.
LONGEST_LAUNCH = 500.0

#: The line with which ``_cases.py`` begins a case, its name in the group.
CASE_LINE = r"CASE (\S+)\n"


class Cases:
    """Several cases of one program, run one after the other in one launch per rank count (``_cases.py``).

    ``cases`` maps a case's name to its rank count and the program's arguments, in which ``{tmp}`` stands for
    ``directory``. The first test that asks for a case launches every case of its rank count, in the order
    given (so a case may resume what an earlier one wrote); the others read their output from that launch.
    A launch may take ``timeout`` seconds per case it runs, plus a minute, at most ``LONGEST_LAUNCH``. A
    case's output holds rank 0's lines from its start to the next case's (another rank's line may stray into
    the next case). A case's exit code is 0 once the next case began, else its launch's. A case that fails
    aborts its launch; the cases after it run in a new launch (up to ``RELAUNCHES`` times per rank count),
    so that one failure is reported once, not by every case that came after it.
    """

    #: New launches per rank count for the cases after a failed one.
    RELAUNCHES = 3

    def __init__(
        self,
        program: str,
        cases: Mapping[str, tuple[int, Sequence[str]]],
        directory: Path,
        timeout: float,
        env: dict[str, str] | None = None,
    ) -> None:
        self.program = program
        self.cases = {
            name: (ranks, [arg.replace("{tmp}", str(directory)) for arg in args])
            for name, (ranks, args) in cases.items()
        }
        self.timeout = timeout
        self.env = env
        # Per rank count: each launch, with the names of the cases it began, in order.
        self._launches: dict[int, list[tuple[mpijob.Finished, list[str]]]] = {}

    def _launch(self, ranks: int) -> list[tuple[mpijob.Finished, list[str]]]:
        launches: list[tuple[mpijob.Finished, list[str]]] = []
        pending = [case for case, (n, _) in self.cases.items() if n == ranks]
        while pending and len(launches) <= self.RELAUNCHES:
            batch = {case: self.cases[case][1] for case in pending}
            job = start_job("_cases.py", ranks, str(PROGRAMS / self.program), json.dumps(batch), env=self.env)
            done = mpijob.finish(job, min(60.0 + self.timeout * len(batch), LONGEST_LAUNCH))
            began = re.split(CASE_LINE, done.output)[1::2]
            launches.append((done, began))
            if done.timed_out or done.returncode == 0 or not began:
                break
            pending = pending[pending.index(began[-1]) + 1 :]  # after the one that failed
        return launches

    def __call__(self, name: str) -> subprocess.CompletedProcess[str]:
        """Return the output of case ``name``, launching its rank count's cases if not done yet.

        Fails the test if its launch ran past its timeout (once, for all of the cases it holds).
        """
        ranks, _ = self.cases[name]
        if ranks not in self._launches:
            self._launches[ranks] = self._launch(ranks)
        launches = self._launches[ranks]
        done, began = next(((d, b) for d, b in launches if name in b), launches[-1])
        if done.timed_out:
            command = " ".join(done.command)
            pytest.fail(f"{command} hung, killed after {done.seconds:.0f} s; output:\n{done.output[-5000:]}")
        if name not in began:
            output = f"case {name} did not run; the last launch's output:\n{done.output}"
            return subprocess.CompletedProcess(done.command, done.returncode or 1, output, "")
        parts = re.split(CASE_LINE, done.output)
        index = began.index(name)
        # Every rank ended a case before rank 0 announced the next one.
        returncode = 0 if index + 1 < len(began) else done.returncode
        return subprocess.CompletedProcess(done.command, returncode, parts[2 + 2 * index], "")


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
