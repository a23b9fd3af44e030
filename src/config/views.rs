//! The `views` option as users write it (a JSON list on the command line, a list of dicts in
//! Python, a list in a config file's `"recipe"`), and how it becomes the config's view groups.
//!
//! A group is `{"count": n, "size": s, "scale": [lo, hi], ...}` with any of the single-view
//! augment options under the same names; `"per_view"` (a list of `count` objects) overrides
//! options view by view (DINO's two global views differ in blur and solarize). A view's spec is
//! the pipeline's options, then its group's, then its own: one option set, built and checked by
//! the same code as the single view's ([`PipelineOptions::augment_spec`]), so every name and
//! every error is the same.

use super::options::{OptionNames, PipelineOptions, TrainInterpolation};
use super::{EraseMode, ViewGroup, MAX_VIEWS};
use crate::error::{Error, Result};
use serde::Deserialize;

/// A number or a list of numbers (timm's `color_jitter`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
enum Floats {
    One(f64),
    Many(Vec<f64>),
}

/// The augment options a group or a view may set (`None`: as the level above).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct ViewKeys {
    scale: Option<(f64, f64)>,
    ratio: Option<(f64, f64)>,
    interpolation: Option<String>,
    antialias: Option<bool>,
    hflip: Option<f64>,
    vflip: Option<f64>,
    rotate: Option<(f32, f32)>,
    color_jitter: Option<Floats>,
    color_jitter_prob: Option<f64>,
    grayscale_prob: Option<f64>,
    aa: Option<String>,
    reprob: Option<f64>,
    remode: Option<EraseMode>,
    recount: Option<u32>,
    blur_prob: Option<f64>,
    blur_sigma: Option<(f64, f64)>,
    blur_kernel: Option<u32>,
    solarize_prob: Option<f64>,
    solarize_threshold: Option<f64>,
}

/// One group of the `views` option: `count`, `size`, the group's augment options and
/// `per_view` (one object of options per view).
#[derive(Clone, Debug, PartialEq)]
pub struct ViewOptions {
    /// Views in the group.
    pub count: u32,
    /// Output size (square); default: the pipeline's `size`.
    pub size: Option<u32>,
    keys: ViewKeys,
    /// Per-view overrides, one object per view (or none).
    per_view: Option<Vec<ViewKeys>>,
}

impl<'de> Deserialize<'de> for ViewOptions {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        use serde_json::Value;
        let mut m = serde_json::Map::<String, Value>::deserialize(d)?;
        let field = |m: &mut serde_json::Map<String, Value>, k: &str| m.remove(k);
        let count = field(&mut m, "count").ok_or_else(|| D::Error::custom("a group needs `count` (its number of views)"))?;
        let count: u32 = serde_json::from_value(count).map_err(|e| D::Error::custom(format!("count: {e}")))?;
        let size =
            field(&mut m, "size").map(serde_json::from_value::<u32>).transpose().map_err(|e| D::Error::custom(format!("size: {e}")))?;
        let per_view = field(&mut m, "per_view")
            .map(serde_json::from_value::<Vec<ViewKeys>>)
            .transpose()
            .map_err(|e| D::Error::custom(format!("per_view: {e}")))?;
        let keys: ViewKeys = serde_json::from_value(Value::Object(m)).map_err(D::Error::custom)?;
        Ok(Self { count, size, keys, per_view })
    }
}

impl ViewOptions {
    /// Parse the `views` option from its JSON text (a list of group objects); errors name the
    /// option as `names` spells it and say what is wrong, unknown keys included.
    pub fn parse_list(text: &str, names: OptionNames) -> Result<Vec<ViewOptions>> {
        serde_json::from_str(text).map_err(|e| {
            Error::config(format!(
                "{}: {e} (a list of groups such as [{{\"count\": 2, \"size\": 224, \"scale\": [0.4, 1.0]}}])",
                names.of("views")
            ))
        })
    }

    /// A group of `count` views of `size` with no other key.
    pub fn plain(count: u32, size: u32) -> Self {
        Self { count, size: Some(size), keys: ViewKeys::default(), per_view: None }
    }
}

