"""scripts/gpu-ledger.py and the ledger it keeps (benches/results/gpu.jsonl): the committed ledger
passes --check; a bundle summary's figure becomes exactly the expected line; what must not enter
the ledger (an unknown metric, a value that is not a finite number, a missing field, a line
already there, the simulated device's figures, a run with no GPU) is refused by name. Standard
library and pytest only; the script runs as a program, as bundle/run.sh and a person run it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-ledger.py"
LEDGER = ROOT / "benches" / "results" / "gpu.jsonl"
if not SCRIPT.exists():  # the GPU bundle carries tests/python without the checkout's scripts/
    pytest.skip("not in a checkout: no scripts/gpu-ledger.py", allow_module_level=True)

# The ledger's fields, in the order the script writes them (the requirement's order).
FIELDS = ["date", "device", "driver", "cuda", "nvjpeg", "commit", "command", "metric", "value", "unit", "note"]
MACHINE = {"date": "2027-01-05", "device": "NVIDIA H100 80GB HBM3", "driver": "580.65.06", "cuda": "13.0",
           "nvjpeg": "13.0.1", "commit": "0123abc"}
FIGURE = {"command": "bin/stoke bench DATA --backend cuda --dtype f16 --layout nchw --batch-size 256 --json",
          "metric": "e2e_images_per_sec", "value": 12345.6, "unit": "images/s",
          "note": "run.sh checks started 2027-01-05T10:00:00Z, step 'stoke bench e2e'; 12800 generated images"}


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def summary(tmp_path, *lines, device_line="GPU: NVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB"):
    """A bundle summary: run.sh's header, the GPU line, then LINES."""
    text = "\n".join(["stoke GPU bundle, run.sh checks: 2027-01-05T10:00:00Z on gpu-box", device_line, *lines,
                      "RESULT: every step that ran passed", ""])
    path = tmp_path / "summary.txt"
    path.write_text(text)
    return path


def machine_line(**over):
    return "LEDGER-MACHINE " + json.dumps({**MACHINE, **over})


def figure_line(raw=None, **over):
    return "LEDGER " + (raw if raw is not None else json.dumps({**FIGURE, **over}))


