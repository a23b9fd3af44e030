"""stoke.Loader on the CPU backend: DLPack export, epochs, sharding, resume, held batches,
errors. References are independent of stoke: Pillow for pixels, a DistributedSampler
computation for lengths, an uninterrupted run for resume."""

import ctypes
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

import stoke
from imagefolder import copy_image_folder, write_image_folder

CLASSES = 3
PER_CLASS = 7


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An ImageFolder of JPEGs of varied sizes (3 classes x 7), made with Pillow."""
    return write_image_folder(tmp_path_factory.mktemp("data"), CLASSES, PER_CLASS, (40, 120), 8, 95, seed=5)


@pytest.fixture(scope="module")
def broken(tmp_path_factory, folder):
    """The same folder plus one file that is not an image."""
    root = copy_image_folder(folder, tmp_path_factory.mktemp("broken"), CLASSES)
    (root / "class1" / "zz_broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg at all")
    return root


def loader(path, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("threads", 2)
    kw.setdefault("reader_threads", 1)
    return stoke.Loader(str(path), kw.pop("batch_size", 4), **kw)


def collect(ld, copy=True):
    out = []
    for images, labels in ld:
        x, y = np.from_dlpack(images), np.from_dlpack(labels)
        out.append((x.copy(), y.copy()) if copy else (x, y))
    return out


def test_batches_have_the_asked_shape_dtype_layout_and_int64_labels(folder):
    for dtype, layout, shape in [("float32", "nchw", (4, 3, 32, 32)), ("float16", "nhwc", (4, 32, 32, 3))]:
        ld = loader(folder, size=32, dtype=dtype, layout=layout)
        images, labels = next(iter(ld))
        x, y = np.from_dlpack(images), np.from_dlpack(labels)
        assert x.shape == shape and x.dtype == np.dtype(dtype)
        assert y.dtype == np.int64 and y.shape == (4,)
        assert images.shape == list(shape) and images.dtype == dtype and images.device == "cpu"
        assert images.__dlpack_device__() == (1, 0)
        assert np.isfinite(x.astype(np.float32)).all()


def test_eval_pixels_match_pillow(folder):
    # Eval preset: Resize(shorter = 32*256/224 = 36) + CenterCrop(32), bilinear, antialias,
    # ImageNet normalization. Reference: Pillow (rounds to uint8 between passes, hence 1.5).
    ld = loader(folder, size=32, preset="eval", shuffle=False, batch_size=CLASSES * PER_CLASS)
    x, y = collect(ld)[0]
    files = sorted((folder / f"class{c}" / f"img{i}.jpg", c) for c in range(CLASSES) for i in range(PER_CLASS))
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    for k, (path, label) in enumerate(files):
        assert y[k] == label
        im = Image.open(path).convert("RGB")
        w, h = im.size
        s = 36 / min(w, h)
        nw, nh = (36, max(1, int(h * s))) if w <= h else (max(1, int(w * s)), 36)
        im = im.resize((nw, nh), Image.BILINEAR)
        l, t = int(round((nw - 32) / 2.0)), int(round((nh - 32) / 2.0))
        ref = np.asarray(im.crop((l, t, l + 32, t + 32)), dtype=np.float64) / 255.0
        got = x[k].transpose(1, 2, 0) * std + mean
        diff = np.abs(got - ref) * 255
        assert diff.mean() < 1.5, f"{path}: mean diff {diff.mean():.2f} levels vs Pillow"


def distributed_len(n, world, drop_last, batch):
    """torch.utils.data.DistributedSampler's per-rank length, then batches."""
    per_rank = n // world if drop_last and n % world else math.ceil(n / world)
    return math.ceil(per_rank / batch)


@pytest.mark.parametrize("world,drop_last,batch", [(1, False, 4), (2, False, 4), (3, True, 4), (4, False, 5), (5, True, 2)])
def test_len_and_sharding_follow_distributed_sampler(folder, world, drop_last, batch):
    n = CLASSES * PER_CLASS
    seen = []
    for rank in range(world):
        ld = loader(folder, batch_size=batch, rank=rank, world_size=world, drop_last=drop_last, size=16)
        assert len(ld) == distributed_len(n, world, drop_last, batch)
        batches = collect(ld)
        assert len(batches) == len(ld), "len() is what an epoch delivers"
        seen.append(sum(len(yy) for _, yy in batches))
    assert len(set(seen)) == 1, f"ranks deliver equal counts: {seen}"


