"""The `lockstep` command as a user runs it: exit codes, standard error, help, the demo."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

LOCKSTEP = os.path.join(os.path.dirname(sys.executable), "lockstep")


def lockstep(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOCKSTEP, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def test_version():
    from importlib.metadata import version

    done = lockstep("--version")
    assert done.returncode == 0
    assert done.stdout.startswith(f"lockstep {version('lockstep')} (Python 3.")


def test_help_lists_every_command():
    done = lockstep("--help")
    assert done.returncode == 0
    for command in ("demo", "doctor"):
        assert f"    {command} " in done.stdout


def test_every_demo_option_has_help_and_shows_its_default():
    done = lockstep("demo", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for shown in (
        "--epochs EPOCHS epochs to train (at least 1) (default: 15)",
        "--workers WORKERS worker processes (at least 1) (default: 2)",
        "--storage-path STORAGE_PATH directory (or s3:// URL) the run is written under; "
        "default: $LOCKSTEP_STORAGE_PATH, else ~/lockstep_results",
        "--name NAME run name; default: demo-<date>-<time>, a new run",
        "--limit LIMIT use only this many images; default: all",
        "--seed SEED random seed: the same seed, the same run (default: 0)",
    ):
        assert shown in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["demo", "--epochs", "0"], "argument --epochs: 0 is too small: give 1 or more"),
        (["demo", "--workers", "-1"], "argument --workers: -1 is too small: give 1 or more"),
        (["demo", "--epochs", "many"], "argument --epochs: 'many' is not a whole number"),
        (["demo", "--storage-path", "/proc/lockstep"], "--storage-path '/proc/lockstep' cannot"),
        (["no-such-command"], "invalid choice: 'no-such-command'"),
        (["demo", "--bogus"], "lockstep demo: error: unrecognized arguments: --bogus"),
        (["runs", "list", "-x"], "lockstep runs list: error: unrecognized arguments: -x"),
        (["runs", "show", "r", "--metric", "m"], "lockstep runs show: error: unrecognized"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_invalid_values_are_one_line_on_stderr_and_exit_2(args, message):
    done = lockstep(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_doctor_shows_versions_and_backends_with_their_fix():
    done = lockstep("doctor")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("lockstep ")
    assert lines[1].startswith("Python 3.")
    for package in ("torch", "pyarrow", "tensorflow", "xgboost", "lightgbm", "ray"):
        assert any(line.split()[:1] == [package] for line in lines), package
    backends = lines[lines.index("backends:") + 1 :]
    names = [line.split()[0] for line in backends if not line.strip().startswith("fix:")]
    assert names == ["gloo", "NCCL", "TensorFlow", "Horovod", "XGBoost", "LightGBM", "Ray"]
    assert "  gloo        ok" in backends  # the test extra installs torch
    for i, line in enumerate(backends):
        if "not usable:" in line:  # every backend that cannot be used says how to fix it
            assert backends[i + 1].strip().startswith("fix: "), line
            # a command that only shows what is wrong fixes nothing
            assert not backends[i + 1].strip().startswith("fix: nvidia-smi"), line


FAKE_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu=index,name,memory.total,driver_version*)
    echo "0, NVIDIA H100 80GB HBM3, 81559, 580.65.06"
    echo "1, NVIDIA H100 80GB HBM3, 81559, 580.65.06" ;;
  *--query-gpu=index*) echo 0; echo 1 ;;
  *) exit 9 ;;
esac
"""


