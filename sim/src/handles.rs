//! cuBLAS and cuRAND handles: what a library built on them creates before it computes
//! anything (candle's `CudaDevice` makes a cuBLAS handle and a cuRAND generator on its stream).
//!
//! Only the handles are modelled — create, bind to a stream, seed, destroy — each checked as
//! the driver's calls are (a current context, a stream of it, a live handle; a destroy of
//! something that is not a live handle is a finding). **No math**: cuBLAS GEMMs and cuRAND's generators are not
//! exported, so a binary that calls them does not link against the stand-in. The stand-in runs
//! stoke's own kernels, not cuBLAS's or candle's.

use crate::dev;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Mutex;

/// `cublasStatus_t` / `curandStatus_t` values used here.
const OK: i32 = 0;
const CUBLAS_NOT_INITIALIZED: i32 = 1;
const CUBLAS_INVALID_VALUE: i32 = 7;
const CURAND_NOT_INITIALIZED: i32 = 101;
const CURAND_TYPE_ERROR: i32 = 103;
const CURAND_INITIALIZATION_FAILED: i32 = 203;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lib {
    Cublas,
    Curand,
}

struct Handle {
    lib: Lib,
    stream: usize,
}

static HANDLES: Mutex<(usize, BTreeMap<usize, Handle>)> = Mutex::new((0, BTreeMap::new()));

fn create(lib: Lib, call: &str) -> Option<usize> {
    dev::require(call).ok()?;
    let mut g = HANDLES.lock().unwrap_or_else(|p| p.into_inner());
    g.0 += 1;
    let h = 0x6000_0000 + g.0 * 0x10;
    g.1.insert(h, Handle { lib, stream: 0 });
    Some(h)
}

fn with_handle<T>(h: usize, lib: Lib, call: &str, f: impl FnOnce(&mut Handle) -> T) -> Option<T> {
    let mut g = HANDLES.lock().unwrap_or_else(|p| p.into_inner());
    match g.1.get_mut(&h) {
        Some(x) if x.lib == lib => Some(f(x)),
        _ => {
            crate::report("invalid handle", format!("{call}({h:#x}): not a live {lib:?} handle"));
            None
        }
    }
}

fn destroy(h: usize, lib: Lib, call: &str) -> bool {
    let mut g = HANDLES.lock().unwrap_or_else(|p| p.into_inner());
    match g.1.get(&h) {
        Some(x) if x.lib == lib => {
            g.1.remove(&h);
            true
        }
        _ => {
            drop(g);
            crate::report("invalid handle", format!("{call}({h:#x}): not a live {lib:?} handle (double destroy?)"));
            false
        }
    }
}

fn set_stream(h: usize, lib: Lib, s: usize, call: &str) -> bool {
    if dev::stream(s, call).is_err() {
        return false;
    }
    with_handle(h, lib, call, |x| x.stream = s).is_some()
}

/// Create a handle of `lib` into the caller's `out`: `OK`, `null_out` when `out` is null,
/// `no_context` without a current context.
///
/// # Safety
/// `out` is null or valid for one write.
unsafe fn create_into(out: *mut usize, lib: Lib, call: &str, null_out: i32, no_context: i32) -> i32 {
    if out.is_null() {
        return null_out;
    }
    match create(lib, call) {
        // SAFETY: the caller's out-pointer, not null.
        Some(h) => unsafe {
            *out = h;
            OK
        },
        None => no_context,
    }
}

/// `OK` when `done`, else `failed`.
fn status(done: bool, failed: i32) -> i32 {
    if done {
        OK
    } else {
        failed
    }
}

#[no_mangle]
pub unsafe extern "C" fn cublasCreate_v2(out: *mut usize) -> i32 {
    // SAFETY: forwarded to the caller's out-pointer contract.
    unsafe { create_into(out, Lib::Cublas, "cublasCreate", CUBLAS_INVALID_VALUE, CUBLAS_NOT_INITIALIZED) }
}

#[no_mangle]
pub extern "C" fn cublasSetStream_v2(h: usize, s: usize) -> i32 {
    status(set_stream(h, Lib::Cublas, s, "cublasSetStream"), CUBLAS_INVALID_VALUE)
}