def test_rank_and_world_size_default_to_torchrun_env(folder):
    code = (
        "import stoke,sys; ld = stoke.Loader(sys.argv[1], 4, device='cpu', size=16); "
        "print(len(ld), ld.rank, ld.world_size)"
    )
    env = dict(os.environ, RANK="1", WORLD_SIZE="3")
    out = subprocess.run([sys.executable, "-c", code, str(folder)], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(distributed_len(21, 3, False, 4)), "1", "3"]


def test_iter_starts_the_next_epoch_and_set_epoch_picks_one(folder):
    ld = loader(folder, size=16, seed=3)
    e0 = collect(ld)
    e1 = collect(ld)
    assert ld.state_dict()["epoch"] == 2
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(e0, e1)), "epochs are shuffled differently"
    ld.set_epoch(0)
    again = collect(ld)
    for (xa, ya), (xb, yb) in zip(e0, again):
        assert np.array_equal(ya, yb) and np.array_equal(xa, xb), "same epoch, same seed: bit-identical"


def test_same_seed_is_bit_identical_whatever_the_thread_count(folder):
    a = collect(loader(folder, size=24, seed=9, threads=1))
    b = collect(loader(folder, size=24, seed=9, threads=2, reader_threads=2))
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert np.array_equal(ya, yb) and xa.tobytes() == xb.tobytes()


def test_state_dict_resumes_bit_identical_at_the_next_batch(folder):
    full = loader(folder, size=24, seed=4, batch_size=3)
    ref = collect(full)
    ld = loader(folder, size=24, seed=4, batch_size=3)
    it = iter(ld)
    for _ in range(2):
        next(it)
    state = json.loads(json.dumps(ld.state_dict()))  # JSON-serialisable
    assert state["epoch"] == 0 and state["step"] == 2
    resumed = loader(folder, size=24, seed=4, batch_size=3)
    resumed.load_state_dict(state)
    rest = collect(resumed)
    assert len(rest) == len(ref) - 2
    for (xa, ya), (xb, yb) in zip(ref[2:], rest):
        assert np.array_equal(ya, yb) and xa.tobytes() == xb.tobytes()
    with pytest.raises(ValueError, match="seed 4, this pipeline has seed 5"):
        loader(folder, size=24, seed=5, batch_size=3).load_state_dict(state)


def test_held_batches_are_never_overwritten_and_the_bound_is_named(folder):
    ld = loader(folder, size=16, batch_size=2, max_held_batches=9)
    it = iter(ld)
    held, copies = [], []
    for _ in range(9):
        images, labels = next(it)
        x = np.from_dlpack(images)  # a zero-copy view into stoke's buffer
        held.append((images, labels, x))
        copies.append(x.copy())
    assert ld.held_batches == 9
    with pytest.raises(RuntimeError, match="max_held_batches=9"):
        next(it)
    for view, c in zip([h[2] for h in held], copies):
        assert np.array_equal(view, c), "a held batch changed"
    # Dropping references gives batches back; the epoch then continues.
    del held, x, view, images, labels
    assert ld.held_batches == 0
    rest = [np.from_dlpack(i).copy() for i, _ in it]
    assert len(rest) == len(ld) - 9
    for c in copies:
        assert np.isfinite(c.astype(np.float32)).all()


def test_a_view_keeps_its_batch_alive_after_the_tensor_objects_are_gone(folder):
    ld = loader(folder, size=16, batch_size=2)
    images, labels = next(iter(ld))
    x = np.from_dlpack(images)
    before = x.copy()
    del images, labels
    assert ld.held_batches == 1, "the numpy view still references the batch through DLPack"
    assert np.array_equal(x, before)
    del x
    assert ld.held_batches == 0


