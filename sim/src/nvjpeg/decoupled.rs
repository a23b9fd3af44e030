//! The decoupled API: decoders, JPEG streams and their getters, nvJPEG's pinned and device
//! buffers, and the three stages (`nvjpegDecodeJpegHost` → `TransferToDevice` →
//! `DecodeJpegDevice`). The module doc of [`super`] states what each stage does.

use super::*;

struct Decoder {
    handle: *const Handle,
    backend: c_int,
}

#[no_mangle]
pub extern "C" fn nvjpegDecoderCreate(h: *mut c_void, backend: c_int, out: *mut *mut c_void) -> Status {
    let hd = obj!(h, Handle);
    if !matches!(backend, BACKEND_DEFAULT | BACKEND_HYBRID | BACKEND_GPU_HYBRID) {
        return finding(format!("nvjpegDecoderCreate: backend {backend} is not simulated for the decoupled API"));
    }
    new(out, Decoder { handle: hd as *const Handle, backend: if backend == BACKEND_DEFAULT { BACKEND_HYBRID } else { backend } })
}

#[no_mangle]
pub extern "C" fn nvjpegDecoderDestroy(d: *mut c_void) -> Status {
    destroy::<Decoder>(d)
}

#[no_mangle]
pub extern "C" fn nvjpegDecoderJpegSupported(d: *mut c_void, js: *mut c_void, p: *mut c_void, out: *mut c_int) -> Status {
    let dec = obj!(d, Decoder);
    let p = if p.is_null() { None } else { Some(&*obj!(p, Params)) };
    stream_supported(dec.handle as *mut c_void, js, p, Some(dec.backend), out)
}

#[no_mangle]
pub extern "C" fn nvjpegJpegStreamCreate(h: *mut c_void, out: *mut *mut c_void) -> Status {
    let hd = obj!(h, Handle);
    if failing("nvjpegJpegStreamCreate", hd.backend) {
        return ALLOCATOR_FAILURE;
    }
    new(out, Stream { data: Vec::new(), info: None })
}

#[no_mangle]
pub extern "C" fn nvjpegJpegStreamDestroy(s: *mut c_void) -> Status {
    destroy::<Stream>(s)
}

