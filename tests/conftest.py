"""How the suite shares out among pytest-xdist workers: the tests that launch MPI jobs go to one of them.

The README's test command is ``pytest -n 2 --dist loadgroup``: the tests under ``tests/mpi`` and the SLURM
scripts' (:data:`MPI_TESTS`) form one group that one worker runs one after the other, each job of up to 8
ranks with the machine to itself but for the other worker, which runs everything else meanwhile (pure
objects in one process, the docs). The group is chosen by path, in a scheduler of our own, rather than with
``xdist_group`` marks: pytest 9.2 names a test by an attribute that pytest-xdist 3.8 does not rename, so
its marks group nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

#: The tests that launch jobs under ``mpiexec`` (paths relative to the repository, as in their node ids).
MPI_TESTS = ("tests/mpi/", "tests/test_slurm_scripts.py")


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: one work unit of every MPI test, every other test a unit of its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class MPITestsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "mpi" if nodeid.startswith(MPI_TESTS) else nodeid

    return MPITestsTogether(config, log)
