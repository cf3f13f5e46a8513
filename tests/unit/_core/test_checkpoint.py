import os
import pathlib
import pickle

import pytest

from lockstep._core.checkpoint import Checkpoint


@pytest.fixture
def local_dir(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "model.txt").write_text("weights")
    (d / "sub").mkdir()
    (d / "sub" / "opt.txt").write_text("opt")
    return d


def test_from_directory_missing_is_an_early_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"does not exist.*HINT"):
        Checkpoint.from_directory(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        Checkpoint.from_directory(tmp_path / "file")


def test_as_directory_of_a_local_checkpoint_is_the_directory_itself(local_dir):
    checkpoint = Checkpoint.from_directory(local_dir)
    with checkpoint.as_directory() as d:
        assert d == str(local_dir)
    assert local_dir.exists()


def test_to_directory_copies_everything(local_dir, tmp_path):
    out = Checkpoint.from_directory(local_dir).to_directory(tmp_path / "out")
    assert (tmp_path / "out" / "sub" / "opt.txt").read_text() == "opt"
    assert out == str(tmp_path / "out")


def test_metadata_get_set_update(local_dir):
    checkpoint = Checkpoint.from_directory(local_dir)
    assert checkpoint.get_metadata() == {}
    checkpoint.set_metadata({"epoch": 3})
    checkpoint.update_metadata({"lr": 0.1})
    assert checkpoint.get_metadata() == {"epoch": 3, "lr": 0.1}
    assert (local_dir / ".metadata.json").exists()
    with pytest.raises(ValueError, match="JSON-serialisable"):
        checkpoint.set_metadata({"f": object()})


def test_not_a_path(local_dir):
    with pytest.raises(TypeError, match="as_directory"):
        os.fspath(Checkpoint.from_directory(local_dir))


def test_pickle_and_equality(local_dir):
    checkpoint = Checkpoint.from_directory(local_dir)
    copy = pickle.loads(pickle.dumps(checkpoint))
    assert copy == checkpoint and hash(copy) == hash(checkpoint)
    assert repr(copy) == f"Checkpoint(filesystem=local, path={local_dir})"  # Ray's form


def test_remote_checkpoint_downloads_and_cleans_up(local_dir):
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.put(str(local_dir), "/lockstep-ckpt-test", recursive=True)
    try:
        checkpoint = Checkpoint("memory:///lockstep-ckpt-test")
        assert not checkpoint.is_local
        with checkpoint.as_directory() as d:
            with open(os.path.join(d, "sub", "opt.txt")) as f:
                assert f.read() == "opt"
            held = d
        assert not os.path.exists(held)
        checkpoint.set_metadata({"remote": True})
        assert Checkpoint("memory:///lockstep-ckpt-test").get_metadata() == {"remote": True}
        copy = pickle.loads(pickle.dumps(checkpoint))
        assert copy.get_metadata() == {"remote": True}
    finally:
        fs.rm("/lockstep-ckpt-test", recursive=True)


def test_to_bytes_and_from_bytes_round_trip(local_dir):
    import shutil

    copy = Checkpoint.from_bytes(Checkpoint.from_directory(local_dir).to_bytes())
    try:
        assert pathlib.Path(copy.path, "sub", "opt.txt").read_text() == "opt"
        assert pathlib.Path(copy.path, "model.txt").read_text() == "weights"
    finally:
        shutil.rmtree(copy.path)


def test_to_dict_and_from_dict_round_trip(local_dir):
    import shutil

    checkpoint = Checkpoint.from_dict({"epoch": 3, "state": {"w": [1.0, 2.0]}})
    try:
        assert checkpoint.to_dict() == {"epoch": 3, "state": {"w": [1.0, 2.0]}}
    finally:
        shutil.rmtree(checkpoint.path)
    # a directory of files goes through a dict and comes back whole
    again = Checkpoint.from_dict(Checkpoint.from_directory(local_dir).to_dict())
    try:
        assert pathlib.Path(again.path, "sub", "opt.txt").read_text() == "opt"
    finally:
        shutil.rmtree(again.path)


def test_load_model_of_files_no_framework_wrote_is_a_clear_error(tmp_path):
    import lockstep.train  # noqa: F401  (registers the frameworks' loaders)

    (tmp_path / "weights.bin").write_bytes(b"0")
    with pytest.raises(ValueError, match=r"holds no model lockstep recognises.*HINT"):
        Checkpoint.from_directory(tmp_path).load_model()
