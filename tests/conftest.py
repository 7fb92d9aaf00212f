"""How the suite shares out among pytest-xdist workers: the tests that launch MPI jobs in two lanes.

The README's test command is ``pytest -n 2 --dist loadgroup``. The tests that launch jobs under ``mpiexec``
form two groups, each run one test after the other by one worker: the trainers' tests
(:data:`TRAINER_TESTS`: Lightning, the Hugging Face Trainer, the DDP tutorial's preemptions and process
groups, long jobs that spend their time in PyTorch) and every other MPI test (:data:`MPI_TESTS`). The first
worker that is free takes the next group or test, so the other worker runs the trainers' group and then the
tests of one process (pure objects, the docs) while the first runs the rest of the MPI tests: at most two
jobs run at once, as on a cluster's shared login node. The groups are chosen by path, in a scheduler of our
own, rather than with ``xdist_group`` marks: pytest 9.2 names a test by an attribute that pytest-xdist 3.8
does not rename, so its marks group nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

#: The tests that launch jobs under ``mpiexec`` (paths relative to the repository, as in their node ids).
MPI_TESTS = ("tests/mpi/", "tests/test_slurm_scripts.py")

#: Of those, the trainers' (a group of their own, beside the others).
TRAINER_TESTS = tuple(
    f"tests/mpi/test_{name}.py" for name in ("lightning", "hf_trainer", "preemption", "distributed")
)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: each group of MPI tests one work unit, every other test one of its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class MPITestsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(TRAINER_TESTS):
                return "mpi-trainers"
            return "mpi" if nodeid.startswith(MPI_TESTS) else nodeid

    return MPITestsTogether(config, log)
