//! Resolution schedules: FFCV's progressive resizing (ffcv-imagenet's `get_resolution`), the
//! output size of every batch of an epoch as a function of the epoch alone.
//!
//! `size(e)` is `min_res` for `e <= start_ramp`, `max_res` for `e >= end_ramp`, and between
//! them numpy's `interp` of `(start_ramp, min_res) → (end_ramp, max_res)` rounded to the
//! nearest multiple of 32, ties to even (`int(np.round(interp / 32)) * 32`). Since it depends
//! on the epoch only, a resumed epoch has its epoch's size whatever the world size or the step
//! it resumes at.
//!
//! Memory is sized once for `max_res` (docs/CONTRACTS.md, contract 5): a smaller epoch's
//! batches use the front of the same buffers; no epoch allocates. Both sizes are multiples of
//! 32 so that the rounded ramp stays within `[min_res, max_res]` (an interpolated 209 of a
//! `max_res` of 210 would round to 224, past the buffers).

use super::{AugmentSpec, GroupShape};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// What the ramp rounds to (FFCV's 32).
pub const RESOLUTION_STEP: u32 = 32;

/// FFCV's `resolution` section: `min_res` until `start_ramp`, a linear ramp rounded to
/// multiples of 32, `max_res` from `end_ramp` on. Epochs count from 0, as FFCV's
/// `range(epochs)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolutionSchedule {
    /// Output side (square) up to and including `start_ramp`.
    pub min_res: u32,
    /// Output side from `end_ramp` on: the largest, which memory is sized for.
    pub max_res: u32,
    /// Last epoch at `min_res`.
    pub start_ramp: u64,
    /// First epoch at `max_res`.
    pub end_ramp: u64,
}

impl ResolutionSchedule {
    /// The output side of every batch of `epoch`.
    pub fn size(&self, epoch: u64) -> u32 {
        if epoch <= self.start_ramp {
            return self.min_res;
        }
        if epoch >= self.end_ramp {
            return self.max_res;
        }
        // numpy's interp between two points: slope first, then `slope · (x − x0) + y0`, in f64.
        let slope = (self.max_res as f64 - self.min_res as f64) / (self.end_ramp as f64 - self.start_ramp as f64);
        let interp = slope * (epoch as f64 - self.start_ramp as f64) + self.min_res as f64;
        (interp / RESOLUTION_STEP as f64).round_ties_even() as u32 * RESOLUTION_STEP
    }

    /// `"MIN,MAX,START,END"`, the command line's form.
    pub fn parse(text: &str, names: super::OptionNames) -> Result<Self> {
        let bad =
            || Error::config(format!("{} takes MIN_RES,MAX_RES,START_RAMP,END_RAMP (four integers), got {text:?}", names.of("resolution")));
        let parts: Vec<&str> = text.split(',').map(str::trim).collect();
        let [min, max, start, end] = parts[..] else { return Err(bad()) };
        let n = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let side = |s: &str| s.parse::<u32>().map_err(|_| bad());
        Ok(Self { min_res: side(min)?, max_res: side(max)?, start_ramp: n(start)?, end_ramp: n(end)? })
    }

    /// Check the schedule; errors show the values.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::config(format!("resolution: {m}")));
        let (lo, hi) = (self.min_res, self.max_res);
        if lo == 0 || hi == 0 {
            return bad(format!("min_res and max_res must be at least {RESOLUTION_STEP}, got {lo} and {hi}"));
        }
        if lo > hi {
            return bad(format!("min_res {lo} is larger than max_res {hi}"));
        }
        if lo % RESOLUTION_STEP != 0 || hi % RESOLUTION_STEP != 0 {
            return bad(format!(
                "min_res and max_res must be multiples of {RESOLUTION_STEP} (the ramp rounds to them, and must stay within [min_res, max_res]), got {lo} and {hi}"
            ));
        }
        if hi > 8192 {
            return bad(format!("max_res must be at most 8192, got {hi}"));
        }
        if self.end_ramp < self.start_ramp {
            return bad(format!("end_ramp {} is before start_ramp {}", self.end_ramp, self.start_ramp));
        }
        Ok(())
    }

    /// `spec` at the size of `epoch`.
    pub fn spec_at(&self, spec: &AugmentSpec, epoch: u64) -> AugmentSpec {
        let s = self.size(epoch);
        AugmentSpec { size: (s, s), ..spec.clone() }
    }
}

