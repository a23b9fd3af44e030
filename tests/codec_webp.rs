//! WebP through the codec and the CPU pipeline, against Pillow (which decodes with libwebp):
//! the fixtures in `golden/webp/` and the pixels `Image.open(f).convert('RGB')` gives for each
//! were written by `golden/webp/make.py`. Lossless files must match exactly; lossy ones within
//! the rounding two VP8 decoders may differ by (`LOSSY_MAX_DIFF`). The format is sniffed from
//! the bytes, never the file name.

mod codec_common;

use std::path::Path;
use stoke::backend::cpu::decode::{decode_rgb, DecodeErrorKind, DecodedImage};
use stoke::codec::{parse_info, ImageFormat};
use stoke::config::{OnError, PipelineConfig};
use stoke::pipeline::Pipeline;

/// (name, WebP bytes, Pillow's RGB pixels, lossless), all 40×30.
const FIXTURES: [(&str, &[u8], &[u8], bool); 4] = [
    ("lossless_rgb", include_bytes!("golden/webp/lossless_rgb.webp"), include_bytes!("golden/webp/lossless_rgb.rgb"), true),
    ("lossless_rgba", include_bytes!("golden/webp/lossless_rgba.webp"), include_bytes!("golden/webp/lossless_rgba.rgb"), true),
    ("lossy_rgb", include_bytes!("golden/webp/lossy_rgb.webp"), include_bytes!("golden/webp/lossy_rgb.rgb"), false),
    ("lossy_rgba", include_bytes!("golden/webp/lossy_rgba.webp"), include_bytes!("golden/webp/lossy_rgba.rgb"), false),
];
const W: u32 = 40;
const H: u32 = 30;

/// Largest per-channel difference allowed against libwebp on the lossy fixtures: VP8's
/// prediction and transforms are exact integer arithmetic, but the chroma upsampling and the
/// YUV→RGB rounding of two decoders may differ by a level or two.
const LOSSY_MAX_DIFF: u8 = 3;

fn max_diff(a: &[u8], b: &[u8]) -> u8 {
    a.iter().zip(b).map(|(x, y)| x.abs_diff(*y)).max().unwrap_or(0)
}

#[test]
fn webp_kinds_decode_to_pillows_rgb() {
    let mut out = DecodedImage::default();
    for (name, webp, want, lossless) in FIXTURES {
        let info = parse_info(webp).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((info.format, info.width, info.height), (ImageFormat::WebP, W, H), "{name}");
        assert_eq!(info.components, if name.ends_with("rgba") { 4 } else { 3 }, "{name}");
        decode_rgb(webp, 1 << 20, &mut out).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((out.width, out.height, out.region_w, out.region_h), (W, H, W, H), "{name}");
        assert_eq!(out.rgb.len(), want.len(), "{name}");
        let d = max_diff(&out.rgb, want);
        if lossless {
            assert_eq!(d, 0, "{name}: lossless pixels differ from Pillow's convert('RGB')");
        } else {
            assert!(d <= LOSSY_MAX_DIFF, "{name}: max difference {d} from libwebp (allowed {LOSSY_MAX_DIFF})");
        }
        eprintln!("{name}: max |stoke - pillow| = {d}");
    }
}

#[test]
fn a_webp_header_over_the_size_guard_is_refused_and_a_cut_file_is_named_truncated() {
    let mut out = DecodedImage::default();
    let e = decode_rgb(FIXTURES[0].1, (W * H - 1) as u64, &mut out).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::TooLarge);
    assert!(e.to_string().contains("40x30"), "{e}");
    let webp = FIXTURES[2].1;
    let e = decode_rgb(&webp[..webp.len() / 2], 1 << 20, &mut out).unwrap_err();
    assert!(matches!(e.kind, DecodeErrorKind::Truncated | DecodeErrorKind::Corrupt), "{e:?}");
    assert!(e.to_string().starts_with("webp: "), "{e}");
}

fn config(root: &Path) -> PipelineConfig {
    codec_common::whole_image_config(root, W, H, 2, OnError::Fail)
}

#[test]
fn webps_under_any_name_are_indexed_and_delivered_with_pillows_pixels() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("a")).unwrap();
    std::fs::create_dir_all(root.join("b")).unwrap();
    std::fs::write(root.join("a/n01_webp.JPEG"), FIXTURES[0].1).unwrap();
    std::fs::write(root.join("a/alpha.webp"), FIXTURES[1].1).unwrap();
    std::fs::write(root.join("b/lossy.WEBP"), FIXTURES[2].1).unwrap();
    let want: std::collections::HashMap<&str, (&[u8], bool)> =
        [("a/n01_webp.JPEG", (FIXTURES[0].2, true)), ("a/alpha.webp", (FIXTURES[1].2, true)), ("b/lossy.WEBP", (FIXTURES[2].2, false))]
            .into();
    let mut p = Pipeline::new(config(root)).unwrap();
    p.start_epoch(0, 0);
    let mut checked = 0;
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        let bytes = b.host_bytes().unwrap();
        for (slot, &i) in b.indices.iter().enumerate() {
            let key = p.dataset().expect("per-sample index").sample(i).key.clone();
            let (rgb, lossless) = want[key.as_str()];
            let got = codec_common::slot_bytes(bytes, slot, W, H);
            let d = max_diff(&got, rgb);
            assert!(d <= if lossless { 0 } else { LOSSY_MAX_DIFF }, "{key}: max difference {d} from Pillow");
            checked += 1;
        }
        p.recycle(b);
    }
    assert_eq!(checked, 3);
}