unsafe fn stream_parse(js: *mut c_void, d: *const u8, n: usize, keep: bool) -> Status {
    let j = obj!(js, Stream);
    if d.is_null() {
        return INVALID_PARAMETER;
    }
    // SAFETY: `d` holds `n` bytes (the API's contract).
    let data = unsafe { std::slice::from_raw_parts(d, n) };
    j.info = None;
    match parse(data) {
        Ok(i) => {
            j.info = Some(i);
            j.data = if keep { data.to_vec() } else { Vec::new() };
            SUCCESS
        }
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvjpegJpegStreamParse(
    _h: *mut c_void,
    d: *const u8,
    n: usize,
    _meta: c_int,
    _save: c_int,
    js: *mut c_void,
) -> Status {
    if crate::faults::inject("nvjpegJpegStreamParse") {
        return EXECUTION_FAILED;
    }
    // SAFETY: forwarded.
    unsafe { stream_parse(js, d, n, true) }
}

#[no_mangle]
pub unsafe extern "C" fn nvjpegJpegStreamParseHeader(_h: *mut c_void, d: *const u8, n: usize, js: *mut c_void) -> Status {
    if crate::faults::inject("nvjpegJpegStreamParseHeader") {
        return EXECUTION_FAILED;
    }
    // SAFETY: forwarded.
    unsafe { stream_parse(js, d, n, false) }
}

fn info_of(js: *mut c_void) -> Result<Info, Status> {
    if js.is_null() {
        return Err(INVALID_PARAMETER);
    }
    // SAFETY: a live stream object (the API's contract).
    unsafe { &*(js as *const Stream) }.info.ok_or(INVALID_PARAMETER)
}

macro_rules! getter {
    ($name:ident, |$i:ident| $($out:ident : $t:ty = $v:expr),+) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(js: *mut c_void, $($out: *mut $t),+) -> Status {
            let $i = match info_of(js) { Ok(i) => i, Err(e) => return e };
            $(if $out.is_null() { return INVALID_PARAMETER; })+
            // SAFETY: non-null out-pointers.
            unsafe { $(*$out = $v;)+ }
            SUCCESS
        }
    };
}

getter!(nvjpegJpegStreamGetFrameDimensions, |i| w: c_uint = i.w, h: c_uint = i.h);
getter!(nvjpegJpegStreamGetComponentsNum, |i| n: c_uint = i.comps);
getter!(nvjpegJpegStreamGetChromaSubsampling, |i| css: c_int = i.css);
getter!(nvjpegJpegStreamGetJpegEncoding, |i| enc: c_int = i.sof as c_int);

fn new_buffer(out: *mut *mut c_void, alloc: *mut c_void, kind: Kind) -> Status {
    if !alloc.is_null() {
        return finding("nvJPEG buffer with a V1 allocator: not simulated (stoke passes its own through the V2 calls)".into());
    }
    new(out, Mutex::new(Buffer::new(kind, None)))
}

/// `nvjpegBuffer*CreateV2`: a buffer made and freed through the caller's allocator.
fn new_buffer_v2(h: *mut c_void, out: *mut *mut c_void, alloc: *mut c_void, kind: Kind, call: &str) -> Status {
    let _ = obj!(h, Handle);
    match Alloc::read(alloc, call) {
        Ok(a) => new(out, Mutex::new(Buffer::new(kind, a))),
        Err(e) => e,
    }
}

#[no_mangle]
pub extern "C" fn nvjpegBufferPinnedCreateV2(h: *mut c_void, a: *mut c_void, out: *mut *mut c_void) -> Status {
    new_buffer_v2(h, out, a, Kind::Pinned, "nvjpegBufferPinnedCreateV2")
}

#[no_mangle]
pub extern "C" fn nvjpegBufferDeviceCreateV2(h: *mut c_void, a: *mut c_void, out: *mut *mut c_void) -> Status {
    new_buffer_v2(h, out, a, Kind::Device, "nvjpegBufferDeviceCreateV2")
}

fn destroy_buffer(b: *mut c_void) -> Status {
    if b.is_null() {
        return INVALID_PARAMETER;
    }
    // SAFETY: a buffer object this library created.
    unsafe { &*(b as *const Mutex<Buffer>) }.lock().unwrap().release();
    destroy::<Mutex<Buffer>>(b)
}

#[no_mangle]
pub extern "C" fn nvjpegBufferPinnedCreate(_h: *mut c_void, a: *mut c_void, out: *mut *mut c_void) -> Status {
    new_buffer(out, a, Kind::Pinned)
}

#[no_mangle]
pub extern "C" fn nvjpegBufferPinnedDestroy(b: *mut c_void) -> Status {
    destroy_buffer(b)
}

#[no_mangle]
pub extern "C" fn nvjpegBufferDeviceCreate(_h: *mut c_void, a: *mut c_void, out: *mut *mut c_void) -> Status {
    new_buffer(out, a, Kind::Device)
}

#[no_mangle]
pub extern "C" fn nvjpegBufferDeviceDestroy(b: *mut c_void) -> Status {
    destroy_buffer(b)
}

fn resize(b: *mut c_void, size: usize, call: &'static str) -> Status {
    if b.is_null() {
        return INVALID_PARAMETER;
    }
    ensure_ctx();
    // SAFETY: a buffer object this library created.
    match unsafe { &*(b as *const Mutex<Buffer>) }.lock().unwrap().ensure(size, call) {
        Ok(()) => SUCCESS,
        Err(e) => e,
    }
}

#[no_mangle]
pub extern "C" fn nvjpegBufferPinnedResize(b: *mut c_void, size: usize, _stream: usize) -> Status {
    resize(b, size, "nvjpegBufferPinnedResize")
}

#[no_mangle]
pub extern "C" fn nvjpegBufferDeviceResize(b: *mut c_void, size: usize, _stream: usize) -> Status {
    resize(b, size, "nvjpegBufferDeviceResize")
}

#[no_mangle]
pub extern "C" fn nvjpegStateAttachPinnedBuffer(s: *mut c_void, b: *mut c_void) -> Status {
    obj!(s, State).pinned = b as *mut Mutex<Buffer>;
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvjpegStateAttachDeviceBuffer(s: *mut c_void, b: *mut c_void) -> Status {
    obj!(s, State).device = b as *mut Mutex<Buffer>;
    SUCCESS
}

fn buffer<'a>(b: *mut Mutex<Buffer>, call: &str, what: &str) -> Result<&'a Mutex<Buffer>, Status> {
    if b.is_null() {
        return Err(finding(format!("{call}: no {what} buffer attached to the state")));
    }
    // SAFETY: a buffer object this library created, attached to the state.
    Ok(unsafe { &*b })
}

#[no_mangle]
pub extern "C" fn nvjpegDecodeJpegHost(h: *mut c_void, d: *mut c_void, s: *mut c_void, p: *mut c_void, js: *mut c_void) -> Status {
    if crate::faults::inject("nvjpegDecodeJpegHost") {
        return EXECUTION_FAILED;
    }
    const CALL: &str = "nvjpegDecodeJpegHost";
    let hd = obj!(h, Handle);
    let dec = obj!(d, Decoder);
    let st = obj!(s, State);
    let pr = obj!(p, Params);
    let j = obj!(js, Stream);
    ensure_ctx();
    let Some(info) = j.info else { return INVALID_PARAMETER };
    if j.data.is_empty() {
        return finding(format!("{CALL}: the stream was parsed without its data (nvjpegJpegStreamParse)"));
    }
    if !supported(dec.backend, &info, pr.allow_cmyk) {
        return JPEG_NOT_SUPPORTED;
    }
    if pr.format != OUTPUT_RGBI {
        return finding(format!("{CALL}: output format {} is not simulated (RGBI only)", pr.format));
    }
    let roi = match roi_of(Some(pr), info.w, info.h) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let pinned = match buffer(st.pinned, CALL, "pinned") {
        Ok(b) => b,
        Err(e) => return e,
    };
    let need = stage_bytes(&info);
    let mut pb = pinned.lock().unwrap();
    if let Err(e) = pb.ensure(need, CALL) {
        return e;
    }
    // The host stage writes the pinned buffer now.
    dev::host_access(&access_of(&pb, need, true, CALL));
    match decode(&j.data, &info, roi, hd.interpolate) {
        Ok(px) => {
            st.host = Some(Arc::new(px));
            SUCCESS
        }
        Err(e) => {
            st.host = None;
            e
        }
    }
}

#[no_mangle]
pub extern "C" fn nvjpegDecodeJpegTransferToDevice(
    _h: *mut c_void,
    _d: *mut c_void,
    s: *mut c_void,
    js: *mut c_void,
    stream: usize,
) -> Status {
    if crate::faults::inject("nvjpegDecodeJpegTransferToDevice") {
        return EXECUTION_FAILED;
    }
    const CALL: &str = "nvjpegDecodeJpegTransferToDevice";
    let st = obj!(s, State);
    let Ok(info) = info_of(js) else { return INVALID_PARAMETER };
    if st.host.is_none() {
        return finding(format!("{CALL} without a successful nvjpegDecodeJpegHost on this state"));
    }
    let Ok(strm) = dev::stream(stream, CALL) else { return INVALID_PARAMETER };
    let (pinned, device) = match (buffer(st.pinned, CALL, "pinned"), buffer(st.device, CALL, "device")) {
        (Ok(p), Ok(d)) => (p, d),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let need = stage_bytes(&info);
    let mut db = device.lock().unwrap();
    if let Err(e) = db.ensure(need, CALL) {
        return e;
    }
    let pb = pinned.lock().unwrap();
    let mut acc = access_of(&pb, need, false, CALL);
    acc.extend(access_of(&db, need, true, CALL));
    dev::enqueue(&strm, dev::Enqueue::work(acc, || Ok(())));
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvjpegDecodeJpegDevice(
    _h: *mut c_void,
    _d: *mut c_void,
    s: *mut c_void,
    out: *mut NvImage,
    stream: usize,
) -> Status {
    if crate::faults::inject("nvjpegDecodeJpegDevice") {
        return EXECUTION_FAILED;
    }
    const CALL: &str = "nvjpegDecodeJpegDevice";
    let st = obj!(s, State);
    if out.is_null() {
        return INVALID_PARAMETER;
    }
    let Some(px) = st.host.clone() else {
        return finding(format!("{CALL} without a successful nvjpegDecodeJpegHost on this state"));
    };
    let Ok(strm) = dev::stream(stream, CALL) else { return INVALID_PARAMETER };
    // SAFETY: a non-null image descriptor (the API's contract).
    let img = unsafe { *out };
    let mut acc = match destination(&img, px.w, px.h, CALL) {
        Ok(a) => a,
        Err(e) => return e,
    };
    let device = match buffer(st.device, CALL, "device") {
        Ok(b) => b,
        Err(e) => return e,
    };
    acc.extend(access_of(&device.lock().unwrap(), px.rgb.len(), false, CALL));
    let img = SendImage(img);
    dev::enqueue(
        &strm,
        dev::Enqueue::work(acc, move || {
            let img = img;
            write_rows(&img.0, &px);
            Ok(())
        }),
    );
    SUCCESS
}
