//! Several views per sample on the CPU backend, end to end: each sample decoded once (the
//! region covering all its views), each view the shared math on its own params, laid out group
//! by group and view-major; view 0 is the single-view pipeline's batch; the same bytes whatever
//! the thread count; a substituted slot carries every view of its source.

mod photos_common;

use std::path::Path;
use stoke::augment::host::{self, Scratch, SrcImage};
use stoke::backend::cpu::decode::{decode_rgb, DecodedImage};
use stoke::batch::Batch;
use stoke::config::{BackendKind, DType, Layout, OnError, OptionNames, PipelineConfig, PipelineOptions, ViewOptions};
use stoke::pipeline::Pipeline;

/// root/{a,b}/NN.jpg: 9 photos of assorted sizes, one truncated if `broken`.
fn dataset(root: &Path, broken: bool) {
    photos_common::photo_folder(root, 4);
    if broken {
        let p = root.join("b").join("01.jpg");
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() / 3]).unwrap();
    }
}

const VIEWS: &str = r#"[
  {"count": 2, "size": 32, "scale": [0.4, 1.0], "interpolation": "bicubic",
   "per_view": [{"blur_prob": 1.0}, {"blur_prob": 0.1, "solarize_prob": 0.2}]},
  {"count": 3, "size": 16, "scale": [0.05, 0.4], "blur_prob": 0.5, "color_jitter": [0.4, 0.4, 0.2, 0.1], "color_jitter_prob": 0.8}
]"#;

fn config(root: &Path, threads: usize, dtype: DType, layout: Layout) -> PipelineConfig {
    let o = PipelineOptions {
        views: Some(ViewOptions::parse_list(VIEWS, OptionNames::Cli).unwrap()),
        batch_size: Some(4),
        seed: Some(5),
        backend: Some(BackendKind::Cpu),
        threads: Some(threads),
        on_error: Some(OnError::Skip),
        dtype: Some(dtype),
        layout: Some(layout),
        grayscale_prob: Some(0.2),
        ..Default::default()
    };
    o.to_config(root, OptionNames::Cli).unwrap()
}

fn epoch(c: &PipelineConfig) -> Vec<Batch> {
    let mut p = Pipeline::new(c.clone()).unwrap();
    p.start_epoch(0, 0);
    let mut out = Vec::new();
    while let Some(b) = p.next_batch() {
        out.push(b.unwrap());
    }
    out
}

#[test]
fn each_view_is_the_shared_math_on_its_own_params_in_its_place() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), false);
    for (dtype, layout) in [(DType::F32, Layout::Nchw), (DType::F16, Layout::Nhwc)] {
        let c = config(dir.path(), 2, dtype, layout);
        assert_eq!(c.view_count(), 5);
        let p = Pipeline::new(c.clone()).unwrap();
        let ds = p.dataset().unwrap().clone();
        drop(p);
        let mut checked = 0;
        for b in epoch(&c) {
            assert_eq!(b.views(), 5);
            assert_eq!(b.groups.iter().map(|g| (g.count, g.width)).collect::<Vec<_>>(), vec![(2, 32), (3, 16)]);
            let n = b.len();
            assert_eq!(b.host_bytes().unwrap().len(), n * (2 * 3 * 32 * 32 + 3 * 3 * 16 * 16) * dtype.size());
            let places = b.view_places();
            for i in 0..n {
                // Reference: the whole image decoded, each view's params applied alone.
                let mut bytes = Vec::new();
                ds.read_bytes(b.indices[i], &mut bytes).unwrap();
                let mut img = DecodedImage::default();
                decode_rgb(&bytes, 1 << 30, &mut img).unwrap();
                for (v, place) in places.iter().enumerate() {
                    let params = &b.params[i * 5 + v];
                    assert_eq!((params.out_w as usize, params.out_h as usize), (place.width, place.height));
                    let mut want = vec![0u8; place.sample_bytes];
                    let src = SrcImage::full(&img.rgb, img.width as i32, img.height as i32);
                    host::augment(src, params, &c.output, &mut want, 0, &mut Scratch::default()).unwrap();
                    let at = place.offset + i * place.sample_bytes;
                    assert!(b.host_bytes().unwrap()[at..at + place.sample_bytes] == want[..], "slot {i} view {v} ({dtype:?} {layout:?})");
                    checked += 1;
                }
                // The views of one sample are drawn apart (their crops differ).
                let crops: Vec<_> = (0..5)
                    .map(|v| {
                        let p = &b.params[i * 5 + v];
                        (p.crop_x, p.crop_y, p.crop_w, p.crop_h)
                    })
                    .collect();
                assert!(crops.windows(2).any(|w| w[0] != w[1]), "{crops:?}");
            }
        }
        assert_eq!(checked, 9 * 5);
    }
}

#[test]
fn view_zero_is_the_single_view_batch_and_threads_do_not_change_a_bit() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), false);
    let c = config(dir.path(), 2, DType::F32, Layout::Nchw);
    let views = epoch(&c);
    let mut one = c.clone();
    one.views.clear();
    let single = epoch(&one);
    assert_eq!(views.len(), single.len());
    for (v, s) in views.iter().zip(&single) {
        assert_eq!((s.views(), s.groups.len()), (1, 1));
        let first = v.view_places()[0];
        let n = v.len();
        assert!(v.host_bytes().unwrap()[..n * first.sample_bytes] == *s.host_bytes().unwrap(), "view 0 = the single-view batch");
        assert_eq!(v.params.iter().step_by(5).copied().collect::<Vec<_>>(), s.params);
        assert_eq!(v.labels, s.labels);
    }
    let one_thread = epoch(&config(dir.path(), 1, DType::F32, Layout::Nchw));
    for (a, b) in views.iter().zip(&one_thread) {
        assert!(a.host_bytes() == b.host_bytes() && a.params == b.params, "same bytes whatever the thread count");
    }
}

#[test]
fn a_substituted_slot_carries_every_view_of_its_source() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), true);
    let c = config(dir.path(), 2, DType::F32, Layout::Nchw);
    let mut subs = 0;
    for b in epoch(&c) {
        for s in &b.substitutes {
            subs += 1;
            let src = (0..b.len()).find(|&j| j != s.slot && b.indices[j] == b.indices[s.slot]).expect("the source slot");
            for place in b.view_places() {
                let at = |i: usize| place.offset + i * place.sample_bytes;
                let bytes = b.host_bytes().unwrap();
                assert!(bytes[at(s.slot)..at(s.slot) + place.sample_bytes] == bytes[at(src)..at(src) + place.sample_bytes]);
            }
            assert_eq!(b.params[s.slot * 5..s.slot * 5 + 5], b.params[src * 5..src * 5 + 5]);
        }
    }
    assert_eq!(subs, 1);
}
