//! # stoke-sim: a simulated device, not a GPU
//!
//! Test equipment. One shared library that stands in for `libcuda.so.1` (the part of the
//! driver API stoke calls through cudarc) and `libnvjpeg.so.13` (every nvJPEG function stoke
//! declares), so stoke's CUDA backend runs, unchanged, on a machine without a GPU. It is loaded
//! the way the real libraries are (the loader path; `STOKE_NVJPEG`): `scripts/with-sim-gpu.sh
//! COMMAND` builds it and runs COMMAND with it in front. Nothing in stoke's `src/` knows it
//! exists.
//!
//! It models the documented API, stricter than a GPU:
//! - **memory** ([`mem`]): every device and pinned allocation is tracked host memory between
//!   guard pages; every pointer a call is given must lie inside a live allocation of the right
//!   kind, or the call fails naming itself and the address; use after free, double free and
//!   leaks at context destruction are findings; `cuMemGetInfo` reports a configurable total;
//! - **contexts**: a call on a thread with no current context fails, as the driver's does;
//! - **streams** ([`dev`]): every stream is a worker thread that runs its queue after seeded
//!   random delays, so nothing is done when the host call returns; events, waits, synchronize
//!   and query keep the driver's ordering; a hazard checker (vector clocks over streams and the
//!   host) reports two unordered accesses to the same bytes where one writes;
//! - **kernels** ([`kernels`]): stoke's own `kernels/*.cu`, compiled for the host, run over the
//!   whole grid (fibers per thread: barriers, shared memory, warp collectives, atomics) after
//!   the launch checks a GPU makes; a fault inside a kernel names the allocation it hit;
//! - **nvJPEG** ([`nvjpeg`]): each backend's documented limits, decoding with libjpeg-turbo;
//! - **faults** ([`faults`]): a chosen driver or nvJPEG call fails at a chosen use, so the error
//!   paths run (`stoke_sim_inject`, `STOKE_SIM_FAULTS`).
//!
//! What it proves: the host-side logic runs correctly against the documented API. What it
//! cannot: real-hardware behaviour, timing, nvJPEG's own bugs. A figure measured on it is never
//! a GPU figure; the device calls itself "stoke-sim (simulated device, not a GPU)".
//!
//! Everything it finds is printed to stderr as `stoke-sim: <kind>: <sentence>` and kept; a
//! process that exits with findings it did not take ([`stoke_sim_take_findings`]) exits with
//! status 86 (unless `STOKE_SIM_ALLOW_FINDINGS=1`), so a test binary that caused one fails.
//!
//! Settings (environment, read once): `STOKE_SIM_SEED` (stream delays, default 1),
//! `STOKE_SIM_DELAY_US` (largest delay before an op, default 200), `STOKE_SIM_MEMORY` (device
//! bytes, default 80 GiB), `STOKE_SIM_HW_ENGINES` / `STOKE_SIM_HW_CORES` (the hardware JPEG
//! decoder, default 7 × 1; 0 engines: none), `STOKE_SIM_MEMPOOLS` (stream-ordered allocation,
//! default 1), `STOKE_SIM_CC` (compute capability, default 90).

#![allow(clippy::missing_safety_doc)] // every export is a C entry point with the C API's contract

pub mod dev;
pub mod driver;
pub mod faults;
pub mod handles;
pub mod kernels;
pub mod mem;
pub mod nvjpeg;

use std::ffi::{c_char, CString};
use std::sync::{Mutex, OnceLock};

/// The device's name, as `cuDeviceGetName` reports it.
pub const DEVICE_NAME: &str = "stoke-sim (simulated device, not a GPU)";

/// Settings read from the environment once.
#[derive(Debug)]
pub struct Config {
    pub seed: u64,
    pub delay_us: u64,
    pub memory: u64,
    pub hw_engines: u32,
    pub hw_cores: u32,
    pub mempools: bool,
    pub cc: (i32, i32),
    pub allow_findings: bool,
    /// `STOKE_SIM_NVJPEG_GROW`: bytes the hardware engine's buffer grows by at every batched
    /// decode (default 0): an nvJPEG that allocates in steady state, for the checks that watch
    /// nvJPEG's memory over a long run (examples/soak).
    pub nvjpeg_grow: u64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("stoke-sim: {name}={v:?} is not a number; using {default}");
            default
        }),
        Err(_) => default,
    }
}

