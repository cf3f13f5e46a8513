"""A real SLURM cluster on the hosts: ``slurmctld`` and a private ``munged`` on the first
host, one ``slurmd`` on each host; job helpers that never wait without a limit."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from tests.cluster.hosts import Hosts, stop

# slurmd drains a node whose slurm.conf CPUs differ from the hardware: config_overrides
# lets the conf win (every host shares this machine's cores). A requeued job waits
# cred_expire + 1 s before it may start again (120 s by default; 5 is the least SLURM
# 22.05 takes), and the scheduler looks at pending jobs every sched_interval (60 s): short
# ones, so that a requeue runs in seconds.
SLURM_CONF = """\
ClusterName=lockstep
SlurmctldHost={controller}({controller_addr})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.sock,cred_expire=5
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool-%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
KillWait={kill_wait}
MinJobAge=3600
{nodes}
PartitionName=hosts Nodes={node_list} Default=YES MaxTime=INFINITE State=UP
"""

FINISHED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED"})
FINISHED |= {"OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


class Slurm:
    """SLURM on ``nodes`` of ``hosts`` (the first runs the controller too).

    Client commands (``sbatch``, ``srun``, ``squeue``, ``scontrol``, ``scancel``) run as the
    first node: only the hosts reach each other.
    """

    def __init__(
        self, hosts: Hosts, nodes: Sequence[str], cpus: int = 2, kill_wait_s: int = 10
    ) -> None:
        self.hosts = hosts
        self.nodes = list(nodes)
        self.cpus = cpus
        self.kill_wait_s = kill_wait_s
        self.dir = hosts.dir / "slurm"
        self.conf = self.dir / "slurm.conf"
        self._daemons: list[psutil.Process] = []

    @property
    def controller(self) -> str:
        return self.nodes[0]

    def env(self) -> dict[str, str]:
        """What a SLURM command needs: this cluster's slurm.conf."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 60) -> None:
        """Write the configuration, start munged, slurmctld and every slurmd; return when
        every node is idle."""
        self._write_config()
        self._start(self.controller, self._munged())
        self._wait_for(self.dir / "munge.sock", timeout)
        self._start(self.controller, ["slurmctld", "-D", "-i"])
        for node in self.nodes:
            self._start(node, ["slurmd", "-D", "-N", node])
        self.wait_idle(timeout)

    def stop(self) -> None:
        """Stop the daemons (each slurmd ends its jobs' processes as it stops)."""
        stop(self._daemons)
        self._daemons.clear()

    def _write_config(self) -> None:
        (self.dir / "state").mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)  # munged refuses a socket directory others may write to
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        nodes = "\n".join(
            f"NodeName={n} NodeAddr={self.hosts.address(n)} CPUs={self.cpus} State=UNKNOWN"
            for n in self.nodes
        )
        self.conf.write_text(
            SLURM_CONF.format(
                controller=self.controller,
                controller_addr=self.hosts.address(self.controller),
                dir=self.dir,
                kill_wait=self.kill_wait_s,
                nodes=nodes,
                node_list=",".join(self.nodes),
            )
        )

    def _munged(self) -> list[str]:
        d = self.dir
        return [
            "munged",
            "--foreground",
            "--force",
            f"--key-file={d}/munge.key",
            f"--socket={d}/munge.sock",
            f"--pid-file={d}/munged.pid",
            f"--log-file={d}/munged.log",
            f"--seed-file={d}/munged.seed",
        ]

    def _start(self, host: str, argv: list[str]) -> None:
        log = self.dir / f"{argv[0]}-{host}.out"
        self._daemons.append(self.hosts.daemon(host, argv, log, env=self.env()))

    def _wait_for(self, path: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} never appeared:\n{self.logs()}")
            time.sleep(0.05)

    def logs(self) -> str:
        """Every daemon's log, for a failure's message."""
        return "\n".join(
            f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out"))
        )

    def command(
        self, argv: Sequence[str], timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """A SLURM client command run on the controller's host."""
        return self.hosts.run(self.controller, argv, timeout=timeout, env=self.env(), check=check)

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            idle = self.command(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], check=False)
            if sorted(set(idle.stdout.split())) == sorted(self.nodes):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"SLURM nodes not idle after {timeout} s:\n{self.logs()}")
            time.sleep(0.2)

    def srun(
        self, args: Sequence[str], timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``srun ARGS``; fails at once (``--immediate``) when the nodes are busy, where a
        bare srun would wait forever."""
        return self.command(["srun", "--immediate=10", *args], timeout=timeout, check=check)

    def sbatch(self, script: str | Path, *args: str) -> int:
        """Submit a job script (a path, or its text); return the job id."""
        path = Path(script)
        if not path.exists():
            path = self.dir / f"job-{time.monotonic_ns()}.sh"
            path.write_text(str(script))
        done = self.command(["sbatch", "--parsable", *args, str(path)])
        return int(done.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job``'s fields: JobState, Restarts, NodeList, ExitCode, ..."""
        out = self.command(["scontrol", "show", "job", "-o", str(job_id)]).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def state(self, job_id: int) -> str:
        return self.job(job_id)["JobState"]

    def wait(
        self, job_id: int, states: Sequence[str] | frozenset[str] = FINISHED, timeout: float = 120
    ) -> str:
        """Wait until the job is in one of ``states`` (by default: finished); return it."""
        deadline = time.monotonic() + timeout
        while (state := self.state(job_id)) not in states:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} is {state}, not {sorted(states)}, after {timeout} s:\n"
                    f"{self.job(job_id)}\n{self.logs()}"
                )
            time.sleep(0.2)
        return state

    def scancel(self, job_id: int, signal: str | None = None, *, batch: bool = False) -> None:
        """Cancel the job, or send it ``signal`` (to every step, or the batch shell only)."""
        args = [f"--signal={signal}"] if signal else []
        args += ["--batch"] if batch else ["--full"] if signal else []
        self.command(["scancel", *args, str(job_id)])

    def requeue(self, job_id: int) -> None:
        """``scontrol requeue``: the job goes back to pending and runs again."""
        self.command(["scontrol", "requeue", str(job_id)])
