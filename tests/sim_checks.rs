//! The simulated device's checks fire (sim/, run under `scripts/with-sim-gpu.sh`): an access
//! past the end of an allocation inside a kernel, a stream reading what another still writes
//! with no event between them, memory never freed when the context goes, and a call on a
//! thread with no current context each end the process with a finding that names the call
//! and the address, and the same work done correctly ends it with none.
//!
//! Each case runs in a child process (this test binary again, `SIM_CHECK=<case>`): a finding
//! poisons the context as a fault does on a GPU, and the stand-in makes a process that exits
//! with findings exit with status 86. Skips (saying so) unless the device is the stand-in;
//! `STOKE_REQUIRE_SIM=1` (CI) makes that a failure.

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use std::process::Command;

fn on_sim() -> bool {
    let named = stoke::backend::cuda::device::probe_driver().is_ok()
        && stoke::backend::cuda::device::device_info(0).is_ok_and(|d| d.name.contains("simulated device, not a GPU"));
    if !named {
        assert!(std::env::var("STOKE_REQUIRE_SIM").as_deref() != Ok("1"), "STOKE_REQUIRE_SIM=1 but the device is not the stand-in");
        eprintln!("skipped: not running on the simulated device (scripts/with-sim-gpu.sh)");
    }
    named
}

/// Run `case` in a child; its exit status and stderr.
fn child(case: &str) -> (Option<i32>, String) {
    child_env(case, &[])
}

fn child_env(case: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .envs(env.iter().copied())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("SIM_CHECK", case)
        .env_remove("STOKE_SIM_ALLOW_FINDINGS")
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn check(r: sys::CUresult, what: &str) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{what}");
}