impl ViewKeys {
    /// `o` with these keys over it.
    fn apply(&self, o: &mut PipelineOptions, at: &str) -> Result<()> {
        macro_rules! over {
            ($($f:ident),*) => { $( if self.$f.is_some() { o.$f = self.$f.clone(); } )* };
        }
        over!(scale, ratio, hflip, vflip, rotate, color_jitter_prob, grayscale_prob, aa, reprob, remode, recount);
        over!(blur_prob, blur_sigma, blur_kernel, solarize_prob, solarize_threshold);
        if let Some(a) = self.antialias {
            o.no_antialias = !a;
        }
        if let Some(j) = &self.color_jitter {
            o.color_jitter = Some(match j {
                Floats::One(v) => vec![*v],
                Floats::Many(v) => v.clone(),
            });
        }
        if let Some(name) = &self.interpolation {
            o.train_interpolation = Some(TrainInterpolation::parse(name).ok_or_else(|| {
                Error::config(format!("{at}: interpolation must be \"bilinear\", \"bicubic\" or \"random\", got {name:?}"))
            })?);
            // The group's interpolation replaces a filter named above it.
            o.filter = None;
        }
        // A blur or solarize turned off here takes its ranges with it.
        if self.blur_prob == Some(0.0) {
            (o.blur_sigma, o.blur_kernel) = (None, None);
        }
        if self.solarize_prob == Some(0.0) {
            o.solarize_threshold = None;
        }
        if self.reprob == Some(0.0) {
            (o.remode, o.recount) = (None, None);
        }
        Ok(())
    }
}

impl PipelineOptions {
    /// The view groups of `groups` over these options; errors name the group and view.
    pub(super) fn view_groups(&self, groups: &[ViewOptions], mean: [f32; 3], names: OptionNames) -> Result<Vec<ViewGroup>> {
        let option = names.of("views");
        if groups.is_empty() {
            return Err(Error::config(format!("{option}: give at least one group")));
        }
        let total: u64 = groups.iter().map(|g| g.count as u64).sum();
        if total > MAX_VIEWS as u64 {
            return Err(Error::config(format!("{option}: at most {MAX_VIEWS} views of a sample, got {total}")));
        }
        let mut out = Vec::with_capacity(groups.len());
        for (g, group) in groups.iter().enumerate() {
            let at = format!("{option}[{g}]");
            if group.count == 0 {
                return Err(Error::config(format!("{at}: count must be at least 1, got 0")));
            }
            if group.size == Some(0) {
                return Err(Error::config(format!("{at}: size must be at least 1, got 0")));
            }
            if let Some(per) = &group.per_view {
                if per.len() != group.count as usize {
                    return Err(Error::config(format!(
                        "{at}: per_view holds {} objects for {} views (one per view)",
                        per.len(),
                        group.count
                    )));
                }
            }
            let mut base = self.clone();
            base.views = None;
            set_size(&mut base, group.size);
            group.keys.apply(&mut base, &at)?;
            let mut views = Vec::with_capacity(group.count as usize);
            for k in 0..group.count as usize {
                let mut o = base.clone();
                let at = format!("{at} view {k}");
                if let Some(per) = &group.per_view {
                    per[k].apply(&mut o, &at)?;
                }
                let spec = o.augment_spec(mean, names).and_then(|a| a.validate().map(|()| a)).map_err(|e| match e {
                    Error::Config(m) => Error::config(format!("{at}: {m}")),
                    e => e,
                })?;
                views.push(spec);
            }
            out.push(ViewGroup { views });
        }
        Ok(out)
    }
}

