"""The HTML report, the report's metrics and the missing-package message (report/html.py, __main__.py)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from propulate import Float
from propulate.checkpoint import make_uid
from propulate.individual import Individual, Status
from propulate.report.frame import interim_losses, to_dataframe
from propulate.report.html import SECTIONS, build_html, migration_counts
from propulate.report.text import format_report

pytest.importorskip("plotly")

REPO = Path(__file__).resolve().parents[2]
LIMITS = {"lr": Float(1e-5, 1e-1, log=True), "layers": (1, 8), "act": ("relu", "tanh")}
T0 = 1_700_000_000.0


def evaluation(island: int, worker: int, generation: int, loss: float, status: Status) -> Individual:
    params = {"lr": 10.0 ** -(1 + generation % 4), "layers": 1 + generation % 8, "act": "relu"}
    ind = Individual(params, LIMITS, generation=generation, rank=worker)
    ind.island, ind.migration_history = island, str(island)
    ind.uid = make_uid(0, 2 * island + worker, generation)
    ind.status, ind.loss = status, loss
    ind.evaltime, ind.evalperiod = T0 + generation + 1.0, 1.0
    ind.metrics = {} if status is Status.FAILED else {"accuracy": 1.0 / (1.0 + loss)}
    if status is Status.FAILED:
        ind.error = (
            f"Traceback (most recent call last):\n  ...\nValueError: diverged at generation {generation}"
        )
    curve = [loss + 2.0, loss + 1.0, loss] if status is Status.COMPLETED else [loss + 1.0, loss]
    if status is not Status.FAILED:
        ind.surrogate_data = {"curve": curve, "loss": None, "pruned": status is Status.PRUNED}
    return ind


@pytest.fixture
def population() -> list[Individual]:
    """Two islands of two workers, six generations: completions, prunings, failures and two migrations."""
    inds = []
    for island in range(2):
        for worker in range(2):
            for generation in range(6):
                status = [Status.COMPLETED, Status.COMPLETED, Status.PRUNED, Status.FAILED][generation % 4]
                loss = math.nan if status is Status.FAILED else 0.1 * (1 + generation + 3 * worker + island)
                inds.append(evaluation(island, worker, generation, loss, status))
    for i, target in ((0, 1), (13, 0)):
        copy = inds[i].copy()
        copy.uid, copy.migration_steps = make_uid(0, 100, i), 1
        copy.migration_history += f"-{target}"
        inds.append(copy)
    return inds


def sections(text: str) -> dict[str, str]:
    return dict(re.findall(r'<section id="([a-z-]+)">(.*?)</section>', text, flags=re.DOTALL))


def build(population: list[Individual]) -> str:
    frame = to_dataframe(population)
    return build_html(frame, interim_losses(population), title="my run", notes=["n1"])


def test_every_section_holds_its_figure_or_table(population):
    found = sections(build(population))
    assert list(found) == list(SECTIONS)
    for key, body in found.items():
        tag = "<table>" if key in ("top", "failures") else 'class="plotly-graph-div"'
        assert tag in body, key


def test_self_contained_and_deterministic(population):
    text = build(population)
    assert text == build(population)
    # plotly.js once, inline; nothing loaded from elsewhere.
    assert not re.search(r"<script[^>]*\ssrc=", text) and not re.search(r"<link[^>]*\shref=", text)
    assert text.count("<script type='text/javascript'>") == 1 and len(text) > 1_000_000


def test_top_table_has_metrics_and_failures_are_listed(population):
    frame = to_dataframe(population)
    found = sections(build(population))
    header = re.findall(r"<th>(.*?)</th>", found["top"])
    assert header[:3] == ["number", "loss", "accuracy"] and header[-3:] == ["lr", "layers", "act"]
    failed = frame.loc[frame["state"] == "FAIL", "number"].tolist()
    assert len(failed) == 4 and "4 failed evaluation(s)" in found["failures"]
    assert [int(n) for n in re.findall(r"<tr><td>(\d+)</td>", found["failures"])] == failed
    # The error each failed with, from the checkpoint (Individual.error), not only "see the log".
    assert found["failures"].count("ValueError: diverged at generation") == 4, found["failures"]
    # As read from a checkpoint written before errors were kept.
    older = build_html(frame.drop(columns="system_attrs_fail_reason"))
    assert "stores no error messages" in sections(older)["failures"]


def test_log_axis_migration_and_interim(population):
    found = sections(build(population))
    assert '"type":"log"' in found["parameters"] and "lr (log)" in found["parallel"]
    counts = migration_counts(to_dataframe(population))
    assert counts.tolist() == [[0, 1], [1, 0]]
    assert "2 move(s) between 2 island(s)" in found["migration"]
    assert "pruned here" in found["interim"] and "learning curves" in found["interim"]


def test_interim_losses_one_row_per_step(population):
    frame = to_dataframe(population)
    interim = interim_losses(population)
    assert list(interim.columns) == ["uid", "step", "loss"]
    joined = interim.merge(frame[["uid", "state"]], on="uid")
    steps = joined.groupby("uid")["step"].max()
    assert set(steps[joined.groupby("uid")["state"].first() == "COMPLETE"]) == {2}
    assert set(steps[joined.groupby("uid")["state"].first() == "PRUNED"]) == {1}
    assert len(interim_losses([])) == 0


def test_empty_and_all_failed_runs_still_have_every_section(population):
    failed = [ind for ind in population if ind.status is Status.FAILED]
    for inds in (failed, []):
        frame = to_dataframe(inds, population[0].space)
        found = sections(build_html(frame, interim_losses(inds)))
        assert list(found) == list(SECTIONS)


def test_text_report_lists_metrics(population):
    report = format_report(to_dataframe(population), top=2)
    lines = report.splitlines()
    header = next(line for line in lines if line.split()[:3] == ["#", "number", "loss"])
    assert header.split()[3] == "accuracy"


BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {module!r}:
            raise ImportError(f"No module named {{name!r}}")
sys.meta_path.insert(0, Block())
for key in [k for k in sys.modules if k.split(".")[0] == {module!r}]:
    del sys.modules[key]
from propulate.__main__ import main
sys.exit(main({argv!r}))
"""


@pytest.mark.parametrize(
    ("module", "argv", "extra"),
    [
        ("pandas", ["report", "."], "export"),
        ("pandas", ["plot", "."], "export"),
        ("plotly", ["report", ".", "--html", "r.html"], "report"),
    ],
)
def test_missing_package_is_one_clear_line(module, argv, extra, tmp_path):
    code = BLOCK.format(module=module, argv=argv)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"needs {module}, which is not installed" in done.stderr
    assert f'pip install "propulate[{extra}]"' in done.stderr


def test_readme_says_which_extra_each_command_needs():
    readme = (REPO / "README.md").read_text()
    section = readme.split("### Results: report, export, plots", 1)[1].split("\n### ", 1)[0]
    for extra in ("export", "plot", "report"):
        assert f'pip install "propulate[{extra}]"' in section, extra
    assert "report ./checkpoints --html" in section