#[no_mangle]
pub extern "C" fn cublasDestroy_v2(h: usize) -> i32 {
    status(destroy(h, Lib::Cublas, "cublasDestroy"), CUBLAS_NOT_INITIALIZED)
}

/// `curandCreateGenerator`: pseudo-random types (100..=199) only.
#[no_mangle]
pub unsafe extern "C" fn curandCreateGenerator(out: *mut usize, rng_type: i32) -> i32 {
    if !(100..200).contains(&rng_type) {
        return CURAND_TYPE_ERROR;
    }
    // SAFETY: forwarded to the caller's out-pointer contract.
    unsafe { create_into(out, Lib::Curand, "curandCreateGenerator", CURAND_INITIALIZATION_FAILED, CURAND_INITIALIZATION_FAILED) }
}

#[no_mangle]
pub extern "C" fn curandSetStream(h: usize, s: usize) -> i32 {
    status(set_stream(h, Lib::Curand, s, "curandSetStream"), CURAND_NOT_INITIALIZED)
}

#[no_mangle]
pub extern "C" fn curandSetPseudoRandomGeneratorSeed(h: usize, _seed: u64) -> i32 {
    status(with_handle(h, Lib::Curand, "curandSetPseudoRandomGeneratorSeed", |_| ()).is_some(), CURAND_NOT_INITIALIZED)
}

#[no_mangle]
pub extern "C" fn curandDestroyGenerator(h: usize) -> i32 {
    status(destroy(h, Lib::Curand, "curandDestroyGenerator"), CURAND_NOT_INITIALIZED)
}

/// `cuCtxDestroy`: stoke and cudarc use the primary context only (retained and released);
/// destroying it is refused by name, as a misuse the driver would make fatal.
#[no_mangle]
pub extern "C" fn cuCtxDestroy_v2(ctx: *mut c_void) -> dev::CUresult {
    crate::report(
        "invalid handle",
        format!("cuCtxDestroy({ctx:p}): the stand-in models the primary context only; release it with cuDevicePrimaryCtxRelease"),
    );
    dev::INVALID_CONTEXT
}

/// Driver entry points a binary linked against libcuda must find (cudarc references them from
/// functions stoke and candle do not call): calling one is a finding, since the stand-in does
/// not model it.
fn not_modelled(call: &str) -> dev::CUresult {
    crate::report("not modelled", format!("{call}: the stand-in does not model this call"));
    dev::NOT_SUPPORTED
}

#[no_mangle]
pub extern "C" fn cuModuleLoad(_module: *mut c_void, _path: *const std::ffi::c_char) -> dev::CUresult {
    not_modelled("cuModuleLoad")
}

#[no_mangle]
pub extern "C" fn cuMemcpyPeerAsync(
    _dst: u64,
    _dst_ctx: usize,
    _src: u64,
    _src_ctx: usize,
    _bytes: usize,
    _stream: usize,
) -> dev::CUresult {
    not_modelled("cuMemcpyPeerAsync")
}

/// cuBLAS's and cuRAND's math, which candle's CUDA backend links (GEMMs for matmul and
/// convolution, the generators for random init): exported so that a binary using them links
/// against the stand-in, and refused when called — a finding, and an error status to the
/// caller (`CUBLAS_STATUS_NOT_SUPPORTED`, `CURAND_STATUS_NOT_INITIALIZED`). The arguments are
/// never read (the C calling convention lets a callee ignore them).
macro_rules! math_not_modelled {
    ($status:expr => $($name:ident),+) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> i32 {
            crate::report("not modelled", format!("{}: the stand-in runs no cuBLAS or cuRAND math", stringify!($name)));
            $status
        }
    )+};
}

math_not_modelled!(15 => cublasGemmStridedBatchedEx, cublasDgemmStridedBatched);
math_not_modelled!(CURAND_NOT_INITIALIZED => curandGenerateNormal, curandGenerateNormalDouble, curandGenerateUniform, curandGenerateUniformDouble);