/// The views' specs in `epoch`: `specs` as they are without a schedule; each at the epoch's
/// size with one.
pub fn specs_at<'a>(specs: &'a [AugmentSpec], schedule: Option<&ResolutionSchedule>, epoch: u64) -> Cow<'a, [AugmentSpec]> {
    match schedule {
        None => Cow::Borrowed(specs),
        Some(r) => Cow::Owned(specs.iter().map(|s| r.spec_at(s, epoch)).collect()),
    }
}

/// The groups' shapes in `epoch`: `groups` as they are without a schedule; each at the epoch's
/// size with one.
pub fn shapes_at<'a>(groups: &'a [GroupShape], schedule: Option<&ResolutionSchedule>, epoch: u64) -> Cow<'a, [GroupShape]> {
    match schedule {
        None => Cow::Borrowed(groups),
        Some(r) => {
            let s = r.size(epoch) as usize;
            Cow::Owned(groups.iter().map(|g| GroupShape { width: s, height: s, ..*g }).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ffcv-imagenet's rn50 configs: 160 → 192 between epochs 11 and 13 (16 epochs): epoch 12
    /// interpolates to 176 = 5.5 · 32, which numpy rounds to 6 (ties to even): 192.
    #[test]
    fn ffcvs_own_schedule_rounds_ties_to_even() {
        let r = ResolutionSchedule { min_res: 160, max_res: 192, start_ramp: 11, end_ramp: 13 };
        let sizes: Vec<u32> = (0..16).map(|e| r.size(e)).collect();
        assert_eq!(&sizes[10..14], &[160, 160, 192, 192]);
        assert!(sizes[..12].iter().all(|&s| s == 160) && sizes[12..].iter().all(|&s| s == 192));
        // A tie that rounds down: 144 = 4.5 · 32 → 4 · 32.
        let r = ResolutionSchedule { min_res: 128, max_res: 160, start_ramp: 0, end_ramp: 2 };
        assert_eq!((r.size(0), r.size(1), r.size(2)), (128, 128, 160));
    }

    #[test]
    fn a_step_schedule_and_the_parser() {
        let r = ResolutionSchedule { min_res: 128, max_res: 224, start_ramp: 5, end_ramp: 5 };
        assert_eq!((r.size(5), r.size(6)), (128, 224));
        let p = ResolutionSchedule::parse(" 160, 192,11,13", super::super::OptionNames::Cli).unwrap();
        assert_eq!(p, ResolutionSchedule { min_res: 160, max_res: 192, start_ramp: 11, end_ramp: 13 });
        for text in ["160,192,11", "160,192,a,13", "160,192,11,13,1", "-32,192,1,2"] {
            let e = ResolutionSchedule::parse(text, super::super::OptionNames::Cli).unwrap_err().to_string();
            assert!(e.contains("--resolution takes MIN_RES,MAX_RES,START_RAMP,END_RAMP") && e.contains(text), "{e}");
        }
    }

    #[test]
    fn bad_schedules_are_named() {
        let r = |min_res, max_res, start_ramp, end_ramp| ResolutionSchedule { min_res, max_res, start_ramp, end_ramp };
        for (s, want) in [
            (r(0, 192, 1, 2), "at least 32, got 0 and 192"),
            (r(160, 0, 1, 2), "at least 32, got 160 and 0"),
            (r(224, 192, 1, 2), "min_res 224 is larger than max_res 192"),
            (r(160, 200, 1, 2), "multiples of 32 (the ramp rounds to them, and must stay within [min_res, max_res]), got 160 and 200"),
            (r(160, 192, 5, 4), "end_ramp 4 is before start_ramp 5"),
            (r(160, 8224, 1, 2), "max_res must be at most 8192, got 8224"),
        ] {
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains("resolution: ") && e.contains(want), "{e} (want {want})");
        }
        r(160, 160, 0, 0).validate().unwrap();
    }
}
