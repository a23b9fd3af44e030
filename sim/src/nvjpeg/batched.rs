//! `nvjpegDecodeBatched(Ex)` and its setup calls: the hardware backend's batched decode (every
//! image decoded and written at the call) and the GPU-assisted hybrid backend's (decoded at the
//! call, written on the stream); which images each takes (`nvjpegDecodeBatchedSupported(Ex)`).
//! The module doc of [`super`] states what each backend does.

use super::*;

#[no_mangle]
pub extern "C" fn nvjpegDecodeBatchedInitialize(h: *mut c_void, s: *mut c_void, batch: c_int, _threads: c_int, fmt: c_int) -> Status {
    let _ = obj!(h, Handle);
    let st = obj!(s, State);
    if let Some((strm, seq)) = &st.batched_pending {
        if strm.completed() < *seq {
            return finding(
                "nvjpegDecodeBatchedInitialize while this state's last batched decode is still queued on its stream (nvJPEG: any running batched decoding should be finished first)".into(),
            );
        }
    }
    if batch <= 0 || fmt != OUTPUT_RGBI {
        return if fmt != OUTPUT_RGBI {
            finding(format!("nvjpegDecodeBatchedInitialize: output format {fmt} is not simulated (RGBI only)"))
        } else {
            INVALID_PARAMETER
        };
    }
    st.batch = Some((batch, fmt));
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvjpegDecodeBatchedPreAllocate(
    h: *mut c_void,
    s: *mut c_void,
    batch: c_int,
    w: c_int,
    hh: c_int,
    _css: c_int,
    _fmt: c_int,
) -> Status {
    let hd = obj!(h, Handle);
    let st = obj!(s, State);
    if !hd.hw() {
        // "available only when the handle is instantiated using NVJPEG_BACKEND_HARDWARE. It
        // is currently a No Op for other backends" (nvJPEG docs).
        return SUCCESS;
    }
    if batch <= 0 || w <= 0 || hh <= 0 {
        return INVALID_PARAMETER;
    }
    ensure_ctx();
    match st.hw_buffer.ensure(batch as usize * w as usize * hh as usize * 3, "nvjpegDecodeBatchedPreAllocate") {
        Ok(()) => SUCCESS,
        Err(e) => e,
    }
}

/// The hardware batched decode: every image decoded and written now, on the calling thread.
#[allow(clippy::too_many_arguments)] // nvjpegDecodeBatched(Ex)'s own arguments
unsafe fn hw_batched(
    h: *mut c_void,
    s: *mut c_void,
    data: *const *const u8,
    lens: *const usize,
    out: *mut NvImage,
    params: Option<*mut *mut c_void>,
    stream: usize,
    call: &'static str,
) -> Status {
    if crate::faults::inject(call) {
        return EXECUTION_FAILED;
    }
    let hd = obj!(h, Handle);
    let st = obj!(s, State);
    ensure_ctx();
    if let Err(e) = dev::require(call) {
        return if e == dev::INVALID_CONTEXT { NOT_INITIALIZED } else { EXECUTION_FAILED };
    }
    if dev::stream(stream, call).is_err() {
        return INVALID_PARAMETER;
    }
    let Some((batch, _)) = st.batch else {
        return finding(format!(
            "{call} before nvjpegDecodeBatchedInitialize on this state (or after a failed batched decode, which needs it again)"
        ));
    };
    if data.is_null() || lens.is_null() || out.is_null() {
        return INVALID_PARAMETER;
    }
    if hd.backend == BACKEND_GPU_HYBRID {
        if params.is_some() {
            finding(format!(
                "{call} on a GPU_HYBRID handle: nvjpegDecodeBatchedEx is supported only by the hardware and lossless backends (nvJPEG docs)"
            ));
            return IMPLEMENTATION_NOT_SUPPORTED;
        }
        // SAFETY: the API's contract, forwarded.
        let r = unsafe { gpu_hybrid_batched(hd, st, batch as usize, data, lens, out, stream, call) };
        if r != SUCCESS {
            st.batch = None;
        }
        return r;
    }
    if !hd.hw() {
        return finding(format!("{call}: the batched decode of a {} handle is not simulated", hd.backend));
    }
    if crate::config().hw_engines == 0 {
        return ARCH_MISMATCH;
    }
    let n = batch as usize;
    let on_device = hd.backend == BACKEND_HARDWARE_DEVICE;
    // The device-input variant reads its bitstreams from device memory at the call, as it
    // writes its outputs: a copy into them still queued on a stream is a hazard.
    let mut bitstream_reads = Vec::new();
    for i in 0..n {
        // SAFETY: `batch` input pointers and lengths per the API's contract.
        let (p, len) = unsafe { (*data.add(i) as usize, *lens.add(i)) };
        let want = if on_device { Want::Device } else { Want::Host };
        match mem::check(p, len, want, call, &format!("bitstream {i}")) {
            Err(e) => return finding(if on_device { format!("{e} (an NVJPEG_BACKEND_HARDWARE_DEVICE handle)") } else { e }),
            Ok(Some(a)) if on_device && len > 0 => bitstream_reads.push(Access::new(a, p, p + len, false, call)),
            Ok(_) => {}
        }
    }
    dev::host_access(&bitstream_reads);
    let mut results = Vec::with_capacity(n);
    let mut accesses = Vec::new();
    let mut need = 0usize;
    for i in 0..n {
        // SAFETY: `batch` inputs, lengths, outputs (and params) per the API's contract; a
        // device bitstream is host-addressable memory on the stand-in (checked above).
        let (d, img) = unsafe { (std::slice::from_raw_parts(*data.add(i), *lens.add(i)), *out.add(i)) };
        let p = match params {
            // SAFETY: as above.
            Some(ps) => {
                let pp = *ps.add(i);
                Some(obj!(pp, Params) as &Params)
            }
            None => None,
        };
        let info = match parse(d) {
            Ok(i) => i,
            Err(e) => return e,
        };
        if !supported(BACKEND_HARDWARE, &info, false) {
            return JPEG_NOT_SUPPORTED;
        }
        if p.is_some_and(|p| p.format != OUTPUT_RGBI) {
            return finding(format!("{call}: image {i}: output format other than RGBI is not simulated"));
        }
        let roi = match roi_of(p, info.w, info.h) {
            Ok(r) => r,
            Err(e) => return e,
        };
        match destination(&img, roi.2, roi.3, call) {
            Ok(a) => accesses.extend(a),
            Err(e) => return e,
        }
        need += info.w as usize * info.h as usize * 3;
        results.push((info, roi, img, d));
    }
    // Images larger than the reservation: nvJPEG allocates during the decode (and at every call
    // when STOKE_SIM_NVJPEG_GROW asks for an nvJPEG that keeps allocating).
    let grow = crate::config().nvjpeg_grow as usize;
    let need = if grow > 0 { need.max(st.hw_buffer.len + grow) } else { need };
    if let Err(e) = st.hw_buffer.ensure(need, call) {
        return e;
    }
    // Written now: the engine does not wait for what is queued on `stream`.
    dev::host_access(&accesses);
    // The bitstreams in pinned memory are read by the stream (the engine's copies of them are
    // queued there; the docs do not say they are done when the call returns): the host must
    // not write them again before it knows the stream passed this call.
    let reads: Vec<Access> = results
        .iter()
        .filter_map(|(_, _, _, d)| {
            let p = d.as_ptr() as usize;
            mem::find(p).filter(|a| a.kind == Kind::Pinned && !d.is_empty()).map(|a| Access::new(a, p, p + d.len(), false, call))
        })
        .collect();
    for (info, roi, img, d) in results {
        match decode(d, &info, roi, hd.interpolate) {
            Ok(px) => write_rows(&img, &px),
            Err(e) => return e,
        }
    }
    if !reads.is_empty() {
        let Ok(strm) = dev::stream(stream, call) else { return INVALID_PARAMETER };
        dev::enqueue(&strm, dev::Enqueue::work(reads, || Ok(())));
    }
    SUCCESS
}

/// Images the GPU-hybrid batched decode took with Huffman decoding on the GPU, and on the host.
static GPU_HUFFMAN: AtomicU64 = AtomicU64::new(0);
static HOST_HUFFMAN: AtomicU64 = AtomicU64::new(0);

/// This module's counters for `stoke_sim_stats`.
pub(crate) fn stats_json() -> String {
    format!(
        "\"gpu_hybrid_batched\":{{\"gpu_huffman\":{},\"host_huffman\":{}}}",
        GPU_HUFFMAN.load(Ordering::Relaxed),
        HOST_HUFFMAN.load(Ordering::Relaxed)
    )
}

/// Components of the first scan (SOS `Ns`).
fn first_scan_components(d: &[u8]) -> Option<u8> {
    find_segment(d, |m| m == 0xda).and_then(|i| d.get(i + 4).copied())
}

/// `nvjpegDecodeBatched` on a GPU_HYBRID handle (module doc): decoded at the call, written on
/// the stream.
#[allow(clippy::too_many_arguments)] // nvjpegDecodeBatched's own arguments
unsafe fn gpu_hybrid_batched(
    hd: &Handle,
    st: &mut State,
    n: usize,
    data: *const *const u8,
    lens: *const usize,
    out: *mut NvImage,
    stream: usize,
    call: &'static str,
) -> Status {
    let Ok(strm) = dev::stream(stream, call) else { return INVALID_PARAMETER };
    let mut accesses = Vec::new();
    let mut images = Vec::with_capacity(n);
    let (mut coefficients, mut bitstreams) = (0usize, 0usize);
    let mut gpu_path = 0u64;
    for i in 0..n {
        // SAFETY: `batch` inputs, lengths and outputs per the API's contract.
        let (d, img) = unsafe { (std::slice::from_raw_parts(*data.add(i), *lens.add(i)), *out.add(i)) };
        let info = match parse(d) {
            Ok(i) => i,
            Err(e) => return e,
        };
        if !supported(BACKEND_HYBRID, &info, false) {
            return JPEG_NOT_SUPPORTED;
        }
        // No ROI in this API: the whole image.
        match destination(&img, info.w, info.h, call) {
            Ok(a) => accesses.extend(a),
            Err(e) => return e,
        }
        let interleaved = info.comps > 1 && first_scan_components(d) == Some(info.comps as u8);
        gpu_path += u64::from(n > 100 && info.sof == 0xc0 && interleaved);
        coefficients += stage_bytes(&info);
        bitstreams += d.len();
        images.push((info, img, d));
    }
    // The state's buffers, grown to this call and kept.
    if let Err(e) = st.hw_buffer.ensure(coefficients + bitstreams, call) {
        return e;
    }
    if let Err(e) = st.batch_pinned.ensure(bitstreams, call) {
        return e;
    }
    dev::host_access(&access_of(&st.batch_pinned, bitstreams, true, call));
    accesses.extend(access_of(&st.batch_pinned, bitstreams, false, call));
    accesses.extend(access_of(&st.hw_buffer, coefficients + bitstreams, true, call));
    let mut decoded = Vec::with_capacity(n);
    for (info, img, d) in images {
        match decode(d, &info, (0, 0, info.w, info.h), hd.interpolate) {
            Ok(px) => decoded.push((SendImage(img), px)),
            Err(e) => return e,
        }
    }
    GPU_HUFFMAN.fetch_add(gpu_path, Ordering::Relaxed);
    HOST_HUFFMAN.fetch_add(n as u64 - gpu_path, Ordering::Relaxed);
    let (seq, _) = dev::enqueue(
        &strm,
        dev::Enqueue::work(accesses, move || {
            for (img, px) in &decoded {
                write_rows(&img.0, px);
            }
            Ok(())
        }),
    );
    st.batched_pending = Some((strm, seq));
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvjpegDecodeBatched(
    h: *mut c_void,
    s: *mut c_void,
    data: *const *const u8,
    lens: *const usize,
    out: *mut NvImage,
    stream: usize,
) -> Status {
    // SAFETY: the API's contract, forwarded.
    unsafe { hw_batched(h, s, data, lens, out, None, stream, "nvjpegDecodeBatched") }
}

#[no_mangle]
pub unsafe extern "C" fn nvjpegDecodeBatchedEx(
    h: *mut c_void,
    s: *mut c_void,
    data: *const *const u8,
    lens: *const usize,
    out: *mut NvImage,
    params: *mut *mut c_void,
    stream: usize,
) -> Status {
    if params.is_null() {
        return INVALID_PARAMETER;
    }
    // SAFETY: the API's contract, forwarded.
    unsafe { hw_batched(h, s, data, lens, out, Some(params), stream, "nvjpegDecodeBatchedEx") }
}

#[no_mangle]
pub extern "C" fn nvjpegDecodeBatchedSupported(h: *mut c_void, js: *mut c_void, out: *mut c_int) -> Status {
    stream_supported(h, js, None, None, out)
}

#[no_mangle]
pub extern "C" fn nvjpegDecodeBatchedSupportedEx(h: *mut c_void, js: *mut c_void, p: *mut c_void, out: *mut c_int) -> Status {
    let p = obj!(p, Params);
    stream_supported(h, js, Some(p), None, out)
}
