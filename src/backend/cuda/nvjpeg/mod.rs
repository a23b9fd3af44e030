//! nvJPEG, opened at run time, in three layers as cudarc wraps NVIDIA's libraries:
//!
//! - [`sys`]: raw declarations from the 13.0 `nvjpeg.h` and the function table loaded with
//!   `libloading` (search order: `$STOKE_NVJPEG`, `libnvjpeg.so.13`, `libnvjpeg.so.12`,
//!   `libnvjpeg.so`);
//! - [`result`]: each call returns `Result`, the status turned into a sentence
//!   ([`crate::GpuError::Nvjpeg`]);
//! - [`safe`]: owning types that free on drop;
//! - [`memory`]: the allocators nvJPEG's handles get, which count what nvJPEG holds.

pub mod memory;
pub mod result;
pub mod safe;
pub mod sys;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// `libnvjpeg.so.13` from the pinned PyPI wheel: `$STOKE_NVJPEG`, else the one
    /// `scripts/setup-cuda.sh` put in `./.venv-cuda` (relative to the working directory).
    fn wheel_lib() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os(sys::NVJPEG_ENV) {
            return Some(PathBuf::from(p)).filter(|p| p.is_file());
        }
        let lib = std::fs::read_dir(".venv-cuda/lib").ok()?;
        lib.filter_map(|e| e.ok()).map(|e| e.path().join("site-packages/nvidia/cu13/lib/libnvjpeg.so.13")).find(|p| p.is_file())
    }

    /// Opens the real library and asks its version: needs no GPU (libnvjpeg needs only libc).
    #[test]
    fn the_pinned_wheel_library_loads_and_reports_13_0() {
        let Some(path) = wheel_lib() else {
            eprintln!("skipped: no libnvjpeg.so.13 (run scripts/setup-cuda.sh or set STOKE_NVJPEG)");
            return;
        };
        let lib = sys::NvjpegLib::open_first(&[path.display().to_string()]).expect("open libnvjpeg");
        assert!(lib.nvjpegDecodeBatchedEx.is_some() && lib.nvjpegCreateExV2.is_some());
        let (major, minor, patch) = result::get_version(&lib).expect("nvjpegGetProperty");
        // The pinned wheel is nvidia-nvjpeg==13.0.1.86 (docs/CONTRACTS.md, "Toolchain facts"); its header says
        // NVJPEG_VER 13.0.1; the library reports major 13, minor 0.
        assert_eq!((major, minor), (13, 0), "patch {patch}");
    }

    /// A valid baseline JPEG of `w × h` (4:4:4, three components) whose every DCT coefficient
    /// is 0, so it decodes to RGB (128, 128, 128) everywhere (Pillow agrees). Huffman tables
    /// with one 1-bit code each: DC category 0 and AC end-of-block, so a block is the bits `00`.
    fn gray_jpeg(w: u16, h: u16) -> Vec<u8> {
        fn seg(out: &mut Vec<u8>, marker: u8, body: &[u8]) {
            out.extend([0xff, marker]);
            out.extend(((body.len() + 2) as u16).to_be_bytes());
            out.extend(body);
        }
        let mut j = vec![0xff, 0xd8];
        let mut dqt = vec![0u8];
        dqt.extend([1u8; 64]);
        seg(&mut j, 0xdb, &dqt);
        let mut sof = vec![8u8];
        sof.extend(h.to_be_bytes());
        sof.extend(w.to_be_bytes());
        sof.extend([3, 1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0]);
        seg(&mut j, 0xc0, &sof);
        for class in [0x00u8, 0x10] {
            let mut dht = vec![class, 1];
            dht.extend([0u8; 15]);
            dht.push(0x00);
            seg(&mut j, 0xc4, &dht);
        }
        seg(&mut j, 0xda, &[3, 1, 0x00, 2, 0x00, 3, 0x00, 0, 63, 0]);
        let blocks = (w as usize).div_ceil(8) * (h as usize).div_ceil(8) * 3;
        let bits = 2 * blocks;
        j.extend(std::iter::repeat_n(0u8, bits / 8));
        if bits % 8 != 0 {
            j.push(0xffu8 >> (bits % 8)); // pad the last byte with 1 bits (never 0xff here)
        }
        j.extend([0xff, 0xd9]);
        j
    }

    #[test]
    fn the_gray_fixture_has_the_layout_pillow_accepted() {
        // Checked once with Pillow 13 (decodes to 13x7 RGB, every pixel (128, 128, 128)); this
        // pins the bytes so a change to the generator is noticed.
        let hex: String = gray_jpeg(13, 7).iter().map(|b| format!("{b:02x}")).collect();
        let want = concat!(
            "ffd8ffdb0043", "00", "01010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101",
            "ffc00011080007000d03011100021100031100",
            "ffc40014000100000000000000000000000000000000",
            "ffc40014100100000000000000000000000000000000",
            "ffda000c03010002000300003f00", "000f", "ffd9"
        );
        assert_eq!(hex, want);
    }

    /// nvJPEG on a real GPU: header facts, the decoupled decode (host → transfer → device)
    /// and, where the GPU has a hardware JPEG decoder, the batched hardware decode.
    /// Skips without a GPU unless STOKE_REQUIRE_GPU=1. Not yet verified on a GPU.
    #[test]
    fn decodes_the_gray_fixture_on_the_gpu() {
        use crate::backend::cuda::device::Gpu;
        use cudarc::driver::DevicePtrMut;
        use safe::*;
        use sys::*;
        let gpu = match Gpu::open(0).and_then(|g| NvjpegLib::get().map(|_| g)) {
            Ok(g) => g,
            Err(e) if std::env::var("STOKE_REQUIRE_GPU").is_ok_and(|v| v == "1") => panic!("STOKE_REQUIRE_GPU=1: {e}"),
            Err(e) => {
                eprintln!("skipped: no GPU with nvJPEG ({e})");
                return;
            }
        };
        let (w, h) = (13u32, 7u32);
        let jpeg = gray_jpeg(w as u16, h as u16);
        let handle = NvjpegHandle::new(nvjpegBackend_t::NVJPEG_BACKEND_DEFAULT, NVJPEG_FLAGS_DEFAULT).unwrap();
        let (n, css, ws, hs) = handle.image_info(&jpeg).unwrap();
        assert_eq!((n, css, ws[0], hs[0]), (3, nvjpegChromaSubsampling_t::NVJPEG_CSS_444, 13, 7));

        let mut js = JpegStream::new(&handle).unwrap();
        let info = js.parse_header(&jpeg).unwrap();
        assert_eq!(
            info,
            StreamInfo {
                width: w,
                height: h,
                components: 3,
                subsampling: nvjpegChromaSubsampling_t::NVJPEG_CSS_444,
                encoding: nvjpegJpegEncoding_t::NVJPEG_ENCODING_BASELINE_DCT
            }
        );
        js.parse(&jpeg).unwrap();

        let stream = gpu.stream().clone();
        let cu = stream.cu_stream() as cudaStream_t;
        let decode_check = |out: &cudarc::driver::CudaSlice<u8>, what: &str| {
            let host = stream.clone_dtoh(out).unwrap();
            stream.synchronize().unwrap();
            // All-zero coefficients decode to Y = Cb = Cr = 128, which is RGB 128 exactly;
            // allow 1 for a colour conversion that rounds differently.
            assert!(host.iter().all(|&v| v.abs_diff(128) <= 1), "{what}: {:?}", &host[..12]);
        };

        let decoder = Decoder::new(&handle, nvjpegBackend_t::NVJPEG_BACKEND_DEFAULT).unwrap();
        let mut state = decoder.new_state().unwrap();
        state.attach_pinned(PinnedBuffer::new(&handle).unwrap()).unwrap();
        state.attach_device(DeviceBuffer::new(&handle).unwrap()).unwrap();
        let mut params = DecodeParams::new(&handle).unwrap();
        params.set_output_format(nvjpegOutputFormat_t::NVJPEG_OUTPUT_RGBI).unwrap();
        assert!(decoder.supports(&js, &params).unwrap());
        decoder.decode_host(&mut state, &params, &js).unwrap();
        let mut out = stream.alloc_zeros::<u8>((w * h * 3) as usize).unwrap();
        {
            let (ptr, _guard) = out.device_ptr_mut(&stream);
            let mut img = nvjpegImage_t::default();
            img.channel[0] = ptr as *mut u8;
            img.pitch[0] = (3 * w) as usize;
            // SAFETY: `out` holds w·h·3 bytes, RGBI with pitch 3w; it outlives the sync in
            // decode_check; `cu` is this context's stream.
            unsafe {
                decoder.transfer_to_device(&mut state, &js, cu).unwrap();
                decoder.decode_device(&mut state, &mut img, cu).unwrap();
            }
        }
        decode_check(&out, "decoupled decode");

        match NvjpegHandle::new(nvjpegBackend_t::NVJPEG_BACKEND_HARDWARE, NVJPEG_FLAGS_DEFAULT) {
            Err(e) => println!("STOKE-Q hw-open: no, the hardware backend did not open ({e})"),
            Ok(hw) => {
                match hw.hardware_decoder_info() {
                    Ok((engines, cores)) => println!("STOKE-Q hw-size: {engines} x {cores} (hardware JPEG decoder opened)"),
                    Err(e) => {
                        println!("STOKE-Q hw-open: opened, but its engine info failed ({e}); the pipeline runs without it");
                        return;
                    }
                }
                // Ask the engine first, as the decoder does: a refusal (this 13x7 image may be
                // under its minimum size) is a reported skip of this route, not a failure.
                let mut hs = JpegStream::new(&hw).unwrap();
                let asked = hs.parse_header(&jpeg).and_then(|_| hs.batched_supported(None));
                if !matches!(asked, Ok(true)) {
                    println!(
                        "STOKE-Q hw-open: the engine refuses the {w}x{h} gray fixture ({asked:?}); batched hardware decode not tested"
                    );
                    return;
                }
                let mut st = JpegState::new(&hw).unwrap();
                st.batched_initialize(1, 1, nvjpegOutputFormat_t::NVJPEG_OUTPUT_RGBI).unwrap();
                let mut out = stream.alloc_zeros::<u8>((w * h * 3) as usize).unwrap();
                {
                    let (ptr, _guard) = out.device_ptr_mut(&stream);
                    let mut img = [nvjpegImage_t::default()];
                    img[0].channel[0] = ptr as *mut u8;
                    img[0].pitch[0] = (3 * w) as usize;
                    // The engine writes when called, without waiting for the stream: the
                    // zeroing memset queued by alloc_zeros must be done first (the simulated
                    // device caught this test racing it).
                    stream.synchronize().unwrap();
                    // SAFETY: as above; one image, batch size 1.
                    unsafe { st.decode_batched(&[&jpeg], &mut img, cu).unwrap() };
                }
                decode_check(&out, "hardware batched decode");
            }
        }
    }
}
