//! One image's route from its header ([`Classifier`]): stoke's header parser, then nvJPEG's
//! own check for the hardware engine, and the region to decode.
//!
//! A classifier owns its nvJPEG bitstream handle and params (nvJPEG's thread-safety rules: one
//! per thread), so the CUDA backend routes the next batch on a thread of its own while the
//! engine decodes the current one ([`super::GpuDecoder::new_classifier`]).

use super::*;
use crate::augment::params::AugParams;
use crate::backend::cuda::nvjpeg::safe::{DecodeParams, JpegStream, NvjpegHandle};
use crate::error::GpuError;
use std::sync::Arc;

/// A route, the region to decode, the stored size and whether the CUDA route tries the
/// GPU-assisted hybrid decoder first ([`gpu_hybrid_first`]).
pub type Classified = (Route, Roi, (u32, u32), bool);

/// Routes images (module doc). Made by [`super::GpuDecoder::new_classifier`]; the same
/// answers whichever classifier of a decoder gives them.
pub struct Classifier {
    max_pixels: u64,
    interpolated: bool,
    use_hardware: bool,
    use_cuda: bool,
    engine_gray: bool,
    // The engine's check (a bitstream handle and params on the hardware handle), `None`
    // without the engine.
    hw: Option<(JpegStream, DecodeParams)>,
}

impl Classifier {
    /// A classifier for `plan`; `hw` the hardware engine's handle, `None` without the engine.
    pub(super) fn new(plan: &DecoderPlan, hw: Option<&Arc<NvjpegHandle>>) -> Result<Self, GpuError> {
        let hw = match hw {
            Some(h) => Some((JpegStream::new(h)?, DecodeParams::new(h)?)),
            None => None,
        };
        Ok(Self {
            max_pixels: plan.max_pixels,
            interpolated: plan.interpolated,
            use_hardware: plan.use_hardware,
            use_cuda: plan.use_cuda,
            engine_gray: plan.engine_gray,
            hw,
        })
    }

    /// The route of every job, in order, into `out` (cleared first).
    pub fn classify_batch(&mut self, jobs: &[(&[u8], AugParams)], out: &mut Vec<Result<Classified, SlotError>>) {
        out.clear();
        out.extend(jobs.iter().map(|(bytes, p)| self.classify(bytes, p)));
    }

    /// Route one image from its header (and nvJPEG's hardware check), and the region to decode.
    pub fn classify(&mut self, bytes: &[u8], p: &AugParams) -> Result<Classified, SlotError> {
        // The format comes from the bytes, never the name: only JPEG goes to nvJPEG; a PNG
        // (ImageNet holds one under a .JPEG name) or anything else takes the CPU route, which
        // decodes what the codec knows and names what it does not.
        let info = match crate::codec::sniff(bytes) {
            Some(crate::codec::ImageFormat::Jpeg) => crate::codec::jpeg::parse(bytes).ok(),
            _ => None,
        };
        let cand = gpu_candidate(info.as_ref(), self.max_pixels, self.engine_gray).map_err(SlotError::from)?;
        // A stream cut short (no EOI) goes to the CPU decoder too, which reports it.
        let cand = cand.filter(|_| has_eoi(bytes));
        let Some(info) = info else { return Ok((Route::Cpu, Roi { x: 0, y: 0, w: 0, h: 0 }, (0, 0), false)) };
        let stored = (info.width, info.height);
        check_params(p, stored)?;
        // A block of margin for interpolated upsampling at region edges (widen_for_upsampling);
        // replicated chroma reads no sample outside its block.
        let mut roi = decode_roi(p, stored.0, stored.1, 16);
        if self.interpolated {
            roi = widen_for_upsampling(roi, stored, 16);
        }
        let full = Roi { x: 0, y: 0, w: stored.0, h: stored.1 };
        let hw_ok = match (&mut self.hw, cand) {
            (Some((parse, pr)), Some(true)) if self.use_hardware => {
                parse.parse_header(bytes).is_ok() && {
                    // Ask with the region the engine would decode (the decode pass sets the
                    // params for real); when it refuses the region, ask for the whole image.
                    let mut ask = |r: Option<Roi>| {
                        pr.set_output_format(RGBI).is_ok()
                            && pr.set_roi(r.map(|r| (r.x, r.y, r.w, r.h))).is_ok()
                            && parse.batched_supported(Some(pr)).unwrap_or(false)
                    };
                    (roi != full && ask(Some(roi)))
                        || (ask(None) && {
                            roi = full;
                            true
                        })
                }
            }
            _ => false,
        };
        let route = match route(cand, cand.and(Some(hw_ok))) {
            Route::Cuda if !self.use_cuda => Route::Cpu,
            r => r,
        };
        Ok((route, roi, stored, gpu_hybrid_first(&info)))
    }
}

/// The params were drawn for the header the index saw; refuse them if the image says
/// otherwise (the kernel would read outside it).
pub(super) fn check_params(p: &AugParams, stored: (u32, u32)) -> Result<(), SlotError> {
    let code = crate::augment::host::params_check(p, stored.0 as i32, stored.1 as i32);
    if code != 0 {
        return Err(SlotError::Params(crate::augment::host::params_problem(code, p, stored.0 as i32, stored.1 as i32)));
    }
    Ok(())
}
