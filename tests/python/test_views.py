"""stoke.Loader(views=[...]): several views of every sample from one decode, as a list of
tensors (one per view, in group order), each a zero-copy view into one buffer; `.group` gives a
group's views as one tensor. References: the single-view loader (view 0 is its batch) and the
bytes themselves (a group tensor is its views one after another)."""

import numpy as np
import pytest

import stoke
from imagefolder import write_image_folder

DINO_LIKE = [
    {"count": 2, "size": 32, "scale": (0.4, 1.0), "interpolation": "bicubic",
     "per_view": [{"blur_prob": 1.0}, {"blur_prob": 0.1, "solarize_prob": 0.2}]},
    {"count": 3, "size": 16, "scale": (0.05, 0.4), "blur_prob": 0.5},
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("views"), 2, 5, (60, 140), 8, 95, seed=9)


def loader(path, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("threads", 2)
    kw.setdefault("reader_threads", 1)
    return stoke.Loader(str(path), 4, **kw)


@pytest.mark.parametrize("dtype,layout", [("float32", "nchw"), ("float16", "nhwc")])
def test_views_are_a_list_in_group_order_and_groups_are_their_views_without_a_copy(folder, dtype, layout):
    ld = loader(folder, views=DINO_LIKE, dtype=dtype, layout=layout, color_jitter=0.4, seed=3)
    views, labels = next(iter(ld))
    assert isinstance(views, list) and len(views) == 5
    n = np.from_dlpack(labels).shape[0]
    for v, size in zip(views, [32, 32, 16, 16, 16]):
        x = np.from_dlpack(v)
        want = (n, 3, size, size) if layout == "nchw" else (n, size, size, 3)
        assert x.shape == want and x.dtype == np.dtype(dtype) and v.shape == list(want)
        assert np.isfinite(x.astype(np.float32)).all()
    # A group is its views, view-major, in one buffer: no copy to concatenate them.
    for first, count in [(0, 2), (2, 3)]:
        g = np.from_dlpack(views[first].group)
        assert g.shape[0] == count * n
        parts = [np.from_dlpack(views[first + k]) for k in range(count)]
        assert np.array_equal(g, np.concatenate(parts))
        assert g.__array_interface__["data"][0] == parts[0].__array_interface__["data"][0]
    # The views of a sample differ (their own crops).
    a, b = np.from_dlpack(views[0]), np.from_dlpack(views[1])
    assert not np.array_equal(a, b)


def test_view_zero_is_the_single_view_batch(folder):
    first_group = dict(DINO_LIKE[0])
    per_view = first_group.pop("per_view")
    single = loader(folder, size=32, scale=(0.4, 1.0), train_interpolation="bicubic", blur_prob=1.0, seed=3)
    multi = loader(folder, views=DINO_LIKE, seed=3)
    assert per_view[0] == {"blur_prob": 1.0}
    for (x, y), (views, labels) in zip(single, multi):
        assert np.array_equal(np.from_dlpack(x), np.from_dlpack(views[0]))
        assert np.array_equal(np.from_dlpack(y), np.from_dlpack(labels))


def test_same_seed_same_views_whatever_the_threads(folder):
    def run(threads):
        return [[np.from_dlpack(v).copy() for v in views] for views, _ in loader(folder, views=DINO_LIKE, threads=threads, seed=1)]
    a, b = run(1), run(2)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert all(np.array_equal(p, q) for p, q in zip(x, y))


def test_bad_views_are_named(folder):
    cases = [
        ([{"count": 0, "size": 96}], "views[0]: count must be at least 1"),
        ([{"count": 1, "size": 0}], "views[0]: size must be at least 1"),
        ([{"count": 1, "size": 96, "scale": (0.0, 1.0)}], "crop scale must satisfy"),
        ([{"count": 1, "size": 96, "zoom": 2}], "unknown field `zoom`"),
        ([{"count": 1, "size": 96, "blur_prob": 1.0, "blur_kernel": 4}], "blur_kernel must be odd"),
        ("224", "views"),
        ([{"count": 1, "size": 96, "scale": object()}], "views must be a list of dicts"),
    ]
    for views, words in cases:
        with pytest.raises(ValueError, match="views") as e:
            loader(folder, views=views)
        assert words in str(e.value), (views, str(e.value))
    with pytest.raises(ValueError, match="mixup/cutmix: refused"):
        loader(folder, views=DINO_LIKE, mixup=0.8, num_classes=2)


def test_the_torch_example_trains_dinos_multi_crop_step_on_the_cpu():
    pytest.importorskip("torch", reason="torch is not installed here (the GPU machine has it)")
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, os.path.join(root, "examples", "train_torch.py"), "--smoke", "--preset", "dino", "--pairs", "1"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(dino," in out.stdout and "non-finite input values 0" in out.stdout
