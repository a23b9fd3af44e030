"""examples/train_torch.py's fed/alone harness.

The pure parts (the pairs' median and spread, the RESULT line, the figure bundle-run.sh prints)
run everywhere: the example imports neither torch nor stoke at module import. The harness
itself (interleaved pairs, the same per-step work in both loops, stoke's NHWC batch handed to a
channels_last model as a view with no copy) runs on the CPU where torch is importable, and
skips otherwise (CI's test venv has no torch); the end-to-end run also needs stoke.
"""

import importlib.util
import io
import json
import pathlib
import sys
from contextlib import redirect_stdout

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_torch.py"


def load_example():
    spec = importlib.util.spec_from_file_location("train_torch_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def need_torch():
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed (CI's test venv has none): the harness needs it; the pure parts ran")
    return torch


def test_example_imports_without_torch():
    before = set(sys.modules)
    load_example()
    # Only what was imported for the example's own sake counts (another test may have torch).
    new = set(sys.modules) - before
    assert not any(m == "torch" or m.startswith("torch.") for m in new), sorted(new)
    assert "stoke" not in new


def test_summarize_pairs_median_of_ratios_and_spread():
    m = load_example()
    s = m.summarize_pairs([(90.0, 100.0), (80.0, 100.0), (99.0, 110.0)])
    assert [round(r["ratio"], 6) for r in s["pairs"]] == [0.9, 0.8, 0.9]
    # The median is of the per-pair ratios (0.8, 0.9, 0.9), not fed median / alone median.
    assert s["fed_alone_median"] == pytest.approx(0.9)
    assert (s["fed_alone_min"], s["fed_alone_max"]) == (pytest.approx(0.8), pytest.approx(0.9))
    assert s["fed_median"] == 90.0 and s["alone_median"] == 100.0
    # Even counts: the mean of the two middle ones.
    assert m.summarize_pairs([(1.0, 2.0), (3.0, 4.0)])["fed_alone_median"] == pytest.approx((0.5 + 0.75) / 2)
    # Fed only (--synthetic-steps 0): no ratios, still the rates.
    s = m.summarize_pairs([(5.0, None), (7.0, None)])
    assert s["fed_alone_median"] is None and s["alone_median"] is None and s["fed_median"] == 6.0
    with pytest.raises(ValueError):
        m.summarize_pairs([])


def test_result_line_round_trip_and_figure():
    m = load_example()
    s = m.summarize_pairs([(5300.0, 5900.0), (5350.0, 5880.0), (5200.0, 5910.0)])
    rec = {"model": "resnet50", "preset": "train", **s, "data_wait_share": 0.03,
           "gpu_util_fed_pct": 91.0, "gpu_util_alone_pct": 96.0}
    line = m.result_line(rec)
    assert line.startswith("RESULT {") and "\n" not in line
    log = "noise\n" + m.result_line({"model": "old", "preset": "x", **s}) + "\nRESULT {broken\n" + line + "\ntrailing\n"
    assert m.parse_result_lines(log)[-1] == json.loads(json.dumps(rec))
    fig = m.figure_from_log(log)
    assert fig.startswith("resnet50 train: fed/alone median 0.898 [0.880-0.910] x3 (0.90,0.91,0.88)"), fig
    assert "fed 5300 / alone 5900 img/s" in fig and "wait 3.0%" in fig and "util 91/96%" in fig
    assert len(fig) <= 160  # bundle-run.sh cuts a figure at 160 characters
    assert m.figure_from_log("no result here\n") is None
    assert m.pair_lines(s)[-1].startswith("fed/alone median 0.898 over 3 pairs, spread 0.880-0.910")


def test_figure_cli_reads_a_log_without_torch(monkeypatch):
    m = load_example()
    line = m.result_line({"model": "vit_b16", "preset": "train", **m.summarize_pairs([(2.0, 2.0)])})
    monkeypatch.setattr(sys, "stdin", io.StringIO("x\n" + line + "\n"))
    out = io.StringIO()
    with redirect_stdout(out):
        assert m.main(["--figure"]) == 0
    assert out.getvalue().startswith("vit_b16 train: fed/alone median 1.000 [1.000-1.000] x1 (1.00)")
    monkeypatch.setattr(sys, "stdin", io.StringIO("nothing\n"))
    assert m.main(["--figure"]) == 1


def test_channels_last_view_is_a_view():
    torch = need_torch()
    m = load_example()
    nhwc = torch.randn(4, 8, 6, 3)
    x = m.channels_last_view(torch, nhwc)
    assert x.shape == (4, 3, 8, 6)
    assert x.is_contiguous(memory_format=torch.channels_last)
    assert x.data_ptr() == nhwc.data_ptr()
    nhwc[1, 2, 3, 0] = 42.0  # the same memory: a write shows through the view
    assert x[1, 0, 2, 3] == 42.0
    # An NHWC-shaped batch laid out as NCHW is refused: it would need a copy to be channels_last.
    with pytest.raises(AssertionError):
        m.channels_last_view(torch, torch.randn(4, 3, 8, 6).permute(0, 2, 3, 1))


def test_pairs_interleave_and_do_the_same_work():
    torch = need_torch()
    m = load_example()
    calls, syncs = [], []

    def source(tag):
        while True:
            yield tag, torch.zeros(())

    def step(x, y):
        calls.append(x)
        return torch.tensor(float(len(calls)))

    def segment(batches):
        return m.run_segment(batches, step, steps=7, warmup=2, sync=lambda: syncs.append(len(calls)),
                             sync_every=3, batch_size=4)

    segs = m.run_pairs(3, source("fed"), source("alone"), segment)
    assert len(segs) == 3
    # fed, alone, fed, alone, ...: 9 steps each (2 warm-up + 7 timed).
    assert calls == (["fed"] * 9 + ["alone"] * 9) * 3
    # The same syncs at the same steps of every segment (counted in steps since the segment
    # began): after the warm-up (2), after the 3rd and 6th timed steps (5, 8), at the end (9).
    assert len(syncs) == 6 * 4
    for k in range(6):
        assert [syncs[4 * k + j] - 9 * k for j in range(4)] == [2, 5, 8, 9], syncs
    for f, a, b in segs:
        assert len(f["losses"]) == len(a["losses"]) == 3  # two periodic reads and the last loss
        assert f["images_per_sec"] > 0 and a["images_per_sec"] > 0
        assert b is None
    # Fed only.
    calls.clear()
    assert [(a, b) for _, a, b in m.run_pairs(2, source("fed"), None, segment)] == [(None, None)] * 2
    assert calls == ["fed"] * 18
    # With a beside segment: after each pair's alone one, given that pair's fed segment.
    calls.clear()
    seen = []

    def beside(fed_seg):
        seen.append(fed_seg)
        return segment(source("beside"))

    segs = m.run_pairs(2, source("fed"), source("alone"), segment, beside)
    assert calls == (["fed"] * 9 + ["alone"] * 9 + ["beside"] * 9) * 2
    assert seen == [f for f, _, _ in segs] and all(b["images_per_sec"] > 0 for _, _, b in segs)


class FakeClock:
    """A clock that moves only when slept on, or when a batch takes time to come."""

    def __init__(self):
        self.t = 100.0
        self.slept = []

    def now(self):
        return self.t

    def sleep(self, d):
        assert d > 0
        self.slept.append(d)
        self.t += d


def scripted(clock, script):
    """commands() for beside_loop: each entry is (command, batches to take before it comes);
    asserts the loop blocks exactly while paused."""
    state = {"i": 0, "left": 0}

    def commands(block):
        if state["left"] > 0:
            assert not block, "blocked while running"
            state["left"] -= 1
            return None
        cmd, then = script[state["i"]]
        state["i"] += 1
        state["left"] = then
        return cmd

    return commands


def test_beside_loop_paces_batches_at_the_rate_and_reports_each_run():
    m = load_example()
    clock = FakeClock()
    taken = []

    def batches():
        while True:
            taken.append(clock.t)
            yield None

    replies = []
    # 512 images/s with batches of 64: one batch every 0.125 s; 5 batches, then paused, then a
    # second run of 3 batches at 128 images/s.
    script = [(("run", 512), 5), (("pause",), 0), (("run", "128"), 3), (("pause",), 0), (("quit",), 0)]
    m.beside_loop(batches(), scripted(clock, script), replies.append, 64, now=clock.now, sleep=clock.sleep)
    assert replies[0] == ("running",) and replies[2] == ("running",) and replies[-1] == ("bye",)
    # What each run took in its time: the rate asked, never more.
    assert replies[1] == ("paused", 5 * 64, pytest.approx(0.625))
    assert replies[3] == ("paused", 3 * 64, pytest.approx(1.5))
    # Batch k of a run is taken k intervals after the run began.
    assert taken[:5] == [pytest.approx(100.0 + 0.125 * k) for k in range(1, 6)]
    second = taken[5:]
    assert [b - taken[4] for b in second] == [pytest.approx(0.5 * k) for k in range(1, 4)]


def test_beside_loop_takes_batches_as_they_come_when_stoke_is_slower_than_the_rate():
    m = load_example()
    clock = FakeClock()

    def slow_batches():
        while True:
            clock.t += 0.25  # each batch takes 0.25 s to come; the rate asks for one every 0.125 s
            yield None

    replies = []
    m.beside_loop(slow_batches(), scripted(clock, [(("run", 512), 4), (("pause",), 0), (("quit",), 0)]),
                  replies.append, 64, now=clock.now, sleep=clock.sleep)
    assert clock.slept == [pytest.approx(0.125)]  # the first batch's interval; then none is waited for
    _, images, secs = replies[1]
    assert images == 256 and secs == pytest.approx(0.125 + 4 * 0.25)  # under half the rate asked, and said so


def test_beside_loop_refuses_bad_commands():
    m = load_example()
    clock = FakeClock()
    for script in ([(("run", 0), 0)], [(("faster",), 0)]):
        with pytest.raises(ValueError):
            m.beside_loop(iter([]), scripted(clock, script), lambda r: None, 8, now=clock.now, sleep=clock.sleep)


def test_beside_summary_and_lines():
    m = load_example()
    s = m.summarize_pairs([(90.0, 100.0), (95.0, 100.0), (80.0, 100.0)])
    s.update(m.beside_summary([(99.0, 100.0), (97.0, 100.0), (98.0, 100.0)]))
    assert (s["beside_alone_median"], s["beside_alone_min"], s["beside_alone_max"]) == pytest.approx((0.98, 0.97, 0.99))
    assert s["beside_median"] == 98.0
    lines = m.pair_lines(s)
    assert lines[-1] == "beside/alone median 0.980, spread 0.970-0.990"
    rec = dict(s, model="resnet50", preset="train", beside="process")
    assert "beside(process)/alone 0.980 [0.970-0.990]" in m.figure_from_log(m.result_line(rec))


def write_folder(root, classes=4, per_class=12):
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from imagefolder import write_image_folder

    root.mkdir()
    return write_image_folder(root, classes, per_class, (40, 72), 12, 90, 0)


def run_on_cpu(tmp_path, pairs, *extra):
    """The example on the CPU backend with a tiny model over a small generated folder: (module,
    its output, its last RESULT record)."""
    need_torch()
    pytest.importorskip("stoke", reason="the stoke package is not installed")
    m = load_example()
    data = write_folder(tmp_path / "data")
    out = io.StringIO()
    argv = [str(data), "--device", "cpu", "--model", "tiny", "--size", "32", "--batch-size", "4", "--pairs", str(pairs),
            "--steps", "4", "--warmup-steps", "1", "--sync-every", "2", *extra]
    with redirect_stdout(out):
        assert m.main(argv) == 0
    text = out.getvalue()
    return m, text, m.parse_result_lines(text)[-1]


@pytest.mark.parametrize("channels_last", [True, False], ids=["nhwc-view", "nchw"])
def test_cpu_end_to_end_result(tmp_path, channels_last):
    m, text, rec = run_on_cpu(tmp_path, 3, "--channels-last" if channels_last else "--no-channels-last", "--json")
    assert rec["model"] == "tiny" and rec["backend"] == "cpu" and rec["device"] == "cpu"
    assert rec["layout"] == ("nhwc-view" if channels_last else "nchw")
    assert len(rec["pairs"]) == 3 and all(p["fed"] > 0 and p["alone"] > 0 for p in rec["pairs"])
    ratios = sorted(p["ratio"] for p in rec["pairs"])
    assert rec["fed_alone_median"] == pytest.approx(ratios[1])
    assert (rec["fed_alone_min"], rec["fed_alone_max"]) == (pytest.approx(ratios[0]), pytest.approx(ratios[2]))
    assert rec["nonfinite_input_values"] == 0
    assert sum(line.startswith("pair ") for line in text.splitlines()) == 3
    assert "fed/alone median" in m.figure_from_log(text)
    # The older JSON line (scripts/bundle-questions.py) still comes, with the medians.
    old = [json.loads(line) for line in text.splitlines() if line.startswith("{")][-1]
    assert old["images_per_sec"] == pytest.approx(rec["fed_median"])
    assert old["model_alone_images_per_sec"] == pytest.approx(rec["alone_median"])


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_cpu_beside_segments(tmp_path, mode):
    """--beside on the CPU backend: each pair runs fed, alone and beside; stoke beside takes
    batches near the fed segment's rate (the harness's plumbing: CPU timings are no figure)."""
    m, text, rec = run_on_cpu(tmp_path, 2, "--beside", mode)
    assert rec["beside"] == mode and len(rec["pairs"]) == 2
    for p in rec["pairs"]:
        assert p["beside"] > 0 and p["beside_ratio"] == pytest.approx(p["beside"] / p["alone"])
        assert p["beside_target_rate"] == pytest.approx(p["fed"]) and p["beside_stoke_rate"] > 0
    assert rec["beside_alone_median"] is not None
    assert "beside/alone median" in text and f"beside({mode})/alone" in m.figure_from_log(text)
