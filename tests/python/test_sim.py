"""The Python package's CUDA half on the simulated device (sim/, docs/sim.md), without torch.

The consumer here is written against the CUDA driver API itself (ctypes): it makes its own
context current, creates its own stream, takes a batch through ``__dlpack__(stream=...)``, reads
the DLTensor's device pointer and copies the pixels to the host on its own stream. That is the
path PyTorch takes, minus PyTorch, so it runs where torch with CUDA cannot: on the stand-in in
CI. The stand-in's hazard checker is the referee: a consumer stream that did not wait for the
batch, or a ring slot reused while the consumer still reads it, is a finding, and the findings
are taken and asserted empty after every test.

The pixels are compared with the CPU backend on the same files, seed and config (an independent
decoder and augment path). Skipped unless the stand-in is loaded (scripts/with-sim-gpu.sh);
STOKE_REQUIRE_SIM=1 turns the skip into a failure, as CI runs it.
"""

import ctypes
import json
import os
import threading

import numpy as np
import pytest

import stoke
from imagefolder import write_image_folder

REQUIRE = os.environ.get("STOKE_REQUIRE_SIM") == "1"
CLASSES = 2
PER_CLASS = 6


class Driver:
    """The few driver calls a consumer makes, on the library stoke itself loaded (libcuda.so.1
    from the loader path: the same file, so dlopen hands back the same instance)."""

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            self._skip(f"no libcuda.so.1 on the loader path: {e}")
        if not hasattr(self.lib, "stoke_sim_is_simulated"):
            self._skip("libcuda.so.1 is a real driver, not the stand-in (tests/python/test_cuda.py covers GPUs)")
        for name in ("stoke_sim_take_findings", "stoke_sim_stats"):
            getattr(self.lib, name).restype = ctypes.c_void_p
        self.lib.stoke_sim_free.argtypes = [ctypes.c_void_p]
        for name in ("stoke_sim_stream_waits", "stoke_sim_stream_records"):
            getattr(self.lib, name).restype = ctypes.c_int64
            getattr(self.lib, name).argtypes = [ctypes.c_size_t]
        self.lib.cuMemcpyDtoHAsync_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
        self.lib.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        self.lib.cuStreamDestroy_v2.argtypes = [ctypes.c_void_p]
        self.lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        self.check(self.lib.cuInit(0), "cuInit")
        self.ctx = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), 0), "cuDevicePrimaryCtxRetain")

    @staticmethod
    def _skip(why):
        if REQUIRE:
            pytest.fail(f"STOKE_REQUIRE_SIM=1 but {why}")
        pytest.skip(why)

    @staticmethod
    def check(rc, what):
        assert rc == 0, f"{what} returned CUresult {rc}"

    def make_current(self):
        self.check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def stream(self):
        s = ctypes.c_void_p()
        self.check(self.lib.cuStreamCreate(ctypes.byref(s), 1), "cuStreamCreate")  # non-blocking
        return s.value

    def take_json(self, fn):
        p = fn()
        try:
            return json.loads(ctypes.string_at(p).decode())
        finally:
            self.lib.stoke_sim_free(p)

    def findings(self):
        return self.take_json(self.lib.stoke_sim_take_findings)

    def stats(self):
        return self.take_json(self.lib.stoke_sim_stats)

    def copy_to_host(self, ptr, nbytes, stream):
        """Copies `nbytes` at device `ptr` into a fresh numpy buffer on `stream` and waits."""
        out = np.empty(nbytes, dtype=np.uint8)
        self.check(self.lib.cuMemcpyDtoHAsync_v2(out.ctypes.data, ptr, nbytes, stream), "cuMemcpyDtoHAsync_v2")
        self.check(self.lib.cuStreamSynchronize(stream), "cuStreamSynchronize")
        return out


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_uint64),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def dltensor(capsule):
    """The (unversioned) DLTensor inside a "dltensor" capsule; the capsule keeps ownership."""
    return DLTensor.from_address(_get_pointer(capsule, b"dltensor"))


