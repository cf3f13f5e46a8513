import os

from lockstep._internal.controller.uploads import UploadJob, Uploads


def handoff(tmp_path, name):
    path = tmp_path / name
    path.mkdir()
    (path / "w.txt").write_text(name)
    return str(path)


def test_jobs_upload_in_order_and_hand_off_files_are_deleted(tmp_path):
    copied = []
    uploads = Uploads(lambda local, target: copied.append((os.path.basename(local), target)))
    a, b = handoff(tmp_path, "a"), handoff(tmp_path, "b")
    uploads.submit(UploadJob("step0", 0, {1: b, 0: a}))
    done = uploads.finished(wait=True)
    uploads.close()
    assert [d.job.step for d in done] == ["step0"] and done[0].error is None
    assert copied == [
        ("a", ".staging/step_000000000/rank_00000"),
        ("b", ".staging/step_000000000/rank_00001"),
    ]
    assert not os.path.exists(a) and not os.path.exists(b)


def test_a_failing_upload_is_retried_then_reported(tmp_path):
    calls = []

    def flaky(local, target):
        calls.append(target)
        raise ConnectionError("store unreachable")

    uploads = Uploads(flaky, attempts=3, backoff_s=0.001)
    a = handoff(tmp_path, "a")
    uploads.submit(UploadJob("step0", 4, {0: a}))
    (done,) = uploads.finished(wait=True)
    uploads.close()
    assert len(calls) == 3
    assert isinstance(done.error, ConnectionError)
    assert not os.path.exists(a)


def test_recovering_upload_succeeds(tmp_path):
    calls = []

    def recovering(local, target):
        calls.append(target)
        if len(calls) < 3:
            raise ConnectionError("try again")

    uploads = Uploads(recovering, attempts=5, backoff_s=0.001)
    uploads.submit(UploadJob("s", 0, {0: handoff(tmp_path, "a")}))
    (done,) = uploads.finished(wait=True)
    uploads.close()
    assert done.error is None and len(calls) == 3
