"""Time ``python -m propulate report --html`` on the checkpoint of a 100,000-evaluation run.

The run is real: two islands (one worker each under ``mpiexec -n 2``) with migration minimize a loss that
costs nothing and is a generator of three interim losses followed by a static surrogate, so the checkpoint
holds learning curves and pruned evaluations; one evaluation in a hundred fails. Rank 0 then builds the
report in a fresh process, as a user on a login node would, and prints one JSON line: the evaluations,
the seconds the run took, ``build_seconds`` (wall-clock time of the whole command, interpreter start and
imports included) and ``html_bytes`` (the size of the file). Usage::

    mpiexec -n 2 python benchmarks/report_html.py --evaluations 100000 --render

With ``--render``, rank 0 also opens the report in headless Chromium driven by Playwright, at 1280 px with
the network off (as ``tests/browser.py`` does; ``PROPULATE_CHROMIUM`` names another binary), and adds
``render_seconds``: from the start of the navigation until every plot section holds the svg that plotly
draws. Two figures hint where that time goes: ``plotly_js_seconds``, from the start of the navigation until
the inline plotly.js has run, and ``plot_seconds``, the time each section's ``Plotly.newPlot`` took until
its promise resolved. Neither counts parsing the figures' data, nor drawing that plotly leaves to later
animation frames (parallel coordinates draws its lines in batches): for a section's whole cost, compare
with the page without its figure (``benchmarks/README.md``).

Issue 21 asks for a build in under 10 s and a render in under 5 s at 100,000 evaluations.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mpi4py import MPI

from propulate import Float, Islands
from propulate.report.html import SECTIONS
from propulate.surrogate import StaticSurrogate
from propulate.utils import get_default_propagator

REPO = Path(__file__).resolve().parents[1]
LIMITS = {
    "lr": Float(1e-5, 1e-1, log=True),
    "layers": (1, 8),
    "act": ("relu", "tanh", "gelu"),
    "dropout": (0.0, 0.5),
}
#: The sections that hold a plotly figure; the others hold tables.
PLOT_SECTIONS = [name for name in SECTIONS if name not in ("top", "failures")]
CHROMIUM_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser")
RENDER_TIMEOUT_MS = 120_000
# Runs before the page's own scripts: notes when plotly.js has run and times each Plotly.newPlot (whose
# drawing happens within the call; the promise it returns resolves once the figure is complete).
TIMERS = """
window.reportTimes = {plots: {}};
let plotly;
Object.defineProperty(window, "Plotly", {
    configurable: true,
    get() { return plotly; },
    set(library) {
        window.reportTimes.library = performance.now();
        const newPlot = library.newPlot;
        library.newPlot = function (div, ...rest) {
            const start = performance.now();
            const drawn = newPlot.call(this, div, ...rest);
            const id = typeof div === "string" ? div : div.id;
            Promise.resolve(drawn).then(() => { window.reportTimes.plots[id] = performance.now() - start; });
            return drawn;
        };
        plotly = library;
    },
});
"""
# performance.now() (milliseconds since the navigation started) once every plot section holds its svg.
RENDERED = """sections => sections.every(
    id => document.querySelector(`section#${id} .plotly-graph-div svg.main-svg`)) && performance.now()"""


def loss(params: dict) -> Iterator[dict[str, float]]:
    """Three interim losses of a made-up training; fails for one configuration in a hundred."""
    base = (params["lr"] - 0.003) ** 2 * 1e4 + abs(params["layers"] - 4) + params["dropout"]
    if params["dropout"] > 0.495:
        raise RuntimeError("dropout too high for this toy network")
    for epoch in range(1, 4):
        value = base + 1.0 / epoch
        yield {"loss": value, "accuracy": 1.0 / (1.0 + value)}


def render(report: Path) -> dict[str, Any]:
    """Open ``report`` in headless Chromium offline and return how long it took to draw, in seconds."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as err:
        raise SystemExit('--render needs Playwright: pip install "propulate[dev]"') from err
    executable = os.environ.get("PROPULATE_CHROMIUM") or next(
        (found for found in map(shutil.which, CHROMIUM_NAMES) if found), None
    )
    if executable is None:
        raise SystemExit(f"--render needs Chromium on PATH (one of {', '.join(CHROMIUM_NAMES)})")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable)
        context = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
        context.add_init_script(TIMERS)
        page = context.new_page()
        escaped: list[str] = []

        def note(request: Any) -> None:
            if not request.url.startswith("file:"):
                escaped.append(request.url)

        page.on("request", note)
        page.goto(report.as_uri(), wait_until="commit")
        rendered = page.wait_for_function(
            RENDERED, arg=PLOT_SECTIONS, polling="raf", timeout=RENDER_TIMEOUT_MS
        ).json_value()
        page.wait_for_load_state("load")
        times = page.evaluate("() => window.reportTimes")
        browser.close()
    if escaped:
        raise SystemExit(f"the report tried the network: {escaped}")
    return {
        "render_seconds": round(rendered / 1000, 2),
        "plotly_js_seconds": round(times["library"] / 1000, 2),
        "plot_seconds": {
            name: round(times["plots"][f"{name}-plot"] / 1000, 2)
            for name in PLOT_SECTIONS
            if f"{name}-plot" in times["plots"]
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=100_000, help="in all, over every rank")
    parser.add_argument("--directory", help="where to put the checkpoint (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint and the report")
    parser.add_argument(
        "--render", action="store_true", help="also time drawing the report in headless Chromium, offline"
    )
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    directory = args.directory or (tempfile.mkdtemp(prefix="report-html-") if world.rank == 0 else None)
    directory = world.bcast(directory)
    rng = random.Random(7 + world.rank)
    islands = Islands(
        loss,
        get_default_propagator(8, LIMITS, rng=rng),
        rng,
        generations=-(-args.evaluations // world.size),
        num_islands=min(world.size, 2),
        migration_probability=0.05,
        pollination=False,
        checkpoint_path=directory,
        surrogate_factory=StaticSurrogate,
    )
    start = time.perf_counter()
    islands.propulate(debug=-1)
    run_seconds = time.perf_counter() - start
    world.Barrier()
    if world.rank == 0:
        measure(args, directory, run_seconds, world.size * islands.propulator.generation)
    # The other ranks wait asleep, not spinning in MPI (as MPI_Finalize would) while the first one times
    # the build and the render on the same cores.
    done = world.Ibarrier()
    while not done.Test():
        time.sleep(0.05)


def measure(args: argparse.Namespace, directory: str, run_seconds: float, evaluations: int) -> None:
    """Build the report in a fresh process, optionally render it, and print the figures (first rank)."""
    target = Path(directory, "report.html")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI", "HYDRA", "OMPI_"))}
    env["PYTHONPATH"] = str(REPO)
    command = [sys.executable, "-m", "propulate", "report", directory, "--html", str(target)]
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, capture_output=True)
    build = time.perf_counter() - start
    figures = {
        "evaluations": evaluations,
        "run_seconds": round(run_seconds, 1),
        "build_seconds": round(build, 2),
        "html_bytes": target.stat().st_size,
    }
    if args.render:
        figures |= render(target)
    print(json.dumps(figures), flush=True)
    if not args.keep and not args.directory:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
