"""``python -m propulate``: look at the results of a run from its checkpoint, without MPI.

Subcommands (``python -m propulate SUBCOMMAND --help`` for their options):

``report DIR [--top N] [--reference R ...] [--html FILE]``
    Print the best configurations, counts per state and per island, evaluations per hour and worker
    utilization; with ``--html``, also write the interactive report (:mod:`propulate.report.html`). For a run
    with several objectives, instead of the best configurations: the Pareto front and the hypervolume of the
    front so far as the run went on (:func:`propulate.report.text.format_report`), up to the reference point
    ``--reference`` (one number per objective, in its own direction; default: 10 % of each objective's
    range beyond its worst completed value).
``export DIR --format csv|json``
    Write one row per evaluation as CSV or JSON (columns in :mod:`propulate.report.frame`).
``plot DIR [--reference R ...]``
    Write ``best_loss.png``, ``timeline.png`` and ``parameters.png`` (:mod:`propulate.report.plots`); for a
    run with several objectives ``front.png``, ``hypervolume.png``, ``timeline.png`` and ``parameters.png``
    (:data:`propulate.report.plots.MULTI_OBJECTIVE_FIGURES`).
``compact DIR``
    Merge the checkpoint's files into one (:mod:`propulate.checkpoint.compaction`); a resume does the same.
    Not while a run writes to ``DIR``.

Exit status: 0 on success, 2 for a usage error (also a ``--reference`` that does not fit the run), 1 when
the work cannot be done (no checkpoint in ``DIR``, an unreadable checkpoint file, a missing optional package,
a file that cannot be written); the reason goes to standard error.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .errors import PropulateError

if TYPE_CHECKING:
    from .objectives import Objectives

PROG = "python -m propulate"


class UsageError(Exception):
    """An option that does not fit the checkpoint it is used on (exit status 2)."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _add_reference(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reference",
        nargs="+",
        type=_finite_float,
        metavar="R",
        help="with several objectives: the hypervolume's reference point, one number per objective in the "
        "objective's own direction (the hypervolume counts what is below it for a minimized objective, "
        "above it for a maximized one); default: 10%% of the range of each objective's completed values "
        "beyond its worst completed value",
    )


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser of ``python -m propulate``."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Look at the results of a propulate run from its checkpoint directory. Needs no MPI: "
        "runs on a login node while the job is still going, or after it ended.",
        epilog=f"Run '{PROG} SUBCOMMAND --help' for the options of a subcommand.",
    )
    parser.add_argument("--version", action="version", version=f"propulate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    directory = argparse.ArgumentParser(add_help=False)
    directory.add_argument("directory", metavar="DIR", type=Path, help="the run's checkpoint_path")

    report = commands.add_parser(
        "report",
        parents=[directory],
        help="print the best configurations, counts, throughput and worker utilization",
        description="Print a plain-text report: the best distinct configurations, evaluations per state "
        "and per island, evaluations per hour of wall-clock time while the job ran, and each worker's "
        "utilization (time evaluating / time of the sessions it evaluated in). For a run with several "
        "objectives, instead of the best configurations: the Pareto front (the distinct completed "
        "evaluations no other one dominates) and the hypervolume of the front so far after each tenth of "
        "the completed evaluations.",
    )
    report.add_argument(
        "--top",
        type=_positive_int,
        metavar="N",
        help="how many configurations to list (5); with several objectives, how many rows of the Pareto "
        "front at most (20)",
    )
    _add_reference(report)
    report.add_argument(
        "--html",
        metavar="FILE",
        type=Path,
        help="also write the report as one self-contained HTML file with interactive figures (opens "
        'offline in any browser; needs pip install "propulate[report]")',
    )

    export = commands.add_parser(
        "export",
        parents=[directory],
        help="write one row per evaluation as CSV or JSON",
        description="Write one row per evaluation, with Optuna's columns (number, value, state, "
        "datetime_start, datetime_complete, duration, params_<name>, user_attrs_<name>) and propulate's "
        "(island, worker, generation, migration_history, session, uid, active). Load it with "
        "pandas.read_csv or pandas.read_json(..., orient='records').",
    )
    export.add_argument("--format", choices=("csv", "json"), default="csv", help="file format (csv)")
    export.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="file to write, '-' for standard output (default: DIR/propulate-results.csv or .json)",
    )
    export.add_argument(
        "--include-interrupted",
        action="store_true",
        help="also list evaluations the end of the job cut short (state WAITING, redone on resume)",
    )

    plot = commands.add_parser(
        "plot",
        parents=[directory],
        help="write PNG figures of the search",
        description="Write best_loss.png (best loss so far vs. evaluations and vs. time), timeline.png "
        "(each worker's evaluations over time) and parameters.png (the loss against each parameter). For a "
        "run with several objectives: front.png (the completed evaluations in objective space, the Pareto "
        "front highlighted), hypervolume.png (the hypervolume of the front so far vs. evaluations and vs. "
        "time), timeline.png and parameters.png (the first objective against each parameter, the front "
        "marked); no best_loss.png.",
    )
    _add_reference(plot)
    plot.add_argument(
        "-o", "--output-dir", metavar="OUTDIR", type=Path, help="where to write the figures (default: DIR)"
    )
    plot.add_argument("--dpi", type=_positive_int, default=120, help="resolution in dots per inch (120)")

    commands.add_parser(
        "compact",
        parents=[directory],
        help="merge the checkpoint's files into one (not while a run writes to DIR)",
        description="Merge the files of every session so far into one file that holds the same "
        "individuals, counters and states, and delete the files it replaces; files killed before their "
        "first record are moved to DIR/set-aside. A resume does this by itself; use it to shrink a "
        "finished run's folder. Not while a run writes to DIR.",
    )
    return parser


