"""What a run found, read from its checkpoint without MPI: a table, a text report, figures, an HTML page.

Everything here works on a login node or in a notebook, on a finished run or on a running job's checkpoint
(``python -m propulate report|export|plot DIR`` uses it). One module per idea, each building on those above
it and never on one below:

- :mod:`.frame`: the evaluations of a run as a pandas DataFrame, one row per evaluation, with Optuna's
  columns and propulate's provenance; CSV and JSON files of it;
- :mod:`.fronts`: for a run with several objectives, the Pareto front, the reference point and the
  hypervolume of the front so far;
- :mod:`.summary`: the numbers the reports show: best configurations, counts per state and island,
  sessions, throughput, worker utilization;
- :mod:`.lineage`: for a population-based training, each member's intervals and the schedule of the best
  member's state;
- :mod:`.text`: the plain-text report of ``python -m propulate report``;
- :mod:`.prepare`: what both kinds of figures compute before drawing (the clock while running, the best
  loss so far, category positions, the front's staircase);
- :mod:`.plots`: PNG figures with matplotlib; :mod:`.html`: one self-contained HTML page with plotly.

The names below are also importable from :mod:`propulate.report` itself, e.g.
``from propulate.report import load_dataframe``. pandas, matplotlib and plotly are optional dependencies
(the ``export``, ``plot`` and ``report`` extras), imported on first use with an error that names the extra;
importing this package imports none of them.
"""

from .frame import (
    NoCheckpointError,
    checkpoint_dataframe,
    interim_losses,
    load_dataframe,
    read_checkpoint,
    to_dataframe,
    write_csv,
    write_json,
)
from .fronts import hypervolume_history, pareto_front_rows, reference_point
from .html import build_html, write_html
from .plots import save_figures
from .text import format_report

__all__ = [
    "NoCheckpointError",
    "build_html",
    "checkpoint_dataframe",
    "format_report",
    "hypervolume_history",
    "interim_losses",
    "load_dataframe",
    "pareto_front_rows",
    "read_checkpoint",
    "reference_point",
    "save_figures",
    "to_dataframe",
    "write_csv",
    "write_html",
    "write_json",
]
