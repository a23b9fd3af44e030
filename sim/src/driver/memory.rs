//! Memory: allocations (plain, stream-ordered, from pools), pinned host memory, copies and
//! memsets, with the driver's documented synchronous cases (see the parent module's doc), and
//! pointer attributes.

use super::*;

fn alloc(kind: Kind, p: *mut u64, n: usize, call: &'static str) -> CUresult {
    try_cu!(injected(call, dev::OUT_OF_MEMORY));
    let ctx = try_cu!(dev::require(call));
    if n == 0 {
        return INVALID_VALUE;
    }
    match mem::alloc(kind, n, ctx.handle(), call) {
        // SAFETY: caller's out-pointer.
        Ok(base) => unsafe { out(p, base as u64) },
        Err(()) => dev::OUT_OF_MEMORY,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(p: *mut CUdeviceptr, n: usize) -> CUresult {
    alloc(Kind::Device, p, n, "cuMemAlloc")
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(p: *mut CUdeviceptr, n: usize, s: usize) -> CUresult {
    try_cu!(dev::stream(s, "cuMemAllocAsync"));
    alloc(Kind::Device, p, n, "cuMemAllocAsync")
}

/// `cuMemPoolCreate`: a pool of pinned device memory on device 0 (`CUmemPoolProps`:
/// allocation type 1, location type 1 (device), id 0; what else the props say is not modelled).
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(pool: *mut usize, props: *const u32) -> CUresult {
    try_cu!(initialised("cuMemPoolCreate"));
    if pool.is_null() || props.is_null() || !crate::config().mempools {
        return if crate::config().mempools { INVALID_VALUE } else { dev::NOT_SUPPORTED };
    }
    // SAFETY: the caller's CUmemPoolProps starts with allocType, handleTypes, location.type,
    // location.id (four 32-bit fields).
    let (alloc_type, loc_type, loc_id) = unsafe { (*props, *props.add(2), *props.add(3)) };
    if alloc_type != 1 || loc_type != 1 || loc_id != 0 {
        crate::report(
            "invalid argument",
            format!("cuMemPoolCreate: allocation type {alloc_type}, location type {loc_type} id {loc_id}: the stand-in has pinned device pools on device 0"),
        );
        return INVALID_VALUE;
    }
    // SAFETY: caller's out-pointer.
    unsafe { out(pool, mem::pool_create()) }
}

fn pool_result<T>(r: Result<T, String>) -> Result<T, CUresult> {
    r.map_err(|m| {
        crate::report("invalid handle", m);
        INVALID_VALUE
    })
}

#[no_mangle]
pub extern "C" fn cuMemPoolDestroy(pool: usize) -> CUresult {
    try_cu!(initialised("cuMemPoolDestroy"));
    try_cu!(pool_result(mem::pool_destroy(pool)));
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAttribute(pool: usize, attr: c_int, v: *mut c_void) -> CUresult {
    try_cu!(initialised("cuMemPoolGetAttribute"));
    match try_cu!(pool_result(mem::pool_attribute(pool, attr))) {
        // SAFETY: caller's out-pointer; attributes 4..=8 are cuuint64_t.
        Some(x) => unsafe { out(v as *mut u64, x) },
        None => INVALID_VALUE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAttribute(pool: usize, attr: c_int, v: *mut c_void) -> CUresult {
    try_cu!(initialised("cuMemPoolSetAttribute"));
    if v.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller's value: cuuint64_t for the threshold, int for the reuse flags.
    let value = unsafe {
        if attr == 4 {
            *(v as *const u64)
        } else {
            *(v as *const c_int) as u64
        }
    };
    match try_cu!(pool_result(mem::pool_set_attribute(pool, attr, value))) {
        true => SUCCESS,
        false => INVALID_VALUE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(p: *mut CUdeviceptr, n: usize, pool: usize, s: usize) -> CUresult {
    try_cu!(dev::stream(s, "cuMemAllocFromPoolAsync"));
    // A destroyed or unknown pool is refused before anything is allocated.
    try_cu!(pool_result(mem::pool_check(pool, "cuMemAllocFromPoolAsync")));
    match alloc(Kind::Device, p, n, "cuMemAllocFromPoolAsync") {
        SUCCESS => {
            // SAFETY: written by `alloc` just above.
            let base = unsafe { *p } as usize;
            try_cu!(pool_result(mem::pool_adopt(pool, base, n, "cuMemAllocFromPoolAsync")));
            SUCCESS
        }
        e => e,
    }
}

fn free_now(p: usize, kind: Kind, call: &str) -> CUresult {
    match mem::free(p, kind, call) {
        Ok(a) => {
            dev::guards_forget(a.base, a.end());
            SUCCESS
        }
        Err(msg) => {
            crate::report(if msg.contains("double free") { "double free" } else { "invalid pointer" }, msg);
            INVALID_VALUE
        }
    }
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(p: CUdeviceptr) -> CUresult {
    let ctx = try_cu!(dev::require("cuMemFree"));
    // cuMemFree synchronises with the device first.
    dev::synchronize_all(ctx.handle());
    mem::pool_release(p as usize);
    free_now(p as usize, Kind::Device, "cuMemFree")
}

#[no_mangle]
pub extern "C" fn cuMemFreeAsync(p: CUdeviceptr, s: usize) -> CUresult {
    try_cu!(injected("cuMemFreeAsync", UNKNOWN));
    try_cu!(dev::require("cuMemFreeAsync"));
    let st = try_cu!(dev::stream(s, "cuMemFreeAsync"));
    let a = match checked(p as usize, 0, Want::Device, "cuMemFreeAsync", "pointer") {
        Ok(Some(a)) if a.base == p as usize => a,
        Ok(_) => {
            crate::report("invalid pointer", format!("cuMemFreeAsync({p:#x}): not the start of an allocation"));
            return INVALID_VALUE;
        }
        Err(code) => return code,
    };
    // Freed in stream order: a write of the whole allocation for the hazard checker (a free
    // while another stream still uses it is a hazard), the pages dropped when the stream gets
    // there.
    let access = Access::new(a.clone(), a.base, a.end(), true, "cuMemFreeAsync");
    let base = a.base;
    // A pool stops counting it now, as the driver's bookkeeping does at the call.
    mem::pool_release(base);
    dev::enqueue(
        &st,
        Enqueue::work(vec![access], move || {
            mem::free(base, Kind::Device, "cuMemFreeAsync").map(|_| ()).map_err(|m| OpError {
                code: INVALID_VALUE,
                kind: "double free",
                message: m,
            })
        }),
    );
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(p: *mut *mut c_void, n: usize, _flags: c_uint) -> CUresult {
    alloc(Kind::Pinned, p as *mut u64, n, "cuMemHostAlloc")
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(p: *mut *mut c_void, n: usize) -> CUresult {
    alloc(Kind::Pinned, p as *mut u64, n, "cuMemAllocHost")
}

#[no_mangle]
pub extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    let ctx = try_cu!(dev::require("cuMemFreeHost"));
    dev::synchronize_all(ctx.handle());
    free_now(p as usize, Kind::Pinned, "cuMemFreeHost")
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    try_cu!(dev::require("cuMemGetInfo"));
    let t = crate::config().memory;
    // SAFETY: caller's out-pointers.
    unsafe {
        try_cu!(match out(free, t.saturating_sub(mem::device_bytes()) as usize) {
            SUCCESS => Ok(()),
            e => Err(e),
        });
        out(total, t as usize)
    }
}

/// The access of `[p, p + n)` inside `a` (none for pageable host memory).
fn access(a: Option<mem::Alloc>, p: usize, n: usize, write: bool, what: &str) -> Vec<Access> {
    a.map(|a| vec![Access::new(a, p, p + n, write, what)]).unwrap_or_default()
}

/// Copy `n` bytes from `src` to `dst` on stream `s`.
/// - `src` pageable host: the bytes are taken now (after the stream's earlier work, as the
///   driver's staging does), the write lands later;
/// - `dst` pageable host: returns once the copy is done;
/// - otherwise fully asynchronous.
///
/// `sync`: the synchronous API (legacy stream, returns when done).
#[allow(clippy::too_many_arguments)] // the driver's copy family in one place
fn copy(call: &'static str, dst: usize, dst_want: Want, src: usize, src_want: Want, n: usize, s: usize, sync: bool) -> CUresult {
    try_cu!(injected(call, UNKNOWN));
    try_cu!(dev::require(call));
    let st = try_cu!(dev::stream(if sync { 0 } else { s }, call));
    if n == 0 {
        return SUCCESS;
    }
    let d = try_cu!(checked(dst, n, dst_want, call, "destination"));
    let sa = try_cu!(checked(src, n, src_want, call, "source"));
    let pageable_src = src_want == Want::Host && sa.is_none();
    let pageable_dst = dst_want == Want::Host && d.is_none();
    // The stream works through the device's view of pinned memory (the host's is guarded).
    let (dst_v, src_v) = (d.as_ref().map_or(dst, |a| a.device_view(dst)), sa.as_ref().map_or(src, |a| a.device_view(src)));
    let mut acc = access(d, dst, n, true, call);
    acc.extend(access(sa, src, n, false, call));
    if pageable_src {
        dev::synchronize(&st);
        // SAFETY: `src` holds `n` readable bytes (the API's contract).
        let bytes = unsafe { std::slice::from_raw_parts(src as *const u8, n) }.to_vec();
        dev::enqueue(
            &st,
            Enqueue::work(acc, move || {
                // SAFETY: `dst` lies inside a live allocation checked above (a stream-ordered
                // free after this op has not run yet).
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst_v as *mut u8, n) };
                Ok(())
            }),
        );
    } else {
        dev::enqueue(
            &st,
            Enqueue::work(acc, move || {
                // SAFETY: both ranges were checked against live allocations (or are the
                // caller's pageable memory, which the synchronous return below keeps alive).
                unsafe { std::ptr::copy(src_v as *const u8, dst_v as *mut u8, n) };
                Ok(())
            }),
        );
    }
    if sync || pageable_dst {
        dev::synchronize(&st);
        try_cu!(dev::require(call));
    }
    SUCCESS
}

#[no_mangle]
pub extern "C" fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, n: usize, s: usize) -> CUresult {
    copy("cuMemcpyHtoDAsync", dst as usize, Want::Device, src as usize, Want::Host, n, s, false)
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, n: usize, s: usize) -> CUresult {
    copy("cuMemcpyDtoHAsync", dst as usize, Want::Host, src as usize, Want::Device, n, s, false)
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: usize) -> CUresult {
    copy("cuMemcpyDtoDAsync", dst as usize, Want::Device, src as usize, Want::Device, n, s, false)
}

#[no_mangle]
pub extern "C" fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) -> CUresult {
    copy("cuMemcpyHtoD", dst as usize, Want::Device, src as usize, Want::Host, n, 0, true)
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult {
    copy("cuMemcpyDtoH", dst as usize, Want::Host, src as usize, Want::Device, n, 0, true)
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult {
    copy("cuMemcpyDtoD", dst as usize, Want::Device, src as usize, Want::Device, n, 0, true)
}

fn memset(call: &'static str, dst: usize, v: u8, n: usize, s: usize, sync: bool) -> CUresult {
    try_cu!(dev::require(call));
    let st = try_cu!(dev::stream(if sync { 0 } else { s }, call));
    if n == 0 {
        return SUCCESS;
    }
    let d = try_cu!(checked(dst, n, Want::Device, call, "destination"));
    dev::enqueue(
        &st,
        Enqueue::work(access(d, dst, n, true, call), move || {
            // SAFETY: checked against a live device allocation above.
            unsafe { std::ptr::write_bytes(dst as *mut u8, v, n) };
            Ok(())
        }),
    );
    if sync {
        dev::synchronize(&st);
    }
    SUCCESS
}

#[no_mangle]
pub extern "C" fn cuMemsetD8Async(dst: CUdeviceptr, v: u8, n: usize, s: usize) -> CUresult {
    memset("cuMemsetD8Async", dst as usize, v, n, s, false)
}

#[no_mangle]
pub extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, v: u8, n: usize) -> CUresult {
    memset("cuMemsetD8", dst as usize, v, n, 0, true)
}

#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(data: *mut c_void, attr: c_int, p: CUdeviceptr) -> CUresult {
    let Some(a) = mem::find(p as usize) else { return INVALID_VALUE };
    match attr {
        // CU_POINTER_ATTRIBUTE_MEMORY_TYPE: 1 host, 2 device
        // SAFETY: the attribute's documented out type (an unsigned int).
        2 => unsafe { out(data as *mut c_uint, if a.kind == Kind::Device { 2 } else { 1 }) },
        // CU_POINTER_ATTRIBUTE_CONTEXT
        // SAFETY: as above (a CUcontext).
        1 => unsafe { out(data as *mut usize, a.ctx) },
        _ => INVALID_VALUE,
    }
}
