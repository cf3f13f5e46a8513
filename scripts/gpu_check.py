"""The GPU check: every test marked ``gpu`` and the GPU benchmark, then a short table.

Run by ``scripts/gpu-check.sh`` (see there). The tests get at most TESTS_S seconds and the
benchmark BENCH_S, so that the whole check ends within 8 minutes; what did not finish in
its time says so in the table. ``GPU_CHECK_DRY=1`` runs the same steps on a machine
without a GPU: every GPU test skips, and the benchmark runs tiny on the CPU.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT / "scripts" / "wheels"
TESTS_S = 330
BENCH_S = 110
GPU_TESTS = ["tests/integration/test_gpu.py"]
# GPU tests of frameworks the GPU machine may lack: run where the framework is installed.
OPTIONAL_GPU_TESTS = {"xgboost": "tests/integration/test_xgboost.py"}
RESULT = re.compile(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")
TARGET = 0.97


def unpack_missing_wheels(site: Path) -> list[str]:
    """Unpack each wheel of scripts/wheels whose distribution this Python lacks into
    ``site`` (a wheel is a zip of what an install puts into site-packages)."""
    unpacked = []
    for wheel in sorted(WHEELS.glob("*.whl")):
        name = wheel.name.split("-")[0]
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
            unpacked.append("-".join(wheel.name.split("-")[:2]))
    return unpacked


def run(command: list[str], env: dict[str, str], log: Path, limit_s: float) -> tuple[int, bool]:
    """Run ``command`` with its output in ``log``; its exit code, and whether it was stopped
    at ``limit_s`` seconds (with everything it started)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            return proc.wait(timeout=limit_s), False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(), True


def machine(env: dict[str, str], dry: bool) -> str:
    """The card, its driver, torch's CUDA and NCCL: one line."""
    probe = (
        "import json, sys, torch\n"
        "try:\n    nccl = '.'.join(map(str, torch.cuda.nccl.version()))\n"
        "except Exception:\n    nccl = 'none'\n"
        "print(json.dumps([torch.__version__, torch.version.cuda, nccl, sys.version.split()[0]]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    found = json.loads(done.stdout) if done.returncode == 0 else ["?"] * 4
    torch_version, cuda, nccl, python = found
    try:
        card = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        card = "no NVIDIA GPU" + (" (dry run)" if dry else "")
    return f"{card}; torch {torch_version} (CUDA {cuda}, NCCL {nccl}); Python {python}"


def test_files() -> tuple[list[str], list[str]]:
    """The test files to run, and a line for each GPU test left out, with why."""
    files, left_out = list(GPU_TESTS), []
    for module, path in OPTIONAL_GPU_TESTS.items():
        try:
            importlib.metadata.distribution(module)
            files.append(path)
        except importlib.metadata.PackageNotFoundError:
            left_out.append(f"{path}: not run ({module} is not installed here)")
    return files, left_out


def run_tests(env: dict[str, str], out: Path) -> tuple[list[tuple[str, str]], str]:
    files, left_out = test_files()
    log = out / "gpu-tests.log"
    command = [sys.executable, "-m", "pytest", *files, "-m", "gpu", "-v", "-rA"]
    start = time.monotonic()
    code, stopped = run(command, env, log, TESTS_S)
    seconds = time.monotonic() - start
    results = []
    for line in log.read_text(errors="replace").splitlines():
        match = RESULT.match(line)
        if match:
            results.append((match.group(1).removeprefix("tests/integration/"), match.group(2)))
    results += [(line, "-") for line in left_out]
    how = f"stopped at the {TESTS_S} s limit" if stopped else f"exit code {code}"
    return results, f"pytest: {how}, {seconds:.0f} s (log: {log})"


def run_benchmark(env: dict[str, str], out: Path, dry: bool) -> tuple[list[str], bool]:
    figures_file = out / "bench.json"
    command = [sys.executable, "benchmarks/gpu_ddp.py", "--json", str(figures_file)]
    if dry:
        command.append("--dry")
    code, stopped = run(command, env, out / "bench.log", BENCH_S)
    if stopped or code != 0 or not figures_file.exists():
        why = f"stopped at the {BENCH_S} s limit" if stopped else f"failed (exit code {code})"
        return [f"benchmark gpu_ddp.py {why}: see {out / 'bench.log'}"], False
    f = json.loads(figures_file.read_text())
    met = f["ratio"] >= TARGET
    verdict = "(dry run: the figures mean nothing)" if dry else ("ok" if met else "BELOW TARGET")
    return [
        f"benchmark gpu_ddp.py on {f['card']}, {f['steps']} steps, median of {f['repeats']}:",
        f"  samples/s: lockstep {f['lockstep_samples_s']:,.0f}, plain torch.distributed "
        f"{f['baseline_samples_s']:,.0f}, ratio {f['ratio']:.3f}x (target >= {TARGET}x) {verdict}",
        f"  to the first report: lockstep {f['lockstep_first_report_s']:.1f} s; plain: first "
        f"step after {f['baseline_first_step_s']:.1f} s",
    ], met or dry


def main() -> int:
    dry = os.environ.get("GPU_CHECK_DRY", "") == "1"
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="lockstep-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lockstep-gpu-site-") as site:
        unpacked = unpack_missing_wheels(Path(site))
        paths = [str(ROOT / "src"), str(ROOT), site, os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        header = machine(env, dry)
        results, tests_line = run_tests(env, out)
        bench_lines, bench_ok = run_benchmark(env, out, dry)
    counts = {kind: sum(1 for _, r in results if r == kind) for kind in ("PASSED", "SKIPPED")}
    failed = [name for name, r in results if r in ("FAILED", "ERROR", "XPASS")]
    width = max([len(name) for name, _ in results] + [10])
    print()
    print(f"GPU check{' (DRY RUN, no GPU)' if dry else ''}: {header}")
    if unpacked:
        print(f"unpacked from scripts/wheels: {', '.join(unpacked)}")
    print(f"{'test':<{width}}  result")
    for name, result in results:
        print(f"{name:<{width}}  {result.lower()}")
    print(tests_line)
    print("\n".join(bench_lines))
    ok = bool(results) and not failed and bench_ok and (dry or counts["PASSED"] > 0)
    print(
        f"{counts['PASSED']} passed, {len(failed)} failed, {counts['SKIPPED']} skipped; "
        f"{'OK' if ok else 'NOT OK'} in {time.monotonic() - started:.0f} s; files in {out}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
