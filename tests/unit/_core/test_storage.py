"""The storage contract: every filesystem a run directory can live on passes these tests.

A new filesystem subclasses StorageContract and overrides the ``root`` fixture.
"""

import os

import pytest

from lockstep._core import storage
from lockstep._core.storage import StorageDir


class StorageContract:
    @pytest.fixture
    def root(self) -> StorageDir:
        raise NotImplementedError

    def test_write_read_and_replace_atomically(self, root: StorageDir):
        root.makedirs()
        root.write_atomic("state.json", b"one")
        root.write_atomic("state.json", b"two")
        assert root.read_bytes("state.json") == b"two"
        assert root.listdir() == ["state.json"]

    def test_upload_merges_and_move_renames(self, root: StorageDir, tmp_path):
        (tmp_path / "a").mkdir()
        (tmp_path / "a" / "nested").mkdir()
        (tmp_path / "a" / "model.bin").write_bytes(b"\x00\x01")
        (tmp_path / "a" / "nested" / "opt.txt").write_text("opt")
        (tmp_path / "b").mkdir()
        (tmp_path / "b" / "rank1.txt").write_text("r1")
        root.makedirs()
        root.upload_dir(str(tmp_path / "a"), ".staging/step")
        root.upload_dir(str(tmp_path / "b"), ".staging/step")
        root.move(".staging/step", "checkpoint_000000")
        assert not root.exists(".staging/step")
        checkpoint = root.child("checkpoint_000000")
        assert checkpoint.listdir() == ["model.bin", "nested", "rank1.txt"]
        assert checkpoint.read_bytes("nested/opt.txt") == b"opt"

    def test_remove_tree_and_missing(self, root: StorageDir, tmp_path):
        (tmp_path / "f").write_text("x")
        root.makedirs()
        root.upload_dir(str(tmp_path), "tree")
        root.remove("tree")
        root.remove("never-existed")
        assert root.listdir() == []

    def test_listdir_of_missing_directory_is_empty(self, root: StorageDir):
        assert root.child("absent").listdir() == []

    def test_download_round_trip(self, root: StorageDir, tmp_path):
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "w.txt").write_text("weights")
        root.makedirs()
        root.upload_dir(str(tmp_path / "src"), "ckpt")
        storage.download_dir(root.fs, root.join("ckpt"), str(tmp_path / "dst"))
        assert (tmp_path / "dst" / "w.txt").read_text() == "weights"
        root.download("ckpt", str(tmp_path / "dst2"))
        assert (tmp_path / "dst2" / "w.txt").read_text() == "weights"

    def test_merge_into_replaces_same_named_files(self, root: StorageDir, tmp_path):
        for rank, names in {
            "r0": ["same.txt", "zero.txt"],
            "r1": ["same.txt", "one/x.txt"],
        }.items():
            for name in names:
                (tmp_path / rank / name).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / rank / name).write_text(rank)
            root.upload_dir(str(tmp_path / rank), f"staged/{rank}")
        root.merge_into("staged/r0", "staged/r1")
        merged = root.child("staged/r1")
        assert merged.listdir() == ["one", "same.txt", "zero.txt"]
        assert merged.read_text("same.txt") == "r0"
        assert not root.exists("staged/r0")

    def test_pickles_as_the_same_kind_of_directory(self, root: StorageDir):
        import cloudpickle

        copy = cloudpickle.loads(cloudpickle.dumps(root))
        assert type(copy) is type(root) and copy.uri == root.uri


class TestLocalStorage(StorageContract):
    @pytest.fixture
    def root(self, tmp_path) -> StorageDir:
        return StorageDir.from_uri(tmp_path / "store")

    def test_local_paths_get_the_local_implementation(self, root: StorageDir):
        assert isinstance(root, storage.LocalDir) and root.can_append
        assert isinstance(StorageDir.from_uri("memory://x"), storage.FsspecDir)

    def test_atomic_write_leaves_no_temporary_file(self, root: StorageDir):
        root.makedirs()
        root.write_atomic("x", b"1")
        assert os.listdir(root.path) == ["x"]

    def test_append(self, root: StorageDir):
        root.makedirs()
        root.append_text("log", "a\n")
        root.append_text("log", "b\n")
        assert root.read_text("log") == "a\nb\n"


class TestMemoryStorage(StorageContract):
    def test_cannot_append(self):
        assert not StorageDir.from_uri("memory://lockstep-test/append").can_append

    @pytest.fixture
    def root(self, request) -> StorageDir:
        uri = f"memory://lockstep-test/{request.node.name}"
        yield StorageDir.from_uri(uri)
        StorageDir.from_uri(uri).remove("")


class TestS3Storage(StorageContract):
    @pytest.fixture
    def root(self, s3_endpoint, request) -> StorageDir:
        return StorageDir.from_uri(f"s3://lockstep-runs/{request.node.name}")


def test_resolve_local_and_uri(tmp_path):
    assert storage.resolve(str(tmp_path)) == (None, str(tmp_path))
    assert storage.resolve("file://" + str(tmp_path))[1] == str(tmp_path)
    fs, path = storage.resolve("memory://bucket/x")
    assert "memory" in fs.protocol and path == "/bucket/x"
    uri = storage.display_uri(fs, path)
    assert uri.startswith("memory://") and storage.resolve(uri)[1] == path


def test_names():
    assert storage.checkpoint_dir_name(12) == "checkpoint_000012"
    assert storage.staging_dir_name(3) == ".staging/step_000000003"


def test_a_local_file_written_piece_by_piece_replaces_the_old_one_only_whole(tmp_path):
    root = StorageDir.from_uri(str(tmp_path))
    root.write_atomic("rows", b"old")
    with pytest.raises(RuntimeError), root.writing_atomic("rows") as f:
        f.write(b"new, cut short by")
        raise RuntimeError("an error while writing")
    assert root.read_bytes("rows") == b"old"
    assert sorted(os.listdir(tmp_path)) == ["rows"]  # no half-written copy beside it
    with root.writing_atomic("rows") as f:
        f.write(b"new, ")
        f.write(b"whole")
    assert root.read_bytes("rows") == b"new, whole"