def refused(result, *needles):
    """The run failed, printed no ledger line, and its message names the problem."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def test_committed_ledger_passes_check():
    r = run("--check", LEDGER)
    assert r.returncode == 0, r.stderr
    assert "valid" in r.stdout
    lines = LEDGER.read_text().splitlines()
    assert len(lines) > 50
    # Every line names a real device as nvidia-smi does (the H200 of the back-filled runs of
    # 2026-11-26, the H100 of 2026-11-27) and the driver the machines had.
    rows = [json.loads(s) for s in lines]
    assert {r["device"] for r in rows} <= {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    assert {r["device"] for r in rows if r["date"] == "2026-11-26"} == {"NVIDIA H200"}
    assert {r["driver"] for r in rows} == {"580.159.04"}


def test_summary_figure_becomes_the_ledger_line(tmp_path):
    path = summary(tmp_path, machine_line(), "PASS stoke bench e2e (7 s): cuda 12346 images/s", figure_line())
    r = run(path)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert len(out) == 1
    rec = json.loads(out[0])
    assert list(rec) == FIELDS
    assert rec == {**MACHINE, **FIGURE}


def test_append_then_check_then_duplicate_refused(tmp_path):
    path = summary(tmp_path, machine_line(), figure_line(), figure_line(metric="cores_per_10k", value=2.1, unit="cores"))
    ledger = tmp_path / "gpu.jsonl"
    assert run(path, "--append", ledger).returncode == 0
    assert len(ledger.read_text().splitlines()) == 2
    assert run("--check", ledger).returncode == 0
    # The same call appended twice: refused, the ledger unchanged.
    before = ledger.read_text()
    refused(run(path, "--append", ledger), "already in")
    assert ledger.read_text() == before


def test_unknown_metric_refused(tmp_path):
    path = summary(tmp_path, machine_line(), figure_line(metric="e2e_imgs_per_sec"))
    refused(run(path), "unknown metric 'e2e_imgs_per_sec'")


def test_unit_other_than_the_metrics_refused(tmp_path):
    path = summary(tmp_path, machine_line(), figure_line(unit="images/min"))
    refused(run(path), "unit 'images/min' for e2e_images_per_sec")


@pytest.mark.parametrize("value, shown", [("NaN", "nan"), ("Infinity", "inf"), ('"12345"', "'12345'"), ("true", "True")])
def test_value_not_a_finite_number_refused(tmp_path, value, shown):
    raw = json.dumps({**FIGURE, "value": 0}).replace('"value": 0', f'"value": {value}')
    path = summary(tmp_path, machine_line(), figure_line(raw))
    refused(run(path), f"value {shown} is not a finite number")


def test_missing_fields_refused(tmp_path):
    fig = {k: v for k, v in FIGURE.items() if k != "note"}
    path = summary(tmp_path, machine_line(), figure_line(json.dumps(fig)))
    refused(run(path), "missing field(s): note")
    machine = {k: v for k, v in MACHINE.items() if k != "nvjpeg"}
    path = summary(tmp_path, "LEDGER-MACHINE " + json.dumps(machine), figure_line())
    refused(run(path), "missing field(s): nvjpeg")
    # A summary with figures but no machine line at all (a bundle from before the ledger).
    refused(run(summary(tmp_path, figure_line())), "no LEDGER-MACHINE line")


def test_figure_cannot_set_machine_facts(tmp_path):
    path = summary(tmp_path, machine_line(), figure_line(device="NVIDIA B200"))
    refused(run(path), "may not set machine field(s) device")


def test_duplicate_figure_in_summary_refused(tmp_path):
    path = summary(tmp_path, machine_line(), figure_line(), figure_line())
    refused(run(path), "duplicate of line")


def test_simulated_device_summary_refused(tmp_path):
    name = "stoke-sim (simulated device, not a GPU)"
    # run.sh's DEVICE line says so, whatever the machine line claims.
    path = summary(tmp_path, machine_line(), figure_line(),
                   device_line=f"DEVICE (from STOKE_BUNDLE_DEVICE_LIBS, no nvidia-smi): {name}")
    refused(run(path), "the summary comes from the simulated device")
    # Without that line, the machine line's device (stoke doctor's name for it) is refused.
    path = summary(tmp_path, machine_line(device=name), figure_line())
    refused(run(path), "summary.txt:3: the summary comes from the simulated device")


def test_no_gpu_summary_refused(tmp_path):
    path = summary(tmp_path, machine_line(), figure_line(),
                   device_line="NO GPU: nvidia-smi found no GPU or libcuda.so.1 is not loadable; every GPU step is SKIPPED")
    refused(run(path), "says NO GPU")


def test_assumed_gpu_summary_refused(tmp_path):
    path = summary(tmp_path, machine_line(), figure_line(),
                   device_line="GPU ASSUMED (STOKE_BUNDLE_ASSUME_GPU=1, to check the plumbing of the GPU steps): none found")
    refused(run(path), "STOKE_BUNDLE_ASSUME_GPU=1")


def write_ledger(tmp_path, recs):
    path = tmp_path / "gpu.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_check_refuses_bad_lines(tmp_path):
    good = {**MACHINE, **FIGURE}
    assert run("--check", write_ledger(tmp_path, [good])).returncode == 0
    cases = [
        ([good, good], "gpu.jsonl:2: duplicate of line 1"),
        ([{**good, "metric": "fps"}], "gpu.jsonl:1: unknown metric 'fps'"),
        ([{**good, "value": float("nan")}], "gpu.jsonl:1: value nan is not a finite number"),
        ([{k: v for k, v in good.items() if k != "commit"}], "gpu.jsonl:1: missing field(s): commit"),
        ([{**good, "extra": 1}], "gpu.jsonl:1: unknown field(s): extra"),
        ([{**good, "date": "2027-02-30"}], "gpu.jsonl:1: date '2027-02-30' is not YYYY-MM-DD"),
        ([{**good, "date": "05/01/2027"}], "is not YYYY-MM-DD"),
        ([{**good, "commit": "HEAD"}], "commit 'HEAD' is not a commit hash"),
        ([{**good, "device": "stoke-sim (simulated device, not a GPU)"}], "is the simulated device"),
        ([[1, 2]], "gpu.jsonl:1: not a JSON object"),
    ]
    for recs, needle in cases:
        r = run("--check", write_ledger(tmp_path, recs))
        assert r.returncode == 1 and needle in r.stderr, (recs, r.stderr)
    # A line that differs only in its note is a different figure, not a duplicate.
    assert run("--check", write_ledger(tmp_path, [good, {**good, "note": "run 2 of 3"}])).returncode == 0


# --- --emit: the summary lines bundle/run.sh writes ------------------------------------------

BENCH = {"backend": "cuda", "device": "NVIDIA H100 80GB HBM3", "images_per_sec": 16000.0, "cpu_cores_used": 3.2,
         "batch_size": 256, "output": "f16 nchw 224x224", "gpu_upsampling": "nearest", "gpu_wait": "auto",
         "latency_ms": {"p50": 13.0, "p99": 32.5, "mean": 14.0, "max": 40.0},
         "peak_device_bytes": 1256 * 2**20, "peak_pinned_bytes": 186 * 2**20}


def emit(tmp_path, kind, text, *extra):
    src = tmp_path / f"{kind}.log"
    src.write_text(text)
    return run("--emit", kind, "--input", src, "--command", "bin/stoke bench DATA", "--note", "step x", *extra)


def test_emit_e2e_figures_from_stoke_bench_json(tmp_path):
    r = emit(tmp_path, "e2e", "+ bin/stoke bench ... (timeout 60 s)\n" + json.dumps(BENCH) + "\n")
    assert r.returncode == 0, r.stderr
    figs = {f["metric"]: f for f in (json.loads(s[len("LEDGER "):]) for s in r.stdout.splitlines())}
    assert {m: f["value"] for m, f in figs.items()} == {
        "e2e_images_per_sec": 16000.0, "cores_per_10k": 2.0, "batch_p99_over_p50": 2.5,
        "peak_device_mib": 1256.0, "peak_pinned_mib": 186.0}
    assert figs["e2e_images_per_sec"]["note"] == "step x; nearest upsampling; auto GPU waits"
    assert figs["cores_per_10k"]["unit"] == "cores"


def test_emit_refuses_cpu_fallback_and_other_batch(tmp_path):
    r = emit(tmp_path, "e2e", json.dumps({**BENCH, "backend": "cpu"}) + "\n")
    assert r.returncode == 1 and "not a GPU figure" in r.stderr and r.stdout == ""
    r = emit(tmp_path, "engine", json.dumps({**BENCH, "batch_size": 64}) + "\n")
    assert r.returncode == 1 and "batch size 64" in r.stderr and r.stdout == ""


def test_emit_train_reads_the_result_line(tmp_path):
    rec = {"model": "vit_b16", "preset": "train", "backend": "cuda", "batch_size": 256, "amp_dtype": "bf16",
           "fed_alone_median": 0.912, "pairs": [{"ratio": 0.9}, {"ratio": 0.912}, {"ratio": 0.95}]}
    older = {"model": "vit_b16", "preset": "train", "backend": "cuda", "images_per_sec": 1, "model_alone_images_per_sec": 2}
    r = emit(tmp_path, "train", "RESULT " + json.dumps(rec) + "\n" + json.dumps(older) + "\n")
    assert r.returncode == 0, r.stderr
    (fig,) = [json.loads(s[len("LEDGER "):]) for s in r.stdout.splitlines()]
    assert (fig["metric"], fig["value"], fig["unit"]) == ("fed_over_alone_vit_b16", 0.912, "ratio")
    assert "median of 3 (fed, alone) pairs" in fig["note"]


def test_emit_train_with_beside_adds_its_figure(tmp_path):
    rec = {"model": "resnet50", "preset": "train", "backend": "cuda", "batch_size": 256, "beside": "process",
           "fed_alone_median": 0.947, "beside_alone_median": 0.981, "pairs": [{"ratio": 0.947}] * 3}
    r = emit(tmp_path, "train", "RESULT " + json.dumps(rec) + "\n")
    assert r.returncode == 0, r.stderr
    figs = {f["metric"]: f for f in (json.loads(s[len("LEDGER "):]) for s in r.stdout.splitlines())}
    assert {m: f["value"] for m, f in figs.items()} == {"fed_over_alone_resnet50": 0.947,
                                                         "beside_process_over_alone_resnet50": 0.981}
    assert all("beside process" in f["note"] for f in figs.values())
    # A beside run of a model without a beside metric is refused, not filed under another name.
    r = emit(tmp_path, "train", "RESULT " + json.dumps({**rec, "preset": "deit"}) + "\n")
    assert r.returncode == 1 and "no beside metric" in r.stderr


def test_emitted_lines_make_a_valid_summary(tmp_path):
    doctor = {"driver": {"available": True, "version": "580.65.06", "cuda": "13.0"},
              "devices": [{"name": "NVIDIA H100 80GB HBM3"}], "nvjpeg": {"version": "13.0.1"}}
    log = "+ sh -c 'stoke doctor --json' (timeout 30 s)\n" + json.dumps(doctor, indent=2) + "\n"
    m = emit(tmp_path, "machine", log, "--smi", "NVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB",
             "--commit", "0123abc+dirty\n", "--date", "2027-01-05")
    assert m.returncode == 0, m.stderr
    assert json.loads(m.stdout[len("LEDGER-MACHINE "):]) == {**MACHINE, "commit": "0123abc+dirty"}
    f = emit(tmp_path, "decode-all", json.dumps(BENCH) + "\n")
    path = summary(tmp_path, *m.stdout.splitlines(), *f.stdout.splitlines())
    r = run(path)
    assert r.returncode == 0, r.stderr
    (rec,) = [json.loads(s) for s in r.stdout.splitlines()]
    assert (rec["metric"], rec["value"], rec["commit"]) == ("decode_only_images_per_sec", 16000.0, "0123abc+dirty")
