"""Naming an OOM kill: the cgroup's counters (v2 and v1 layouts, real files in a tmp dir)
and the memory a worker was last seen using."""

from __future__ import annotations

import os

from lockstep._internal.execution.worker_group.process.memory import (
    Cgroup,
    MemoryWatch,
    find_cgroup,
    parse_oom_kills,
    rss_bytes,
)

V2_EVENTS = "low 0\nhigh 0\nmax 57\noom 2\noom_kill {}\noom_group_kill 0\n"
V1_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill {}\n"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v2(tmp_path, *, kills=0, limit="12884901888"):
    """A cgroup v2 mount with this process in ``/user.slice/job``."""
    root = tmp_path / "cgroup"
    write(root / "cgroup.controllers", "cpu memory\n")
    write(root / "user.slice/job/memory.events", V2_EVENTS.format(kills))
    write(root / "user.slice/job/memory.max", f"{limit}\n")
    write(tmp_path / "proc_cgroup", "0::/user.slice/job\n")
    return root, root / "user.slice/job"


def test_the_oom_kill_count_is_read_from_both_formats():
    assert parse_oom_kills(V2_EVENTS.format(3)) == 3
    assert parse_oom_kills(V1_CONTROL.format(1)) == 1
    assert parse_oom_kills("oom_kill_disable 0\n") is None
    assert parse_oom_kills("") is None


def test_a_v2_cgroup_is_found_from_proc_self_cgroup(tmp_path):
    root, job = v2(tmp_path, kills=4)
    cgroup = find_cgroup(str(tmp_path / "proc_cgroup"), str(root))
    assert cgroup == Cgroup(str(job), 2)
    assert cgroup.oom_kills() == 4
    assert cgroup.limit() == 12 * 2**30


def test_a_v1_cgroup_is_found_and_no_limit_reads_as_none(tmp_path):
    root = tmp_path / "cgroup"
    job = root / "memory/process_api/abc"
    write(job / "memory.oom_control", V1_CONTROL.format(0))
    write(job / "memory.limit_in_bytes", "9223372036854771712\n")
    write(tmp_path / "proc_cgroup", "5:cpu:/\n4:memory:/process_api/abc\n0::/\n")
    cgroup = find_cgroup(str(tmp_path / "proc_cgroup"), str(root))
    assert cgroup == Cgroup(str(job), 1)
    assert cgroup.oom_kills() == 0
    assert cgroup.limit() is None


def test_in_a_cgroup_namespace_the_mount_is_the_processs_own_cgroup(tmp_path):
    root = tmp_path / "cgroup"
    write(root / "cgroup.controllers", "memory\n")
    write(root / "memory.events", V2_EVENTS.format(0))
    write(tmp_path / "proc_cgroup", "0::/kubepods/pod123/abc\n")
    assert find_cgroup(str(tmp_path / "proc_cgroup"), str(root)) == Cgroup(str(root), 2)


def test_no_cgroup_to_read(tmp_path):
    assert find_cgroup(str(tmp_path / "missing"), str(tmp_path)) is None
    write(tmp_path / "proc_cgroup", "0::/\n")
    assert find_cgroup(str(tmp_path / "proc_cgroup"), str(tmp_path / "empty")) is None


def test_a_sigkill_with_the_oom_counter_up_is_named_an_oom_kill(tmp_path):
    root, job = v2(tmp_path, kills=0)
    watch = MemoryWatch(find_cgroup(str(tmp_path / "proc_cgroup"), str(root)))
    watch.sample({1: os.getpid()}, now=0.0)
    used = watch._rss[1]
    (job / "memory.events").write_text(V2_EVENTS.format(1))  # the kernel killed one
    kind, summary = watch.explain_kill(1, 4242)
    assert kind == "oom"
    assert summary.startswith(
        "rank 1 (pid 4242) was killed by the kernel's OOM killer "
        "(memory.events oom_kill 0 -> 1; it used "
    )
    assert summary.endswith(" when last seen, the limit is 12.0 GiB)")
    assert f"{used / 2**20:.0f} MiB" in summary or f"{used / 2**30:.1f} GiB" in summary
    # the next kill is compared with the count after this one
    kind, _ = watch.explain_kill(0, 4241)
    assert kind == "signal"


def test_a_sigkill_without_an_oom_kill_says_sigkill_and_the_memory(tmp_path):
    root, _ = v2(tmp_path, kills=2, limit="max")
    watch = MemoryWatch(find_cgroup(str(tmp_path / "proc_cgroup"), str(root)))
    watch.sample({0: os.getpid()}, now=0.0)
    kind, summary = watch.explain_kill(0, 7)
    assert kind == "signal"
    assert summary.startswith("rank 0 (pid 7) was killed by SIGKILL (it used ")
    assert "when last seen, the machine has " in summary
    kind, summary = watch.explain_kill(1, 8)  # never sampled: nothing to add
    assert (kind, summary) == ("signal", "rank 1 (pid 8) was killed by SIGKILL")


def test_memory_is_sampled_at_most_every_half_second(tmp_path):
    watch = MemoryWatch(Cgroup(str(tmp_path), 2))
    watch.sample({0: os.getpid()}, now=10.0)
    watch.sample({1: os.getpid()}, now=10.2)
    assert set(watch._rss) == {0}
    watch.sample({1: os.getpid()}, now=10.6)
    assert set(watch._rss) == {0, 1}


def test_rss_of_a_live_and_a_gone_process():
    assert rss_bytes(os.getpid()) > 0
    assert rss_bytes(2**22 + 12345) is None
