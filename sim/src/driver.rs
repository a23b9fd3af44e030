//! The driver API entry points stoke reaches through cudarc (which resolves each symbol when
//! first called, so only these are needed), with the driver's documented behaviour: copies
//! and memsets to and from pageable memory are synchronous where the documentation says so,
//! the legacy stream synchronises with blocking streams, a call without a current context
//! fails.

use crate::dev::{self, Access, CUresult, Enqueue, OpError, INVALID_VALUE, SUCCESS};
use crate::kernels;
use crate::mem::{self, Kind, Want};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

type CUdeviceptr = u64;

static INITIALISED: AtomicBool = AtomicBool::new(false);

macro_rules! try_cu {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

/// `CUDA_ERROR_UNKNOWN`: what an injected failure of a call that is not an allocation returns.
const UNKNOWN: CUresult = 999;

/// `Err(code)` when the test armed a failure of this call of `call` ([`crate::faults`]).
fn injected(call: &str, code: CUresult) -> Result<(), CUresult> {
    if crate::faults::inject(call) {
        Err(code)
    } else {
        Ok(())
    }
}

fn initialised(call: &str) -> Result<(), CUresult> {
    if INITIALISED.load(Ordering::Acquire) {
        Ok(())
    } else {
        crate::report("not initialised", format!("{call} before cuInit"));
        Err(dev::NOT_INITIALIZED)
    }
}

/// A pointer check that failed: the finding, and `CUDA_ERROR_INVALID_VALUE`.
fn checked(p: usize, len: usize, want: Want, call: &str, role: &str) -> Result<Option<mem::Alloc>, CUresult> {
    mem::check(p, len, want, call, role).map_err(|msg| {
        crate::report(if msg.contains("use after free") { "use after free" } else { "invalid pointer" }, msg);
        INVALID_VALUE
    })
}

unsafe fn out<T>(p: *mut T, v: T) -> CUresult {
    if p.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: a non-null out-pointer from the caller, as the API requires.
    unsafe { p.write(v) };
    SUCCESS
}

mod memory;

// ---- init, device ------------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> CUresult {
    if flags != 0 {
        return INVALID_VALUE;
    }
    extern "C" {
        fn stoke_sim_install_fault_handler();
    }
    // SAFETY: installs the SIGSEGV/SIGBUS/SIGTRAP handlers once (sim/cpp/runtime.cpp).
    unsafe { stoke_sim_install_fault_handler() };
    INITIALISED.store(true, Ordering::Release);
    SUCCESS
}

