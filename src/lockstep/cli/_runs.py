"""``lockstep runs``: list, show, plot and compare the runs under a storage path.

A run is a directory holding ``result.json`` (one JSON line per report) and, when written
by this version, ``run_state.json`` (status, checkpoints and their metrics, error) and
``params.json``. Older runs and Tune experiments (``<experiment>/<trial>/result.json``) are
read from the same files, whatever of them exists.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lockstep._core import flags, storage
from lockstep._core.time_ledger import CATEGORIES
from lockstep.cli import _time

# Keys every result carries besides the user's metrics.
_AUTO_KEYS = {
    *storage.RESULT_AUTO_KEYS,
    "time_this_iter_s",
    "time_since_restore",
    "iterations_since_restore",
    "done",
    "trial_id",
    "date",
    "pid",
    "hostname",
    "node_ip",
    "config",
    "experiment_tag",
    "should_checkpoint",
    "timesteps_total",
    "episodes_total",
    "timesteps_since_restore",
    # the time ledger's figures, which Tune results carry
    "goodput",
    *(f"time_{name}_s" for name in ("wall", *CATEGORIES)),
}
# What counts reports rather than measures them: not plotted or ranked unless named.
COUNTERS = frozenset({"epoch", "step", "global_step", "iteration", "batch"})
# Image viewers that draw a PNG in the terminal, tried in this order.
_VIEWERS: tuple[tuple[str, list[str]], ...] = (
    ("viu", []),
    ("chafa", []),
    ("timg", []),
    ("imgcat", []),
)


@dataclass
class Run:
    """What the files of one run directory say."""

    name: str
    path: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def status(self) -> str:
        if self.state.get("status"):
            return str(self.state["status"])
        if self.error:
            return "errored"
        return "unknown"

    @property
    def iterations(self) -> int:
        if self.state.get("training_iteration"):
            return int(self.state["training_iteration"])
        return int(self.rows[-1].get("training_iteration", len(self.rows))) if self.rows else 0

    @property
    def start(self) -> datetime.datetime | None:
        if not self.rows or "timestamp" not in self.rows[0]:
            return None
        first = self.rows[0]
        started = float(first["timestamp"]) - float(first.get("time_this_iter_s") or 0)
        return datetime.datetime.fromtimestamp(started)

    @property
    def duration_s(self) -> float | None:
        return (
            float(self.rows[-1]["time_total_s"])
            if self.rows and "time_total_s" in self.rows[-1]
            else None
        )

    @property
    def history(self) -> list[dict[str, Any]]:
        """Every attempt (``RunState.history``): its size and how it ended, and why."""
        return [a for a in self.state.get("history") or [] if isinstance(a, dict)]

    def attempts_text(self) -> str:
        """How many attempts, and what ended those that did not finish.

        Example:
            >>> Run("r", "/r", state={"attempts": 3, "num_failures": 1, "num_preemptions": 1,
            ...                       "history": [{"ended": "failed"}, {"ended": "resized"},
            ...                                   {"ended": "finished"}]}).attempts_text()
            '3 (1 failure, 1 preemption, 1 resize)'
        """
        count = int(self.state.get("attempts") or len(self.history))
        if not count:
            return "-"
        ends = [a.get("ended") for a in self.history]
        parts = [
            _plural(int(self.state.get("num_failures") or 0), "failure"),
            _plural(int(self.state.get("num_preemptions") or 0), "preemption"),
            _plural(ends.count("resized"), "resize"),
            _plural(ends.count("driver lost"), "driver lost", "drivers lost"),
            _plural(ends.count("stopped"), "stop"),
        ]
        shown = [part for part in parts if part]
        return f"{count} ({', '.join(shown)})" if shown else str(count)

    def metric_names(self) -> list[str]:
        """The user's numeric metrics, nested ones as ``a/b``, in the order first reported."""
        names: dict[str, None] = {}
        for row in self.rows:
            for key, value in _flatten(row).items():
                if key.split("/")[0] not in _AUTO_KEYS and _number(value) is not None:
                    names[key] = None
        return list(names)

    def measures(self) -> list[str]:
        """:meth:`metric_names` without counters such as ``epoch``: what is plotted and
        ranked when no metric is named."""
        return [name for name in self.metric_names() if name.lower() not in COUNTERS]

    def series(self, metric: str) -> tuple[list[int], list[float]]:
        """(iterations, values) of one metric, skipping reports without it."""
        steps, values = [], []
        for index, row in enumerate(self.rows, 1):
            value = _number(_flatten(row).get(metric))
            if value is not None:
                steps.append(int(row.get("training_iteration", index)))
                values.append(value)
        return steps, values