/// The cases, run in the child.
#[test]
fn child_entry() {
    let Ok(case) = std::env::var("SIM_CHECK") else { return };
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    match case.as_str() {
        // stoke's own canary kernel told to mark a target past the end of a 4 KiB arena.
        "oob" | "in_bounds" => {
            let gpu = stoke::backend::cuda::device::Gpu::open(0).unwrap();
            let kernels = gpu.kernels().unwrap();
            let f = kernels.function("stoke_canary_set").unwrap();
            let arena = gpu.stream().alloc_zeros::<u8>(4096).unwrap();
            let h = if case == "oob" { 64 } else { 8 };
            // One target, 16 pixels wide, `h` rows at pitch 48 from offset 0: 64 rows reach
            // byte 3072 + ..., past 4096 for the canaries placed in the lower rows.
            let target: [u32; 6] = [0, 0, 16, h, 48 * 4, 0];
            let targets = gpu.stream().clone_htod(&target).unwrap();
            let mut b = gpu.stream().launch_builder(&f);
            b.arg(&arena).arg(&targets);
            // SAFETY: the kernel's parameters (arena, targets); the out-of-bounds case is the
            // point of the test, and the simulated device catches it.
            unsafe { b.launch(LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 }) }.unwrap();
            let r = gpu.stream().synchronize();
            eprintln!("synchronize after the launch: {r:?}");
        }
        // Stream A fills a buffer; stream B copies it, with or without waiting on A's event.
        "no_wait" | "wait" => unsafe {
            // SAFETY: raw driver calls on a current context with handles created here.
            let (mut a, mut b, mut src, mut dst, mut ev) = (std::ptr::null_mut(), std::ptr::null_mut(), 0u64, 0u64, std::ptr::null_mut());
            check(sys::cuStreamCreate(&mut a, 1), "stream a");
            check(sys::cuStreamCreate(&mut b, 1), "stream b");
            check(sys::cuMemAlloc_v2(&mut src, 1 << 16), "src");
            check(sys::cuMemAlloc_v2(&mut dst, 1 << 16), "dst");
            check(sys::cuEventCreate(&mut ev, 2), "event");
            check(sys::cuMemsetD8Async(src, 7, 1 << 16, a), "fill on a");
            check(sys::cuEventRecord(ev, a), "record");
            if case == "wait" {
                check(sys::cuStreamWaitEvent(b, ev, 0), "wait");
            }
            check(sys::cuMemcpyDtoDAsync_v2(dst, src, 1 << 16, b), "copy on b");
            check(sys::cuStreamSynchronize(b), "sync b");
            check(sys::cuStreamSynchronize(a), "sync a");
            check(sys::cuMemFree_v2(src), "free src");
            check(sys::cuMemFree_v2(dst), "free dst");
            check(sys::cuEventDestroy_v2(ev), "event destroy");
            check(sys::cuStreamDestroy_v2(a), "destroy a");
            check(sys::cuStreamDestroy_v2(b), "destroy b");
        },
        // A device allocation forgotten, then every reference to the context dropped.
        "leak" | "no_leak" => {
            let mut p = 0u64;
            // SAFETY: a plain allocation on the current context, freed below unless leaked.
            check(unsafe { sys::cuMemAlloc_v2(&mut p, 12345) }, "alloc");
            if case == "no_leak" {
                // SAFETY: the allocation just made.
                check(unsafe { sys::cuMemFree_v2(p) }, "free");
            }
            drop(stream);
            drop(ctx);
            return;
        }
        // cuMemAlloc on a fresh thread that never made a context current.
        "no_context" | "context" => {
            let bind = case == "context";
            let ctx2 = ctx.clone();
            let r = std::thread::spawn(move || {
                if bind {
                    ctx2.bind_to_thread().unwrap();
                }
                let mut p = 0u64;
                // SAFETY: a plain allocation call; its result is checked.
                let r = unsafe { sys::cuMemAlloc_v2(&mut p, 4096) };
                if r == sys::CUresult::CUDA_SUCCESS {
                    // SAFETY: the allocation just made.
                    unsafe { sys::cuMemFree_v2(p) };
                }
                r
            })
            .join()
            .unwrap();
            eprintln!("cuMemAlloc on the fresh thread: {r:?}");
        }
        // A device-to-host copy into pinned memory, read by the host before or after the
        // stream is synchronised; a host-to-device copy from pinned memory whose source the host
        // overwrites before or after.
        "read_early" | "read_synced" | "reuse_early" | "reuse_synced" => unsafe {
            // SAFETY: raw driver calls on a current context with memory made here; the early
            // cases are the hazards under test, which the stand-in reports.
            let (mut s, mut dev, mut host) = (std::ptr::null_mut(), 0u64, std::ptr::null_mut());
            let n = 1usize << 16;
            check(sys::cuStreamCreate(&mut s, 1), "stream");
            check(sys::cuMemAlloc_v2(&mut dev, n), "device");
            check(sys::cuMemHostAlloc(&mut host, n, 0), "pinned");
            let h = host as *mut u8;
            check(sys::cuMemsetD8Async(dev, 9, n, s), "fill");
            if case.starts_with("read") {
                check(sys::cuMemcpyDtoHAsync_v2(host, dev, n, s), "copy to the host");
                if case == "read_synced" {
                    check(sys::cuStreamSynchronize(s), "sync");
                }
                let v = std::ptr::read_volatile(h.add(100));
                check(sys::cuStreamSynchronize(s), "sync");
                eprintln!("read {v} (9 once the copy landed)");
            } else {
                std::ptr::write_bytes(h, 1, n);
                check(sys::cuMemcpyHtoDAsync_v2(dev, host, n, s), "copy to the device");
                if case == "reuse_synced" {
                    check(sys::cuStreamSynchronize(s), "sync");
                }
                std::ptr::write_volatile(h.add(5000), 2);
                check(sys::cuStreamSynchronize(s), "sync");
            }
            check(sys::cuMemFreeHost(host), "free pinned");
            check(sys::cuMemFree_v2(dev), "free device");
            check(sys::cuStreamDestroy_v2(s), "destroy");
        },
        // stoke's kernel stoke_auto_hist (__launch_bounds__(256)) launched with 512-thread
        // blocks, and its canary check (no bound) with 32.
        "over_bounds" | "within_bounds" => {
            let gpu = stoke::backend::cuda::device::Gpu::open(0).unwrap();
            let kernels = gpu.kernels().unwrap();
            let a = gpu.stream().alloc_zeros::<u8>(1 << 20).unwrap();
            let b = gpu.stream().alloc_zeros::<u8>(1 << 20).unwrap();
            let c = gpu.stream().alloc_zeros::<u8>(1 << 20).unwrap();
            if case == "over_bounds" {
                let f = kernels.function("stoke_auto_hist").unwrap();
                let (n, step) = (0u32, 0i32);
                let mut l = gpu.stream().launch_builder(&f);
                l.arg(&a).arg(&b).arg(&n).arg(&step).arg(&c);
                // SAFETY: the kernel's parameters (params, images, count, step, histograms); the
                // block is over its bound on purpose and the launch is refused before it runs.
                let r = unsafe { l.launch(LaunchConfig { grid_dim: (1, 1, 1), block_dim: (512, 1, 1), shared_mem_bytes: 0 }) };
                eprintln!("launch: {r:?}");
            } else {
                let f = kernels.function("stoke_canary_check").unwrap();
                let mut l = gpu.stream().launch_builder(&f);
                l.arg(&a).arg(&b).arg(&c);
                // SAFETY: (arena, targets, intact) with zeroed targets: every canary at offset 0.
                unsafe { l.launch(LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 }) }.unwrap();
            }
            gpu.stream().synchronize().unwrap();
        }
        // A device allocation freed twice, or written after it was freed.
        "double_free" | "use_after_free" | "free_once" => unsafe {
            // SAFETY: raw driver calls on a current context; the misuse is what is tested, and
            // the stand-in refuses it before touching anything.
            let mut p = 0u64;
            check(sys::cuMemAlloc_v2(&mut p, 4096), "alloc");
            check(sys::cuMemFree_v2(p), "free");
            match case.as_str() {
                "double_free" => eprintln!("second free: {:?}", sys::cuMemFree_v2(p)),
                "use_after_free" => eprintln!("memset after free: {:?}", sys::cuMemsetD8_v2(p, 0, 16)),
                _ => {}
            }
        },
        // A stream-ordered memory pool: used bytes counted from the allocation to the free call,
        // a destroy with an allocation outstanding deferred to its free ("pool_ok"); an
        // allocation from a destroyed pool refused ("pool_destroyed").
        "pool_ok" | "pool_destroyed" => unsafe {
            // SAFETY: raw driver calls on a current context with handles created here; the
            // misuse is what is tested, and the stand-in refuses it before touching anything.
            let mut props: sys::CUmemPoolProps = std::mem::zeroed();
            props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
            props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
            let mut pool = std::ptr::null_mut();
            check(sys::cuMemPoolCreate(&mut pool, &props), "pool");
            let used = |pool| {
                let mut v = 0u64;
                check(
                    sys::cuMemPoolGetAttribute(
                        pool,
                        sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
                        &mut v as *mut u64 as *mut _,
                    ),
                    "used",
                );
                v
            };
            let s = stream.cu_stream();
            let (mut a, mut b) = (0u64, 0u64);
            check(sys::cuMemAllocFromPoolAsync(&mut a, 1000, pool, s), "alloc a");
            check(sys::cuMemAllocFromPoolAsync(&mut b, 3000, pool, s), "alloc b");
            assert_eq!(used(pool), 4000);
            check(sys::cuMemFreeAsync(a, s), "free a");
            assert_eq!(used(pool), 3000, "counted at the free call");
            check(sys::cuMemPoolDestroy(pool), "destroy with b outstanding");
            if case == "pool_destroyed" {
                eprintln!("alloc from a destroyed pool: {:?}", sys::cuMemAllocFromPoolAsync(&mut a, 1000, pool, s));
            }
            check(sys::cuMemFreeAsync(b, s), "free b: the pool goes with it");
            check(sys::cuStreamSynchronize(s), "sync");
        },
        // cuBLAS/cuRAND handles as a candle device makes them, looked up in the stand-in the way
        // a linked binary finds them: destroyed once ("handles_ok"), or twice ("handle_twice").
        // nvJPEG's GPU-hybrid backend in batched mode: whole images with nvjpegDecodeBatched
        // ("hyb_plain"); nvjpegDecodeBatchedEx, documented for the hardware and lossless
        // backends only, is a finding ("hyb_ex").
        // The hardware backend's batched decode from pinned memory the host then overwrites,
        // before ("hw_reuse_early") or after ("hw_reuse_synced") it synchronised the stream:
        // the engine's reads of its bitstreams are queued on the stream.
        // The device-bitstream variant of the engine (NVJPEG_BACKEND_HARDWARE_DEVICE): its
        // bitstream copied to the device and read at the call, after the host waited for the
        // copy ("hwdev_synced") or not ("hwdev_early"), or given a host pointer ("hwdev_host").
        // nvJPEG's memory through a caller's V2 allocator (nvjpegCreateExV2, as stoke's handles
        // are made): a device buffer grown through one that hands out device memory
        // ("alloc_device", clean) or host heap memory ("alloc_heap", a finding).
        "alloc_device" | "alloc_heap" => {
            use std::ffi::{c_int, c_void};
            use stoke::backend::cuda::nvjpeg::sys::{
                nvjpegBackend_t, nvjpegBufferDevice_t, nvjpegDevAllocatorV2_t, nvjpegHandle_t, NvjpegLib,
            };
            unsafe extern "C" fn dev_malloc(ctx: *mut c_void, p: *mut *mut c_void, n: usize, _s: *mut c_void) -> c_int {
                // SAFETY: nvJPEG's out pointer; `ctx` says which memory to hand out.
                unsafe {
                    if ctx.is_null() {
                        let mut d = 0;
                        let r = sys::cuMemAlloc_v2(&mut d, n);
                        *p = d as usize as *mut c_void;
                        (r != sys::CUresult::CUDA_SUCCESS) as c_int
                    } else {
                        *p = Box::into_raw(vec![0u8; n].into_boxed_slice()) as *mut c_void;
                        0
                    }
                }
            }
            unsafe extern "C" fn dev_free(ctx: *mut c_void, p: *mut c_void, _n: usize, _s: *mut c_void) -> c_int {
                // SAFETY: what dev_malloc handed out (the heap case leaks its bytes: the process
                // ends with the finding anyway).
                if ctx.is_null() {
                    unsafe { sys::cuMemFree_v2(p as usize as sys::CUdeviceptr) as c_int }
                } else {
                    0
                }
            }
            let lib = NvjpegLib::get().unwrap();
            let ctx = if case == "alloc_heap" { std::ptr::dangling_mut::<c_void>() } else { std::ptr::null_mut() };
            let mut dev = nvjpegDevAllocatorV2_t { dev_malloc: Some(dev_malloc), dev_free: Some(dev_free), dev_ctx: ctx };
            let mut h: nvjpegHandle_t = unsafe { std::mem::zeroed() };
            let mut b: nvjpegBufferDevice_t = unsafe { std::mem::zeroed() };
            // SAFETY: the allocator functions live for the process; out pointers are valid.
            unsafe {
                let create = lib.nvjpegCreateExV2.unwrap();
                assert_eq!(create(nvjpegBackend_t::NVJPEG_BACKEND_HYBRID, &mut dev, std::ptr::null_mut(), 0, &mut h).0, 0);
                assert_eq!((lib.nvjpegBufferDeviceCreateV2.unwrap())(h, &mut dev, &mut b).0, 0);
                let r = (lib.nvjpegBufferDeviceResize.unwrap())(b, 1 << 20, stream.cu_stream() as _);
                eprintln!("resize: {r:?}");
                assert_eq!((lib.nvjpegBufferDeviceDestroy)(b).0, 0);
                assert_eq!((lib.nvjpegDestroy)(h).0, 0);
            }
        }
        "hyb_plain" | "hyb_ex" | "hw_reuse_early" | "hw_reuse_synced" | "hwdev_early" | "hwdev_synced" | "hwdev_host" => {
            use stoke::backend::cuda::nvjpeg::safe::{Bitstream, DecodeParams, JpegState, NvjpegHandle};
            use stoke::backend::cuda::nvjpeg::sys::{nvjpegBackend_t, nvjpegImage_t, nvjpegOutputFormat_t};
            let dir = tempfile::tempdir().unwrap();
            stoke::gen::generate(dir.path(), &stoke::gen::GenConfig::new(12), &|_| {}).unwrap();
            let files = walk(dir.path());
            let (bytes, info) = files
                .iter()
                .filter_map(|p| std::fs::read(p).ok())
                .find_map(|b| {
                    stoke::codec::jpeg::parse(&b)
                        .ok()
                        .filter(|i| i.components == 3 && i.coding == stoke::codec::jpeg::Coding::Baseline)
                        .map(|i| (b, i))
                })
                .expect("a baseline JPEG among the generated files");
            let hw = case.starts_with("hw");
            let backend = match case.as_str() {
                c if c.starts_with("hwdev") => nvjpegBackend_t::NVJPEG_BACKEND_HARDWARE_DEVICE,
                _ if hw => nvjpegBackend_t::NVJPEG_BACKEND_HARDWARE,
                _ => nvjpegBackend_t::NVJPEG_BACKEND_GPU_HYBRID,
            };
            let handle = NvjpegHandle::new(backend, 0).unwrap();
            let mut state = JpegState::new(&handle).unwrap();
            let rgbi = nvjpegOutputFormat_t::NVJPEG_OUTPUT_RGBI;
            state.batched_initialize(1, 1, rgbi).unwrap();
            let n = 3 * info.width as usize * info.height as usize;
            let dest = stream.alloc_zeros::<u8>(n).unwrap();
            let mut img = nvjpegImage_t::default();
            img.channel[0] = cudarc::driver::DevicePtr::device_ptr(&dest, &stream).0 as *mut u8;
            img.pitch[0] = 3 * info.width as usize;
            let mut dests = [img];
            if case.starts_with("hwdev") {
                let params = [DecodeParams::new(&handle).unwrap()];
                // A large zeroing queued first, so the copy behind it is still in flight when
                // the host does not wait.
                let pad = stream.alloc_zeros::<u8>(64 << 20).unwrap();
                let mut on_device = stream.alloc_zeros::<u8>(bytes.len()).unwrap();
                stream.memcpy_htod(&bytes, &mut on_device).unwrap();
                if case != "hwdev_early" {
                    stream.synchronize().unwrap();
                }
                let input = match case.as_str() {
                    "hwdev_host" => Bitstream::Host(&bytes),
                    _ => Bitstream::Device { ptr: cudarc::driver::DevicePtr::device_ptr(&on_device, &stream).0, len: bytes.len() },
                };
                // SAFETY: one input of its length (device memory written by the copy above, or
                // host bytes for the refused case), one whole-image RGBI destination.
                let r = unsafe { state.decode_batched_ex(&[input], &mut dests, &params, stream.cu_stream() as _) };
                eprintln!("decode: {r:?}");
                stream.synchronize().unwrap();
                drop((pad, on_device));
                return;
            }
            if hw {
                // The engine writes its outputs at the call, not after the zeroing queued above.
                stream.synchronize().unwrap();
                // SAFETY: raw driver calls on the current context; the pinned copy of the
                // bitstream is freed after the stream is synchronised.
                unsafe {
                    let mut pinned = std::ptr::null_mut();
                    check(sys::cuMemHostAlloc(&mut pinned, bytes.len(), 0), "pinned");
                    let p = std::slice::from_raw_parts_mut(pinned as *mut u8, bytes.len());
                    p.copy_from_slice(&bytes);
                    let r = state.decode_batched(&[&*p], &mut dests, stream.cu_stream() as _);
                    eprintln!("decode: {r:?}");
                    if case == "hw_reuse_synced" {
                        stream.synchronize().unwrap();
                    }
                    std::ptr::write_volatile(pinned as *mut u8, 0);
                    stream.synchronize().unwrap();
                    check(sys::cuMemFreeHost(pinned), "free pinned");
                }
                return;
            }
            // SAFETY: one input, one whole-image RGBI destination of n bytes; synchronised below.
            let r = unsafe {
                if case == "hyb_ex" {
                    let params = [DecodeParams::new(&handle).unwrap()];
                    state.decode_batched_ex(&[Bitstream::Host(&bytes)], &mut dests, &params, stream.cu_stream() as _)
                } else {
                    state.decode_batched(&[&bytes], &mut dests, stream.cu_stream() as _)
                }
            };
            stream.synchronize().unwrap();
            eprintln!("decode: {r:?}");
        }
        "handles_ok" | "handle_twice" => unsafe {
            // SAFETY: the stand-in's exports with their C signatures; handles created here.
            let lib = libloading::Library::new("libcuda.so.1").unwrap();
            let create: libloading::Symbol<unsafe extern "C" fn(*mut usize) -> i32> = lib.get(b"cublasCreate_v2").unwrap();
            let set_stream: libloading::Symbol<unsafe extern "C" fn(usize, usize) -> i32> = lib.get(b"cublasSetStream_v2").unwrap();
            let destroy: libloading::Symbol<unsafe extern "C" fn(usize) -> i32> = lib.get(b"cublasDestroy_v2").unwrap();
            let mut h = 0usize;
            assert_eq!(create(&mut h), 0);
            assert_eq!(set_stream(h, stream.cu_stream() as usize), 0);
            assert_eq!(destroy(h), 0);
            if case == "handle_twice" {
                eprintln!("second destroy: {}", destroy(h));
            }
        },
        // Context flags: blocking sync with the other flags kept ("flags_ok"), two scheduling
        // modes at once, which the driver refuses ("flags_bad").
        "flags_ok" | "flags_bad" => unsafe {
            // SAFETY: raw driver calls on the context made current above.
            let mut f = 0u32;
            check(sys::cuCtxGetFlags(&mut f), "get");
            let want = if case == "flags_ok" { (f & !7) | 4 } else { (f & !7) | 1 | 4 };
            eprintln!("set {want:#x}: {:?}", sys::cuCtxSetFlags(want));
        },
        // The CUDA backend on a device of STOKE_SIM_MEMORY bytes (set by the parent).
        "backend" => {
            let dir = tempfile::tempdir().unwrap();
            let mut g = stoke::gen::GenConfig::new(8);
            g.classes = 2;
            stoke::gen::generate(&dir.path().join("data"), &g, &|_| {}).unwrap();
            let opts = stoke::source::IndexOptions { save: false, ..Default::default() };
            let ds = stoke::source::Dataset::open(&dir.path().join("data"), &opts).unwrap();
            let mut c = stoke::config::PipelineConfig::new(ds.path());
            c.batch_size = 64;
            match stoke::backend::cuda::pipeline::CudaBackend::new(&c, &ds) {
                Ok(b) => eprintln!("backend opened: {} device bytes", b.device_bytes()),
                Err(e) => eprintln!("backend refused: {e}"),
            }
        }
        other => panic!("unknown SIM_CHECK case {other}"),
    }
    drop(stream);
    drop(ctx);
}