/// The driver's private tables (what the CUDA runtime and NVRTC ask a real libcuda for) are
/// not simulated: "not found", and a null table, so a caller falls back or says so. (NVRTC
/// opens libcuda.so.1 when it is on the loader path and asks for it.)
#[no_mangle]
pub unsafe extern "C" fn cuGetExportTable(table: *mut *const c_void, _id: *const c_void) -> CUresult {
    if !table.is_null() {
        // SAFETY: a non-null out-pointer from the caller.
        unsafe { *table = std::ptr::null() };
    }
    dev::NOT_FOUND
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> CUresult {
    // SAFETY: caller's out-pointer.
    unsafe { out(v, 13000) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(n: *mut c_int) -> CUresult {
    try_cu!(initialised("cuDeviceGetCount"));
    // SAFETY: caller's out-pointer.
    unsafe { out(n, 1) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(d: *mut c_int, ordinal: c_int) -> CUresult {
    try_cu!(initialised("cuDeviceGet"));
    if ordinal != 0 {
        return dev::INVALID_DEVICE;
    }
    // SAFETY: caller's out-pointer.
    unsafe { out(d, 0) }
}

fn attribute(a: c_int) -> Option<c_int> {
    let c = crate::config();
    Some(match a {
        1 => 1024,                                 // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,                             // MAX_BLOCK_DIM_X/Y
        4 => 64,                                   // MAX_BLOCK_DIM_Z
        5 => i32::MAX,                             // MAX_GRID_DIM_X
        6 | 7 => 65535,                            // MAX_GRID_DIM_Y/Z
        8 => kernels::MAX_DYNAMIC_SHARED as c_int, // MAX_SHARED_MEMORY_PER_BLOCK
        10 => 32,                                  // WARP_SIZE
        16 => 2,                                   // MULTIPROCESSOR_COUNT: the host threads that run it
        19 => 1,                                   // CAN_MAP_HOST_MEMORY
        33 => 0,                                   // PCI_BUS_ID
        34 => 0,                                   // PCI_DEVICE_ID
        50 => 0,                                   // PCI_DOMAIN_ID
        40 => 2,                                   // ASYNC_ENGINE_COUNT
        41 => 1,                                   // UNIFIED_ADDRESSING
        75 => c.cc.0,                              // COMPUTE_CAPABILITY_MAJOR
        76 => c.cc.1,                              // COMPUTE_CAPABILITY_MINOR
        97 => 227 * 1024,                          // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        115 => c.mempools as c_int,                // MEMORY_POOLS_SUPPORTED
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(v: *mut c_int, attr: c_int, d: c_int) -> CUresult {
    try_cu!(initialised("cuDeviceGetAttribute"));
    if d != 0 {
        return dev::INVALID_DEVICE;
    }
    match attribute(attr) {
        // SAFETY: caller's out-pointer.
        Some(x) => unsafe { out(v, x) },
        None => {
            crate::report("not simulated", format!("cuDeviceGetAttribute: attribute {attr} is not simulated"));
            INVALID_VALUE
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, d: c_int) -> CUresult {
    try_cu!(initialised("cuDeviceGetName"));
    if d != 0 {
        return dev::INVALID_DEVICE;
    }
    if name.is_null() || len <= 0 {
        return INVALID_VALUE;
    }
    let b = crate::DEVICE_NAME.as_bytes();
    let n = b.len().min(len as usize - 1);
    // SAFETY: `name` holds `len` bytes (the API's contract); n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), name as *mut u8, n);
        *name.add(n) = 0;
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, d: c_int) -> CUresult {
    try_cu!(initialised("cuDeviceTotalMem"));
    if d != 0 {
        return dev::INVALID_DEVICE;
    }
    // SAFETY: caller's out-pointer.
    unsafe { out(bytes, crate::config().memory as usize) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], d: c_int) -> CUresult {
    if d != 0 {
        return dev::INVALID_DEVICE;
    }
    // SAFETY: caller's out-pointer.
    unsafe { out(uuid, *b"stoke-sim-device") }
}

// ---- contexts ----------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut usize, d: c_int) -> CUresult {
    try_cu!(initialised("cuDevicePrimaryCtxRetain"));
    if d != 0 {
        return dev::INVALID_DEVICE;
    }
    // SAFETY: caller's out-pointer.
    unsafe { out(ctx, dev::primary().retain()) }
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(d: c_int) -> CUresult {
    if d != 0 {
        return dev::INVALID_DEVICE;
    }
    dev::primary().release()
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: usize) -> CUresult {
    crate::note_caller();
    if ctx != 0 && ctx != dev::primary().handle() {
        crate::report("invalid handle", format!("cuCtxSetCurrent: {ctx:#x} is not a context"));
        return dev::INVALID_CONTEXT;
    }
    dev::set_current(ctx);
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut usize) -> CUresult {
    // SAFETY: caller's out-pointer.
    unsafe { out(ctx, dev::current_handle()) }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(d: *mut c_int) -> CUresult {
    try_cu!(dev::require("cuCtxGetDevice"));
    // SAFETY: caller's out-pointer.
    unsafe { out(d, 0) }
}

#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    let ctx = try_cu!(dev::require("cuCtxSynchronize"));
    dev::synchronize_all(ctx.handle());
    try_cu!(dev::require("cuCtxSynchronize"));
    SUCCESS
}

/// The flags a context may carry (CUDA 13.0's `CU_CTX_FLAGS_MASK`); of the scheduling bits
/// (`CU_CTX_SCHED_MASK`, 7) one value at most: auto 0, spin 1, yield 2, blocking sync 4.
const CTX_FLAGS_MASK: c_uint = 255;

#[no_mangle]
pub extern "C" fn cuCtxSetFlags(flags: c_uint) -> CUresult {
    let ctx = try_cu!(dev::require("cuCtxSetFlags"));
    if flags & !CTX_FLAGS_MASK != 0 || !matches!(flags & 7, 0 | 1 | 2 | 4) {
        crate::report("invalid value", format!("cuCtxSetFlags: {flags:#x} is not a valid set of context flags"));
        return INVALID_VALUE;
    }
    ctx.flags.store(flags, std::sync::atomic::Ordering::SeqCst);
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CUresult {
    let ctx = try_cu!(dev::require("cuCtxGetFlags"));
    // SAFETY: caller's out-pointer.
    unsafe { out(flags, ctx.flags.load(std::sync::atomic::Ordering::SeqCst)) }
}

// ---- errors ------------------------------------------------------------------------------

fn error_text(e: CUresult) -> (&'static str, &'static str) {
    match e {
        0 => ("CUDA_SUCCESS", "no error\0"),
        1 => ("CUDA_ERROR_INVALID_VALUE", "invalid argument (stoke-sim: see its finding on stderr)\0"),
        2 => ("CUDA_ERROR_OUT_OF_MEMORY", "out of memory\0"),
        3 => ("CUDA_ERROR_NOT_INITIALIZED", "initialization error\0"),
        101 => ("CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal\0"),
        200 => ("CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid\0"),
        201 => ("CUDA_ERROR_INVALID_CONTEXT", "invalid device context\0"),
        222 => ("CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain.\0"),
        400 => ("CUDA_ERROR_INVALID_HANDLE", "invalid resource handle\0"),
        500 => ("CUDA_ERROR_NOT_FOUND", "named symbol not found\0"),
        600 => ("CUDA_ERROR_NOT_READY", "device not ready\0"),
        700 => ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered\0"),
        701 => ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch\0"),
        719 => ("CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure\0"),
        801 => ("CUDA_ERROR_NOT_SUPPORTED", "operation not supported\0"),
        _ => ("CUDA_ERROR_UNKNOWN", "unknown error\0"),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(e: CUresult, s: *mut *const c_char) -> CUresult {
    // SAFETY: caller's out-pointer; the text is static and NUL-terminated.
    unsafe { out(s, error_text(e).1.as_ptr() as *const c_char) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(e: CUresult, s: *mut *const c_char) -> CUresult {
    let name: &'static str = match error_text(e).0 {
        "CUDA_SUCCESS" => "CUDA_SUCCESS\0",
        "CUDA_ERROR_INVALID_VALUE" => "CUDA_ERROR_INVALID_VALUE\0",
        "CUDA_ERROR_OUT_OF_MEMORY" => "CUDA_ERROR_OUT_OF_MEMORY\0",
        "CUDA_ERROR_INVALID_CONTEXT" => "CUDA_ERROR_INVALID_CONTEXT\0",
        "CUDA_ERROR_ILLEGAL_ADDRESS" => "CUDA_ERROR_ILLEGAL_ADDRESS\0",
        "CUDA_ERROR_LAUNCH_FAILED" => "CUDA_ERROR_LAUNCH_FAILED\0",
        "CUDA_ERROR_NOT_READY" => "CUDA_ERROR_NOT_READY\0",
        "CUDA_ERROR_INVALID_HANDLE" => "CUDA_ERROR_INVALID_HANDLE\0",
        "CUDA_ERROR_NOT_FOUND" => "CUDA_ERROR_NOT_FOUND\0",
        _ => "CUDA_ERROR_UNKNOWN\0",
    };
    // SAFETY: caller's out-pointer; static NUL-terminated text.
    unsafe { out(s, name.as_ptr() as *const c_char) }
}

// ---- streams, events ---------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(s: *mut usize, flags: c_uint) -> CUresult {
    let ctx = try_cu!(dev::require("cuStreamCreate"));
    let st = dev::create_stream(ctx.handle(), flags & 1 != 0);
    // SAFETY: caller's out-pointer.
    unsafe { out(s, st.handle()) }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(s: *mut usize, flags: c_uint, _priority: c_int) -> CUresult {
    // SAFETY: forwarded with the same contract.
    unsafe { cuStreamCreate(s, flags) }
}

#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(s: usize) -> CUresult {
    if s == 0 || s == dev::STREAM_LEGACY || s == dev::STREAM_PER_THREAD {
        crate::report("invalid handle", "cuStreamDestroy: a default stream cannot be destroyed".into());
        return dev::INVALID_HANDLE;
    }
    let st = try_cu!(dev::stream(s, "cuStreamDestroy"));
    dev::destroy_stream(&st);
    SUCCESS
}

#[no_mangle]
pub extern "C" fn cuStreamSynchronize(s: usize) -> CUresult {
    try_cu!(injected("cuStreamSynchronize", UNKNOWN));
    let st = try_cu!(dev::stream(s, "cuStreamSynchronize"));
    try_cu!(dev::require("cuStreamSynchronize"));
    dev::synchronize(&st);
    try_cu!(dev::require("cuStreamSynchronize"));
    SUCCESS
}

#[no_mangle]
pub extern "C" fn cuStreamQuery(s: usize) -> CUresult {
    let st = try_cu!(dev::stream(s, "cuStreamQuery"));
    if dev::query(&st) {
        SUCCESS
    } else {
        dev::NOT_READY
    }
}

#[no_mangle]
pub extern "C" fn cuStreamWaitEvent(s: usize, e: usize, _flags: c_uint) -> CUresult {
    try_cu!(injected("cuStreamWaitEvent", UNKNOWN));
    try_cu!(dev::require("cuStreamWaitEvent"));
    let st = try_cu!(dev::stream(s, "cuStreamWaitEvent"));
    let ev = try_cu!(dev::event(e, "cuStreamWaitEvent"));
    dev::wait_event(&st, ev, e);
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(_s: usize, status: *mut c_int) -> CUresult {
    // SAFETY: caller's out-pointer. Graph capture is not simulated: never capturing.
    unsafe { out(status, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(e: *mut usize, flags: c_uint) -> CUresult {
    try_cu!(dev::require("cuEventCreate"));
    // CU_EVENT_DISABLE_TIMING = 2
    // SAFETY: caller's out-pointer.
    unsafe { out(e, dev::create_event(flags & 2 == 0)) }
}

#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(e: usize) -> CUresult {
    if dev::destroy_event(e) {
        SUCCESS
    } else {
        crate::report("invalid handle", format!("cuEventDestroy: event {e:#x} is not a live event (destroyed twice?)"));
        dev::INVALID_HANDLE
    }
}

#[no_mangle]
pub extern "C" fn cuEventRecord(e: usize, s: usize) -> CUresult {
    try_cu!(injected("cuEventRecord", UNKNOWN));
    try_cu!(dev::require("cuEventRecord"));
    let ev = try_cu!(dev::event(e, "cuEventRecord"));
    let st = try_cu!(dev::stream(s, "cuEventRecord"));
    dev::record(ev, &st, e);
    SUCCESS
}

#[no_mangle]
pub extern "C" fn cuEventQuery(e: usize) -> CUresult {
    let ev = try_cu!(dev::event(e, "cuEventQuery"));
    if dev::event_done(ev) {
        SUCCESS
    } else {
        dev::NOT_READY
    }
}

#[no_mangle]
pub extern "C" fn cuEventSynchronize(e: usize) -> CUresult {
    try_cu!(injected("cuEventSynchronize", UNKNOWN));
    let ev = try_cu!(dev::event(e, "cuEventSynchronize"));
    dev::event_sync(ev);
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: usize, end: usize) -> CUresult {
    let a = try_cu!(dev::event(start, "cuEventElapsedTime"));
    let b = try_cu!(dev::event(end, "cuEventElapsedTime"));
    if !a.timing || !b.timing {
        return dev::INVALID_HANDLE;
    }
    if !dev::event_done(a) || !dev::event_done(b) {
        return dev::NOT_READY;
    }
    let (Some(ta), Some(tb)) = (*a.time.lock().unwrap(), *b.time.lock().unwrap()) else {
        return dev::INVALID_HANDLE; // never recorded
    };
    let v = if tb >= ta { (tb - ta).as_secs_f32() * 1e3 } else { -((ta - tb).as_secs_f32() * 1e3) };
    // SAFETY: caller's out-pointer.
    unsafe { out(ms, v) }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(ms: *mut f32, start: usize, end: usize) -> CUresult {
    // SAFETY: same contract.
    unsafe { cuEventElapsedTime(ms, start, end) }
}

// ---- modules, launches -------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(m: *mut usize, image: *const c_void) -> CUresult {
    try_cu!(dev::require("cuModuleLoadData"));
    // SAFETY: the API's contract on `image`.
    match unsafe { kernels::load(image) } {
        // SAFETY: caller's out-pointer.
        Ok(h) => unsafe { out(m, h) },
        Err((code, msg)) => {
            eprintln!("stoke-sim: {msg}");
            code
        }
    }
}

#[no_mangle]
pub extern "C" fn cuModuleUnload(m: usize) -> CUresult {
    if kernels::unload(m) {
        SUCCESS
    } else {
        crate::report("invalid handle", format!("cuModuleUnload: {m:#x} is not a loaded module"));
        dev::INVALID_HANDLE
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(f: *mut usize, m: usize, name: *const c_char) -> CUresult {
    try_cu!(dev::require("cuModuleGetFunction"));
    if name.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: a NUL-terminated name (the API's contract).
    let n = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
    let h = try_cu!(kernels::function(m, &n));
    // SAFETY: caller's out-pointer.
    unsafe { out(f, h) }
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(v: *mut c_int, attr: c_int, _f: usize) -> CUresult {
    // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0; others report 0.
    // SAFETY: caller's out-pointer.
    unsafe { out(v, if attr == 0 { 1024 } else { 0 }) }
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
    f: usize,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    s: usize,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    try_cu!(injected("cuLaunchKernel", UNKNOWN));
    try_cu!(dev::require("cuLaunchKernel"));
    let st = try_cu!(dev::stream(s, "cuLaunchKernel"));
    // SAFETY: the API's contract on `f` and `params`.
    unsafe { kernels::launch(f, [gx, gy, gz], [bx, by, bz], shared, &st, params, extra) }
}
