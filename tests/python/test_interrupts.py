"""A Loader in a process that is interrupted, forked, shared between threads or dropped mid-epoch:
Ctrl-C raises KeyboardInterrupt promptly and the process exits; a Loader used after a fork is a
named error while a new one works; a second thread iterating the same Loader is a named error;
Loaders dropped mid-epoch leave no threads or file descriptors. Each case runs in a child
process under a timeout where a hang would otherwise hang pytest."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from PIL import Image

import stoke
from imagefolder import write_image_folder

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    """A folder whose every batch takes seconds on one thread: 16 copies of one 48-megapixel
    JPEG (written once with Pillow; the copies are hard links). Noise over the gradient makes
    the entropy-coded data large (23 MB against 1 MB for the gradient alone), so a batch takes
    about 5 s here, not 1.3: the prompt-interrupt test needs the wait to have far to go."""
    root = tmp_path_factory.mktemp("slow")
    d = root / "class0"
    d.mkdir()
    h, w = 6000, 8000
    y = np.linspace(0, 255, h, dtype=np.float32)[:, None]
    x = np.linspace(0, 255, w, dtype=np.float32)[None, :]
    px = np.stack([np.broadcast_to(x, (h, w)), np.broadcast_to(y, (h, w)), np.broadcast_to((x + y) / 2, (h, w))], -1)
    first = d / "img00.jpg"
    img = px.astype(np.uint8)
    img ^= np.random.default_rng(0).integers(0, 64, size=img.shape, dtype=np.uint8)
    Image.fromarray(img).save(first, quality=90)
    for i in range(1, 16):
        os.link(first, d / f"img{i:02}.jpg")
    return root


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("small"), 2, 6, (40, 90), 8, 95, seed=9)


def child(code, *args, timeout=120, **popen):
    """Run `code` in a fresh Python with stoke importable; returns the Popen (started)."""
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **popen,
    )


def test_ctrl_c_during_a_long_wait_for_a_batch_raises_keyboardinterrupt_at_once_and_the_process_exits(slow):
    p = child(
        """
        import signal, sys, time, stoke
        # What Ctrl-C does in an interactive Python, whatever this process inherited: a job a
        # shell starts in the background (`cmd &`, CI run by hand) has SIGINT ignored, and a
        # Python started so installs no KeyboardInterrupt handler.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        ld = stoke.Loader(sys.argv[1], 16, device="cpu", threads=1, reader_threads=1, preset="eval", size=224, prefetch=1)
        it = iter(ld)
        print("waiting", flush=True)
        try:
            next(it)
            print("no interrupt: the batch came first", flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            # The batch waited for still comes: how long the wait would have gone on.
            t = time.monotonic()
            images, labels = next(it)
            print(f"rest {time.monotonic() - t:.3f}", flush=True)
        """,
        slow,
    )
    try:
        assert p.stdout.readline().strip() == "waiting"
        time.sleep(0.5)
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        line = p.stdout.readline().strip()
        latency = time.monotonic() - t
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert line == "interrupted", (line, out, err)
    rest = float(out.split()[-1])
    # The test means something only if the wait had far to go: the batch took longer still.
    assert rest > 1.0, f"the batch came {rest:.3f} s after the interrupt: too fast to tell a prompt interrupt"
    assert latency < 0.75, f"KeyboardInterrupt came {latency:.3f} s after SIGINT (the batch came {rest:.3f} s later)"
    assert p.returncode == 0, err


def test_a_loader_used_in_a_forked_child_is_a_named_error_and_a_new_loader_there_works(small):
    p = child(
        """
        import os, sys, stoke
        ld = stoke.Loader(sys.argv[1], 4, device="cpu", threads=2, reader_threads=1, size=32)
        next(iter(ld))
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                next(iter(ld))
                print("the parent's loader iterated in the child", flush=True)
                code = 1
            except RuntimeError as e:
                print("refused:", e, flush=True)
            mine = stoke.Loader(sys.argv[1], 4, device="cpu", threads=2, reader_threads=1, size=32)
            n = sum(labels.shape[0] for _, labels in mine)
            print("child epoch", n, flush=True)
            del ld, mine
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        n = sum(labels.shape[0] for _, labels in ld)
        print("parent epoch", n, "child status", status, flush=True)
        """,
        small,
    )
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, (out, err)
    assert "refused:" in out and "made in process" in out and "fork" in out, out
    assert "child epoch 12" in out and "parent epoch 12 child status 0" in out, (out, err)


def test_a_second_thread_iterating_the_same_loader_gets_a_named_error(slow):
    ld = stoke.Loader(str(slow), 16, device="cpu", threads=1, reader_threads=1, preset="eval", size=64, prefetch=1)
    it = iter(ld)
    got = {}

    def first():
        got["first"] = next(it)

    t = threading.Thread(target=first)
    t.start()
    time.sleep(0.5)  # the first thread is waiting for a batch that takes seconds
    assert t.is_alive(), "the batch came too fast to test two threads at once"
    with pytest.raises(RuntimeError, match="in use by another call"):
        next(it)
    with pytest.raises(RuntimeError, match="in use by another call"):
        iter(ld)
    t.join(120)
    assert not t.is_alive() and len(got["first"][1].shape) == 1


def test_loaders_dropped_mid_epoch_leave_no_threads_or_file_descriptors(small):
    def counts():
        time.sleep(0.05)
        return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))

    ld = stoke.Loader(str(small), 4, device="cpu", threads=2, reader_threads=2, size=32)
    next(iter(ld))
    del ld
    before = counts()
    for _ in range(20):
        ld = stoke.Loader(str(small), 4, device="cpu", threads=2, reader_threads=2, size=32)
        it = iter(ld)
        images, labels = next(it)
        del it, ld, images, labels
    after = counts()
    for _ in range(20):
        if after == before:
            break
        after = counts()
    assert after == before, f"threads/fds {before} before 20 Loaders dropped mid-epoch, {after} after"


@pytest.mark.parametrize("handler", ["default", "raises"])
def test_sigterm_during_a_long_wait_ends_the_process_promptly(slow, handler):
    """torchrun stops its workers with SIGTERM: with Python's default disposition the process
    ends at once; with a handler that raises (what a trainer installs to save a checkpoint) the
    exception comes at once and the process, Loader and all, exits promptly too."""
    p = child(
        """
        import signal, sys, stoke
        if sys.argv[2] == "raises":
            def stop(signum, frame):
                raise SystemExit(3)
            signal.signal(signal.SIGTERM, stop)
        ld = stoke.Loader(sys.argv[1], 16, device="cpu", threads=1, reader_threads=1, preset="eval", size=224, prefetch=1)
        it = iter(ld)
        print("waiting", flush=True)
        next(it)
        print("the batch came first", flush=True)
        """,
        slow,
        handler,
    )
    try:
        assert p.stdout.readline().strip() == "waiting"
        time.sleep(0.5)
        t = time.monotonic()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
        latency = time.monotonic() - t
    finally:
        p.kill()
    assert "the batch came first" not in out, (out, err)
    assert p.returncode == (-signal.SIGTERM if handler == "default" else 3), (p.returncode, err)
    print(f"SIGTERM ({handler}): the process ended {latency:.3f} s after the signal")
    assert latency < 1.5, f"the process ended {latency:.3f} s after SIGTERM"
