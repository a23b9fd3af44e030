"""stoke.Loader over Hugging Face Parquet files, written here with pyarrow as the `datasets`
library writes them (an independent writer): the batches must be those of the same JPEGs in an
ImageFolder, per-sample and in stream mode; `image_column`/`label_column` name the columns of a
file without HF metadata."""

import json

import numpy as np
import pytest

import stoke
from imagefolder import write_image_folder

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

CLASSES = 3
PER_CLASS = 7
NAMES = ["cat", "dog", "fox"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("data"), CLASSES, PER_CLASS, (40, 120), 8, 95, seed=5)


def rows(folder):
    """The folder's samples in its index order (classes, then file names)."""
    return [(folder / f"class{c}" / f"img{i}.jpg", c) for c in range(CLASSES) for i in range(PER_CLASS)]


@pytest.fixture(scope="module")
def hf(tmp_path_factory, folder):
    """`data/train-0000{0,1}-of-00002.parquet`, HF layout, row groups of 4, snappy then zstd."""
    root = tmp_path_factory.mktemp("hf")
    (root / "data").mkdir()
    features = {"image": {"_type": "Image"}, "label": {"names": NAMES, "_type": "ClassLabel"}}
    schema = pa.schema(
        [("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])), ("label", pa.int64())],
        metadata={"huggingface": json.dumps({"info": {"features": features}})},
    )
    all_rows = rows(folder)
    for f, (part, codec) in enumerate([(all_rows[:11], "snappy"), (all_rows[11:], "zstd")]):
        table = pa.table(
            {"image": [{"bytes": p.read_bytes(), "path": p.name} for p, _ in part], "label": [c for _, c in part]},
            schema=schema,
        )
        pq.write_table(table, root / "data" / f"train-{f:05d}-of-00002.parquet", row_group_size=4, compression=codec)
    return root


def collect(ld):
    return [(np.from_dlpack(x).copy(), np.from_dlpack(y).copy()) for x, y in ld]


def loader(path, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("threads", 2)
    kw.setdefault("reader_threads", 1)
    kw.setdefault("size", 32)
    return stoke.Loader(str(path), kw.pop("batch_size", 4), **kw)


def test_parquet_batches_are_the_image_folders_batches(folder, hf):
    for source in [hf, hf / "data", hf / "data" / "train-"]:
        a, b = collect(loader(source, seed=3)), collect(loader(folder, seed=3))
        assert len(a) == len(b) == 6
        for (xa, ya), (xb, yb) in zip(a, b):
            assert np.array_equal(ya, yb)
            assert np.array_equal(xa, xb)


def test_stream_mode_delivers_every_sample_once_with_its_label(hf, folder):
    ld = loader(hf / "data", stream=True, shuffle=False, preset="eval", batch_size=5)
    got = collect(ld)
    labels = np.concatenate([y for _, y in got])
    assert sorted(labels.tolist()) == sorted(c for _, c in rows(folder))
    ref = collect(loader(folder, shuffle=False, preset="eval", batch_size=5))
    # Unshuffled, row groups in file order: the folder's order.
    for (xa, ya), (xb, yb) in zip(got, ref):
        assert np.array_equal(ya, yb) and np.array_equal(xa, xb)


def test_image_column_and_label_column_name_the_columns(tmp_path, folder):
    part = rows(folder)
    table = pa.table({"jpg": [p.read_bytes() for p, _ in part], "cls": pa.array([c for _, c in part], pa.int32())})
    path = tmp_path / "plain.parquet"
    pq.write_table(table, path)
    with pytest.raises(Exception, match="no image column"):
        loader(path)
    a = collect(loader(path, image_column="jpg", label_column="cls", seed=1))
    b = collect(loader(folder, seed=1))
    assert all(np.array_equal(xa, xb) and np.array_equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))
    with pytest.raises(Exception, match="nope"):
        loader(path, image_column="nope")
