//! Inputs the fuzz targets once crashed on (fuzz/regressions/TARGET/NAME; a PNG with its chunks' CRCs
//! made right, as a fuzz build ignores them and a real one does not), replayed through the
//! same entries as the targets (`stoke::fuzzing`) in every test run: each must now be an error
//! or a result, never a panic.

use std::path::Path;

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions").join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn parquet_crash_inputs_are_named_errors() {
    let all = inputs("parquet");
    assert!(!all.is_empty());
    for (name, bytes) in all {
        let r = std::panic::catch_unwind(|| stoke::fuzzing::parquet_file(&bytes));
        let e = r.unwrap_or_else(|_| panic!("{name}: the Parquet reader panicked")).expect_err(&name).to_string();
        assert!(e.contains("fuzz.parquet"), "{name}: the error names the file: {e}");
        if name.starts_with("page-declaring") {
            // Refused from its header, before the parquet crate allocates what it declares.
            assert!(e.contains("more than 64 times its bytes"), "{name}: {e}");
        }
    }
}

#[test]
fn png_crash_inputs_are_named_errors() {
    let all = inputs("png");
    assert!(!all.is_empty());
    for (name, bytes) in all {
        let mut out = stoke::codec::DecodedImage::default();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stoke::codec::png::decode_rgb(&bytes, 1 << 22, &mut out)));
        let e = r.unwrap_or_else(|_| panic!("{name}: the PNG decoder panicked")).expect_err(&name);
        assert_eq!(e.kind, stoke::codec::DecodeErrorKind::Corrupt, "{name}: {e}");
        assert!(e.to_string().contains("PLTE"), "{name}: the error says which chunk: {e}");
    }
}

/// The rewrites' fuzz target's finds: a damaged progressive gray JPEG declaring 2×2 that
/// libjpeg-turbo decodes with its block smoothing, whose block rows follow the declared
/// factors (declared 1×1 it decoded to other pixels in its last rows: progressive files are no
/// longer declared 1×1); a damaged arithmetic-coded sequential file rewritten as baseline
/// without a warning that decoded to other pixels (arithmetic-coded files are no longer
/// rewritten); a damaged progressive file that decodes without a warning and holds
/// coefficients a baseline scan cannot code, which libjpeg-turbo's encoder wrote anyway (every
/// rewrite is now decoded and compared); a gray file whose DQT comes after its scan, which
/// decoded with whatever table the thread's previous image left (such files now decode on a
/// fresh decoder: an error, every time). Each must keep its pixels, or its error, through
/// whatever rewrite is still made of it, decoded on a thread that decoded another image first.
#[test]
fn jpeg_rewrite_inputs_keep_their_pixels() {
    use stoke::backend::cpu::decode::{decode_rgb, to_baseline};
    let all = inputs("jpeg_rewrite");
    assert!(all.len() >= 4);
    let other = stoke::gen::image(1, 4, 0).unwrap().bytes;
    let decode = |b: &[u8]| {
        let mut out = stoke::codec::DecodedImage::default();
        decode_rgb(&other, 1 << 22, &mut out).unwrap();
        decode_rgb(b, 1 << 22, &mut out).map(|()| out.rgb).map_err(|e| e.kind)
    };
    for (name, bytes) in all {
        let stored = decode(&bytes);
        let mut b = bytes.clone();
        if stoke::codec::jpeg::declare_gray_1x1(&mut b) {
            assert_eq!(decode(&b), stored, "{name}: declared 1x1");
        }
        if let Some(t) = to_baseline(&bytes, 1 << 22) {
            assert_eq!(decode(&t), stored, "{name}: rewritten as baseline");
        }
    }
}