def read_run(path: str, name: str | None = None) -> Run:
    """Read one run directory's files (any that exist)."""
    run = Run(name=name or os.path.basename(path.rstrip("/")), path=path)
    results = os.path.join(path, storage.RESULTS_FILE)
    if os.path.exists(results):
        with open(results, encoding="utf-8") as f:
            run.rows = [json.loads(line) for line in f if line.strip()]
    run.state = _read_json(os.path.join(path, storage.STATE_FILE))
    run.params = _read_json(os.path.join(path, storage.PARAMS_FILE))
    error_file = os.path.join(path, storage.ERROR_FILE)
    if os.path.exists(error_file):
        with open(error_file, encoding="utf-8") as f:
            run.error = f.read().strip()
    elif run.state.get("error"):
        run.error = str(run.state["error"].get("message", run.state["error"]))
    return run


def find_runs(root: str) -> list[Run]:
    """Every run under ``root``: its run directories, and the trials of Tune experiments."""
    found = []
    for entry in sorted(_subdirs(root)):
        path = os.path.join(root, entry)
        if _is_run(path):
            found.append(read_run(path, entry))
            continue
        for trial in sorted(_subdirs(path)):
            if _is_run(os.path.join(path, trial)):
                found.append(read_run(os.path.join(path, trial), f"{entry}/{trial}"))
    return found


def best(run: Run, metric: str | None, mode: str | None) -> tuple[str, float] | None:
    """The best value of ``metric`` (default: the run's score attribute, or its first metric)."""
    metric = metric or _score_attribute(run) or next(iter(run.measures()), None)
    if metric is None:
        return None
    _, values = run.series(metric)
    if not values:
        return None
    mode = mode or _mode(run, metric)
    return metric, (min(values) if mode == "min" else max(values))


def add_parser(commands: Any) -> None:
    """Register ``lockstep runs`` and its subcommands."""
    runs = commands.add_parser(
        "runs", help="list, show, plot and compare runs", description=_RUNS_DESCRIPTION
    )
    runs.set_defaults(command_parser=runs)
    sub = runs.add_subparsers(dest="runs_command", required=True, metavar="COMMAND")
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--storage-path", default=None, help=_storage_help())
    ranking = argparse.ArgumentParser(add_help=False)
    ranking.add_argument(
        "--metric",
        default=None,
        help="the metric to rank by; default: the run's checkpoint score attribute, else its "
        "first metric",
    )
    ranking.add_argument(
        "--mode",
        choices=("min", "max"),
        default=None,
        help="whether lower or higher is better; default: the checkpoint config's order, "
        "else min for a loss or an error and max for anything else",
    )
    made = {}
    for name, (ranks, summary, description) in _COMMANDS.items():
        made[name] = sub.add_parser(
            name,
            parents=[where, ranking] if ranks else [where],
            help=summary,
            description=description,
        )
        made[name].set_defaults(command_parser=made[name])
    made["show"].add_argument("run", help=_RUN_HELP)
    made["show"].add_argument(
        "--json", action="store_true", help="print JSON: the run, its attempts and its time"
    )
    made["plot"].add_argument("run", help=_RUN_HELP)
    made["plot"].add_argument(
        "metrics",
        nargs="*",
        help="the metrics to plot; default: every numeric metric the run reported, except "
        f"counters ({', '.join(sorted(COUNTERS))})",
    )
    made["plot"].add_argument("--output", default=None, help="the PNG; default: <run>/metrics.png")
    made["compare"].add_argument("runs", nargs="+", metavar="run", help=_RUN_HELP + "; one or more")
    made["compare"].add_argument(
        "--output",
        default=None,
        help="the PNG; default: compare-<runs>.png in the storage path (the runs' common "
        "directory when they are not under it)",
    )


