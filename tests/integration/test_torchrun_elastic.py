"""torchrun's elastic rendezvous (``--nnodes=1:2``) and ``num_workers=(2, 4)`` on two
hosts: one run that starts on the first host alone, grows when the second host's agent
joins, and finishes on the first host after the second one dies whole, each time from
the latest committed checkpoint."""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.processes, pytest.mark.slow]

SCRIPT = str(Path(__file__).resolve().parents[1] / "cluster" / "elastic_run.py")
ROOT = Path(__file__).resolve().parents[2]
SCHEDULERS = (ROOT / "README.md").read_text().split("\n## Schedulers: ", 1)[1]
# the README's elastic torchrun line: its variables, torchrun's options, the script's
README_LINE = SCHEDULERS.split("Elastic, on any number", 1)[1].split("```sh\n", 1)[1]
README_LINE = README_LINE.split("```", 1)[0].strip()
_words = README_LINE.split()
_at = _words.index("torchrun")
ENV = dict(word.split("=", 1) for word in _words[:_at])
OPTIONS = _words[_at + 1 : _words.index("examples/cluster_train.py")]


def torchrun_elastic(argv: list[str]) -> list[str]:
    """An agent with the README's options (--nnodes 1:2 --nproc-per-node 2, c10d
    rendezvous on node1, the --rdzv-conf that keeps it quick), run with this interpreter:
    its processes import lockstep from this checkout."""
    return [sys.executable, "-m", "torch.distributed.run", *OPTIONS, *argv]


def wait_until(what: str, condition: Callable[[], bool], agent, log: Path) -> None:
    """Wait for ``condition`` (a file, a report), failing (with the agent's output) if
    the agent ends first."""
    deadline = time.monotonic() + 240
    while not condition():
        ended = agent.poll() is not None
        if ended or time.monotonic() > deadline:
            how = f"node1's agent exited {agent.returncode}" if ended else "240 s passed"
            logs = "\n".join(
                f"{p.name}:\n{p.read_text()[-6000:]}" for p in log.parent.glob("*.log")
            )
            pytest.fail(f"{how} before {what}:\n{logs}")
        time.sleep(0.2)


def die(agent: subprocess.Popen) -> None:
    """SIGKILL ``agent`` and every process under it at once, as when their machine dies
    (not every process on the host: the session's SLURM daemon runs there too)."""
    tree = psutil.Process(agent.pid)
    tree = [tree, *tree.children(recursive=True)]
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)
    agent.wait(timeout=60)
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, alive


def run_state(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "run_state.json").read_text())
    except FileNotFoundError:
        return {"history": [], "checkpoints": []}


def committed_by(run_dir: Path, num_workers: int, nth: int) -> int:
    """Checkpoints committed by the ``nth`` attempt (from 0) of ``num_workers`` workers."""
    state = run_state(run_dir)
    attempts = [a for a in state["history"] if a["num_workers"] == num_workers]
    if len(attempts) <= nth:
        return 0
    since = attempts[nth]["iteration"]
    return sum(c["training_iteration"] > since for c in state["checkpoints"])


