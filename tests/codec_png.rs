//! PNG through the codec and the CPU pipeline, against Pillow: the fixtures in `golden/png/`
//! and the pixels `Image.open(f).convert('RGB')` gives for each were written by
//! `golden/png/make.py`. The format is sniffed from the bytes, never the file name.

use jpeg_encoder::{ColorType, Encoder};
mod codec_common;

use std::path::Path;
use stoke::backend::cpu::decode::{decode_rgb, DecodeErrorKind, DecodedImage};
use stoke::config::{OnError, PipelineConfig};
use stoke::pipeline::Pipeline;

/// (name, PNG bytes, Pillow's RGB pixels), all 32×24.
const FIXTURES: [(&str, &[u8], &[u8]); 4] = [
    ("rgba8", include_bytes!("golden/png/rgba8.png"), include_bytes!("golden/png/rgba8.rgb")),
    ("la8", include_bytes!("golden/png/la8.png"), include_bytes!("golden/png/la8.rgb")),
    ("palette_trns", include_bytes!("golden/png/palette_trns.png"), include_bytes!("golden/png/palette_trns.rgb")),
    ("gray16", include_bytes!("golden/png/gray16.png"), include_bytes!("golden/png/gray16.rgb")),
];
const W: u32 = 32;
const H: u32 = 24;

#[test]
fn png_kinds_decode_to_pillows_rgb_exactly() {
    let mut out = DecodedImage::default();
    for (name, png, want) in FIXTURES {
        decode_rgb(png, 1 << 20, &mut out).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((out.width, out.height, out.region_w, out.region_h), (W, H, W, H), "{name}");
        assert_eq!(out.rgb, want, "{name}: pixels differ from Pillow's convert('RGB')");
    }
}

#[test]
fn a_png_header_over_the_size_guard_is_refused_before_decoding() {
    let mut png = FIXTURES[0].1.to_vec();
    png[16..20].copy_from_slice(&60000u32.to_be_bytes());
    png[20..24].copy_from_slice(&60000u32.to_be_bytes());
    let e = decode_rgb(&png, 64 << 20, &mut DecodedImage::default()).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::TooLarge);
    assert!(e.to_string().contains("60000x60000"), "{e}");
}

fn write_jpeg(path: &Path, color: ColorType, channels: usize) {
    let px: Vec<u8> = (0..W as usize * H as usize * channels).map(|i| (i * 7 % 251) as u8).collect();
    let mut out = Vec::new();
    Encoder::new(&mut out, 90).encode(&px, W as u16, H as u16, color).unwrap();
    std::fs::write(path, out).unwrap();
}

/// root/a: the RGBA PNG under a `.JPEG` name, an RGB JPEG, a CMYK JPEG; root/b: the other
/// PNGs under `.png` and `.jpg` names, and `bad.png` (a PNG cut in half) when `broken`.
fn dataset(root: &Path, broken: bool) {
    for c in ["a", "b"] {
        std::fs::create_dir_all(root.join(c)).unwrap();
    }
    std::fs::write(root.join("a/n01_png.JPEG"), FIXTURES[0].1).unwrap();
    write_jpeg(&root.join("a/rgb.jpg"), ColorType::Rgb, 3);
    write_jpeg(&root.join("a/cmyk.jpg"), ColorType::Cmyk, 4);
    std::fs::write(root.join("b/la8.png"), FIXTURES[1].1).unwrap();
    std::fs::write(root.join("b/palette.jpg"), FIXTURES[2].1).unwrap();
    std::fs::write(root.join("b/gray16.PNG"), FIXTURES[3].1).unwrap();
    if broken {
        let png = FIXTURES[0].1;
        std::fs::write(root.join("b/bad.png"), &png[..png.len() / 2]).unwrap();
    }
}

fn config(root: &Path) -> PipelineConfig {
    codec_common::whole_image_config(root, W, H, 3, OnError::Skip)
}

#[test]
fn pngs_under_any_name_are_delivered_with_pillows_pixels_and_cmyk_jpegs_too() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), false);
    let mut p = Pipeline::new(config(dir.path())).unwrap();
    let want: std::collections::HashMap<&str, &[u8]> = [
        ("a/n01_png.JPEG", FIXTURES[0].2),
        ("b/la8.png", FIXTURES[1].2),
        ("b/palette.jpg", FIXTURES[2].2),
        ("b/gray16.PNG", FIXTURES[3].2),
    ]
    .into();
    p.start_epoch(0, 0);
    let (mut seen, mut checked) = (0, 0);
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        assert!(b.substitutes.is_empty(), "{:?}", b.substitutes);
        let bytes = b.host_bytes().unwrap();
        let per = (W * H * 3 * 4) as usize;
        for (slot, &i) in b.indices.iter().enumerate() {
            seen += 1;
            let key = p.dataset().expect("per-sample index").sample(i).key.clone();
            let Some(rgb) = want.get(key.as_str()) else { continue };
            let out = &bytes[slot * per..(slot + 1) * per];
            for (j, (o, &e)) in out.chunks_exact(4).zip(rgb.iter()).enumerate() {
                let got = f32::from_le_bytes(o.try_into().unwrap());
                assert!((got - e as f32).abs() < 1e-3, "{key}: element {j}: {got} vs pillow {e}");
            }
            checked += 1;
        }
        p.recycle(b);
    }
    assert_eq!((seen, checked), (6, 4));
    assert_eq!(p.stats().substitutes, 0);
}

#[test]
fn a_truncated_png_is_substituted_under_skip_and_named_under_fail() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), true);
    let mut c = config(dir.path());
    let mut p = Pipeline::new(c.clone()).unwrap();
    p.start_epoch(0, 0);
    let mut subs = Vec::new();
    while let Some(b) = p.next_batch() {
        subs.extend(b.unwrap().substitutes.clone());
    }
    assert_eq!(subs.len(), 1, "{subs:?}");
    assert!(subs[0].location.ends_with("bad.png") && subs[0].error.kind() != "read", "{:?}", subs[0]);
    c.on_error = OnError::Fail;
    let mut p = Pipeline::new(c).unwrap();
    p.start_epoch(0, 0);
    let err = std::iter::from_fn(|| p.next_batch()).find_map(|b| b.err()).expect("an error under fail").to_string();
    assert!(err.contains("bad.png"), "{err}");
}
