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