def read(drv, tensor, stream):
    """What a consumer on `stream` sees of a device tensor: (numpy array, capsule). `stream` is a
    DLPack handle: a stream, 1 (legacy default) or 2 (per-thread default), which the driver API
    spells the same (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD); or -1, no synchronization, after
    which the consumer synchronizes the whole context itself and copies on the null stream."""
    capsule = tensor.__dlpack__(stream=stream)
    t = dltensor(capsule)
    assert (t.device.device_type, t.device.device_id) == (2, 0), "not a CUDA tensor"
    shape = tuple(t.shape[i] for i in range(t.ndim))
    assert not t.strides or all(t.strides[i] == int(np.prod(shape[i + 1:])) for i in range(t.ndim)), "not compact"
    kind = {(2, 32): np.float32, (2, 16): np.float16, (0, 64): np.int64, (1, 8): np.uint8}[(t.dtype.code, t.dtype.bits)]
    nbytes = int(np.prod(shape)) * np.dtype(kind).itemsize
    if stream == -1:
        drv.check(drv.lib.cuCtxSynchronize(), "cuCtxSynchronize")
        stream = None
    raw = drv.copy_to_host(t.data + t.byte_offset, nbytes, stream)
    return raw.view(kind).reshape(shape), capsule


@pytest.fixture(scope="module")
def drv():
    return Driver()


@pytest.fixture(autouse=True)
def no_findings(request):
    yield
    if "drv" in request.fixturenames:
        d = request.getfixturevalue("drv")
        assert d.findings() == [], "the stand-in found something (see above)"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("sim-data"), CLASSES, PER_CLASS, (64, 160), 6, 90, seed=4, digits=2)


KW = dict(size=32, dtype="float32", layout="nchw", seed=9, shuffle=True)
BATCH = 4


def cpu_batches(folder, **kw):
    out = []
    for images, labels in stoke.Loader(str(folder), BATCH, device="cpu", threads=1, **{**KW, **kw}):
        out.append((np.from_dlpack(images).copy(), np.from_dlpack(labels).copy()))
    return out


def check_against_cpu(got, ref, dtype="float32", layout="nchw"):
    # Same files, crops and flips in the same order; the pixels differ only by the decoders
    # and rounding (tests/python/test_cuda.py's bound: 2 levels mean), labels exactly equal.
    assert len(got) == len(ref) > 0
    scale = 1.0 if dtype == "uint8" else 255 * 0.226  # back to 0..255 levels
    for (x, y), (xc, yc) in zip(got, ref):
        assert x.shape == xc.shape and x.dtype == xc.dtype, (x.shape, xc.shape, x.dtype, xc.dtype)
        assert np.allclose(y, yc, atol=1e-6) and y.dtype == yc.dtype, "labels (the order) differ between backends"
        d = np.abs(x.astype(np.float64) - xc.astype(np.float64)) * scale
        assert d.mean() < 2.0, f"{dtype}/{layout}: mean |cuda - cpu| = {d.mean():.3f} levels"


@pytest.mark.parametrize(
    "kw",
    [{}, {"dtype": "float16", "layout": "nhwc"}, {"dtype": "uint8"}, {"mixup": 0.8, "cutmix": 1.0, "num_classes": CLASSES},
     {"gpu_upsampling": "nearest"}],
    ids=["f32-nchw", "f16-nhwc", "u8-nchw", "mixup-soft-targets", "nearest-upsampling"],
)
def test_a_consumer_stream_waits_for_each_batch_and_sees_the_cpu_backends_pixels(drv, folder, kw):
    drv.make_current()
    s = drv.stream()
    ld = stoke.Loader(str(folder), BATCH, device="cuda", **{**KW, **kw})
    assert ld.backend == "cuda"
    got = []
    for images, labels in ld:
        before = drv.lib.stoke_sim_stream_waits(s)
        x = read(drv, images, s)[0]
        assert drv.lib.stoke_sim_stream_waits(s) > before, "__dlpack__(stream=s) did not make s wait for the batch"
        y = read(drv, labels, s)[0]
        got.append((x, y))
    # The last batch is released on s: before s goes (stoke records on it; the stand-in would
    # name a destroyed stream).
    del images, labels
    check_against_cpu(got, cpu_batches(folder, **kw), kw.get("dtype", "float32"), kw.get("layout", "nchw"))
    drv.check(drv.lib.cuStreamDestroy_v2(s), "cuStreamDestroy_v2")


