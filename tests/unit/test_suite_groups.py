"""The groups in which pytest-xdist's workers run the MPI tests (``tests/conftest.py``)."""

from __future__ import annotations

from tests.conftest import MPI_TESTS, REPO, TRAINER_TESTS


def test_the_trainer_group_names_modules_that_exist_among_the_mpi_tests():
    """A renamed module would fall silently into the other group and unbalance the two workers."""
    for path in TRAINER_TESTS:
        assert (REPO / path).is_file(), f"{path} does not exist: update TRAINER_TESTS in tests/conftest.py"
        assert path.startswith(MPI_TESTS), path
