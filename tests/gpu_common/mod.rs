//! Shared by the GPU tests (tests/gpu_*.rs): the skip rule, generated datasets, output
//! comparison in units of the output dtype's last place.
//!
//! Without a usable GPU (driver, device, libnvjpeg, kernels) a GPU test prints why and
//! passes; with `STOKE_REQUIRE_GPU=1` (the GPU bundle sets it) it fails instead.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use stoke::backend::cuda::device::Gpu;
use stoke::config::DType;
use stoke::source::{Dataset, IndexOptions};

/// Held by every GPU test of a binary for its whole run: they then run one at a time even
/// when the harness runs tests in parallel, so one test's device-memory figures are not
/// another's allocations (the bundle also passes `--test-threads=1`).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// The device for `test`, or `None` (after printing why) when there is none and the run
/// does not require one.
pub fn gpu_or_skip(test: &str) -> Option<Arc<Gpu>> {
    match stoke::backend::cuda::open_for_pipeline(0) {
        Ok(g) => Some(g),
        Err(e) => {
            if std::env::var("STOKE_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("STOKE_REQUIRE_GPU=1 but {test} has no usable GPU: {e}");
            }
            eprintln!("skipping {test}: no usable GPU ({e})");
            None
        }
    }
}

/// A generated ImageNet-like folder dataset of `count` images under `dir` (every kind the
/// generator makes: 4:2:0/4:4:4/4:2:2 baseline, restart markers, progressive, gray, CMYK,
/// YCCK), indexed.
pub fn generated(dir: &Path, count: usize, seed: u64) -> Arc<Dataset> {
    let mut cfg = stoke::gen::GenConfig::new(count);
    cfg.seed = seed;
    cfg.classes = 4;
    let root = dir.join("data");
    stoke::gen::generate(&root, &cfg, &|_| {}).expect("generate dataset");
    let opts = IndexOptions { save: false, ..IndexOptions::default() };
    Arc::new(Dataset::open(&root, &opts).expect("index dataset"))
}

/// Raw bits of element `i` of a little-endian tensor of `dtype`, mapped to an integer line
/// on which adjacent representable values differ by 1 (so the difference counts ulps).
pub fn ordered(bytes: &[u8], dtype: DType, i: usize) -> i64 {
    let (bits, sign_bit) = match dtype {
        DType::F32 => (u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()) as i64, 1i64 << 31),
        DType::F16 | DType::Bf16 => (u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]) as i64, 1i64 << 15),
        DType::U8 => return bytes[i] as i64,
    };
    if bits & sign_bit != 0 {
        -(bits & (sign_bit - 1))
    } else {
        bits
    }
}

/// Largest difference in last-place units between two tensors of `dtype`, and where.
pub fn max_ulps(a: &[u8], b: &[u8], dtype: DType) -> (i64, usize) {
    assert_eq!(a.len(), b.len());
    let n = a.len() / dtype.size();
    (0..n).map(|i| ((ordered(a, dtype, i) - ordered(b, dtype, i)).abs(), i)).max().unwrap_or((0, 0))
}

/// The simulated device's counters (sim/: `stoke_sim_stats`) when the loaded libcuda is the
/// stand-in, else `None`: allocation counts a real driver does not report.
pub fn sim_stats() -> Option<serde_json::Value> {
    // SAFETY: opens the libcuda the process already loaded (the loader path names it) and calls
    // the stand-in's own export, which returns a string it allocated and frees in stoke_sim_free.
    unsafe {
        let lib = libloading::Library::new("libcuda.so.1").ok()?;
        let stats: libloading::Symbol<unsafe extern "C" fn() -> *mut std::ffi::c_char> = lib.get(b"stoke_sim_stats\0").ok()?;
        let free: libloading::Symbol<unsafe extern "C" fn(*mut std::ffi::c_char)> = lib.get(b"stoke_sim_free\0").ok()?;
        let p = stats();
        let v = serde_json::from_str(&std::ffi::CStr::from_ptr(p).to_string_lossy()).ok();
        free(p);
        v
    }
}

/// Arm the stand-in's fault injection (sim/src/faults.rs): of the calls of `call` from now on,
/// `skip` pass and the `times` after them fail (`times` 0 disarms). `None` on a real driver,
/// which has no injector: a test that needs one skips there.
pub fn sim_inject(call: &str, skip: u64, times: u64) -> Option<()> {
    let name = std::ffi::CString::new(call).unwrap();
    // SAFETY: the stand-in's own export (as in `sim_stats`), given a NUL-terminated string.
    unsafe {
        let lib = libloading::Library::new("libcuda.so.1").ok()?;
        let inject: libloading::Symbol<unsafe extern "C" fn(*const std::ffi::c_char, u64, u64) -> i32> =
            lib.get(b"stoke_sim_inject\0").ok()?;
        assert_eq!(inject(name.as_ptr(), skip, times), 0, "stoke_sim_inject({call})");
    }
    Some(())
}

/// Failures the stand-in injected so far in this process (`None` on a real driver).
pub fn sim_injected() -> Option<u64> {
    // SAFETY: the stand-in's own export; no arguments.
    unsafe {
        let lib = libloading::Library::new("libcuda.so.1").ok()?;
        let injected: libloading::Symbol<unsafe extern "C" fn() -> u64> = lib.get(b"stoke_sim_injected\0").ok()?;
        Some(injected())
    }
}

/// Run `f` on a thread of its own and fail (instead of hanging the test binary) when it has
/// not returned within `limit`.
pub fn within<T: Send + 'static>(limit: std::time::Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no answer in {limit:?} (a hang)"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked (above)"),
    }
}

/// Make every call of one of `calls` fail with probability `per_million` / 10^6 on the stand-in
/// (sim/src/faults.rs), from a generator seeded with `seed`; `per_million` 0 stops it. `None` on
/// a real driver.
pub fn sim_inject_random(calls: &[&str], per_million: u64, seed: u64) -> Option<()> {
    let names = std::ffi::CString::new(calls.join(",")).unwrap();
    // SAFETY: the stand-in's own export, given a NUL-terminated string.
    unsafe {
        let lib = libloading::Library::new("libcuda.so.1").ok()?;
        let f: libloading::Symbol<unsafe extern "C" fn(*const std::ffi::c_char, u64, u64) -> i32> =
            lib.get(b"stoke_sim_inject_random\0").ok()?;
        assert_eq!(f(names.as_ptr(), per_million, seed), 0, "stoke_sim_inject_random");
    }
    Some(())
}

/// A device batch's images, copied to the host.
pub fn host(batch: &stoke::Batch) -> Vec<u8> {
    let mut v = Vec::new();
    batch.device().expect("a device batch").copy_images_to_host(&mut v).unwrap();
    v
}

/// Every batch of `epoch` from `p`, its images on the host; a device batch is poisoned after it
/// is read (its whole slot), so an element a later batch leaves unwritten shows as 0xFF bytes.
pub fn host_epoch(p: &mut stoke::pipeline::Pipeline, epoch: u64) -> Vec<(Vec<u8>, stoke::Batch)> {
    p.start_epoch(epoch, 0);
    let mut out = Vec::new();
    while let Some(b) = p.next_batch() {
        let mut b = b.unwrap();
        let bytes = match b.device() {
            Some(d) => {
                let v = host(&b);
                d.poison(0xff).unwrap();
                v
            }
            None => b.host_bytes().unwrap().to_vec(),
        };
        b.make_host().unwrap();
        out.push((bytes, b));
    }
    out
}