fn set_size(o: &mut PipelineOptions, size: Option<u32>) {
    if size.is_some() {
        o.size = size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AugmentSpec, CropMode, Filter};

    fn dino_like() -> Vec<ViewOptions> {
        ViewOptions::parse_list(
            r#"[{"count": 2, "size": 224, "scale": [0.4, 1.0], "interpolation": "bicubic",
                 "per_view": [{"blur_prob": 1.0}, {"blur_prob": 0.1, "solarize_prob": 0.2}]},
                {"count": 8, "size": 96, "scale": [0.05, 0.4], "blur_prob": 0.5}]"#,
            OptionNames::Python,
        )
        .unwrap()
    }

    #[test]
    fn groups_take_the_pipeline_options_then_their_own_then_each_views() {
        let o = PipelineOptions { color_jitter: Some(vec![0.4, 0.4, 0.2, 0.1]), views: Some(dino_like()), ..Default::default() };
        let c = o.to_config("d", OptionNames::Python).unwrap();
        assert_eq!(c.views.len(), 2);
        assert_eq!((c.views[0].count(), c.views[1].count(), c.view_count()), (2, 8, 10));
        let (g1, g2, local) = (&c.views[0].views[0], &c.views[0].views[1], &c.views[1].views[3]);
        assert_eq!((g1.size, local.size), ((224, 224), (96, 96)));
        assert_eq!(g1.crop, CropMode::RandomResized { scale: (0.4, 1.0), ratio: (0.75, 4.0 / 3.0) });
        assert_eq!(local.crop, CropMode::RandomResized { scale: (0.05, 0.4), ratio: (0.75, 4.0 / 3.0) });
        assert_eq!((g1.filter, local.filter), (Filter::Bicubic, Filter::Bilinear));
        assert_eq!(g1.blur.as_ref().unwrap().prob, 1.0);
        assert_eq!(g2.blur.as_ref().unwrap().prob, 0.1);
        assert!(g1.solarize.is_none() && g2.solarize.as_ref().unwrap().prob == 0.2);
        assert_eq!(local.blur.as_ref().unwrap().prob, 0.5);
        // The pipeline's options reach every view.
        assert!(c.view_specs().iter().all(|s| s.color_jitter.as_ref().is_some_and(|j| j.hue == Some((-0.1, 0.1)))));
        assert_eq!(c.augment, *g1);
        // Without views: the one view.
        let c = PipelineOptions::default().to_config("d", OptionNames::Cli).unwrap();
        assert_eq!((c.view_count(), c.view_specs()), (1, vec![AugmentSpec::train(224)]));
    }

    #[test]
    fn every_bad_group_is_a_named_error() {
        let bad = |text: &str| {
            let o = PipelineOptions { views: Some(ViewOptions::parse_list(text, OptionNames::Cli)?), ..Default::default() };
            o.to_config("d", OptionNames::Cli).map(|_| ())
        };
        let e = |text: &str| bad(text).unwrap_err().to_string();
        assert!(e(r#"[{"count": 0, "size": 96}]"#).contains("--views[0]: count must be at least 1, got 0"));
        assert!(e(r#"[{"count": 1, "size": 0}]"#).contains("--views[0]: size must be at least 1, got 0"));
        let m = e(r#"[{"count": 1, "size": 96, "scale": [0.0, 0.5]}]"#);
        assert!(m.contains("--views[0] view 0: crop scale must satisfy 0 < min <= max <= 1"), "{m}");
        let m = e(r#"[{"count": 1, "size": 96, "scale": [0.5, 1.5]}]"#);
        assert!(m.contains("crop scale must satisfy"), "{m}");
        let m = e(r#"[{"count": 1, "size": 96, "zoom": 2}]"#);
        assert!(m.contains("--views") && m.contains("unknown field `zoom`"), "{m}");
        let m = e(r#"[{"count": 2, "size": 96, "per_view": [{"blur_prob": 1.0, "blur_kernel": 4}, {}]}]"#);
        assert!(m.contains("--views[0] view 0: --blur-kernel must be odd"), "{m}");
        let m = e(r#"[{"count": 2, "size": 96, "per_view": [{}]}]"#);
        assert!(m.contains("per_view holds 1 objects for 2 views"), "{m}");
        let m = e(r#"[{"count": 1, "size": 96, "interpolation": "lanczos"}]"#);
        assert!(m.contains("interpolation must be"), "{m}");
        assert!(e("[]").contains("give at least one group"));
        assert!(e(r#"[{"count": 65, "size": 8}]"#).contains("at most 64 views"));
        // Mixup/CutMix with views is refused, by name.
        let o = PipelineOptions { mixup: Some(0.8), views: Some(dino_like()), ..Default::default() };
        let m = o.to_config("d", OptionNames::Python).unwrap_err().to_string();
        assert!(m.contains("views with mixup/cutmix: refused"), "{m}");
        // The eval preset has no RandomResizedCrop to take a scale.
        let o = PipelineOptions { preset: super::super::Preset::Eval, views: Some(dino_like()), ..Default::default() };
        let m = o.to_config("d", OptionNames::Python).unwrap_err().to_string();
        assert!(m.contains("views[0] view 0: scale and ratio apply to the train preset"), "{m}");
    }
}
