//! Inputs the fuzz targets once crashed on (fuzz/regressions/TARGET/NAME), replayed through the
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
