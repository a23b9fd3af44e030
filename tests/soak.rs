//! examples/soak.rs's checks fire: a run with memory kept every epoch, and one with a thread
//! left every epoch, each fail naming what grew; a clean short run passes. (The long runs are
//! benchmarks: BENCHMARKS.md "Soak".)

use std::process::Command;

/// The example, built beside this test by `cargo test` (target/<profile>/examples/soak; a run
/// of `--test soak` alone does not build examples: `cargo build --release --example soak` first).
fn soak() -> Command {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    Command::new(dir.join("soak"))
}

fn run(extra: &[&str]) -> (bool, String) {
    run_on("cpu", extra)
}

fn run_on(backend: &str, extra: &[&str]) -> (bool, String) {
    run_with_env(backend, extra, &[])
}

fn run_with_env(backend: &str, extra: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let data = tempfile::tempdir().unwrap();
    let mut cfg = stoke::gen::GenConfig::new(48);
    cfg.classes = 3;
    stoke::gen::generate(data.path(), &cfg, &|_| {}).unwrap();
    let out = soak()
        .args(["--backend", backend, "--epochs", "12", "--batch-size", "16", "--drops", "3", "--json", "--dataset"])
        .arg(data.path())
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .expect("run examples/soak (built by cargo test)");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_clean_run_passes_and_reports_flat_figures() {
    let (ok, out) = run(&[]);
    assert!(ok, "{out}");
    assert!(out.contains("SOAK {") && out.contains("\"problems\":[]"), "{out}");
}

#[test]
fn memory_kept_every_epoch_fails_the_soak() {
    // 4 MB an epoch: 36 MB after the warm-up's 2 epochs, past the 24 MB bound.
    let (ok, out) = run(&["--inject-leak", "4000000"]);
    assert!(!ok, "a leak of 4 MB per epoch passed: {out}");
    assert!(out.contains("resident memory grew"), "{out}");
}

#[test]
fn a_thread_left_every_epoch_fails_the_soak() {
    let (ok, out) = run(&["--inject-thread-leak"]);
    assert!(!ok, "a thread left per epoch passed: {out}");
    assert!(out.contains("threads/fds moved"), "{out}");
}

/// The CUDA backend's run (the simulated device in CI, scripts/with-sim-gpu.sh; a GPU in the
/// bundle), or None where there is no device and none is required.
fn run_cuda(extra: &[&str]) -> Option<(bool, String)> {
    let (ok, out) = run_on("cuda", extra);
    if !ok && !out.contains("SOAK {") {
        assert!(std::env::var("STOKE_REQUIRE_GPU").as_deref() != Ok("1"), "STOKE_REQUIRE_GPU=1 but the CUDA soak did not run: {out}");
        eprintln!("skipping: the CUDA backend did not open ({})", out.lines().last().unwrap_or(""));
        return None;
    }
    Some((ok, out))
}

#[test]
fn a_clean_cuda_run_passes_with_flat_device_memory() {
    let Some((ok, out)) = run_cuda(&[]) else { return };
    assert!(ok, "{out}");
    assert!(out.contains("\"problems\":[]") && out.contains("device_free_mib_by_epoch"), "{out}");
}

/// An nvJPEG that keeps allocating (the stand-in's engine buffer grown 2 MiB at every call):
/// the soak names nvJPEG's memory growing, counted through stoke's allocators.
#[test]
fn nvjpeg_memory_growing_every_epoch_fails_the_soak() {
    let on_sim = stoke::backend::cuda::device::probe_driver().is_ok()
        && stoke::backend::cuda::device::device_info(0).is_ok_and(|d| d.name.contains("simulated device, not a GPU"));
    if !on_sim {
        eprintln!("skipping: the knob is the stand-in's (scripts/with-sim-gpu.sh)");
        return;
    }
    let (ok, out) = run_with_env("cuda", &[], &[("STOKE_SIM_NVJPEG_GROW", "2097152")]);
    assert!(!ok, "nvJPEG's memory growing at every call passed: {out}");
    assert!(out.contains("nvJPEG's own memory grew"), "{out}");
}

#[test]
fn device_memory_kept_every_epoch_fails_the_soak() {
    // 8 MiB an epoch: 80 MiB after the warm-up's 2 epochs, past the 64 MiB slack.
    let Some((ok, out)) = run_cuda(&["--inject-device-leak", "8388608"]) else { return };
    assert!(!ok, "a device leak of 8 MiB per epoch passed: {out}");
    assert!(out.contains("device free memory fell"), "{out}");
}