pub fn config() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| {
        let cc = env_u64("STOKE_SIM_CC", 90) as i32;
        Config {
            seed: env_u64("STOKE_SIM_SEED", 1),
            delay_us: env_u64("STOKE_SIM_DELAY_US", 200),
            memory: env_u64("STOKE_SIM_MEMORY", 80 << 30),
            hw_engines: env_u64("STOKE_SIM_HW_ENGINES", 7) as u32,
            hw_cores: env_u64("STOKE_SIM_HW_CORES", 1) as u32,
            nvjpeg_grow: env_u64("STOKE_SIM_NVJPEG_GROW", 0),
            mempools: env_u64("STOKE_SIM_MEMPOOLS", 1) != 0,
            cc: (cc / 10, cc % 10),
            allow_findings: env_u64("STOKE_SIM_ALLOW_FINDINGS", 0) != 0,
        }
    })
}

/// One thing the simulated device found: a kind (`invalid pointer`, `use after free`,
/// `double free`, `leak`, `no current context`, `hazard`, `launch`, `fault`, `nvjpeg`) and a
/// sentence that names the call and the address.
#[derive(Clone, Debug)]
pub struct Finding {
    pub kind: &'static str,
    pub message: String,
}

static FINDINGS: Mutex<Vec<Finding>> = Mutex::new(Vec::new());

/// Record a finding (and print it at once, so it sits next to the test output it explains).
pub fn report(kind: &'static str, message: String) {
    eprintln!("stoke-sim: {kind}: {message}");
    install_exit_check();
    FINDINGS.lock().unwrap_or_else(|p| p.into_inner()).push(Finding { kind, message });
}

extern "C" fn exit_check() {
    let f = FINDINGS.lock().unwrap_or_else(|p| p.into_inner());
    if f.is_empty() || config().allow_findings {
        return;
    }
    eprintln!("stoke-sim: the process exits with {} finding(s) nobody took:", f.len());
    for x in f.iter().take(20) {
        eprintln!("stoke-sim:   {}: {}", x.kind, x.message);
    }
    // SAFETY: _exit ends the process at once; nothing after it runs.
    unsafe { libc::_exit(86) };
}

fn install_exit_check() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        // SAFETY: registers a plain extern "C" function with no arguments.
        unsafe { libc::atexit(exit_check) };
    });
}

fn json_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o
}

fn into_c(s: String) -> *mut c_char {
    CString::new(s).unwrap_or_default().into_raw()
}

/// The findings so far as a JSON array of `{"kind": ..., "message": ...}`, and forget them
/// (a test that provokes a check takes what it provoked). Free with [`stoke_sim_free`].
#[no_mangle]
pub extern "C" fn stoke_sim_take_findings() -> *mut c_char {
    let mut f = FINDINGS.lock().unwrap_or_else(|p| p.into_inner());
    let items: Vec<String> =
        f.drain(..).map(|x| format!("{{\"kind\":\"{}\",\"message\":\"{}\"}}", x.kind, json_escape(&x.message))).collect();
    into_c(format!("[{}]", items.join(",")))
}

static CALLING_THREADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Count the calling thread among the threads that called the stand-in (once per thread): from
/// `cuCtxSetCurrent` and every call [`faults::inject`] sees (the per-batch and per-image calls of
/// the driver and nvJPEG). A test tells from it whether the code under test makes threads as it
/// runs (the count grows batch after batch) or works on the same ones.
pub(crate) fn note_caller() {
    thread_local!(static SEEN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    SEEN.with(|seen| {
        if !seen.replace(true) {
            CALLING_THREADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
}

/// Counters of the simulated device as JSON: live and peak device and pinned allocations
/// (count and bytes), kernels launched, ops run, hazards, per stream the events it waited on,
/// and the threads that called the stand-in ([`note_caller`]). Free with [`stoke_sim_free`].
#[no_mangle]
pub extern "C" fn stoke_sim_stats() -> *mut c_char {
    into_c(format!(
        "{{{},{},{},{},\"calling_threads\":{}}}",
        mem::stats_json(),
        dev::stats_json(),
        nvjpeg::stats_json(),
        nvjpeg::buffers_json(),
        CALLING_THREADS.load(std::sync::atomic::Ordering::Relaxed)
    ))
}

/// Frees a string this library returned.
#[no_mangle]
pub unsafe extern "C" fn stoke_sim_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: `s` came from CString::into_raw in this library (the caller's contract).
        drop(unsafe { CString::from_raw(s) });
    }
}

/// Always 1: lets a test tell the stand-in from a real libcuda it opened.
#[no_mangle]
pub extern "C" fn stoke_sim_is_simulated() -> i32 {
    1
}