#: The optional packages each command needs: (module, extra that installs it).
NEEDS = {
    "report": [("pandas", "export")],
    "export": [("pandas", "export")],
    "plot": [("pandas", "export"), ("matplotlib", "plot")],
    "html": [("pandas", "report"), ("plotly", "report")],
}


def _missing(command: str) -> str | None:
    """Return what to tell a user who lacks an optional package that ``command`` needs; None if none lacks."""
    import importlib.util

    for module, extra in NEEDS.get(command, []):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return (
                f'needs {module}, which is not installed; install it with: pip install "propulate[{extra}]"'
            )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    args = build_parser().parse_args(argv)
    command = "html" if getattr(args, "html", None) else args.command
    reason = _missing(command)
    if reason is not None:
        print(f"{PROG} {args.command}: error: {reason}", file=sys.stderr)
        return 1
    try:
        return _run(args)
    except UsageError as err:
        print(f"{PROG} {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (PropulateError, ImportError, OSError) as err:
        # No checkpoint or an unreadable one, a missing optional package, a file that cannot be written.
        print(f"{PROG} {args.command}: error: {err}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    from . import report
    from .report.fronts import objectives_of

    if args.command == "compact":
        from .checkpoint import compact, list_files

        if not list_files(args.directory):
            raise report.NoCheckpointError(f"no checkpoint files in {args.directory}")
        merged = compact(args.directory)
        print(f"merged {merged} file(s) into one" if merged else "nothing to merge: one file already")
        return 0
    checkpoint = report.read_checkpoint(args.directory)
    objectives = checkpoint.config.get("objectives")
    if args.command == "report":
        frame = report.checkpoint_dataframe(checkpoint, include_interrupted=True)
        _check_reference(args.reference, objectives_of(frame, objectives))
        config = checkpoint.config
        notes = [
            f"checkpoint: {checkpoint.directory} ({checkpoint.sessions} session(s))",
            f"latest session: {len(config.get('island_counts', []))} island(s) of sizes "
            f"{config.get('island_counts')}, {config.get('ranks_per_worker', 1)} rank(s) per worker, "
            f"propulate {config.get('version', '?')}",
        ]
        text = report.format_report(
            frame, args.top, notes=notes, objectives=objectives, reference=args.reference
        )
        sys.stdout.write(text)
        if args.html:
            interim = report.interim_losses(checkpoint.population)
            title = f"propulate report: {checkpoint.directory}"
            report.write_html(
                frame,
                args.html,
                interim,
                title=title,
                notes=notes,
                top=max(args.top or 5, 10),
                objectives=objectives,
                reference=args.reference,
            )
            print(f"wrote {args.html}")
    elif args.command == "export":
        frame = report.checkpoint_dataframe(checkpoint, include_interrupted=args.include_interrupted)
        write = report.write_csv if args.format == "csv" else report.write_json
        if args.output == "-":
            write(frame, sys.stdout)
        else:
            path = Path(args.output or args.directory / f"propulate-results.{args.format}")
            write(frame, path)
            print(f"wrote {len(frame)} rows to {path}")
    else:
        frame = report.checkpoint_dataframe(checkpoint)
        _check_reference(args.reference, objectives_of(frame, objectives))
        directory = args.output_dir or args.directory
        figures = report.save_figures(
            frame, directory, dpi=args.dpi, objectives=objectives, reference=args.reference
        )
        for path in figures:
            print(f"wrote {path}")
    return 0


def _check_reference(reference: Sequence[float] | None, goals: Objectives | None) -> None:
    """Refuse a ``--reference`` that does not have one number per objective of the run."""
    if reference is None:
        return
    if goals is None:
        raise UsageError("--reference: the run has one loss; a reference point is for several objectives")
    if len(reference) != len(goals):
        from .report.fronts import objective_labels

        raise UsageError(
            f"--reference: expected {len(goals)} numbers, one per objective "
            f"({', '.join(objective_labels(goals))}), got {len(reference)}"
        )


if __name__ == "__main__":
    sys.exit(main())