# Each subcommand: whether it ranks runs (--metric, --mode), its help and its description.
_COMMANDS = {
    "list": (
        True,
        "one line per run",
        "One line per run: status, start, duration, iterations, attempts and the best metric.",
    ),
    "show": (
        False,
        "configs, metrics, checkpoints, attempts, error",
        "Everything about one run: its configs, last metrics, checkpoints, attempts "
        "(failures with their cause, preemptions, resizes) and error.",
    ),
    "plot": (
        False,
        "a PNG of metrics per iteration",
        "Plot metrics per training iteration into a PNG, and print its path.",
    ),
    "compare": (
        True,
        "runs side by side",
        "One table and one plot of several runs' metrics; the plot goes into the storage "
        "path, and its path is printed.",
    ),
}


_RUNS_DESCRIPTION = (
    "Look at the runs under a storage path without writing code: their status, metrics, "
    "checkpoints, attempts and errors."
)
_RUN_HELP = (
    "a run: its name under the storage path (a Tune trial as experiment/trial), or its directory"
)


def _storage_help() -> str:
    """The default storage path as it is here: $LOCKSTEP_STORAGE_PATH when it is set."""
    flag = flags.DEFAULT_STORAGE_PATH
    if flag.name in os.environ:
        return f"where the runs are; default: {flag.get()} (from ${flag.name})"
    return f"where the runs are; default: {flag.default} (${flag.name} changes it)"


def main(args: argparse.Namespace) -> int:
    """Carry out ``lockstep runs <command>``; returns the exit code."""
    root = os.path.expanduser(args.storage_path or flags.DEFAULT_STORAGE_PATH.get())
    try:
        if args.runs_command == "list":
            return _list(root, args)
        if args.runs_command == "show":
            return _show(_locate(root, args.run), args)
        if args.runs_command == "plot":
            return _plot(_locate(root, args.run), args)
        return _compare([_locate(root, r) for r in args.runs], args, root)
    except LookupError as exc:
        print(f"lockstep runs: {exc}", file=sys.stderr)
        return 1


