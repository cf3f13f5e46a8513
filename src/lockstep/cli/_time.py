"""Where a run's time went, in ``lockstep runs show`` (a table, per rank where the ranks
differ, the findings and the checkpoint advice; ``--json``) and ``lockstep runs plot`` (a
panel of stacked bars, per rank and for the run, beside the metrics')."""

from __future__ import annotations

import json
from typing import Any

from lockstep._core import storage
from lockstep._core.time_ledger import CATEGORIES, TimeLedger, read_ledger

# A rank's category differs from the run's by more than this share of the wall time, or
# by more than this many seconds, to be worth a column of its own.
_DIFFERS_SHARE = 0.05
_DIFFERS_S = 0.2
# Matplotlib's tab10, in the categories' order: training green, the waits and stalls warm.
_COLOURS = {
    "starting": "#7f7f7f",
    "training": "#2ca02c",
    "data_wait": "#1f77b4",
    "barrier_wait": "#ff7f0e",
    "checkpoint_stall": "#9467bd",
    "recovering": "#d62728",
    "replayed": "#e377c2",
    "preemption_drain": "#bcbd22",
    "shutdown": "#17becf",
}


def ledger_of(path: str) -> TimeLedger | None:
    """The time ledger of the run directory ``path``, or None (a run of an older version)."""
    found = read_ledger(storage.StorageDir.from_uri(path))
    return found[0] if found is not None else None


def show_json(summary: dict[str, Any], path: str) -> str:
    """``lockstep runs show --json``: ``summary`` (the run's name, status, metrics...) with
    ``time`` (:data:`~lockstep._core.time_ledger.KEYS`), ``time_per_rank``, ``findings``
    and ``checkpoint_advice``."""
    ledger = ledger_of(path)
    advice = ledger.checkpoint_advice() if ledger is not None else None
    data = {
        **summary,
        "time": ledger.as_dict() if ledger is not None else None,
        "time_per_rank": ledger.per_rank_dicts() if ledger is not None else [],
        "findings": ledger.findings() if ledger is not None else [],
        "checkpoint_advice": advice.as_dict() if advice is not None else None,
    }
    return json.dumps(data, indent=1, default=repr)


def differing(ledger: TimeLedger) -> list[str]:
    """The categories in which some rank differs noticeably from the run's figure."""
    run = ledger.as_dict()
    limit = max(_DIFFERS_S, _DIFFERS_SHARE * ledger.wall)
    return [
        name
        for name in CATEGORIES
        if any(abs(rank[name] - run[name]) > limit for rank in ledger.per_rank_dicts())
    ]


def time_table(ledger: TimeLedger) -> Any:
    """A table: each category's seconds and share of the wall time, and each rank's where
    it differs from the run's."""
    from rich.table import Table

    ranks = ledger.per_rank_dicts() if differing(ledger) else []
    table = Table(
        "time",
        "seconds",
        "share",
        *(f"rank {int(r['rank'])}" for r in ranks),
        title=f"where the time went: goodput {ledger.goodput * 100:.1f}%",
    )
    run = ledger.as_dict()
    for name in (*CATEGORIES, "wall"):
        if run[name] <= 0 and name not in ("training", "wall"):
            continue
        share = f"{run[name] / ledger.wall * 100:.1f}%" if ledger.wall > 0 else "-"
        table.add_row(
            name.replace("_", " "),
            f"{run[name]:.2f}",
            share,
            *(f"{r[name]:.2f}" for r in ranks),
        )
    return table


def print_time(console: Any, path: str) -> None:
    """The time table of the run at ``path``, its findings and advice, on ``console``."""
    ledger = ledger_of(path)
    if ledger is None or ledger.wall <= 0:
        return
    console.print(time_table(ledger))
    for line in ledger.findings():
        console.print(line, highlight=False)
    advice = ledger.checkpoint_advice()
    if advice is not None:
        console.print(advice.describe(), highlight=False)


def draw_time(ax: Any, ledger: TimeLedger) -> None:
    """On ``ax``: a horizontal stacked bar per rank and one for the run, each category's
    seconds."""
    rows = [("run", ledger.as_dict())]
    rows += [(f"rank {int(r['rank'])}", r) for r in ledger.per_rank_dicts()]
    shown = [n for n in CATEGORIES if any(values[n] > 0 for _, values in rows)]
    for index, (_, values) in enumerate(reversed(rows)):
        left = 0.0
        for name in shown:
            ax.barh(index, values[name], left=left, color=_COLOURS[name])
            left += values[name]
    ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)])
    ax.set_xlabel("seconds")
    ax.set_title(f"where the time went: goodput {ledger.goodput * 100:.1f}%")
    ax.legend(
        [name.replace("_", " ") for name in shown],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.3),
        ncol=3,
        fontsize="small",
        frameon=False,
    )
