"""The suite's own guard: a session that leaves a process or a file behind fails, and so does
a test that stops the fork server the session keeps warm."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

LEAKY = textwrap.dedent("""
    import os, subprocess, tempfile

    import pytest

    @pytest.fixture(scope="session")
    def leaves_a_file():
        yield
        # after the last test, where no test's own guard sees it
        open(os.path.join(tempfile.gettempdir(), "lockstep-left-behind"), "w").close()

    def test_leaks_an_orphan_and_files(leaves_a_file):
        # an orphan: the shell exits at once, its sleep is no child of this process
        subprocess.run(["bash", "-c", "sleep 300 >/dev/null 2>&1 &"], check=True)
        open(f"/dev/shm/lockstep-table-{os.getpid()}-leak.arrow", "w").close()

    def test_starts_the_fork_server(tmp_path):
        from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig

        config = RunConfig(storage_path=str(tmp_path), verbose=0)
        DataParallelTrainer(lambda: None, run_config=config).fit()

    def test_stops_the_fork_server():
        from lockstep._internal.execution.worker_group import forkserver

        forkserver._server.close()
""")


@pytest.mark.slow
def test_a_session_that_leaves_things_behind_fails(tmp_path):
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "conftest",
            "-p",
            "no:randomly",
            "-q",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            str(tmp_path / "test_leaky.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
    )
    assert done.returncode != 0, done.stdout
    assert "3 passed, 1 error" in done.stdout, done.stdout
    assert "the test suite left things behind" in done.stdout
    assert "processes left running after the tests" in done.stdout
    assert "sleep 300" in done.stdout
    assert "left in the temp directory" in done.stdout
    assert "lockstep-left-behind" in done.stdout
    assert "left in /dev/shm" in done.stdout
    assert "Failed: the session's fork server (pid" in done.stdout
    # ... and the guard removed what it found
    assert not [n for n in os.listdir("/dev/shm") if n.endswith("-leak.arrow")]