def _list(root: str, args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    runs = find_runs(root)
    if not runs:
        print(f"no runs under {root}")
        return 0
    table = Table("name", "status", "start", "duration", "iterations", "attempts", "best metric")
    for run in runs:
        table.add_row(
            run.name,
            run.status,
            run.start.strftime("%Y-%m-%d %H:%M:%S") if run.start else "-",
            _duration(run.duration_s),
            str(run.iterations),
            run.attempts_text(),
            _best_text(best(run, args.metric, args.mode)),
        )
    Console(width=200).print(table)
    return 0


def _show(run: Run, args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    if getattr(args, "json", False):
        print(_time.show_json(_summary(run), run.path))
        return 0
    console = Console(width=200)
    console.print(f"[bold]{run.name}[/bold]  {run.path}")
    console.print(
        f"status: {run.status}   iterations: {run.iterations}   "
        f"duration: {_duration(run.duration_s)}   attempts: {run.attempts_text()}",
        highlight=False,
    )
    config = run.params or (run.rows[-1].get("config") if run.rows else None) or {}
    console.print("configs:")
    console.print_json(json.dumps(config, default=repr))
    if run.rows:
        last = {
            k: v for k, v in _flatten(run.rows[-1]).items() if k.split("/")[0] not in _AUTO_KEYS
        }
        console.print("last metrics: " + ", ".join(f"{k}={_fmt(v)}" for k, v in last.items()))
    checkpoints = run.state.get("checkpoints") or []
    if checkpoints:
        table = Table("checkpoint", "iteration", "metrics", title="checkpoints")
        for record in checkpoints:
            metrics = ", ".join(f"{k}={_fmt(v)}" for k, v in _flatten(record["metrics"]).items())
            table.add_row(record["dir_name"], str(record["training_iteration"]), metrics)
        console.print(table)
    if run.history:
        console.print(_history_table(run))
    _time.print_time(console, run.path)
    if run.error:
        console.print("[red]error:[/red]")
        console.print(run.error, markup=False, highlight=False)
    return 0


def _summary(run: Run) -> dict[str, Any]:
    """``runs show --json``'s part besides the time: the run, its configs, last metrics,
    checkpoints, attempts and error."""
    last = run.rows[-1] if run.rows else {}
    return {
        "name": run.name,
        "path": run.path,
        "status": run.status,
        "iterations": run.iterations,
        "duration_s": run.duration_s,
        "config": run.params or last.get("config") or {},
        "metrics": {k: v for k, v in last.items() if k not in _AUTO_KEYS},
        "checkpoints": run.state.get("checkpoints") or [],
        "attempts": run.history,
        "error": run.error,
    }


def _history_table(run: Run) -> Any:
    """One row per attempt: its size, when it started, from which iteration, how it
    ended and why."""
    from rich.table import Table
    from rich.text import Text

    table = Table("attempt", "workers", "started", "from iteration", "ended", title="attempts")
    for attempt in run.history:
        started = attempt.get("started")
        ended = attempt.get("ended") or ("running" if run.status == "running" else "-")
        if attempt.get("cause"):
            ended = f"{ended}: {attempt['cause']}"
        table.add_row(
            str(int(attempt.get("number", 0)) + 1),
            str(attempt.get("num_workers") or "-"),
            datetime.datetime.fromtimestamp(started).strftime("%Y-%m-%d %H:%M:%S")
            if isinstance(started, int | float)
            else "-",
            str(attempt.get("iteration", "-")),
            Text(ended),  # a cause may hold brackets, which are not markup
        )
    return table


def _plural(count: int, one: str, many: str | None = None) -> str:
    """``"2 failures"``; nothing for none."""
    if not count:
        return ""
    return f"{count} {one if count == 1 else many or one + 's'}"


def _plot(run: Run, args: argparse.Namespace) -> int:
    output = args.output or os.path.join(run.path, "metrics.png")
    _save(plot_figure(run, args.metrics), output)
    return 0


def plot_figure(run: Run, metrics: Sequence[str] = ()) -> Any:
    """The figure of ``runs plot``: one panel per metric (default: :meth:`Run.measures`)
    against the training iteration."""
    metrics = list(metrics) or run.measures()
    if not metrics:
        raise LookupError(f"run {run.name!r} reported no numeric metric")
    missing = [metric for metric in metrics if not run.series(metric)[1]]
    if missing:
        raise LookupError(
            f"run {run.name!r} has no metric {missing[0]!r}; it has {', '.join(run.metric_names())}"
        )
    ledger = _time.ledger_of(run.path)
    timed = ledger is not None and ledger.wall > 0
    figure, axes = _figure(len(metrics) + timed)
    if ledger is not None and timed:
        _time.draw_time(axes.pop(), ledger)  # where the time went, beside the metrics
    for ax, metric in zip(axes, metrics, strict=True):
        steps, values = run.series(metric)
        ax.plot(steps, values, marker="o", markersize=3)
        ax.set_title(metric)
        ax.set_xlabel("training_iteration")
        whole_numbers_on_x(ax, steps)
    figure.suptitle(run.name)
    return figure


def _compare(runs: list[Run], args: argparse.Namespace, root: str) -> int:
    from rich.console import Console
    from rich.table import Table

    metrics = [args.metric] if args.metric else _common_metrics(runs)
    if not metrics:
        raise LookupError("the runs share no numeric metric; pick one with --metric")
    table = Table(
        "run",
        "status",
        "iterations",
        *(f"{m} (last)" for m in metrics),
        *(f"{m} (best)" for m in metrics),
    )
    figure, axes = _figure(len(metrics))
    for run in runs:
        last = [run.series(m)[1][-1:] for m in metrics]
        bests = [best(run, m, args.mode) for m in metrics]
        table.add_row(
            run.name,
            run.status,
            str(run.iterations),
            *(_fmt(v[0]) if v else "-" for v in last),
            *(_fmt(b[1]) if b else "-" for b in bests),
        )
        for ax, metric in zip(axes, metrics, strict=True):
            ax.plot(*run.series(metric), marker="o", markersize=3, label=run.name)
    for ax, metric in zip(axes, metrics, strict=True):
        ax.set_title(metric)
        ax.set_xlabel("training_iteration")
        whole_numbers_on_x(ax, [step for run in runs for step in run.series(metric)[0]])
        ax.legend()
    Console(width=200).print(table)
    _save(figure, args.output or compare_path(runs, root))
    return 0


def compare_path(runs: Sequence[Run], root: str) -> str:
    """Where ``runs compare`` puts its plot: the storage path, or the runs' common
    directory when they are not all under it; named after the runs.

    Example:
        >>> runs = [Run("a", "/r/a"), Run("exp/t1", "/r/exp/t1")]
        >>> compare_path(runs, "/r"), compare_path(runs, "/elsewhere")
        ('/r/compare-a-exp_t1.png', '/r/compare-a-exp_t1.png')
    """
    paths = [os.path.abspath(run.path) for run in runs]
    root = os.path.abspath(root)
    if not all(os.path.commonpath([root, path]) == root for path in paths):
        root = os.path.commonpath([os.path.dirname(path) for path in paths])
    name = "compare-" + "-".join(run.name.replace("/", "_") for run in runs)
    if len(name) > 120:  # file names have a limit; many long names share a digest
        name = f"compare-{len(runs)}-runs-{hashlib.sha1(name.encode()).hexdigest()[:10]}"
    return os.path.join(root, f"{name}.png")


def whole_numbers_on_x(ax: Any, steps: Sequence[float]) -> None:
    """Iterations and epochs are whole numbers: ticks on them only, and one point is
    shown with a unit either side, not in a window of +-0.04."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if steps and min(steps) == max(steps):
        ax.set_xlim(min(steps) - 1, max(steps) + 1)


def _figure(count: int) -> tuple[Any, list[Any]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(count, 3)
    rows = math.ceil(count / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3.2 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_visible(False)
    return figure, flat[:count]


def _save(figure: Any, output: str) -> None:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(output, dpi=100)
    plt.close(figure)
    if not _show_in_terminal(output):
        print(output)


def _show_in_terminal(path: str) -> bool:
    """Draw the PNG with a terminal image viewer when there is one and stdout is a terminal."""
    if not sys.stdout.isatty():
        return False
    for name, options in _VIEWERS:
        viewer = shutil.which(name)
        if viewer and subprocess.run([viewer, *options, path], check=False).returncode == 0:
            print(path)
            return True
    return False


def _locate(root: str, name: str) -> Run:
    for path in (name, os.path.join(root, name)):
        if os.path.isdir(path) and _is_run(path):
            return read_run(path, name)
    matches = [r for r in find_runs(root) if r.name == name or r.name.endswith(f"/{name}")]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(r.name for r in find_runs(root)) or "none"
    raise LookupError(f"no run {name!r} under {root} (runs: {known})")


def _is_run(path: str) -> bool:
    return any(
        os.path.exists(os.path.join(path, f))
        for f in (storage.RESULTS_FILE, storage.STATE_FILE, storage.MARKER_FILE)
    )


def _subdirs(path: str) -> list[str]:
    try:
        return [e.name for e in os.scandir(path) if e.is_dir() and not e.name.startswith(".")]
    except FileNotFoundError:
        return []


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _score_attribute(run: Run) -> str | None:
    config = run.params.get("run_config", {}).get("checkpoint_config", {})
    return config.get("checkpoint_score_attribute") if isinstance(config, dict) else None


def _mode(run: Run, metric: str) -> str:
    config = run.params.get("run_config", {}).get("checkpoint_config", {})
    if isinstance(config, dict) and config.get("checkpoint_score_attribute") == metric:
        return str(config.get("checkpoint_score_order", "max"))
    lowered = metric.lower()
    return "min" if any(w in lowered for w in ("loss", "err", "mse", "mae", "rmse")) else "max"


def _common_metrics(runs: list[Run]) -> list[str]:
    names = [set(r.measures()) for r in runs]
    shared = set.intersection(*names) if names else set()
    return [m for m in runs[0].measures() if m in shared][:6] if runs else []


def _flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict) and key != "config":
            flat.update(_flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(value) else float(value)


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _best_text(found: tuple[str, float] | None) -> str:
    return f"{found[0]}={_fmt(found[1])}" if found else "-"


def run_command(argv: Sequence[str]) -> int:
    """``lockstep runs ...`` from a list of arguments (for tests and scripts).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as root:
        ...     run_command(["list", "--storage-path", root])  # doctest: +ELLIPSIS
        no runs under ...
        0
    """
    top = argparse.ArgumentParser(prog="lockstep")
    add_parser(top.add_subparsers(dest="command", required=True))
    return main(top.parse_args(["runs", *argv]))