def test_dlpack_capsules_legacy_and_versioned(folder):
    images, labels = next(iter(loader(folder, size=16)))
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    assert name(images.__dlpack__()) == b"dltensor"
    assert name(images.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
    assert name(labels.__dlpack__(max_version=(0, 8))) == b"dltensor"
    with pytest.raises(BufferError):
        images.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        images.__dlpack__(dl_device=(2, 0))
    with pytest.raises(ValueError, match="CPU tensor"):
        images.__dlpack__(stream=5)


def test_decode_only_batches_have_labels_and_refuse_to_export_missing_images(folder):
    # decode_only=True decodes and skips the augment: the batch holds no image bytes, so its
    # images tensor must refuse the export (before, the CPU backend ignored the flag; once it
    # honoured it, a capsule pointed past an empty buffer and numpy read out of bounds).
    images, labels = next(iter(loader(folder, size=16, decode_only=True)))
    assert list(images.shape) == [4, 3, 16, 16]
    assert np.from_dlpack(labels).shape == (4,)
    with pytest.raises(ValueError, match="holds no images"):
        np.from_dlpack(images)
    # Without the flag the same loader exports its images.
    images, _ = next(iter(loader(folder, size=16)))
    assert np.from_dlpack(images).shape == (4, 3, 16, 16)


def test_skip_lists_the_replaced_sample_and_fail_names_the_file(broken):
    ld = loader(broken, size=16, batch_size=22, shuffle=False)
    x, y = collect(ld)[0]
    assert len(y) == 22
    errs = ld.errors
    assert len(errs) == 1 and "zz_broken" in errs[0]["key"], errs
    assert errs[0]["reason"] and "zz_broken" in errs[0]["location"]
    assert "zz_broken" not in errs[0]["reason"] and errs[0]["kind"] in ("truncated", "corrupt", "unknown format"), errs
    ld = loader(broken, size=16, batch_size=22, on_error="fail", shuffle=False)
    with pytest.raises(stoke.SampleError, match="zz_broken"):
        collect(ld)


def test_bad_arguments_name_the_argument(folder):
    cases = [
        (dict(dtype="float64"), ValueError, "dtype"),
        (dict(layout="chw"), ValueError, "layout"),
        (dict(preset="val"), ValueError, "preset"),
        (dict(device="tpu"), ValueError, "device"),
        (dict(on_error="ignore"), ValueError, "on_error"),
        (dict(size="big"), TypeError, "size"),
        (dict(rank=3, world_size=2), ValueError, "rank"),
        (dict(scale=(0.5, 0.1)), ValueError, "scale"),
        (dict(batchsize=4), TypeError, "batchsize"),
        (dict(max_held_batches=0), ValueError, "max_held_batches"),
        (dict(store_in_flight=0), ValueError, "store_in_flight"),
        (dict(gpu_upsampling="bilinear"), ValueError, "gpu_upsampling"),
        (dict(gpu_wait="spin"), ValueError, "gpu_wait"),
        (dict(gpu_bitstream="pinned"), ValueError, "gpu_bitstream"),
        (dict(gpu_engine_gray="yes"), TypeError, "gpu_engine_gray"),
        (dict(gpu_engine_lanes="two"), TypeError, "gpu_engine_lanes"),
        (dict(gpu_engine_lanes=3), ValueError, "gpu_engine_lanes"),
        (dict(gpu_engine_lanes=0), ValueError, "gpu_engine_lanes"),
        (dict(gpu_engine_ahead="yes"), TypeError, "gpu_engine_ahead"),
        (dict(gpu_engine_ahead=True, gpu_engine_lanes=2), ValueError, "gpu_engine_ahead"),
        (dict(transcode_progressive="yes"), TypeError, "transcode_progressive"),
        (dict(transcode_cache_bytes=-1), TypeError, "transcode_cache_bytes"),
        (dict(transcode_progressive=True, stream=True), ValueError, "transcode_progressive"),
        (dict(gpu_hybrid_share="half"), ValueError, "gpu_hybrid_share"),
        (dict(gpu_hybrid_share=1.5), ValueError, "gpu_hybrid_share"),
        (dict(gpu_hybrid_share=[0.5]), TypeError, "gpu_hybrid_share"),
        (dict(decoders="nvjpeg"), ValueError, "decoders"),
    ]
    for kw, exc, word in cases:
        with pytest.raises(exc, match=word):
            loader(folder, **kw)
    for share in ("off", "auto", 0.4, "0.4"):
        loader(folder, gpu_hybrid_share=share)  # the CUDA route's switch; accepted (unused) on the CPU
        loader(folder, gpu_hybrid_share=share, gpu_engine_ahead=True)  # the share's calls then on the engine's thread
    with pytest.raises(ValueError, match="batch_size"):
        stoke.Loader(str(folder), 0, device="cpu")
    with pytest.raises((ValueError, RuntimeError), match="no_such_dir"):
        stoke.Loader(str(folder / "no_such_dir"), 4, device="cpu")


def test_cuda_without_a_gpu_says_so(folder):
    try:
        ld = stoke.Loader(str(folder), 4, device="cuda")
    except RuntimeError as e:
        assert "no usable GPU" in str(e) or "GPU" in str(e)
    else:
        assert ld.backend == "cuda", "device='cuda' ran on something else"


def test_stats_report_what_was_delivered(folder):
    # Counts are of batches made: without epoch_ahead nothing of the next epoch is made.
    ld = loader(folder, size=16, batch_size=5, epoch_ahead=False)
    n = sum(len(y) for _, y in collect(ld))
    s = ld.stats()
    assert s["images"] == n and s["batches"] == len(ld)
    assert s["decoded_cpu"] == n and s["device_bytes"] == 0
    assert ld.backend == "cpu"


def test_the_next_epoch_is_made_ahead_and_iterated_as_made_when_asked(folder):
    # The epoch after the one iterated is made as it ends (its batches exist before the next
    # iter()); iterating it gives the batches a loader without epoch_ahead gives, bit for bit;
    # set_epoch of another epoch drops them.
    ahead = loader(folder, size=16, batch_size=5)
    plain = loader(folder, size=16, batch_size=5, epoch_ahead=False)
    with pytest.raises(TypeError, match="epoch_ahead"):
        loader(folder, size=16, epoch_ahead="yes")
    for epoch in range(3):
        a, p = collect(ahead), collect(plain)
        assert [x.tobytes() for x, _ in a] == [x.tobytes() for x, _ in p], f"epoch {epoch}"
        deadline = time.monotonic() + 30
        while ahead.stats()["batches"] < (epoch + 1) * len(ahead) + 2:
            assert time.monotonic() < deadline, f"epoch {epoch + 1} was not made ahead: {ahead.stats()}"
            time.sleep(0.005)
    ahead.set_epoch(7)
    plain.set_epoch(7)
    assert [x.tobytes() for x, _ in collect(ahead)] == [x.tobytes() for x, _ in collect(plain)]


def test_the_torch_example_trains_a_few_steps_on_the_cpu():
    pytest.importorskip("torch", reason="torch is not installed here (the GPU machine has it)")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, os.path.join(root, "examples", "train_torch.py"), "--smoke"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "steps of" in out.stdout and "data wait" in out.stdout


def test_mixup_gives_soft_targets_and_timm_blends_of_the_unmixed_batch(folder):
    """With mixup (Beta(1, 1) every batch, no smoothing) the second tensor is float32 soft
    targets [N, classes]; each image is lam * own + (1 - lam) * its flip partner's, taken from
    the same run without mixing (the per-sample augmentation does not depend on mixing)."""
    plain = collect(loader(folder, batch_size=6, seed=3, size=32, dtype="float32"))
    mixed = collect(loader(folder, batch_size=6, seed=3, size=32, dtype="float32", mixup=1.0, smoothing=0.0))
    assert len(plain) == len(mixed)
    checked = 0
    for (x0, y0), (x1, t) in zip(plain, mixed):
        n = len(y0)
        assert t.dtype == np.float32 and t.shape == (n, CLASSES)
        np.testing.assert_allclose(t.sum(1), 1.0, rtol=1e-6)
        for i in range(n // 2):
            j = n - 1 - i
            if y0[i] == y0[j]:
                continue  # lam is not readable from the targets
            lam = t[i, y0[i]]
            assert t[j, y0[j]] == pytest.approx(lam, abs=1e-6)
            np.testing.assert_allclose(x1[i], lam * x0[i] + (1 - lam) * x0[j], atol=1e-5)
            np.testing.assert_allclose(x1[j], lam * x0[j] + (1 - lam) * x0[i], atol=1e-5)
            checked += 1
    assert checked > 0
    for kw, word in [(dict(mixup_mode="row"), "mixup_mode"), (dict(cutmix_minmax=(0.5, 0.2)), "cutmix_minmax"), (dict(mixup=-1.0), "mixup")]:
        with pytest.raises(ValueError, match=word):
            loader(folder, **kw)


def test_recipe_keywords_use_timm_names_and_meaning(folder):
    """color_jitter / grayscale_prob / reprob / remode / recount / train_interpolation reach the
    pipeline: grayscale_prob=1 gives gray images (equal channels before normalize), reprob=1 with
    remode='const' leaves exact zeros (the mean color) in a box of every image, and the rest of
    each image equals the run without erasing; bad values are ValueErrors naming the keyword."""
    ident = dict(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    gray = collect(loader(folder, batch_size=4, seed=2, size=24, dtype="float32", grayscale_prob=1.0, **ident))
    for x, _ in gray:
        np.testing.assert_allclose(x[:, 0], x[:, 1], atol=0)
        np.testing.assert_allclose(x[:, 1], x[:, 2], atol=0)
    plain = collect(loader(folder, batch_size=4, seed=2, size=24, dtype="float32"))
    erased = collect(loader(folder, batch_size=4, seed=2, size=24, dtype="float32", reprob=1.0, remode="const", recount=2))
    for (x0, _), (x1, _) in zip(plain, erased):
        differs = (x0 != x1).any(axis=1)  # [N, H, W]
        assert differs.any(axis=(1, 2)).all(), "every image has an erased box"
        assert (x1.transpose(1, 0, 2, 3)[:, differs] == 0.0).all()
    jit = collect(loader(folder, batch_size=4, seed=2, size=24, dtype="float32", color_jitter=0.4, train_interpolation="random"))
    assert any((a != b).any() for (a, _), (b, _) in zip(plain, jit))
    same = collect(loader(folder, batch_size=4, seed=2, size=24, dtype="float32", color_jitter=(0.4, 0.4, 0.4, 0.1)))
    assert len(same) == len(plain)
    for kw, word in [
        (dict(color_jitter=-0.5), "color_jitter"),
        (dict(color_jitter=(0.4, 0.4)), "color_jitter"),
        (dict(reprob=0.5, remode="noise"), "remode"),
        (dict(reprob=0.5, recount=9), "recount"),
        (dict(grayscale_prob=1.5), "grayscale_prob"),
        (dict(train_interpolation="lanczos"), "train_interpolation"),
    ]:
        with pytest.raises(ValueError, match=word):
            loader(folder, **kw)


def test_blur_and_solarize_keywords(folder):
    """blur_prob / blur_sigma / blur_kernel / solarize_prob / solarize_threshold reach the
    pipeline: solarize_prob=1 with threshold 0 inverts every value of the plain run; a blur
    (Pillow's form and torchvision's kernel) changes the images and repeats under the same seed;
    bad values are ValueErrors naming the keyword."""
    plain = collect(loader(folder, batch_size=4, seed=4, size=24, dtype="uint8"))
    inverted = collect(loader(folder, batch_size=4, seed=4, size=24, dtype="uint8", solarize_prob=1.0, solarize_threshold=0))
    for (x0, _), (x1, _) in zip(plain, inverted):
        # solarize inverts the f32 value before the uint8 rounding (half to even): 255 − v and v
        # round to levels summing to 255 except at exact halves, one level apart there
        assert (np.abs(x1.astype(int) - (255 - x0.astype(int))) <= 1).all()
        assert (x1.astype(int) + x0.astype(int) == 255).mean() > 0.9
    for kw in [dict(blur_prob=1.0, blur_sigma=(1.0, 2.0)), dict(blur_prob=1.0, blur_kernel=5)]:
        a = collect(loader(folder, batch_size=4, seed=4, size=24, dtype="uint8", **kw))
        b = collect(loader(folder, batch_size=4, seed=4, size=24, dtype="uint8", **kw))
        assert any((x0 != x1).any() for (x0, _), (x1, _) in zip(plain, a)), kw
        for (x0, _), (x1, _) in zip(a, b):
            np.testing.assert_array_equal(x0, x1)
    for kw, word in [
        (dict(blur_prob=1.0, blur_kernel=4), "blur_kernel"),
        (dict(blur_prob=1.0, blur_sigma=(2.0, 1.0)), "blur_sigma"),
        (dict(blur_prob=1.5), "blur_prob"),
        (dict(blur_kernel=3), "blur_prob"),
        (dict(solarize_prob=0.5, solarize_threshold=300), "solarize_threshold"),
        (dict(solarize_prob=-0.5), "solarize_prob"),
    ]:
        with pytest.raises(ValueError, match=word):
            loader(folder, **kw)


def test_autoaugment_policies_and_the_deit_preset(folder):
    """aa= takes timm's strings: 'trivialaugment' changes the uint8 images and repeats under
    the same seed; RandAugment with p=0 (no op fires) equals the plain run; preset='deit'
    yields soft targets (mixup/cutmix); bad strings are ValueErrors naming aa."""
    plain = collect(loader(folder, batch_size=4, seed=3, size=24, dtype="uint8"))
    ta = collect(loader(folder, batch_size=4, seed=3, size=24, dtype="uint8", aa="trivialaugment"))
    again = collect(loader(folder, batch_size=4, seed=3, size=24, dtype="uint8", aa="trivialaugment"))
    assert any((a != b).any() for (a, _), (b, _) in zip(plain, ta))
    for (a, _), (b, _) in zip(ta, again):
        np.testing.assert_array_equal(a, b)
    unfired = collect(loader(folder, batch_size=4, seed=3, size=24, dtype="uint8", aa="rand-m9-n2-p0"))
    for (a, _), (b, _) in zip(plain, unfired):
        np.testing.assert_array_equal(a, b)
    deit = collect(loader(folder, batch_size=4, seed=3, size=24, preset="deit"))
    assert all(y.dtype == np.float32 and y.ndim == 2 for _, y in deit), "DeiT mixes: soft targets"
    for bad in ["rand-m9-n9", "v0", "autoaug"]:
        with pytest.raises(ValueError, match="aa"):
            loader(folder, aa=bad)


def test_uint8_is_the_unnormalized_image(folder):
    """dtype='uint8' yields uint8 [N, 3, H, W] equal to the float32 output with mean 0 / std 1
    times 255, rounded (timm's fast path normalizes on the GPU); steps that write normalized
    values are refused."""
    ident = dict(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    f = collect(loader(folder, batch_size=4, seed=5, size=24, dtype="float32", **ident))
    u = collect(loader(folder, batch_size=4, seed=5, size=24, dtype="uint8"))
    for (x, _), (q, _) in zip(f, u):
        assert q.dtype == np.uint8 and q.shape == x.shape
        assert np.abs(q.astype(np.float64) - x.astype(np.float64) * 255).max() <= 0.5 + 1e-3
    for kw, word in [(dict(reprob=0.25), "float output dtype"), (dict(mixup=0.8), "float output dtype")]:
        with pytest.raises(ValueError, match=word):
            loader(folder, dtype="uint8", **kw)


def test_random_affine_keywords(folder):
    """affine_* keywords (torchvision's RandomAffine) change the images and keep the shape;
    bad values name the keyword."""
    plain = collect(loader(folder, batch_size=4, seed=7, size=24, dtype="float32"))
    aff = collect(loader(folder, batch_size=4, seed=7, size=24, dtype="float32", affine_degrees=20, affine_translate=(0.1, 0.1), affine_scale=(0.9, 1.1), affine_shear=(-5, 5, -5, 5)))
    assert [x.shape for x, _ in plain] == [x.shape for x, _ in aff]
    assert any((a != b).any() for (a, _), (b, _) in zip(plain, aff))
    for kw, word in [(dict(affine_degrees=(1, 2, 3)), "affine_degrees"), (dict(affine_scale=(0.0, 1.0)), "affine scale")]:
        with pytest.raises(ValueError, match=word):
            loader(folder, **kw)


def _moto_or_skip():
    import shutil

    exe = shutil.which("moto_server")
    if exe is None:
        if os.environ.get("STOKE_REQUIRE_STORE") == "1":
            pytest.fail("moto_server is not installed (pip install 'moto[server]') and STOKE_REQUIRE_STORE=1")
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    return exe


def test_loader_reads_s3_shards_as_it_reads_the_same_shards_on_disk(folder, tmp_path):
    """stoke.Loader over s3://bucket/shard-{000000..000001}.tar on a real S3-compatible server
    (moto's server mode on loopback, started here) delivers exactly the batches of the same
    shards on local disk, and resumes at a step the same way."""
    import socket
    import tarfile
    import time

    import urllib.request

    exe = _moto_or_skip()

    # Two WebDataset shards (key.jpg + key.cls) and classes.txt, from the folder fixture.
    files = sorted((c, f) for c in range(CLASSES) for f in sorted((folder / f"class{c}").iterdir()))
    local = tmp_path / "shards"
    local.mkdir()
    for s in range(2):
        with tarfile.open(local / f"shard-{s:06d}.tar", "w") as t:
            for i, (c, f) in enumerate(files[s::2]):
                key = f"s{s}_{i:03d}"
                t.add(f, arcname=f"{key}.jpg")
                cls = tmp_path / f"{key}.cls"
                cls.write_text(str(c))
                t.add(cls, arcname=f"{key}.cls")
    (local / "classes.txt").write_text("".join(f"class{c}\n" for c in range(CLASSES)))

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.time() < deadline and server.poll() is None, "moto_server did not start"
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        env = dict(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint)
        os.environ.update(env)

        def put(path, body=b""):
            # moto's server takes unsigned requests: a bucket PUT, then one object PUT per file.
            headers = {"Content-Type": "application/octet-stream"}
            req = urllib.request.Request(f"{endpoint}/{path}", data=body, method="PUT", headers=headers)
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200, (path, r.status)

        put("stoke-py")
        for f in local.iterdir():
            put(f"stoke-py/train/{f.name}", f.read_bytes())
        remote = "s3://stoke-py/train/shard-{000000..000001}.tar"
        want = collect(loader(str(local / "shard-{000000..000001}.tar"), batch_size=4, seed=9, size=24))
        got = collect(loader(remote, batch_size=4, seed=9, size=24))
        assert len(got) == len(want) == math.ceil(CLASSES * PER_CLASS / 4)
        for (x0, y0), (x1, y1) in zip(want, got):
            np.testing.assert_array_equal(y0, y1)
            np.testing.assert_array_equal(x0, x1)
        first = loader(remote, batch_size=4, seed=9, size=24)
        it = iter(first)
        for _ in range(3):
            next(it)
        state = first.state_dict()
        resumed = loader(remote, batch_size=4, seed=9, size=24)
        resumed.load_state_dict(state)
        rest = collect(resumed)
        assert len(rest) == len(want) - 3
        for (x0, _), (x1, _) in zip(want[3:], rest):
            np.testing.assert_array_equal(x0, x1)
    finally:
        server.kill()
        server.wait()


def numbered_shards(folder, tmp_path):
    """The folder's 21 JPEGs in 6 tar shards of 4 (the last one short), sample n labelled n, so
    that labels identify samples. Returns the files and the shard folder."""
    import tarfile

    files = sorted(f for c in range(CLASSES) for f in sorted((folder / f"class{c}").iterdir()))
    shards = tmp_path / "shards"
    shards.mkdir()
    per = 4
    for s in range(math.ceil(len(files) / per)):
        with tarfile.open(shards / f"shard-{s:06d}.tar", "w") as t:
            for k, f in enumerate(files[s * per : (s + 1) * per]):
                n = s * per + k
                t.add(f, arcname=f"{n:03d}.jpg")
                cls = tmp_path / f"{n:03d}.cls"
                cls.write_text(str(n))
                t.add(cls, arcname=f"{n:03d}.cls")
    return files, shards


@pytest.mark.parametrize("stream", [False, True])
def test_a_state_resumes_on_another_world_size_with_every_sample_once(folder, tmp_path, stream):
    """Elastic resume: 4 ranks (batch 2) deliver 1 batch each and save their states (the same on
    every rank); 3 ranks with batch 3 load one and finish the epoch. Every sample is delivered
    exactly once across both worlds, plus at most 3 + 2 padded copies (DistributedSampler's
    padding). A version 1 state (epoch, step, world_size, batch_size) converts to the same
    rest, and a state from another seed is refused by name."""
    files, shards = numbered_shards(folder, tmp_path)
    n = len(files)
    kw = dict(stream=True, stream_group=2) if stream else {}

    def make(rank, world, batch, seed=3):
        return loader(shards, rank=rank, world_size=world, batch_size=batch, size=16, seed=seed, **kw)

    before, states = [], []
    for r in range(4):
        ld = make(r, 4, 2)
        it = iter(ld)
        before += [int(v) for v in np.from_dlpack(next(it)[1])]
        states.append(json.loads(json.dumps(ld.state_dict())))
    assert all(s == states[0] for s in states), "every rank saves the same state"
    state = states[0]
    assert state["version"] == 2 and state["step"] == 1 and state["world_size"] == 4

    after = []
    for r in range(3):
        ld = make(r, 3, 3)
        ld.load_state_dict(state)
        assert ld.state_dict() == state, "a loaded state is what the loader reports until iter()"
        it = iter(ld)
        batches = [np.from_dlpack(y).copy() for _, y in it]
        assert len(batches) == len(it) < len(ld), "len() of a resumed epoch's iterator: the batches left"
        after += [int(v) for y in batches for v in y]
    delivered = before + after
    assert sorted(set(delivered)) == list(range(n)), "every sample"
    assert len(delivered) - n <= 3 + 2, f"{len(delivered) - n} padded copies"
    # Padding copies are the only repeats: without them every sample appears once.
    counts = np.bincount(delivered, minlength=n)
    assert counts.max() <= 2 and (counts == 2).sum() == len(delivered) - n

    v1 = {k: state[k] for k in ("epoch", "step", "seed", "world_size", "batch_size")}
    v1.update(version=1, rank=0, stream_group=state["stream_group"])
    ld = make(0, 3, 3)
    ld.load_state_dict(v1)
    converted = ld.state_dict()
    assert (converted["remaining"], converted["next_pad"]) == (state["remaining"], state["next_pad"])

    with pytest.raises(ValueError, match="seed 3, this pipeline has seed 4"):
        make(0, 3, 3, seed=4).load_state_dict(state)


def test_stream_loader_delivers_each_sample_once_per_epoch_and_resumes(folder, tmp_path):
    """stream=True over local tar shards (whole-shard reads, shard-level order): every sample
    exactly once per epoch (each sample has its own label, so labels identify samples), a
    different order in the next epoch, and a state_dict resume gives the same batches as the
    uninterrupted run."""
    files, shards = numbered_shards(folder, tmp_path)

    def make(**kw):
        return loader(shards, stream=True, stream_group=2, read_ahead_bytes=1, size=16, seed=3, batch_size=5, **kw)

    ld = make()
    assert len(ld) == math.ceil(len(files) / 5)
    epoch0 = collect(ld)
    epoch1 = collect(ld)
    for ep in (epoch0, epoch1):
        labels = [int(v) for _, y in ep for v in y]
        assert sorted(labels) == list(range(len(files))), labels
    order0 = [int(v) for _, y in epoch0 for v in y]
    order1 = [int(v) for _, y in epoch1 for v in y]
    assert order0 != order1, "each epoch has its own order"

    again = collect(make())
    assert all(np.array_equal(ya, yb) and xa.tobytes() == xb.tobytes() for (xa, ya), (xb, yb) in zip(epoch0, again))

    part = make()
    it = iter(part)
    for _ in range(2):
        next(it)
    state = json.loads(json.dumps(part.state_dict()))
    assert (state["epoch"], state["step"]) == (0, 2)
    resumed = make()
    resumed.load_state_dict(state)
    rest = collect(resumed)
    assert len(rest) == len(epoch0) - 2
    for (xa, ya), (xb, yb) in zip(epoch0[2:], rest):
        assert np.array_equal(ya, yb) and xa.tobytes() == xb.tobytes()

    with pytest.raises(ValueError, match="stream_group.* 2, this pipeline has stream_group.* 0"):
        loader(shards, size=16, seed=3, batch_size=5).load_state_dict(state)
    with pytest.raises(ValueError, match="stream"):
        loader(shards, stream_group=2)
    # The node cache's options: for stream mode, the folder with its limit.
    with pytest.raises(ValueError, match="cache_dir.*apply to stream"):
        loader(shards, cache_dir=str(tmp_path / "c"), cache_limit=1 << 20)
    with pytest.raises(ValueError, match="cache_dir needs cache_limit"):
        make(cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match="cache_limit without cache_dir"):
        make(cache_limit=1 << 20)
    # Local shards are read as they are (the cache is for a store): the same batches.
    cached = collect(make(cache_dir=str(tmp_path / "c"), cache_limit=1 << 20))
    assert all(np.array_equal(ya, yb) and xa.tobytes() == xb.tobytes() for (xa, ya), (xb, yb) in zip(epoch0, cached))


def test_a_capsule_dropped_while_an_exception_propagates_keeps_the_exception(folder):
    """The capsule here is a temporary on the interpreter's stack when 1 / 0 raises: it dies
    while the ZeroDivisionError is pending. Its destructor must leave that exception as it was
    (the DLPack spec's reference deleter saves and restores it), and still free the tensor."""
    ld = loader(folder, size=32)
    images, _ = next(iter(ld))
    for kw in ({}, {"max_version": (1, 0)}):
        with pytest.raises(ZeroDivisionError):
            [images.__dlpack__(**kw), 1 / 0]
    # Nothing was held by the dropped capsules: the loader still hands out and takes back
    # batches (a leaked export would count against max_held_batches).
    del images
    assert sum(1 for _ in ld) == len(ld)


def test_cuda_libraries_from_pips_nvidia_wheels_are_found(tmp_path):
    # A site folder laid out as pip's nvidia-nvjpeg / nvidia-cuda-nvrtc wheels lay it out
    # (CUDA 13: nvidia/cu13/lib). The files are placeholders: import only records them, points
    # STOKE_NVJPEG at libnvjpeg, and tries to preload libnvrtc (a placeholder fails quietly).
    lib = tmp_path / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnvjpeg.so.13").write_bytes(b"")
    (lib / "libnvrtc.so.13").write_bytes(b"")
    env = {k: v for k, v in os.environ.items() if k != "STOKE_NVJPEG"}
    # Ahead of what is there: where stoke itself is found through PYTHONPATH (the GPU bundle),
    # it must stay importable.
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    code = "import os, json, stoke; print(json.dumps([stoke.CUDA_LIBRARIES, os.environ.get('STOKE_NVJPEG')]))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    libs, nvjpeg = json.loads(out.strip().splitlines()[-1])
    assert libs == {"nvjpeg": str(lib / "libnvjpeg.so.13"), "nvrtc": str(lib / "libnvrtc.so.13")}
    assert nvjpeg == str(lib / "libnvjpeg.so.13")
    # A STOKE_NVJPEG the user set wins.
    env["STOKE_NVJPEG"] = "/opt/mine/libnvjpeg.so.13"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1])[1] == "/opt/mine/libnvjpeg.so.13"


def test_the_decoder_was_built_with_simd():
    # scripts/setup.sh gets nasm for every build the README's commands make; a build without it
    # (no root, no sudo, no apt) decodes about 1.5x slower, and import stoke warns. CI requires
    # SIMD (STOKE_REQUIRE_SIMD=1); elsewhere its absence is a skip that says how to fix it.
    if not stoke.JPEG_SIMD and os.environ.get("STOKE_REQUIRE_SIMD") != "1":
        pytest.skip(stoke.NO_SIMD_ADVICE)
    assert stoke.JPEG_SIMD, stoke.NO_SIMD_ADVICE