fn expect_finding(case: &str, kind: &str, words: &[&str]) {
    let (code, err) = child(case);
    assert_eq!(code, Some(86), "{case}: the process should end with the stand-in's findings (status 86):\n{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with(&format!("stoke-sim: {kind}: ")))
        .unwrap_or_else(|| panic!("{case}: no `{kind}` finding:\n{err}"));
    for w in words {
        assert!(line.contains(w), "{case}: the finding does not say {w:?}: {line}");
    }
}

fn expect_clean(case: &str) {
    let (code, err) = child(case);
    assert_eq!(code, Some(0), "{case}: done correctly, no finding expected:\n{err}");
    assert!(!err.contains("stoke-sim: "), "{case}: unexpected finding:\n{err}");
}

#[test]
fn an_access_past_the_end_of_an_allocation_in_a_kernel_is_named() {
    if !on_sim() {
        return;
    }
    expect_finding("oob", "fault", &["kernel stoke_canary_set", "past the end of device allocation", "4096 bytes"]);
    expect_clean("in_bounds");
}

#[test]
fn a_copy_on_one_stream_of_what_another_still_writes_is_a_hazard() {
    if !on_sim() {
        return;
    }
    expect_finding("no_wait", "hazard", &["cuMemcpyDtoDAsync", "cuMemsetD8Async", "no event or synchronisation"]);
    expect_clean("wait");
}

#[test]
fn memory_never_freed_is_a_leak_when_the_context_goes() {
    if !on_sim() {
        return;
    }
    expect_finding("leak", "leak", &["12345 bytes", "never freed"]);
    expect_clean("no_leak");
}

#[test]
fn a_call_without_a_current_context_fails() {
    if !on_sim() {
        return;
    }
    expect_finding("no_context", "no current context", &["cuMemAlloc"]);
    expect_clean("context");
}

#[test]
fn the_host_reading_pinned_memory_a_copy_still_writes_is_a_hazard() {
    if !on_sim() {
        return;
    }
    expect_finding("read_early", "hazard", &["the host reads pinned memory", "cuMemcpyDtoHAsync", "still writes"]);
    expect_clean("read_synced");
}

#[test]
fn the_host_reusing_a_pinned_buffer_a_copy_still_reads_is_a_hazard() {
    if !on_sim() {
        return;
    }
    expect_finding("reuse_early", "hazard", &["the host writes pinned memory", "cuMemcpyHtoDAsync", "still reads"]);
    expect_clean("reuse_synced");
}

#[test]
fn a_block_over_the_kernels_launch_bounds_is_refused() {
    if !on_sim() {
        return;
    }
    expect_finding("over_bounds", "launch", &["stoke_auto_hist", "512 threads per block", "__launch_bounds__(256)"]);
    expect_clean("within_bounds");
}

#[test]
fn a_double_free_and_a_use_after_free_are_named() {
    if !on_sim() {
        return;
    }
    expect_finding("double_free", "double free", &["cuMemFree", "device allocation #"]);
    expect_finding("use_after_free", "use after free", &["cuMemsetD8", "freed device allocation"]);
    expect_clean("free_once");
}

#[test]
fn an_allocation_from_a_destroyed_memory_pool_is_refused() {
    if !on_sim() {
        return;
    }
    expect_finding("pool_destroyed", "invalid handle", &["cuMemAllocFromPoolAsync", "was destroyed"]);
    expect_clean("pool_ok");
}

#[test]
fn a_cublas_handle_destroyed_twice_is_named() {
    if !on_sim() {
        return;
    }
    expect_finding("handle_twice", "invalid handle", &["cublasDestroy", "not a live Cublas handle"]);
    expect_clean("handles_ok");
}

/// `cuMemGetInfo` and the allocations follow the configured device size: the backend that fits
/// an 80 GiB device is refused on a 64 MiB one with a typed out-of-memory error that names the
/// part, and no finding (running out is not misuse).
#[test]
fn a_device_too_small_for_the_backend_is_a_named_out_of_memory_error() {
    if !on_sim() {
        return;
    }
    let (code, err) = child_env("backend", &[("STOKE_SIM_MEMORY", "67108864")]);
    assert_eq!(code, Some(0), "{err}");
    let line = err.lines().find(|l| l.starts_with("backend ")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.starts_with("backend refused") && line.contains("out of") && line.contains("memory"), "{line}");
    assert!(!err.contains("stoke-sim: "), "{err}");
    let (code, err) = child_env("backend", &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("backend opened"), "{err}");
}

/// The hardware engine's batched decode reads its bitstreams on the stream: the host writing
/// them again before it knows the stream passed the call is a hazard (the CUDA backend's
/// staging slots and the readers' pinned pool wait for their guards first).
#[test]
fn the_host_rewriting_a_bitstream_the_hardware_decode_still_reads_is_a_hazard() {
    if !on_sim() {
        return;
    }
    expect_finding("hw_reuse_early", "hazard", &["the host writes pinned memory", "nvjpegDecodeBatched", "still reads"]);
    expect_clean("hw_reuse_synced");
}

/// A caller's nvJPEG allocator (nvjpegCreateExV2, as stoke's handles are made) must hand out
/// live memory of the kind asked for: host heap memory for a device buffer is named.
#[test]
fn an_nvjpeg_allocator_handing_out_memory_that_is_not_the_devices_is_named() {
    if !on_sim() {
        return;
    }
    expect_finding(
        "alloc_heap",
        "nvjpeg",
        &["nvjpegBufferDeviceResize", "the caller's allocator returned", "1048576 bytes of device memory"],
    );
    expect_clean("alloc_device");
}

#[test]
fn the_device_bitstream_engine_reading_a_copy_still_queued_or_a_host_pointer_is_named() {
    if !on_sim() {
        return;
    }
    expect_finding("hwdev_early", "hazard", &["nvjpegDecodeBatchedEx on the host", "cuMemcpyHtoDAsync", "writes them"]);
    expect_finding("hwdev_host", "nvjpeg", &["nvjpegDecodeBatchedEx", "bitstream 0", "no live device allocation", "HARDWARE_DEVICE"]);
    expect_clean("hwdev_synced");
}

#[test]
fn a_batched_gpu_hybrid_decode_with_regions_is_named() {
    if !on_sim() {
        return;
    }
    expect_finding("hyb_ex", "nvjpeg", &["nvjpegDecodeBatchedEx", "GPU_HYBRID", "hardware and lossless"]);
    expect_clean("hyb_plain");
}

#[test]
fn context_flags_with_two_scheduling_modes_are_refused() {
    if !on_sim() {
        return;
    }
    expect_finding("flags_bad", "invalid value", &["cuCtxSetFlags", "0xd"]);
    expect_clean("flags_ok");
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
