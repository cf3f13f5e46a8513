"""read_images (Pillow), read_binary_files, range_tensor."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import lockstep.data as ld


@pytest.fixture
def images(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {}
    for name, shape in (("a.png", (4, 6, 3)), ("b.jpg", (4, 6, 3)), ("c.png", (4, 6, 3))):
        array = rng.integers(0, 255, shape, dtype=np.uint8)
        Image.fromarray(array).save(tmp_path / name)
        arrays[name] = array
    (tmp_path / "notes.txt").write_text("not an image")
    return tmp_path, arrays


def test_read_images_decodes_each_image_file_into_an_array(images):
    root, arrays = images
    ds = ld.read_images(str(root), include_paths=True)
    rows = ds.take_all()
    assert ds.count() == 3 and [r["path"].rsplit("/", 1)[1] for r in rows] == sorted(arrays)
    np.testing.assert_array_equal(rows[0]["image"], arrays["a.png"])  # png is lossless
    assert rows[1]["image"].shape == (4, 6, 3)
    batch = ds.take_batch(3)
    assert batch["image"].shape == (3, 4, 6, 3) and batch["image"].dtype == np.uint8


def test_read_images_resizes_and_converts(images):
    root, _ = images
    ds = ld.read_images(str(root), size=(8, 10), mode="L")
    assert {r["image"].shape for r in ds.take_all()} == {(8, 10)}
    with pytest.raises(ValueError, match="size must be"):
        ld.read_images(str(root), size=(8,))


def test_images_of_different_sizes_keep_their_shapes(tmp_path):
    Image.new("RGB", (3, 2)).save(tmp_path / "small.png")
    Image.new("RGB", (5, 4)).save(tmp_path / "large.png")
    shapes = sorted(r["image"].shape for r in ld.read_images(str(tmp_path)).take_all())
    assert shapes == [(2, 3, 3), (4, 5, 3)]


def test_read_binary_files_gives_each_files_bytes(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"\x00\x01\x02")
    (tmp_path / "b.bin").write_bytes(b"")
    ds = ld.read_binary_files(str(tmp_path), include_paths=True)
    rows = ds.take_all()
    assert [r["bytes"] for r in rows] == [b"\x00\x01\x02", b""]
    assert rows[0]["path"].endswith("a.bin")
    assert [p.count() for p in ds.split(2)] == [1, 1]  # counted without reading


def test_range_tensor_fills_each_row_with_its_index():
    ds = ld.range_tensor(5, shape=(2, 3), override_num_blocks=2)
    assert ds.count() == 5 and ds.num_blocks() == 2 and ds.columns() == ["data"]
    batch = ds.take_batch(5)["data"]
    assert batch.shape == (5, 2, 3)
    np.testing.assert_array_equal(batch[:, 0, 0], np.arange(5))
    assert (batch[3] == 3).all()
    assert [r["data"].tolist() for r in ld.range_tensor(2).take_all()] == [[0], [1]]
    with pytest.raises(ValueError, match="non-negative int"):
        ld.range_tensor(-1)
