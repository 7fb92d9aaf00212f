"""Population-based training in a run's frame: each member's intervals, and the best member's schedule.

The intervals of a population-based training (:mod:`propulate.pbt`) carry their lineage as ``_``-prefixed
entries, which the frame holds in ``user_attrs__member``, ``user_attrs__interval``, ``user_attrs__start``,
``user_attrs__until``, ``user_attrs__parent`` and ``user_attrs__donor`` (:mod:`propulate.report.frame`).
This reads them back from the frame alone, on a login node, as :mod:`propulate.pbt.lineage` does from the
individuals. With several islands a member is named by its island and its index there (the frame's
``island`` column), and a schedule follows an exploited migrant to the interval it carried
(``user_attrs__origin``): the frame holds each island's own evaluations, not the migrants' copies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .frame import require_pandas

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LINEAGE_COLUMNS", "best_schedule", "has_lineage", "intervals", "member_summary"]

#: The frame's lineage columns of a population-based training.
LINEAGE_COLUMNS = tuple(
    f"user_attrs__{key}" for key in ("member", "interval", "start", "until", "parent", "donor")
)


def has_lineage(frame: pd.DataFrame) -> bool:
    """Whether the frame holds a population-based training's intervals."""
    return all(column in frame.columns for column in LINEAGE_COLUMNS)


def intervals(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the completed intervals, by member and interval, their lineage columns as ints."""
    rows = frame[(frame["state"] == "COMPLETE") & frame["user_attrs__member"].notna()]
    rows = rows.astype({column: int for column in LINEAGE_COLUMNS})
    return rows.sort_values(["user_attrs__member", "user_attrs__interval"])


def _member_keys(rows: pd.DataFrame) -> list[str]:
    """Return the columns that name a member: its index, and its island where there are several."""
    several = "island" in rows.columns and rows["island"].nunique() > 1
    return ["island", "user_attrs__member"] if several else ["user_attrs__member"]


def member_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Return one row per member: intervals completed, steps reached, exploits, latest and best loss.

    Indexed by ``member``, or by ``island`` and ``member`` in a run of several islands.
    """
    pd = require_pandas()
    rows = intervals(frame)
    keys = _member_keys(rows)
    members = rows.groupby(keys)
    summary = pd.DataFrame(
        {
            "intervals": members.size(),
            "steps": members["user_attrs__until"].last(),
            "exploits": members["user_attrs__donor"].apply(lambda donors: int((donors >= 0).sum())),
            "latest": members["value"].last(),
            "best": members["value"].min(),
        }
    )
    return summary.rename_axis([key.removeprefix("user_attrs__") for key in keys])


def best_schedule(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the intervals whose training led to the best member's latest state, first first.

    The best member is the one whose latest completed interval has the lowest loss; the intervals are
    found by following ``_parent`` back, across the members it copied (and ``_origin`` across islands).
    Columns: ``start``, ``until``, ``member``, ``donor``, ``value`` and one per parameter, by its name, and
    ``island`` first in a run of several islands. Empty without completed intervals.
    """
    rows = intervals(frame)
    params = [column for column in frame.columns if column.startswith("params_")]
    keys = _member_keys(rows)
    columns = [
        *keys[:-1],
        "user_attrs__start",
        "user_attrs__until",
        "user_attrs__member",
        "user_attrs__donor",
    ]
    columns.append("value")
    latest = rows.sort_values("user_attrs__interval").groupby(keys).tail(1)
    chain = []
    by_uid = rows.set_index("uid")
    uid = int(latest.loc[latest["value"].idxmin(), "uid"]) if len(latest) else -1
    while uid >= 0 and uid in by_uid.index:
        row = by_uid.loc[uid]
        chain.append(uid)
        uid = int(row["user_attrs__parent"])
        origin = row.get("user_attrs__origin")
        if uid not in by_uid.index and origin is not None and origin == origin:  # not NaN: a migrant's
            uid = int(origin)
    schedule = by_uid.loc[chain[::-1], columns + params].reset_index(drop=True)
    return schedule.rename(columns=lambda column: column.removeprefix("user_attrs__").removeprefix("params_"))