def test_two_loaders_on_the_device_at_once_each_on_its_own_thread(drv, folder):
    # Two pipelines on one device in one process, each consumed on a thread of its own (a train
    # and a validation loader; examples/train_torch.py --beside thread): each delivers its own
    # config's batches, the CPU backend's pixels, and neither's work is a finding.
    other = {"seed": 21, "dtype": "float16", "layout": "nhwc"}
    loaders = [stoke.Loader(str(folder), BATCH, device="cuda", **KW), stoke.Loader(str(folder), BATCH, device="cuda", **{**KW, **other})]
    got, errors = [[], []], []

    def consume(i):
        try:
            drv.make_current()
            s = drv.stream()
            for epoch in range(2):
                loaders[i].set_epoch(epoch)
                for images, labels in loaders[i]:
                    got[i].append((epoch, read(drv, images, s)[0], read(drv, labels, s)[0]))
                del images, labels
            drv.check(drv.lib.cuStreamSynchronize(s), "cuStreamSynchronize")
        except Exception as e:  # noqa: BLE001 - reported below, with the thread's name
            errors.append((i, e))

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, kw in enumerate(({}, other)):
        for epoch in range(2):
            ref = []
            ld = stoke.Loader(str(folder), BATCH, device="cpu", threads=1, **{**KW, **kw})
            ld.set_epoch(epoch)
            for images, labels in ld:
                ref.append((np.from_dlpack(images).copy(), np.from_dlpack(labels).copy()))
            check_against_cpu([(x, y) for e, x, y in got[i] if e == epoch], ref, kw.get("dtype", "float32"), kw.get("layout", "nchw"))


