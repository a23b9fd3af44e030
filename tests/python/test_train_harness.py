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
    for f, a in segs:
        assert len(f["losses"]) == len(a["losses"]) == 3  # two periodic reads and the last loss
        assert f["images_per_sec"] > 0 and a["images_per_sec"] > 0
    # Fed only.
    calls.clear()
    assert [a for _, a in m.run_pairs(2, source("fed"), None, segment)] == [None, None]
    assert calls == ["fed"] * 18


def write_folder(root, classes=4, per_class=12):
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from imagefolder import write_image_folder

    root.mkdir()
    return write_image_folder(root, classes, per_class, (40, 72), 12, 90, 0)


@pytest.mark.parametrize("channels_last", [True, False], ids=["nhwc-view", "nchw"])
def test_cpu_end_to_end_result(tmp_path, channels_last):
    need_torch()
    pytest.importorskip("stoke", reason="the stoke package is not installed")
    m = load_example()
    data = write_folder(tmp_path / "data")
    out = io.StringIO()
    argv = [str(data), "--device", "cpu", "--model", "tiny", "--size", "32", "--batch-size", "4", "--pairs", "3",
            "--steps", "4", "--warmup-steps", "1", "--sync-every", "2",
            "--channels-last" if channels_last else "--no-channels-last", "--json"]
    with redirect_stdout(out):
        assert m.main(argv) == 0
    text = out.getvalue()
    rec = m.parse_result_lines(text)[-1]
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