def seen(out: Path) -> list[dict]:
    rows = []
    for path in sorted(out.glob("seen-rank*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines()]
    return rows


def phases(rows: list[dict]) -> list[list[dict]]:
    """Rank 0's rows, in order, split where the world size changes."""
    split: list[list[dict]] = []
    for row in (r for r in rows if r["rank"] == 0):
        if not split or split[-1][-1]["world_size"] != row["world_size"]:
            split.append([])
        split[-1].append(row)
    return split


@pytest.mark.timeout(600)
def test_an_elastic_run_grows_with_a_node_and_finishes_after_it_dies(hosts, tmp_path):
    out, storage = tmp_path / "out", tmp_path / "runs"
    out.mkdir()
    run_dir = storage / "elastic"
    argv = [SCRIPT, f"--out={out}", f"--storage={storage}", "--name=elastic",
            "--min-workers=2", "--max-workers=4"]  # fmt: skip
    logs = {host: open(tmp_path / f"{host}.log", "w") for host in ("node1", "node2")}  # noqa: SIM115
    assert ENV == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}  # so that a node may join
    first = hosts.popen("node1", torchrun_elastic(argv), stdout=logs["node1"],
                        stderr=subprocess.STDOUT, env=ENV)  # fmt: skip
    second, log = None, tmp_path / "node1.log"
    try:
        wait_until(
            "2 checkpoints of 2 workers", lambda: committed_by(run_dir, 2, 0) >= 2, first, log
        )
        second = hosts.popen("node2", torchrun_elastic(argv), stdout=logs["node2"],
                             stderr=subprocess.STDOUT, env=ENV)  # fmt: skip
        wait_until(
            "2 checkpoints of 4 workers", lambda: committed_by(run_dir, 4, 0) >= 2, first, log
        )
        die(second)  # the second host dies: its agent, its processes, their workers
        wait_until("a checkpoint of 2 workers again", lambda: committed_by(run_dir, 2, 1) >= 1,
                   first, log)  # fmt: skip
        last = max(row["epoch"] for row in seen(out)) + 3  # every rank is before it
        (out / "last-epoch").write_text(str(last))
        first.wait(timeout=240)
    finally:
        for agent in (first, second):
            if agent is not None and agent.poll() is None:
                agent.kill()
                agent.wait()
        for handle in logs.values():
            handle.close()
    output = (tmp_path / "node1.log").read_text()
    assert first.returncode == 0, output[-5000:]
    # the code after fit() ran once, in the driver of the job that finished the run
    after = [json.loads(p.read_text()) for p in out.glob("after-fit-*.json")]
    assert [(a["host"], a["metrics"]) for a in after] == [("node1", {"epoch": last})], output
    check_the_run(out, run_dir, last)


def check_the_run(out: Path, run_dir: Path, last: int) -> None:
    """2 workers on node1, 4 across both hosts, 2 on node1: each phase went on from the
    previous one's latest committed checkpoint, and the run record says it resized."""
    rows = seen(out)
    split = phases(rows)
    assert [phase[0]["world_size"] for phase in split] == [2, 4, 2]
    for before, after in itertools.pairwise(split):
        # no checkpoint lost: from the last committed, the epoch in flight at most again
        assert after[0]["epoch"] in (before[-1]["epoch"], before[-1]["epoch"] + 1), split
    epochs = [row["epoch"] for row in split[0] + split[1] + split[2]]
    assert sorted(set(epochs)) == list(range(last + 1))
    for phase in split:
        first, end = phase[0]["epoch"], phase[-1]["epoch"]
        world = phase[0]["world_size"]
        ranks = [r for r in rows if r["world_size"] == world and first <= r["epoch"] <= end]
        assert sorted({r["rank"] for r in ranks}) == list(range(world))
        for row in ranks:  # torchrun's ranks, contiguous per node, the driver's first
            assert (row["node_rank"], row["local_rank"]) == divmod(row["rank"], 2)
            assert (row["host"] == phase[0]["host"]) == (row["rank"] < 2), row
    assert [phase[0]["host"] for phase in (split[0], split[2])] == ["node1", "node1"]
    grown = {r["host"] for r in rows if r["world_size"] == 4}
    assert grown == {"node1", "node2"}
    state = run_state(run_dir)
    assert (state["status"], state["num_failures"]) == ("finished", 0)
    history = [(a["num_workers"], a["ended"]) for a in state["history"]]
    assert history == [(2, "resized"), (4, "resized"), (2, "finished")], state["history"]
    assert state["history"][1]["cause"].startswith("torchrun started the run again with 2 ")
    # each new driver's start counts as recovering (as after a resize by one driver)
    assert json.loads((run_dir / "time.json").read_text())["time"]["recovering"] > 0
    final = run_dir / state["latest"]
    assert sorted(p.name for p in final.iterdir() if not p.name.startswith(".")) == [
        "epoch.txt", "rank0.txt", "rank1.txt"]  # fmt: skip
    assert (final / "epoch.txt").read_text() == str(last)


@pytest.mark.timeout(600)
def test_the_readmes_elastic_torchrun_line_runs_on_one_host_of_two(hosts, tmp_path):
    """The line as it is, with the example: one node of ``--nnodes 1:2`` is a world of 2
    processes, which ``--workers 2:4`` takes."""
    argv = [sys.executable, "-m", "torch.distributed.run", *README_LINE.split()[_at + 1 :]]
    storage = tmp_path / "runs"
    proc = hosts.popen("node1", argv, env=ENV | {"LOCKSTEP_STORAGE_PATH": str(storage)},
                       cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, output
    assert output.count("{'epoch': 5, 'loss': ") == 1, output
    state = run_state(storage / "lockstep_run-torchrun-elastic")  # named after --rdzv-id
    assert state["training_iteration"] == 6
    assert [(a["num_workers"], a["ended"]) for a in state["history"]] == [(2, "finished")]
