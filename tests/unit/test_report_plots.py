"""The figure defects of issue 21: merged timeline bars, integer parameters without jitter, empty axes.

Each test draws a figure of a small hand-made run (no checkpoint, no MPI) and checks what a reader sees.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from propulate.checkpoint import make_uid
from propulate.individual import Individual, Status
from propulate.report.frame import to_dataframe
from propulate.report.plots import plot_best_loss, plot_parameters, plot_timeline

pytest.importorskip("matplotlib")

LIMITS = {"lr": (1e-4, 1e-1), "layers": (1, 8), "act": ("relu", "tanh")}
T0 = 1_700_000_000.0


def evaluation(
    worker: int, generation: int, start: float, period: float, loss: float, layers: int = 3
) -> Individual:
    ind = Individual(
        {"lr": 0.01, "layers": layers, "act": "relu"}, LIMITS, generation=generation, rank=worker
    )
    ind.island, ind.migration_history = 0, "0"
    ind.uid = make_uid(0, worker, generation)
    ind.status = Status.FAILED if math.isnan(loss) else Status.COMPLETED
    ind.loss = loss
    ind.evaltime, ind.evalperiod = T0 + start + period, period
    return ind


def test_timeline_shows_back_to_back_evaluations_apart():
    # Two workers, five evaluations of one second each, each starting where the last ended.
    frame = to_dataframe([evaluation(w, g, float(g), 1.0, 0.5) for w in range(2) for g in range(5)])
    fig = plot_timeline(frame)
    fig.set_dpi(100)
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())[:, :, :3].astype(float)
    ax = fig.axes[0]
    for row in range(2):
        left, y = ax.transData.transform((0.05, row))
        right, _ = ax.transData.transform((4.95, row))
        line = pixels[pixels.shape[0] - round(y), int(left) : int(right)]
        # Bars are tab:blue (31, 119, 180); count the runs of bar-colored pixels along the row's middle.
        blue = np.linalg.norm(line - [31, 119, 180], axis=1) < 60
        runs = int(blue[0]) + int(np.count_nonzero(blue[1:] & ~blue[:-1]))
        assert runs == 5, f"worker {row}: {runs} bar(s) seen for 5 evaluations"


def test_integer_parameter_points_do_not_hide_each_other():
    # Eight evaluations of layers=3 with the same loss: eight markers, not one.
    frame = to_dataframe([evaluation(0, g, float(g), 1.0, 0.5, layers=3) for g in range(8)])
    fig = plot_parameters(frame)
    panel = next(ax for ax in fig.axes if ax.get_xlabel() == "layers")
    points = np.concatenate([c.get_offsets() for c in panel.collections if len(c.get_offsets()) == 8])
    assert len(np.unique(points[:, 0])) == 8
    # Still read as the integer 3: less than half a step away.
    assert np.all(np.abs(points[:, 0] - 3) < 0.5)


@pytest.mark.parametrize("draw", [plot_best_loss, plot_parameters])
def test_all_failed_run_draws_no_meaningless_loss_ticks(draw):
    frame = to_dataframe([evaluation(w, 0, 0.0, 1.0, math.nan) for w in range(3)])
    fig = draw(frame)
    fig.canvas.draw()
    for ax in (ax for ax in fig.axes if ax.get_visible()):
        assert len(ax.get_yticks()) == 0, "loss ticks on axes that show no loss"
        assert any("no loss to show" in text.get_text() for text in ax.texts)


def test_all_failed_timeline_still_shows_the_failures():
    frame = to_dataframe([evaluation(w, 0, 0.0, 1.0, math.nan) for w in range(3)])
    ax = plot_timeline(frame).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"island 0, worker {w}" for w in range(3)]
