"""The tutorials and the README's quickstart run unchanged under mpiexec and print the run's best result."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from propulate import Status, load_checkpoint

from .conftest import REPO

TUTORIALS = REPO / "tutorials"
#: The line the first rank prints at the end: the run's best loss (six significant digits) and parameters.
RESULT = re.compile(r"^Best loss (\S+) with (\{.*\})$", re.MULTILINE)
#: Trains the DDP tutorial's network twice, on one worker of all ranks, with parameters that differ in gamma.
GAMMA_PROGRAM = """
import torch
from mnist_data import prepare_mnist
from mpi4py import MPI
from torch_ddp_example import make_loss_fn, parse_arguments

torch.set_num_threads(1)
loss_fn = make_loss_fn(parse_arguments(), prepare_mnist(None))
params = {"conv_layers": 2, "activation": "relu", "lr": 3e-3}
losses = [loss_fn({**params, "gamma": gamma}, MPI.COMM_WORLD)["loss"] for gamma in (0.1, 1.0)]
if MPI.COMM_WORLD.rank == 0:
    print("losses", *losses)
"""


def quickstart_code() -> str:
    """Return the first Python code block of the README's "Quickstart" section."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```python\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)
    assert block is not None, "README.md's Quickstart section has no Python code block"
    return block.group(1)


def assert_prints_best(out: str, checkpoint: Path) -> None:
    """Assert that ``out`` holds the result line once, naming the checkpoint's best completed individual."""
    printed = RESULT.findall(out)
    assert len(printed) == 1, f"{len(printed)} result lines; output:\n{out[-3000:]}"
    loss, params = float(printed[0][0]), ast.literal_eval(printed[0][1])
    loaded = load_checkpoint(checkpoint)
    assert loaded is not None
    completed = [ind for ind in loaded.population if ind.status is Status.COMPLETED]
    best = min(ind.loss for ind in completed)
    assert loss == pytest.approx(best, rel=1e-5, abs=1e-12), out[-3000:]
    assert any(ind.loss == best and ind.params() == params for ind in completed), out[-3000:]


@pytest.mark.parametrize(
    ("script", "ranks", "extra"),
    [
        ("propulator_example.py", 1, []),
        ("propulator_example.py", 4, ["--function", "rosenbrock"]),
        ("islands_example.py", 4, ["--num_islands", "2"]),
        ("islands_example.py", 8, ["--num_islands", "2", "--pollination"]),
        ("multi_rank_workers_example.py", 4, ["--ranks_per_worker", "2", "--num_islands", "1"]),
        ("multi_rank_workers_example.py", 8, ["--ranks_per_worker", "2", "--num_islands", "2"]),
        ("pso_example.py", 4, ["--variant", "Constriction", "--num_islands", "2"]),
        ("nm_example.py", 4, ["--function", "rosenbrock"]),
        ("cmaes_example.py", 4, ["--function", "sphere", "--adapter", "active"]),
    ],
)
def test_benchmark_tutorial(mpirun, tmp_path, script, ranks, extra):
    args = ["--generations", "15", "--checkpoint", str(tmp_path), "--top_n", "2", *extra]
    out = mpirun(TUTORIALS / script, ranks, *args, timeout=180).stdout
    assert "Top 2 result(s) on island 0" in out, out[-3000:]
    assert (tmp_path / f"{script[:-3]}.log").exists()
    assert_prints_best(out, tmp_path)


def test_readme_quickstart(mpirun, tmp_path):
    """The quickstart as the README shows it: saved as my_search.py and run on 8 ranks."""
    script = tmp_path / "my_search.py"
    script.write_text(quickstart_code(), encoding="utf-8")
    out = mpirun(script, 8, timeout=120, cwd=tmp_path).stdout
    assert_prints_best(out, tmp_path / "checkpoints" / "quickstart")
    assert not list(tmp_path.glob("*.h5")), "nothing written into the working directory itself"


@pytest.mark.torch
def test_ddp_tutorial_gamma_changes_the_loss(mpirun, tmp_path):
    """The learning rate decays after every batch, so gamma matters within the default single epoch."""
    pytest.importorskip("torchvision")
    program = tmp_path / "gamma.py"
    program.write_text(GAMMA_PROGRAM, encoding="utf-8")
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(TUTORIALS)]), "PROPULATE_DATA_CACHE": str(tmp_path)}
    out = mpirun(program, 2, timeout=120, env=env, cwd=tmp_path).stdout
    found = re.search(r"^losses (\S+) (\S+)$", out, flags=re.MULTILINE)
    assert found is not None, out[-3000:]
    decayed, constant = (float(x) for x in found.groups())
    assert abs(decayed - constant) > 0.01 * constant, out[-3000:]
