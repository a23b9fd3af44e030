"""stoke.Loader(resolution=...): FFCV's progressive resizing. Every batch of epoch e has the size
FFCV's ffcv-imagenet `get_resolution(e)` gives (computed here with numpy as its text says), a
resumed epoch keeps it and continues bit for bit; crop_ratio sets the eval preset's centre
crop; bad values are refused by name."""

import json

import numpy as np
import pytest

import stoke
from imagefolder import write_image_folder


def ffcv_resolution(epoch, min_res, max_res, start_ramp, end_ramp):
    """ffcv-imagenet train_imagenet.py, `get_resolution`, as documented there."""
    if epoch <= start_ramp:
        return min_res
    if epoch >= end_ramp:
        return max_res
    interp = np.interp([epoch], [start_ramp, end_ramp], [min_res, max_res])
    return int(np.round(interp[0] / 32)) * 32


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("resolution"), 2, 5, (60, 140), 8, 95, seed=4)


def loader(path, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("threads", 2)
    kw.setdefault("reader_threads", 1)
    return stoke.Loader(str(path), kw.pop("batch_size", 4), **kw)


def collect(ld):
    return [(np.from_dlpack(x).copy(), np.from_dlpack(y).copy()) for x, y in ld]


SCHEDULE = {"min_res": 32, "max_res": 128, "start_ramp": 1, "end_ramp": 5}


@pytest.mark.parametrize("resolution", [SCHEDULE, (32, 128, 1, 5)])
def test_every_batch_of_an_epoch_has_ffcvs_size(folder, resolution):
    ld = loader(folder, resolution=resolution, seed=2)
    seen = []
    for epoch in range(7):
        want = ffcv_resolution(epoch, **SCHEDULE)
        ld.set_epoch(epoch)
        batches = collect(ld)
        assert len(batches) == 3
        for x, _ in batches:
            assert x.shape[1:] == (3, want, want), (epoch, x.shape)
        seen.append(want)
    # 32 up to epoch 1, then 24·(e − 1) + 32 rounded to a multiple of 32, 128 from epoch 5;
    # epoch 3's 80 = 2.5·32 is a tie, rounded to even: 64.
    assert seen == [32, 32, 64, 64, 96, 128, 128]


def test_a_resumed_epoch_keeps_its_size_and_continues_bit_for_bit(folder):
    ref = loader(folder, resolution=SCHEDULE, seed=6, batch_size=3)
    ref.set_epoch(4)
    whole = collect(ref)
    ld = loader(folder, resolution=SCHEDULE, seed=6, batch_size=3)
    ld.set_epoch(4)
    it = iter(ld)
    next(it)
    state = json.loads(json.dumps(ld.state_dict()))
    assert state["epoch"] == 4
    resumed = loader(folder, resolution=SCHEDULE, seed=6, batch_size=3)
    resumed.load_state_dict(state)
    rest = collect(resumed)
    assert len(rest) == len(whole) - 1
    for (xa, ya), (xb, yb) in zip(whole[1:], rest):
        assert xb.shape[2:] == (96, 96)
        assert np.array_equal(ya, yb) and xa.tobytes() == xb.tobytes()


def test_crop_ratio_sets_the_eval_centre_crop(folder):
    default = collect(loader(folder, preset="eval", size=32, shuffle=False))
    same = collect(loader(folder, preset="eval", size=32, shuffle=False, crop_ratio=224 / 256))
    whole = collect(loader(folder, preset="eval", size=32, shuffle=False, crop_ratio=1.0))
    for (a, _), (b, _), (c, _) in zip(default, same, whole):
        assert a.tobytes() == b.tobytes(), "224/256 is the default"
        assert not np.array_equal(a, c), "a ratio of 1 crops the whole shorter side"


@pytest.mark.parametrize(
    "kw,error,match",
    [
        ({"resolution": (160, 128, 1, 2)}, ValueError, "resolution: min_res 160 is larger than max_res 128"),
        ({"resolution": (0, 128, 1, 2)}, ValueError, "min_res and max_res must be at least 32, got 0 and 128"),
        ({"resolution": (32, 128, 3, 2)}, ValueError, "end_ramp 2 is before start_ramp 3"),
        ({"resolution": (32, 100, 1, 2)}, ValueError, "multiples of 32"),
        ({"resolution": {"min_res": 32, "max_res": 64, "start_ramp": 1}}, ValueError, "no \"end_ramp\""),
        ({"resolution": {"min_res": 32, "max_res": 64, "start_ramp": 1, "end_ramp": 2, "ramp": 3}}, ValueError, "unknown key \"ramp\""),
        ({"resolution": (32, 64, 1)}, TypeError, "resolution=\\(32, 64, 1\\)"),
        ({"resolution": (32, 64, 1, 2), "size": 64}, ValueError, "size 64 and resolution both set the output size"),
        ({"resolution": (32, 64, 1, 2), "preset": "eval"}, ValueError, "the eval preset's centre crop: refused"),
        ({"resolution": (32, 64, 1, 2), "views": [{"count": 2}]}, ValueError, "resolution with views: refused"),
        ({"preset": "eval", "crop_ratio": 0.0}, ValueError, "crop_ratio must be in \\(0, 1\\]"),
        ({"preset": "eval", "crop_ratio": 1.25}, ValueError, "got 1.25"),
        ({"crop_ratio": 0.5}, ValueError, "crop_ratio applies to the eval preset"),
    ],
)
def test_bad_values_are_refused_by_name(folder, kw, error, match):
    with pytest.raises(error, match=match):
        loader(folder, **kw)