def test_doctor_lists_the_gpus_nvidia_smi_shows(tmp_path):
    # nvidia-smi's output as it prints it, from a stand-in on PATH: this checks the parsing
    # only (tests/integration/test_gpu.py runs doctor against a real GPU)
    (tmp_path / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (tmp_path / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": ""}
    done = lockstep("doctor", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    gpus = lines[lines.index("GPUs:") + 1 : lines.index("backends:") - 1]
    assert gpus[:2] == [
        "  0  NVIDIA H100 80GB HBM3, 81559 MiB, driver 580.65.06",
        "  1  NVIDIA H100 80GB HBM3, 81559 MiB, driver 580.65.06",
    ]
    import torch

    if torch.version.cuda is None:
        assert gpus[2:] == [
            "  torch's CUDA none (a CPU build of torch), NCCL none (this torch build has no NCCL)"
        ]
        # GPUs are there, this torch cannot use them: the NCCL backend says so
        assert "  NCCL        not usable: this torch build has no CUDA" in lines
    else:  # a CUDA build (the GPU machine's)
        assert gpus[2].startswith(f"  torch's CUDA {torch.version.cuda}, NCCL 2.")


def test_demo_is_seeded_writes_to_the_storage_variable_and_plots(tmp_path):
    env = {"LOCKSTEP_STORAGE_PATH": str(tmp_path)}
    curves = []
    for name in ("first", "second"):
        done = lockstep("demo", "--epochs", "2", "--limit", "120", "--name", name, env=env)
        assert done.returncode == 0, done.stderr
        assert f"Run directory: {tmp_path / name}" in done.stdout
        assert (tmp_path / name / "training_curves.png").exists()
        rows = (tmp_path / name / "result.json").read_text().splitlines()
        curves.append([{k: json.loads(r)[k] for k in ("train_loss", "val_loss")} for r in rows])
    assert curves[0] == curves[1]


def start_demo(*args: str, storage, one_cpu: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [LOCKSTEP, "demo", "--storage-path", str(storage), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # one CPU: two workers ask for more CPUs than there are, whatever the machine
        preexec_fn=(lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
        if one_cpu
        else None,
    )


def test_demo_says_what_it_does_first_and_lockstep_warnings_are_one_plain_line(tmp_path):
    demo = start_demo("--epochs", "1", "--limit", "60", storage=tmp_path, one_cpu=True)
    assert demo.stderr is not None
    first = demo.stderr.readline()
    out, err = demo.communicate(timeout=600)
    assert demo.returncode == 0, err
    assert first == (
        "[lockstep] demo: a ConvNet on 8x8 digits, 1 epoch on 2 workers; loading PyTorch ...\n"
    )
    warned = [line for line in err.splitlines() if "warning" in line.lower()]
    assert warned == [
        "lockstep demo: warning: ScalingConfig asks for 2 CPUs (2 workers x 1) but this "
        "machine has 1: the workers will share CPUs, and every step waits for the slowest. "
        'HINT: use fewer workers, or fewer CPUs each with resources_per_worker={"CPU": ...}'
    ]
    assert "sys.exit(main())" not in err and "UserWarning" not in err
    # what each time covers
    assert re.search(
        r"\[lockstep\] finished in \d+\.\ds \(the whole fit\(\): starting the workers, "
        r"training, stopping them\): 1 report, 0 restarts",
        err,
    ), err
    assert re.search(
        r"^Time: \d+\.\d s since the command started: \d+\.\d s the run on 2 workers \(fit\(\), "
        r"as above\), \d+\.\d s starting, importing PyTorch and drawing the plot$",
        out,
        flags=re.M,
    ), out


def test_ctrl_c_before_the_run_started_says_so(tmp_path):
    demo = start_demo("--epochs", "1", "--limit", "60", storage=tmp_path)
    assert demo.stderr is not None
    first = demo.stderr.readline()
    assert first.startswith("[lockstep] demo: "), first
    # The first line comes before PyTorch is imported, which takes seconds: the run has
    # not started yet.
    demo.send_signal(signal.SIGINT)
    out, err = demo.communicate(timeout=600)
    assert demo.returncode == 130
    assert err.splitlines() == ["lockstep demo: interrupted before the run started"], err
    assert out == ""


def test_doctor_shows_what_launched_it_and_the_topology():
    srun = {"SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "4",
            "SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_NNODES": "2",
            "SLURM_STEP_NODELIST": "node[01-02]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}  # fmt: skip
    done = lockstep("doctor", env=srun)
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("launched by:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert section[:4] == [
        "  launcher      SLURM srun (LOCKSTEP_CLUSTER=auto)",
        "  this process  1 of 4, 1 of 2 on its node, node 0 of 2",
        "  allocation    2 nodes x 2 process(es)",
        "  nodes         node01, node02",
    ]
    assert "  run name      lockstep_run-slurm-5 unless RunConfig(name=...)" in section
    assert section[-1].startswith("  topology      this process joins the driver's run")
    torchrun = {"TORCHELASTIC_RUN_ID": "job7", "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "2",
                "TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_MAX_RESTARTS": "3"}  # fmt: skip
    elastic = lockstep("doctor", env=torchrun)
    assert elastic.returncode == 0, elastic.stderr
    assert (
        "  elastic       num_workers=(min, max) takes this rendezvous's world; a node joining "
        "or lost starts the run again from its latest checkpoint (restart 1; "
        "--max-restarts=3 for failures and lost nodes)\n"
        "  warning       a node joining this job later fails: torch shares its rendezvous "
        "store with the workers, and publishes its address once. HINT: start torchrun with "
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1\n"
    ) in elastic.stdout
    unshared = lockstep("doctor", env=torchrun | {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
    assert "  elastic  " in unshared.stdout and "  warning  " not in unshared.stdout
    off = lockstep("doctor", env=srun | {"LOCKSTEP_CLUSTER": "off"})
    assert "  nothing       a run uses this machine's processes (LOCKSTEP_CLUSTER=off)" in (
        off.stdout
    )