def test_the_beside_worker_takes_device_batches_at_the_rate_it_is_given(drv, folder):
    # examples/train_torch.py --beside process: its worker (stoke without torch) makes a CUDA
    # Loader of the parent's settings and takes its batches at the rate a `run` asks for, until
    # `pause`; it answers each command on stdout.
    import subprocess
    import sys
    import time

    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_torch.py")
    config = dict(data=str(folder), batch_size=BATCH, device="cuda", input_dtype="float16", channels_last=True, size=32,
                  preset="train", no_epoch_ahead=False, transcode_progressive=False, gpu_upsampling="nearest",
                  gpu_wait="auto", decoders="all", gpu_bitstream="host", gpu_engine_gray=False, gpu_engine_lanes=1, gpu_engine_ahead=False,
                  gpu_hybrid_share="off", classes=CLASSES)
    p = subprocess.Popen([sys.executable, example, "--beside-worker", json.dumps(config)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1)

    def said():
        while True:
            line = p.stdout.readline()
            assert line, f"the worker ended (exit {p.wait()})"
            if line.startswith("BESIDE "):
                return line.split()[1:]

    try:
        assert said() == ["ready"]
        p.stdin.write("run 20\n")
        p.stdin.flush()
        assert said() == ["running"]
        time.sleep(1.5)
        p.stdin.write("pause\n")
        p.stdin.flush()
        word, images, secs = said()
        assert word == "paused" and int(images) % BATCH == 0 and int(images) >= BATCH
        assert int(images) / float(secs) <= 20 * 1.01, (images, secs)  # never above the rate asked
        p.stdin.write("quit\n")
        p.stdin.flush()
        assert said() == ["bye"]
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()


def test_a_resolution_schedules_smaller_epochs_reach_the_consumer_at_their_size(drv, folder):
    # Loader(resolution=...): the ring is sized for max_res; each epoch's DLPack tensors have
    # that epoch's shape and the CPU backend's pixels (epoch 1 at 64 first, then 0 at 32 in the
    # same slots).
    drv.make_current()
    s = drv.stream()
    kw = {"size": None, "resolution": (32, 64, 0, 1)}
    ld = stoke.Loader(str(folder), BATCH, device="cuda", **{**KW, **kw})
    assert ld.backend == "cuda"
    for epoch, side in ((1, 64), (0, 32)):
        ld.set_epoch(epoch)
        got = []
        for images, labels in ld:
            assert images.shape[1:] == [3, side, side], (epoch, images.shape)
            got.append((read(drv, images, s)[0], read(drv, labels, s)[0]))
        del images, labels
        ref_ld = stoke.Loader(str(folder), BATCH, device="cpu", threads=1, **{**KW, **kw})
        ref_ld.set_epoch(epoch)
        ref = [(np.from_dlpack(x).copy(), np.from_dlpack(y).copy()) for x, y in ref_ld]
        check_against_cpu(got, ref)
    drv.check(drv.lib.cuStreamDestroy_v2(s), "cuStreamDestroy_v2")


def test_views_reach_the_consumer_as_device_views_with_the_cpu_backends_pixels(drv, folder):
    # Loader(views=...): a list of CUDA tensors, one per view, each at its place in one slot (a
    # group's views one after another: `.group` starts at its first view and spans them all).
    drv.make_current()
    s = drv.stream()
    views = [{"count": 2, "size": 32, "scale": (0.4, 1.0)}, {"count": 3, "size": 16, "scale": (0.05, 0.4)}]
    ld = stoke.Loader(str(folder), BATCH, device="cuda", views=views, **KW)
    assert ld.backend == "cuda"
    got = []
    for vs, labels in ld:
        assert [v.shape[2] for v in vs] == [32, 32, 16, 16, 16]
        xs = [read(drv, v, s)[0] for v in vs]
        g0 = read(drv, vs[0].group, s)[0]
        g1 = read(drv, vs[2].group, s)[0]
        assert np.array_equal(g0, np.concatenate(xs[:2])) and np.array_equal(g1, np.concatenate(xs[2:]))
        got.append((xs, read(drv, labels, s)[0]))
    del vs, labels
    ref = [([np.from_dlpack(v).copy() for v in vs], np.from_dlpack(y).copy())
           for vs, y in stoke.Loader(str(folder), BATCH, device="cpu", threads=1, views=views, **KW)]
    assert len(got) == len(ref) > 0
    for k in range(5):
        check_against_cpu([(x[k], y) for x, y in got], [(x[k], y) for x, y in ref])
    drv.check(drv.lib.cuStreamDestroy_v2(s), "cuStreamDestroy_v2")


def test_gpu_wait_block_sets_the_contexts_blocking_sync(drv, folder):
    # Loader(gpu_wait="block") reaches the device context: its scheduling reads back as
    # CU_CTX_SCHED_BLOCKING_SYNC (4) with its other flags kept; the default leaves it alone.
    drv.make_current()
    flags = ctypes.c_uint()
    drv.check(drv.lib.cuCtxGetFlags(ctypes.byref(flags)), "cuCtxGetFlags")
    original = flags.value
    try:
        drv.check(drv.lib.cuCtxSetFlags(original & ~7), "cuCtxSetFlags")
        for kw, want in (({}, 0), ({"gpu_wait": "block"}, 4)):
            ld = stoke.Loader(str(folder), BATCH, device="cuda", **{**KW, **kw})
            images, labels = next(iter(ld))
            del images, labels, ld
            drv.make_current()
            drv.check(drv.lib.cuCtxGetFlags(ctypes.byref(flags)), "cuCtxGetFlags")
            assert flags.value == (original & ~7) | want, (kw, hex(flags.value), hex(original))
    finally:
        drv.check(drv.lib.cuCtxSetFlags(original), "cuCtxSetFlags")


def test_gpu_bitstream_device_reaches_the_engine_and_keeps_every_batch(drv, folder):
    # Loader(gpu_bitstream="device"): the hardware engine decodes device copies of its
    # bitstreams (copies counted in stats()), and the epoch equals the host-bitstream Loader's
    # bit for bit (the stand-in decodes both with the same code; on a GPU the same engine).
    drv.make_current()
    s = drv.stream()

    def epoch(**kw):
        ld = stoke.Loader(str(folder), BATCH, device="cuda", epoch_ahead=False, **{**KW, **kw})
        got = [(read(drv, images, s)[0], read(drv, labels, s)[0]) for images, labels in ld]
        return got, ld.stats()

    host, hs = epoch()
    dev, ds = epoch(gpu_bitstream="device")
    assert hs["decoded_hardware"] > 0 and hs["bitstream_copies"] == 0, hs
    # nvJPEG's own memory, counted through stoke's allocators, is in stats() too.
    assert hs["nvjpeg_device_bytes"] > 0 and hs["nvjpeg_pinned_bytes"] > 0 and hs["nvjpeg_allocations"] > 0, hs
    assert ds["decoded_hardware"] == hs["decoded_hardware"] and 0 < ds["bitstream_copies"] <= ds["batches"], ds
    assert len(dev) == len(host) > 0
    for (x, y), (xh, yh) in zip(dev, host):
        assert np.array_equal(x, xh) and np.array_equal(y, yh), "a device-bitstream batch differs from the host one"
    drv.check(drv.lib.cuStreamDestroy_v2(s), "cuStreamDestroy_v2")


def test_two_engine_lanes_keep_every_batch_bit_for_bit(drv, tmp_path):
    # Loader(gpu_engine_lanes=2): a batch's hardware-engine calls alternate between two threads,
    # each with its own state and stream (batches of 16: three calls of the stand-in's 7-wide
    # engine); the epoch equals the one-lane Loader's bit for bit, the same images on the engine.
    folder = write_image_folder(tmp_path, 2, 20, (64, 160), 6, 90, seed=5)
    drv.make_current()
    s = drv.stream()

    def epoch(**kw):
        ld = stoke.Loader(str(folder), 16, device="cuda", epoch_ahead=False, **{**KW, **kw})
        got = [(read(drv, images, s)[0], read(drv, labels, s)[0]) for images, labels in ld]
        return got, ld.stats()

    one, st1 = epoch()
    two, st2 = epoch(gpu_engine_lanes=2)
    assert st1["decoded_hardware"] > 2 * 16 and st2["decoded_hardware"] == st1["decoded_hardware"], (st1, st2)
    assert len(two) == len(one) > 0
    for (x, y), (x1, y1) in zip(two, one):
        assert np.array_equal(x, x1) and np.array_equal(y, y1), "a two-lane batch differs from the one-lane one"
    drv.check(drv.lib.cuStreamDestroy_v2(s), "cuStreamDestroy_v2")


def test_the_engine_a_batch_ahead_keeps_every_batch_bit_for_bit(drv, tmp_path):
    # Loader(gpu_engine_ahead=True): the hardware engine's calls on a thread of their own, each
    # batch's queued while the batch before it decoded; the epoch equals the default Loader's
    # bit for bit, the same images on the engine, and stats() counts the batches queued ahead;
    # and so with a batched GPU-hybrid share beside the engine.
    folder = write_image_folder(tmp_path, 2, 20, (64, 160), 6, 90, seed=7)
    drv.make_current()
    s = drv.stream()

    def epoch(**kw):
        ld = stoke.Loader(str(folder), 8, device="cuda", epoch_ahead=False, **{**KW, **kw})
        got = [(read(drv, images, s)[0], read(drv, labels, s)[0]) for images, labels in ld]
        return got, ld.stats()

    base, st0 = epoch()
    ahead, st1 = epoch(gpu_engine_ahead=True)
    assert st0["engine_queued_ahead"] == 0 and st1["engine_queued_ahead"] >= 1, (st0, st1)
    assert st0["decoded_hardware"] > 8 and st1["decoded_hardware"] == st0["decoded_hardware"], (st0, st1)
    assert len(ahead) == len(base) > 0
    for (x, y), (x0, y0) in zip(ahead, base):
        assert np.array_equal(x, x0) and np.array_equal(y, y0), "a batch made with the engine ahead differs"
    # With a pinned batched GPU-hybrid share too (its calls then made on the engine's thread):
    # the epoch of the same share without the engine ahead, the same images on the route.
    shared, st2 = epoch(gpu_hybrid_share=0.5)
    both, st3 = epoch(gpu_hybrid_share=0.5, gpu_engine_ahead=True)
    assert st2["decoded_gpu_hybrid_batched"] > 0, st2
    assert st3["decoded_gpu_hybrid_batched"] == st2["decoded_gpu_hybrid_batched"] and st3["engine_queued_ahead"] >= 1, (st2, st3)
    assert len(both) == len(shared) == len(base)
    for (x, y), (x0, y0) in zip(both, shared):
        assert np.array_equal(x, x0) and np.array_equal(y, y0), "a batch made with the engine ahead and a hybrid share differs"
    drv.check(drv.lib.cuStreamDestroy_v2(s), "cuStreamDestroy_v2")


def test_gpu_engine_gray_sends_gray_baseline_jpegs_to_the_engine(drv, tmp_path):
    # Loader(gpu_engine_gray=True): baseline gray JPEGs go to the hardware engine instead of
    # nvJPEG's CUDA decoders, those sampled 1x1 (as Pillow writes them) and those declaring 2x2
    # (as cjpeg -grayscale writes; the readers declare them 1x1, the same picture); off (the
    # default) they do not.
    from PIL import Image

    root = write_image_folder(tmp_path, 2, 4, (64, 160), 6, 90, seed=7)
    grays = sorted(root.glob("class*/img[01].jpg"))
    for k, f in enumerate(grays):
        Image.open(f).convert("L").save(f, quality=90)
        if k % 2:
            b = bytearray(f.read_bytes())
            sof = b.index(b"\xff\xc0")
            assert (b[sof + 9], b[sof + 11]) == (1, 0x11)
            b[sof + 11] = 0x22
            f.write_bytes(bytes(b))
    drv.make_current()

    def stats(**kw):
        ld = stoke.Loader(str(root), BATCH, device="cuda", epoch_ahead=False, **{**KW, **kw})
        n = sum(labels.shape[0] for _, labels in ld)
        return n, ld.stats()

    (n_off, off), (n_on, on) = stats(), stats(gpu_engine_gray=True)
    assert n_off == n_on == 8
    assert off["decoded_cuda"] == len(grays) == 4 and on["decoded_cuda"] == 0, (off, on)
    assert on["decoded_hardware"] == off["decoded_hardware"] + len(grays), (off, on)


def test_transcode_progressive_sends_progressive_jpegs_to_the_engine(drv, tmp_path):
    # Loader(transcode_progressive=True): progressive JPEGs (as Pillow writes them) are rewritten
    # as baseline once and go to the hardware engine instead of nvJPEG's CUDA decoders; the
    # second epoch rewrites nothing (kept); stats() says so.
    from PIL import Image

    root = write_image_folder(tmp_path, 2, 4, (64, 160), 6, 90, seed=7)
    prog = sorted(root.glob("class*/img[01].jpg"))
    for f in prog:
        Image.open(f).save(f, quality=90, progressive=True)
    drv.make_current()

    def stats(epochs, **kw):
        ld = stoke.Loader(str(root), BATCH, device="cuda", epoch_ahead=False, **{**KW, **kw})
        n = sum(labels.shape[0] for _ in range(epochs) for _, labels in ld)
        return n, ld.stats()

    (n_off, off), (n_on, on) = stats(1), stats(2, transcode_progressive=True)
    assert (n_off, n_on) == (8, 16)
    assert off["decoded_cuda"] == len(prog) == 4 and on["decoded_cuda"] == 0, (off, on)
    assert on["decoded_hardware"] == 2 * off["decoded_hardware"] + 2 * len(prog), (off, on)
    assert (on["transcoded_rewrites"], on["transcoded_kept"], on["transcoded_again"]) == (4, 4, 0), on
    assert on["transcoded_kept_bytes"] > 0 and off["transcoded_rewrites"] == 0, (off, on)


def test_a_released_batch_is_recorded_on_the_consumers_stream(drv, folder):
    # The ring slot goes back to the producer after the consumer's reads: stoke records an event
    # on the consumer's stream when the last capsule and tensor go, and the producer waits on it.
    drv.make_current()
    s = drv.stream()
    ld = stoke.Loader(str(folder), BATCH, device="cuda", **KW)
    it = iter(ld)
    images, labels = next(it)
    x, capsule = read(drv, images, s)
    before = drv.lib.stoke_sim_stream_records(s)
    del capsule, images, labels
    assert drv.lib.stoke_sim_stream_records(s) > before, "no release event recorded on the consumer's stream"
    assert sum(1 for _ in it) == len(ld) - 1
    del it
    drv.check(drv.lib.cuStreamDestroy_v2(s), "cuStreamDestroy_v2")


@pytest.mark.parametrize("handle", [1, 2, -1], ids=["legacy", "per-thread", "no-sync"])
def test_the_protocols_special_streams_with_batches_released_on_another_thread(drv, folder, handle):
    # Each batch is read on a thread of the consumer's and released on the loader's thread
    # (here, the main one): the ring slot must not be reused before those reads are done, even
    # when the handle (2: that thread's per-thread stream; -1: none) means nothing elsewhere.
    drv.make_current()
    ld = stoke.Loader(str(folder), BATCH, device="cuda", **KW)
    got = []
    for images, labels in ld:
        box = {}

        def consume():
            drv.make_current()
            box["x"], box["xc"] = read(drv, images, handle)
            box["y"], box["yc"] = read(drv, labels, handle)

        t = threading.Thread(target=consume)
        t.start()
        t.join()
        got.append((box["x"], box["y"]))
        del box, images, labels
    check_against_cpu(got, cpu_batches(folder))


def numbered_shards(folder, out):
    """The folder's images in tar shards of 4, sample n labelled n (labels identify samples)."""
    import tarfile

    files = sorted(p for p in folder.rglob("*.jpg"))
    out.mkdir()
    for s in range(0, len(files), 4):
        with tarfile.open(out / f"shard-{s // 4:03d}.tar", "w") as t:
            for n in range(s, min(s + 4, len(files))):
                t.add(files[n], arcname=f"{n:03d}.jpg")
                cls = out.parent / f"{n:03d}.cls"
                cls.write_text(str(n))
                t.add(cls, arcname=f"{n:03d}.cls")
    return len(files)


def test_stream_mode_on_the_device_and_an_elastic_resume(drv, folder, tmp_path):
    """stream=True on the CUDA backend (buffers sized from the shards' facts): a consumer stream
    sees the CPU backend's samples in the same order; then 2 ranks deliver a batch each on the
    device, save their (equal) states, and 3 ranks finish the epoch from one: every sample
    once, plus padding."""
    n = numbered_shards(folder, tmp_path / "shards")
    kw = dict(KW, stream=True, stream_group=2)
    drv.make_current()
    s = drv.stream()
    ld = stoke.Loader(str(tmp_path / "shards"), BATCH, device="cuda", **kw)
    assert ld.backend == "cuda"
    got = []
    for x, y in ld:
        got.append((read(drv, x, s)[0], read(drv, y, s)[0]))
    del x, y
    ref = []
    for x, y in stoke.Loader(str(tmp_path / "shards"), BATCH, device="cpu", threads=1, **kw):
        ref.append((np.from_dlpack(x).copy(), np.from_dlpack(y).copy()))
    check_against_cpu(got, ref)
    before, states = [], []
    for r in range(2):
        ld = stoke.Loader(str(tmp_path / "shards"), BATCH, device="cuda", rank=r, world_size=2, **kw)
        x, y = next(iter(ld))
        before += [int(v) for v in read(drv, y, s)[0]]
        del x, y
        states.append(ld.state_dict())
    assert states[0] == states[1], "every rank saves the same state"
    after = []
    for r in range(3):
        ld = stoke.Loader(str(tmp_path / "shards"), 3, device="cuda", rank=r, world_size=3, **kw)
        ld.load_state_dict(states[0])
        for x, y in ld:
            after += [int(v) for v in read(drv, y, s)[0]]
        del x, y
    delivered = before + after
    assert sorted(set(delivered)) == list(range(n)) and len(delivered) - n <= 1 + 2, delivered
    drv.check(drv.lib.cuStreamDestroy_v2(s), "cuStreamDestroy_v2")
