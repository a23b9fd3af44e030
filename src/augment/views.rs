//! Several views of one sample from one decode (DINO's 2 global + 8 local crops, SimCLR's two
//! views): what a view group is, how each view's parameters are drawn, and the one region a
//! sample's decode must cover.
//!
//! A pipeline makes `V ≥ 1` views of every sample, in groups of one output size. The single-view
//! pipeline is the case `V = 1`: one group of one view whose spec is `PipelineConfig::augment`
//! and whose parameters are drawn exactly as they always were ([`view_seed`] of view 0 is the
//! seed itself). View `v` draws every random choice with its own seed, so turning a view on or
//! off never moves another view's pictures.
//!
//! In the batch, group `g` holds `count_g · N` images of its size, view-major: view `k` of the
//! group is the contiguous `[N, C, H, W]` (or NHWC) block `k`, so a group is one tensor
//! `[count_g · N, ...]` (DINO's loop runs one forward per resolution) and each view is a view
//! into it. Groups follow each other in one allocation.

use super::params::{draw, AugParams, SampleRng};
use super::spec::AugmentSpec;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// The most views a pipeline makes of each sample.
pub const MAX_VIEWS: usize = 64;

/// Stream id of the per-view seeds (see [`SampleRng::new`]).
const STREAM_VIEW: u64 = 11;

/// A group of views of one output size: one spec per view (DINO's two global views differ in
/// their blur and solarize).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewGroup {
    /// The views' specs, in order; all of one `size`.
    pub views: Vec<AugmentSpec>,
}

impl ViewGroup {
    /// Views in the group.
    pub fn count(&self) -> usize {
        self.views.len()
    }

    /// Output `(width, height)` of the group's views.
    pub fn size(&self) -> (u32, u32) {
        self.views.first().map_or((0, 0), |s| s.size)
    }

    /// Check the group: at least one view, one size, each spec valid. `g` names it.
    pub fn validate(&self, g: usize) -> Result<()> {
        let Some(first) = self.views.first() else {
            return Err(Error::config(format!("views[{g}]: count must be at least 1, got 0")));
        };
        for (k, v) in self.views.iter().enumerate() {
            if v.size != first.size {
                return Err(Error::config(format!(
                    "views[{g}]: the views of one group share one size; view {k} is {}x{}, view 0 {}x{}",
                    v.size.0, v.size.1, first.size.0, first.size.1
                )));
            }
            v.validate().map_err(|e| match e {
                Error::Config(m) => Error::config(format!("views[{g}] view {k}: {m}")),
                e => e,
            })?;
        }
        Ok(())
    }
}

/// Where a group lies in a batch: `count` views of `width × height`, view-major.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupShape {
    /// Views in the group.
    pub count: usize,
    /// Output width.
    pub width: usize,
    /// Output height.
    pub height: usize,
}

impl GroupShape {
    /// The shapes of `groups`.
    pub fn of(groups: &[ViewGroup]) -> Vec<GroupShape> {
        groups.iter().map(|g| GroupShape { count: g.count(), width: g.size().0 as usize, height: g.size().1 as usize }).collect()
    }

    /// Elements of one view of one sample (3 channels).
    pub fn sample_elements(&self) -> usize {
        3 * self.width * self.height
    }
}

/// Where each view of a batch of `n` samples lies: for view `v` (in group order), its group,
/// its byte offset in the images and the bytes of one sample of it.
pub fn view_offsets(groups: &[GroupShape], n: usize, dtype_size: usize) -> Vec<ViewPlace> {
    let mut out = Vec::new();
    let mut at = 0;
    for (g, s) in groups.iter().enumerate() {
        let sample = s.sample_elements() * dtype_size;
        for k in 0..s.count {
            out.push(ViewPlace {
                group: g,
                index_in_group: k,
                offset: at + k * n * sample,
                sample_bytes: sample,
                width: s.width,
                height: s.height,
            });
        }
        at += s.count * n * sample;
    }
    out
}

/// One view's place in a batch ([`view_offsets`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewPlace {
    /// Its group.
    pub group: usize,
    /// Its position in the group.
    pub index_in_group: usize,
    /// Byte offset of its sample 0 in the images.
    pub offset: usize,
    /// Bytes of one sample of it.
    pub sample_bytes: usize,
    /// Output width.
    pub width: usize,
    /// Output height.
    pub height: usize,
}

/// The seed view `view` draws with: the pipeline's seed for view 0 (so a single-view pipeline
/// draws what it always drew), an independent one for every other view.
pub fn view_seed(seed: u64, view: usize) -> u64 {
    if view == 0 {
        seed
    } else {
        SampleRng::new(seed, 0, view as u64, STREAM_VIEW).next_u64()
    }
}

