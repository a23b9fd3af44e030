//! nvJPEG, opened at run time, in three layers as cudarc wraps NVIDIA's libraries:
//!
//! - [`sys`]: raw declarations from the 13.0 `nvjpeg.h` and the function table loaded with
//!   `libloading` (search order: `$STOKE_NVJPEG`, `libnvjpeg.so.13`, `libnvjpeg.so.12`,
//!   `libnvjpeg.so`);
//! - [`result`]: each call returns `Result`, the status turned into a sentence
//!   ([`crate::GpuError::Nvjpeg`]);
//! - [`safe`]: owning types that free on drop.

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
        lib.filter_map(|e| e.ok())
            .map(|e| e.path().join("site-packages/nvidia/cu13/lib/libnvjpeg.so.13"))
            .find(|p| p.is_file())
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
        // The pinned wheel is nvidia-nvjpeg==13.0.1.86 (TOOLCHAIN.md); its header says
        // NVJPEG_VER 13.0.1; the library reports major 13, minor 0.
        assert_eq!((major, minor), (13, 0), "patch {patch}");
    }
}
