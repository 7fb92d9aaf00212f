"""The SLURM batch scripts in ``slurm/``: they parse, and they run here with stand-ins for srun and sbatch.

The stand-ins in ``tests/slurm_standins`` come first on ``PATH``: ``srun`` runs the step under ``mpiexec``
on ``SLURM_NTASKS`` ranks (or stops it early, or fails, as a test asks), ``sbatch`` and ``scancel`` only
record their arguments. Each test sets the ``SLURM_*`` variables a job would see and runs a batch script
with ``bash``, with the real tutorial and a checkpoint in a temporary folder, and then checks what the
continuation logic did: submit a follow-up job, cancel it, or neither.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from propulate import load_checkpoint

from .mpi.conftest import find_mpiexec, kill_job

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = {"cpu": REPO / "slurm" / "cpu_single_node.sbatch", "gpu": REPO / "slurm" / "gpu_multi_node.sbatch"}
STANDINS = Path(__file__).parent / "slurm_standins"
MACHINERY = "# ========== continuation machinery"
JOB_ID = "1000"
FOLLOW_UP = "4242"  # the job id the sbatch stand-in answers


class Cluster:
    """A temporary folder that plays SLURM for one test: stand-ins on PATH, a job environment, a record."""

    def __init__(self, tmp_path: Path) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        for standin in STANDINS.iterdir():
            shutil.copy(standin, self.bin / standin.name)
            (self.bin / standin.name).chmod(0o755)
        self.record = tmp_path / "record"
        self.record.mkdir()
        self.checkpoint = tmp_path / "checkpoint"
        self.cwd = tmp_path

    def env(self, **overrides: str) -> dict[str, str]:
        """Return the environment of a batch job on 4 ranks, without any SLURM variable of the caller."""
        inherited = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("SLURM_", "SBATCH_", "SRUN_", "PROPULATE_", "FAKE_"))
        }
        return {
            **inherited,
            "PATH": os.pathsep.join([str(self.bin), str(Path(sys.executable).parent), os.environ["PATH"]]),
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
            "PYTHON": sys.executable,
            "SLURM_JOB_ID": JOB_ID,
            "SLURM_JOB_NAME": "propulate-test",
            "SLURM_SUBMIT_DIR": str(REPO),
            "SLURM_NTASKS": "4",
            "SLURM_JOB_NUM_NODES": "1",
            "SLURM_CPUS_PER_TASK": "1",
            "SLURM_JOB_ACCOUNT": "project",
            "SLURM_JOB_PARTITION": "batch",
            "PROPULATE_VENV": "",  # the test's interpreter is on PATH already
            "PROPULATE_CHECKPOINT": str(self.checkpoint),
            "FAKE_SLURM_RECORD": str(self.record),
            "FAKE_MPIEXEC": find_mpiexec(),
            **overrides,
        }

    def start(self, kind: str, **overrides: str) -> subprocess.Popen[str]:
        """Start a batch script as SLURM would: with bash, in the job's environment."""
        return subprocess.Popen(
            ["bash", str(SCRIPTS[kind])],
            cwd=self.cwd,
            env=self.env(**overrides),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    @staticmethod
    def finish(proc: subprocess.Popen[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """Wait for a started batch script; kill it with its step and fail after ``timeout`` seconds."""
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_job(proc)
            out, _ = proc.communicate()
            pytest.fail(f"the batch script ran for more than {timeout} s; output:\n{out[-5000:]}")
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")

    def run(self, kind: str, timeout: float = 120.0, **overrides: str) -> subprocess.CompletedProcess[str]:
        """Run a batch script to its end."""
        return self.finish(self.start(kind, **overrides), timeout)

    def calls(self, command: str | None = None) -> list[list[str]]:
        """Return the recorded calls of the stand-ins (of ``command`` only, if given), as argument lists."""
        path = self.record / "calls"
        lines = path.read_text().splitlines() if path.exists() else []
        calls = [line.split("\t") for line in lines]
        return [call[1:] for call in calls if command is None or call[0] == command]

    def evaluations(self) -> int:
        """Return the generations done in the checkpoint, summed over the workers."""
        checkpoint = load_checkpoint(self.checkpoint)
        return 0 if checkpoint is None else checkpoint.generations_done


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


def assert_follow_up_submitted(cluster: Cluster, kind: str, continuation: int) -> None:
    (call,) = cluster.calls("sbatch")
    assert "--dependency=afterany:" + JOB_ID in call
    assert f"--export=ALL,PROPULATE_CONTINUATION={continuation},PROPULATE_RESUME=1" in call
    assert "--account=project" in call and "--partition=batch" in call
    assert call[-1] == str(SCRIPTS[kind])


# ------------------------------------------------------------------------------------- static checks


@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_script_parses(kind):
    result = subprocess.run(["bash", "-n", str(SCRIPTS[kind])], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", [*SCRIPTS.values(), *sorted(STANDINS.iterdir())], ids=lambda p: p.name)
def test_shellcheck(path):
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed")
    result = subprocess.run([shellcheck, "-s", "bash", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout


def test_both_scripts_share_the_continuation_machinery():
    cpu, gpu = (SCRIPTS[kind].read_text() for kind in ("cpu", "gpu"))
    assert cpu[cpu.index(MACHINERY) :] == gpu[gpu.index(MACHINERY) :]


@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_every_sbatch_line_is_explained(kind):
    lines = SCRIPTS[kind].read_text().splitlines()
    for number, line in enumerate(lines):
        if line.startswith("#SBATCH"):
            above = lines[number - 1]
            assert above.startswith("# ") or above.startswith("#SBATCH"), f"line {number + 1}: {line}"
    assert any(re.match(r"#SBATCH --signal=B:USR1@\d+$", line) for line in lines)


# ------------------------------------------------------------------------------ runs with stand-ins


@pytest.mark.mpi
def test_complete_run_cancels_its_follow_up_and_a_rerun_does_nothing(cluster):
    settings = {"PROPULATE_GENERATIONS": "4", "PROPULATE_TUTORIAL_ARGS": "--num_islands 2"}
    result = cluster.run("cpu", **settings)
    assert result.returncode == 0, result.stdout[-5000:]
    assert_follow_up_submitted(cluster, "cpu", continuation=1)
    (step,) = cluster.calls("srun")
    assert step[0] == "--kill-on-bad-exit=1" and "tutorials/islands_example.py" in step
    assert step[step.index("--generations") + 1] == "4"
    assert step[step.index("--checkpoint") + 1] == str(cluster.checkpoint)
    assert cluster.calls("scancel") == [[FOLLOW_UP]]  # "4242;testcluster" parsed to the job id
    assert cluster.evaluations() == 4 * 4

    calls = cluster.calls()
    again = cluster.run("cpu", **settings)
    assert again.returncode == 0, again.stdout[-5000:]
    assert "is complete: nothing left to do" in again.stdout
    assert cluster.calls() == calls  # no step, no follow-up job

    fresh = cluster.run("cpu", PROPULATE_RESUME="0", **settings)
    assert fresh.returncode == 0, fresh.stdout[-5000:]
    assert len(cluster.calls("srun")) == 2
    assert "--export=ALL,PROPULATE_CONTINUATION=1,PROPULATE_RESUME=1" in cluster.calls("sbatch")[-1]
    assert list(cluster.checkpoint.glob("previous-*/propulate-*.h5"))
    assert cluster.evaluations() == 4 * 4


@pytest.mark.mpi
def test_unfinished_run_keeps_its_follow_up_which_completes_it(cluster):
    settings = {"PROPULATE_GENERATIONS": "5", "PROPULATE_TUTORIAL_ARGS": "--num_islands 2"}
    result = cluster.run("cpu", FAKE_SRUN_MODE="partial", FAKE_SRUN_GENERATIONS="2", **settings)
    assert result.returncode == 0, result.stdout[-5000:]
    assert_follow_up_submitted(cluster, "cpu", continuation=1)
    assert cluster.calls("scancel") == []
    assert f"not complete yet: job {FOLLOW_UP} continues it" in result.stdout
    assert cluster.evaluations() == 2 * 4

    # The follow-up job, the last one the cap allows: it resumes, completes the run and submits nothing.
    follow_up = cluster.run(
        "cpu", PROPULATE_CONTINUATION="1", PROPULATE_MAX_CONTINUATIONS="1", PROPULATE_RESUME="1", **settings
    )
    assert follow_up.returncode == 0, follow_up.stdout[-5000:]
    assert "continuation 1 of at most 1: no follow-up job" in follow_up.stdout
    assert len(cluster.calls("sbatch")) == 1 and cluster.calls("scancel") == []
    assert cluster.evaluations() == 5 * 4


@pytest.mark.mpi
def test_warning_signal_stops_the_step_and_keeps_the_follow_up(cluster):
    proc = cluster.start(
        "cpu",
        PROPULATE_GENERATIONS="1000000",
        PROPULATE_TUTORIAL_ARGS="--num_islands 2 --logging_interval 10",
    )
    log = cluster.checkpoint / "islands_example.log"
    deadline = time.monotonic() + 60
    # Signal only once propulate is evaluating (its signal handlers are installed by then).
    while not (log.exists() and "Progress:" in log.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            Cluster.finish(proc, timeout=10)
            pytest.fail("the step never got to its first progress line")
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGUSR1)  # what `#SBATCH --signal=B:USR1@...` does before the time limit
    result = Cluster.finish(proc, timeout=60)
    assert result.returncode == 0, result.stdout[-5000:]
    assert "SIGUSR1 received: asking propulate to stop" in result.stdout
    assert_follow_up_submitted(cluster, "cpu", continuation=1)
    assert cluster.calls("scancel") == []
    assert 0 < cluster.evaluations() < 1000000 * 4


@pytest.mark.mpi
def test_failed_step_ends_the_chain(cluster):
    result = cluster.run("cpu", FAKE_SRUN_MODE="fail", timeout=60)
    assert result.returncode == 3, result.stdout[-5000:]
    assert "failed (status 3) without being asked to stop" in result.stdout
    assert cluster.calls("scancel") == [[FOLLOW_UP]]


def test_unreadable_checkpoint_is_refused_before_anything_runs(cluster):
    cluster.checkpoint.mkdir()
    (cluster.checkpoint / "propulate-s0000-w000000.h5").write_bytes(b"not an HDF5 file")
    result = cluster.run("cpu", timeout=60)
    assert result.returncode == 1, result.stdout[-5000:]
    assert "cannot be read" in result.stdout
    assert cluster.calls() == []


def test_gpu_script_refuses_ranks_that_do_not_split_into_workers(cluster):
    result = cluster.run("gpu", SLURM_NTASKS="3", PROPULATE_RANKS_PER_WORKER="2", timeout=60)
    assert result.returncode == 1, result.stdout[-5000:]
    assert "3 tasks cannot be split into workers of 2 rank(s)" in result.stdout
    assert cluster.calls() == []


@pytest.mark.mpi
@pytest.mark.torch
def test_gpu_script_trains_with_ddp_and_continues(cluster):
    pytest.importorskip("torchvision")
    # One worker of 2 ranks (gloo on CPU: NCCL falls back), one of its two trainings done in this job.
    settings = {
        "SLURM_NTASKS": "2",
        "PROPULATE_RANKS_PER_WORKER": "2",
        "PROPULATE_TUTORIAL_ARGS": "--batch-size 256",
    }
    result = cluster.run(
        "gpu",
        timeout=240,
        PROPULATE_GENERATIONS="2",
        FAKE_SRUN_MODE="partial",
        FAKE_SRUN_GENERATIONS="1",
        **settings,
    )
    assert result.returncode == 0, result.stdout[-5000:]
    (step,) = cluster.calls("srun")
    assert "tutorials/torch_ddp_example.py" in step and "--distribution=block:block" in step
    assert step[step.index("--method") + 1] == "nccl-slurm"
    assert step[step.index("--ranks-per-worker") + 1] == "2"
    assert_follow_up_submitted(cluster, "gpu", continuation=1)
    assert cluster.calls("scancel") == []
    assert cluster.evaluations() == 1

    # Planned one training per worker, the run is complete: nothing runs and nothing is submitted.
    calls = cluster.calls()
    again = cluster.run("gpu", timeout=60, PROPULATE_GENERATIONS="1", **settings)
    assert again.returncode == 0, again.stdout[-5000:]
    assert "is complete: nothing left to do" in again.stdout
    assert cluster.calls() == calls


@pytest.mark.mpi
@pytest.mark.torch
def test_a_training_longer_than_a_job_continues_if_it_commits_its_state(cluster):
    """No evaluation finished in the job, but a training committed a new state: the follow-up continues it."""
    pytest.importorskip("torchvision")
    args = "--epochs 50 --train-batches 5 --batch-size 64"
    settings = {"SLURM_NTASKS": "2", "PROPULATE_RANKS_PER_WORKER": "2", "PROPULATE_TUTORIAL_ARGS": args}
    proc = cluster.start("gpu", PROPULATE_GENERATIONS="2", **settings)
    deadline = time.monotonic() + 120
    folder = cluster.checkpoint / "evaluations"
    # Stop once the first training committed a state (the tutorial commits every epoch).
    while not (folder.is_dir() and list(folder.glob("*/step-*"))):
        if proc.poll() is not None or time.monotonic() > deadline:
            Cluster.finish(proc, timeout=10)
            pytest.fail("no training committed a state")
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGUSR1)
    result = Cluster.finish(proc, timeout=120)
    assert result.returncode == 0, result.stdout[-5000:]
    assert cluster.evaluations() == 1  # started, not finished: the interrupted training
    pending = load_checkpoint(cluster.checkpoint).pending
    assert sum(len(individuals) for individuals in pending.values()) == 1
    assert "0 evaluation(s) finished, 1 interrupted" in result.stdout
    assert_follow_up_submitted(cluster, "gpu", continuation=1)
    assert cluster.calls("scancel") == []