/// Draw every view's parameters of global sample `sample` of `epoch` (see
/// [`super::params::draw`]), in view order, into `out` (cleared first).
#[allow(clippy::too_many_arguments)]
pub fn draw_views(
    specs: &[AugmentSpec],
    seed: u64,
    epoch: u64,
    sample: u64,
    stored_w: i32,
    stored_h: i32,
    orientation: u32,
    out: &mut Vec<AugParams>,
) {
    out.clear();
    out.extend(specs.iter().enumerate().map(|(v, s)| draw(s, view_seed(seed, v), epoch, sample, stored_w, stored_h, orientation)));
}

/// The parameters a decoder is given for a sample with these views: the first view's, with
/// the crop box grown to the smallest box (in oriented coordinates) that holds every view's
/// crop box. A decoder that decodes the region of this crop (`augment::region::crop_region`)
/// decodes each pixel every view reads; for one view it is that view's parameters.
pub fn covering(views: &[AugParams]) -> AugParams {
    let Some((first, rest)) = views.split_first() else { return AugParams::default() };
    let mut p = *first;
    let (mut x0, mut y0, mut x1, mut y1) = (p.crop_x, p.crop_y, p.crop_x + p.crop_w, p.crop_y + p.crop_h);
    for v in rest {
        x0 = x0.min(v.crop_x);
        y0 = y0.min(v.crop_y);
        x1 = x1.max(v.crop_x + v.crop_w);
        y1 = y1.max(v.crop_y + v.crop_h);
    }
    (p.crop_x, p.crop_y, p.crop_w, p.crop_h) = (x0, y0, x1 - x0, y1 - y0);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_zero_draws_what_a_single_view_pipeline_draws_and_other_views_draw_apart() {
        let spec = AugmentSpec::train(64);
        let specs = vec![spec.clone(), spec.clone(), spec.clone()];
        let mut out = Vec::new();
        draw_views(&specs, 9, 2, 17, 500, 375, 1, &mut out);
        assert_eq!(out[0], draw(&spec, 9, 2, 17, 500, 375, 1));
        assert_ne!(out[1], out[0]);
        assert_ne!(out[2], out[1]);
        // A view's draws do not depend on the views beside it.
        draw_views(&specs[..2], 9, 2, 17, 500, 375, 1, &mut out);
        let mut three = Vec::new();
        draw_views(&specs, 9, 2, 17, 500, 375, 1, &mut three);
        assert_eq!(out[..], three[..2]);
    }

    #[test]
    fn the_covering_crop_holds_every_views_crop_and_nothing_more() {
        let spec = AugmentSpec::train(32);
        let specs = vec![spec; 6];
        let mut views = Vec::new();
        for s in 0..200u64 {
            draw_views(&specs, 3, 0, s, 640, 480, 1 + (s % 8) as u32, &mut views);
            let c = covering(&views);
            for v in &views {
                assert!(c.crop_x <= v.crop_x && c.crop_y <= v.crop_y, "{c:?} {v:?}");
                assert!(c.crop_x + c.crop_w >= v.crop_x + v.crop_w && c.crop_y + c.crop_h >= v.crop_y + v.crop_h);
            }
            // Each edge of the box is some view's edge.
            assert!(views.iter().any(|v| v.crop_x == c.crop_x) && views.iter().any(|v| v.crop_y == c.crop_y));
            assert!(views.iter().any(|v| v.crop_x + v.crop_w == c.crop_x + c.crop_w));
            assert!(views.iter().any(|v| v.crop_y + v.crop_h == c.crop_y + c.crop_h));
        }
        assert_eq!(covering(&views[..1]), views[0]);
    }

    #[test]
    fn views_lie_view_major_in_groups_one_after_another() {
        let groups = [GroupShape { count: 2, width: 4, height: 3 }, GroupShape { count: 3, width: 2, height: 2 }];
        let p = view_offsets(&groups, 5, 2);
        let (a, b) = (3 * 4 * 3 * 2, 3 * 2 * 2 * 2);
        assert_eq!(p.iter().map(|v| v.offset).collect::<Vec<_>>(), vec![0, 5 * a, 10 * a, 10 * a + 5 * b, 10 * a + 10 * b]);
        assert_eq!(p.iter().map(|v| (v.group, v.index_in_group)).collect::<Vec<_>>(), vec![(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]);
        assert_eq!(p[3].sample_bytes, b);
    }

    #[test]
    fn a_group_names_what_is_wrong() {
        let e = ViewGroup { views: vec![] }.validate(1).unwrap_err().to_string();
        assert!(e.contains("views[1]: count must be at least 1"), "{e}");
        let e = ViewGroup { views: vec![AugmentSpec::train(224), AugmentSpec::train(96)] }.validate(0).unwrap_err().to_string();
        assert!(e.contains("share one size") && e.contains("96x96"), "{e}");
        let mut bad = AugmentSpec::train(96);
        bad.hflip_p = 2.0;
        let e = ViewGroup { views: vec![AugmentSpec::train(96), bad] }.validate(0).unwrap_err().to_string();
        assert!(e.contains("views[0] view 1: hflip probability"), "{e}");
    }
}
