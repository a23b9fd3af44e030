"""stoke.Loader on the CUDA backend, seen from PyTorch: device batches through DLPack on the
consumer's stream, against independent references (the CPU backend on the same files, a second
identical run, an uninterrupted run for resume, torch's own memory counters).

Every test here needs a GPU, torch with CUDA, and a stoke built with the CUDA backend. Without
them the tests are skipped, unless STOKE_REQUIRE_GPU=1 (the GPU bundle sets it): then a missing
GPU is a failure, so a GPU run cannot pass by skipping.
"""

import os

import pytest

import stoke
from imagefolder import copy_image_folder, write_image_folder

REQUIRE = os.environ.get("STOKE_REQUIRE_GPU") == "1"
CLASSES = 3
PER_CLASS = 12


def _gpu_or_skip():
    try:
        import torch
    except ImportError:
        if REQUIRE:
            pytest.fail("STOKE_REQUIRE_GPU=1 but torch is not importable")
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        if REQUIRE:
            pytest.fail("STOKE_REQUIRE_GPU=1 but torch sees no CUDA device")
        pytest.skip("no CUDA device")
    return torch


@pytest.fixture(scope="module")
def torch():
    return _gpu_or_skip()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An ImageFolder of photo-like JPEGs (3 classes x 12, 4:2:0, varied sizes), with Pillow."""
    return write_image_folder(tmp_path_factory.mktemp("gpu-data"), CLASSES, PER_CLASS, (96, 400), 6, 92, seed=11, digits=2)


@pytest.fixture(scope="module")
def broken(tmp_path_factory, folder):
    root = copy_image_folder(folder, tmp_path_factory.mktemp("gpu-broken"), CLASSES)
    good = (folder / "class2" / "img00.jpg").read_bytes()
    (root / "class2" / "zz_truncated.jpg").write_bytes(good[: len(good) // 3])
    return root


def cuda_loader(path, **kw):
    kw.setdefault("device", "cuda")
    try:
        return stoke.Loader(str(path), kw.pop("batch_size", 8), **kw)
    except RuntimeError as e:
        if "GPU" in str(e) and not REQUIRE:
            pytest.skip(f"stoke's CUDA backend cannot start here: {e}")
        raise


def take(torch, ld, stream=None):
    """Every batch of the next epoch as torch tensors copied on `stream` (the consumer's)."""
    stream = stream or torch.cuda.current_stream()
    out = []
    with torch.cuda.stream(stream):
        for images, labels in ld:
            x = torch.from_dlpack(images)
            y = torch.from_dlpack(labels)
            out.append((x.clone(), y.clone()))
    stream.synchronize()
    return out


def test_device_batches_reach_torch_on_the_gpu(torch, folder):
    ld = cuda_loader(folder, size=64, dtype="float16", layout="nchw", batch_size=8)
    assert ld.backend == "cuda"
    images, labels = next(iter(ld))
    assert images.device.startswith("cuda:") and images.__dlpack_device__()[0] == 2
    x, y = torch.from_dlpack(images), torch.from_dlpack(labels)
    assert x.is_cuda and x.dtype == torch.float16 and tuple(x.shape) == (8, 3, 64, 64)
    assert y.is_cuda and y.dtype == torch.int64 and tuple(y.shape) == (8,)
    assert torch.isfinite(x.float()).all()
    # Every element written: ImageNet-normalized pixels lie in [-2.2, 2.7]; unwritten ring
    # memory would show as NaN/inf or out-of-range values somewhere across a batch.
    assert x.float().min() >= -2.2 and x.float().max() <= 2.7
    assert set(y.tolist()) <= set(range(CLASSES))


@pytest.mark.parametrize("dtype,layout", [("float32", "nchw"), ("float16", "nhwc"), ("uint8", "nchw")])
def test_cuda_batches_match_the_cpu_backend(torch, folder, dtype, layout):
    # Same seed and config: the same files, crops and flips in the same order on both backends.
    # The pixels differ only by the decoders (nvJPEG vs libjpeg-turbo) and rounding: below
    # torchvision's GPU-vs-CPU decode tolerance (2 levels mean, as tests/gpu_decode.rs), labels
    # exactly equal.
    kw = dict(size=48, dtype=dtype, layout=layout, seed=21, batch_size=12, shuffle=True)
    gpu = take(torch, cuda_loader(folder, **kw))
    cpu = []
    for images, labels in stoke.Loader(str(folder), kw["batch_size"], device="cpu", threads=2,
                                       **{k: v for k, v in kw.items() if k != "batch_size"}):
        cpu.append((torch.from_dlpack(images).clone(), torch.from_dlpack(labels).clone()))
    assert len(gpu) == len(cpu) > 0
    scale = 1.0 if dtype == "uint8" else 255 * 0.226  # back to 0..255 levels
    worst = 0.0
    for (xg, yg), (xc, yc) in zip(gpu, cpu):
        assert torch.equal(yg.cpu(), yc), "labels (the order) differ between backends"
        d = (xg.float().cpu() - xc.float()).abs() * scale
        worst = max(worst, d.mean().item())
        assert d.mean().item() < 2.0, f"{dtype}/{layout}: mean |cuda - cpu| = {d.mean().item():.3f} levels"
    print(f"STOKE-Q python-cpu-vs-cuda: {dtype}/{layout} worst batch mean |cuda - cpu| {worst:.3f} levels")


def test_same_seed_is_bit_identical_on_the_gpu(torch, folder):
    a = take(torch, cuda_loader(folder, size=56, seed=5, batch_size=7))
    b = take(torch, cuda_loader(folder, size=56, seed=5, batch_size=7))
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(ya, yb) and torch.equal(xa, xb)


def test_state_dict_resumes_bit_identical_on_the_gpu(torch, folder):
    ref = take(torch, cuda_loader(folder, size=40, seed=8, batch_size=5))
    ld = cuda_loader(folder, size=40, seed=8, batch_size=5)
    it = iter(ld)
    for _ in range(3):
        next(it)
    state = ld.state_dict()
    del it, ld
    resumed = cuda_loader(folder, size=40, seed=8, batch_size=5)
    resumed.load_state_dict(state)
    rest = take(torch, resumed)
    assert len(rest) == len(ref) - 3
    for (xa, ya), (xb, yb) in zip(ref[3:], rest):
        assert torch.equal(ya, yb) and torch.equal(xa, xb)


def test_a_side_stream_consumer_sees_the_finished_batch(torch, folder):
    # The consumer works on its own stream and never synchronizes with stoke's: __dlpack__
    # (called by from_dlpack with the current stream) makes that stream wait for the batch.
    side = torch.cuda.Stream()
    ref = take(torch, cuda_loader(folder, size=64, seed=2, batch_size=9))
    got = take(torch, cuda_loader(folder, size=64, seed=2, batch_size=9), stream=side)
    for (xa, _), (xb, _) in zip(ref, got):
        assert torch.equal(xa, xb)


def test_held_device_batches_are_not_overwritten(torch, folder):
    ld = cuda_loader(folder, size=32, seed=1, batch_size=4, max_held_batches=6)
    it = iter(ld)
    held, copies = [], []
    for _ in range(6):
        images, labels = next(it)
        x = torch.from_dlpack(images)
        held.append(x)
        copies.append(x.clone())
    with pytest.raises(RuntimeError, match="max_held_batches=6"):
        next(it)
    # Run the rest of the epoch once references are dropped... but first, the held views are
    # intact while the producer kept going up to its ring's end.
    torch.cuda.synchronize()
    for v, c in zip(held, copies):
        assert torch.equal(v, c), "a held device batch changed"
    del held, x, images, labels
    rest = sum(1 for _ in it)
    assert rest == len(ld) - 6


def test_device_memory_is_flat_after_the_first_epoch(torch, folder):
    ld = cuda_loader(folder, size=96, seed=3, batch_size=8, dtype="float16")
    used = []
    for epoch in range(5):
        take(torch, ld)
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        s = ld.stats()
        used.append((total - free, s["device_bytes"], s["pinned_bytes"]))
    grown = [u[0] - used[0][0] for u in used[1:]]
    print(f"STOKE-Q python-memory: device used after each epoch {[u[0] >> 20 for u in used]} MiB, "
          f"stoke device {[u[1] >> 20 for u in used]} MiB, pinned {[u[2] >> 20 for u in used]} MiB")
    assert all(u[1] == used[0][1] and u[2] == used[0][2] for u in used), f"stoke's buffers grew: {used}"
    assert max(grown) <= 2 << 20, f"device memory grew after epoch 1 by {max(grown)} bytes: {used}"


def test_a_broken_file_is_replaced_and_named_on_the_gpu(torch, broken):
    ld = cuda_loader(broken, size=32, batch_size=37, shuffle=False)
    got = take(torch, ld)
    assert sum(len(y) for _, y in got) == 37
    errs = ld.errors
    assert len(errs) == 1 and "zz_truncated" in errs[0]["location"], errs
    ld = cuda_loader(broken, size=32, batch_size=37, shuffle=False, on_error="fail")
    with pytest.raises(stoke.SampleError, match="zz_truncated"):
        take(torch, ld)
