"""The tutorials' command lines: one spelling, defaults in ``--help``, only the options each uses, hints.

``--help`` runs as a plain process (MPI starts as a singleton), so most checks need no ``mpiexec``; only the
rank-mismatch hint of the DDP tutorials is launched on one rank.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mpi4py import MPI

from propulate.utils.benchmark_functions import parse_arguments

REPO = Path(__file__).resolve().parents[2]
TUTORIALS = REPO / "tutorials"

COMMON = {"generations", "seed", "verbosity", "checkpoint", "top-n", "logging-interval", "logging-level"}
GA = {"pop-size", "crossover-probability", "mutation-probability", "random-init-probability"}
ISLANDS = {"num-islands", "migration-probability", "pollination"}
PSO = {"variant", "inertia", "cognitive", "social", "clamping-factor"}
#: The options each benchmark tutorial's ``--help`` lists, besides ``--help``: those it reads, no more.
BENCHMARK_OPTIONS = {
    "propulator_example.py": COMMON | GA | {"function"},
    "islands_example.py": COMMON | GA | ISLANDS | {"function", "num-migrants"},
    "multi_rank_workers_example.py": COMMON | GA | ISLANDS | {"num-migrants", "ranks-per-worker"},
    "pso_example.py": COMMON | PSO | ISLANDS | {"function"},
    "nm_example.py": COMMON | {"function"},
    "cmaes_example.py": COMMON | {"function", "adapter"},
}
TORCH_TUTORIALS = [
    "torch_ddp_example.py",
    "surrogate_example.py",
    "lightning_example.py",
    "hf_trainer_example.py",
]
#: What each torch tutorial needs besides torchvision (the trainer integrations' extras).
NEEDS = {"lightning_example.py": ("lightning",), "hf_trainer_example.py": ("transformers", "sklearn")}
ALL_TUTORIALS = [*BENCHMARK_OPTIONS, *TORCH_TUTORIALS]


def help_text(script: str) -> str:
    """Return ``script --help`` as printed on a terminal wide enough that no help line wraps."""
    if script in TORCH_TUTORIALS:
        pytest.importorskip("torchvision")
        for module in NEEDS.get(script, ()):
            pytest.importorskip(module)
    done = run_help(script)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@functools.cache
def run_help(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script --help`` once per test session: three tests read it, a torch tutorial's takes seconds."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "1000"}
    return subprocess.run(
        [sys.executable, str(TUTORIALS / script), "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


def option_entries(text: str) -> dict[str, str]:
    """Map each long option of a ``--help`` text (without dashes, ``help`` left out) to its entry's text.

    An entry starts at a line ``  --name ...`` and goes on over the more deeply indented lines below it.
    """
    entries: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        start = re.match(r"^ {2}(?:-\w, )?--([\w-]+)", line)
        if start:
            name = start.group(1)
            entries[name] = line
        elif name is not None and line.startswith("   "):
            entries[name] += " " + line.strip()
        else:
            name = None
    entries.pop("help", None)
    return entries


@pytest.mark.parametrize("script", ALL_TUTORIALS)
def test_help_spells_options_with_dashes_and_shows_every_default(script: str) -> None:
    text = help_text(script)
    entries = option_entries(text)
    assert entries, text
    assert not [name for name in entries if "_" in name], f"underscores in {script} --help:\n{text}"
    missing = [name for name, entry in entries.items() if "(default:" not in entry]
    assert not missing, f"{script} --help shows no default for {missing}:\n{text}"


@pytest.mark.parametrize("script", list(BENCHMARK_OPTIONS))
def test_help_lists_only_the_options_the_tutorial_uses(script: str) -> None:
    assert set(option_entries(help_text(script))) == BENCHMARK_OPTIONS[script]


def test_1_2_2_underscore_spellings_are_accepted_beside_dashes() -> None:
    underscores = [
        "--pop_size", "3", "--top_n=2", "--num_islands", "4", "--ranks_per_worker", "1",
        "--crossover_probability", "0.5", "--logging_level", "DEBUG", "--inertia", "0.5",
    ]  # fmt: skip
    dashes = [re.sub(r"^--(\w+)", lambda m: "--" + m.group(1).replace("_", "-"), arg) for arg in underscores]
    old, old_set = parse_arguments(MPI.COMM_SELF, underscores)
    new, new_set = parse_arguments(MPI.COMM_SELF, dashes)
    assert old == new and old_set == new_set
    assert (new.pop_size, new.top_n, new.num_islands, new.crossover_probability) == (3, 2, 4, 0.5)
    assert new_set["inertia"] and not new_set["social"]


def test_tutorial_option_groups_reject_options_the_tutorial_does_not_use() -> None:
    config, _ = parse_arguments(MPI.COMM_SELF, ["--adapter", "active"], groups=("cmaes",))
    assert config.adapter == "active" and not hasattr(config, "variant")
    with pytest.raises(SystemExit):
        parse_arguments(MPI.COMM_SELF, ["--variant", "Canonical"], groups=("cmaes",))


def test_each_tutorial_has_its_own_default_checkpoint_folder() -> None:
    folders = {}
    for script in ALL_TUTORIALS:
        text = help_text(script)
        found = re.search(r"\(default: ([^)]+)\)$", option_entries(text).get("checkpoint", ""))
        assert found is not None, text
        folders[script] = found.group(1)
    assert len(set(folders.values())) == len(folders), folders
    assert all(Path(folder) != Path(".") for folder in folders.values()), folders


@pytest.mark.torch
@pytest.mark.parametrize("script", TORCH_TUTORIALS)
def test_too_few_ranks_for_a_worker_suggest_ranks_per_worker_1(
    mpilaunch, tmp_path: Path, script: str
) -> None:
    pytest.importorskip("torchvision")
    for module in NEEDS.get(script, ()):
        pytest.importorskip(module)
    args = ["--ranks-per-worker", "2", "--checkpoint", str(tmp_path)]
    done = mpilaunch(TUTORIALS / script, 1, *args, timeout=120, cwd=tmp_path)
    assert done.returncode != 0, done.stdout[-3000:]
    assert "--ranks-per-worker 1" in done.stdout, done.stdout[-3000:]
    assert "Traceback" not in done.stdout, done.stdout[-3000:]
    assert not list(tmp_path.iterdir()), "nothing is written before the command line is checked"
