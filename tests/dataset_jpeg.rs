//! The JPEG header parser against hand-built headers (every field chosen by the test), random
//! and mutated bytes (never a panic, never a read past the end), and, opt-in, the corpus
//! manifest (`STOKE_CORPUS=/work/shared/corpus/dev`).

mod dataset_common;

use dataset_common::Jpeg;
use proptest::prelude::*;
use stoke::codec::jpeg::{parse, Coding, HeaderError, Subsampling};

#[test]
fn every_sof_type() {
    let table = [
        (0xC0, Coding::Baseline),
        (0xC1, Coding::Extended),
        (0xC2, Coding::Progressive),
        (0xC3, Coding::Lossless),
        (0xC9, Coding::ArithmeticSequential),
        (0xCA, Coding::ArithmeticProgressive),
        (0xCB, Coding::ArithmeticLossless),
    ];
    for (sof, coding) in table {
        let mut j = Jpeg::new(333, 500);
        j.sof = sof;
        j.precision = if sof == 0xC1 { 12 } else { 8 };
        let i = parse(&j.bytes()).unwrap();
        assert_eq!((i.coding, i.sof, i.width, i.height, i.components), (coding, sof, 333, 500, 3), "sof {sof:#x}");
        assert_eq!(i.precision, j.precision);
        assert_eq!(i.coding.is_arithmetic(), sof >= 0xC9);
        assert_eq!(i.coding.is_progressive(), sof == 0xC2 || sof == 0xCA);
    }
}

#[test]
fn sampling_factors_name_the_subsampling() {
    type Comps = &'static [(u8, u8, u8)];
    let table: [(Comps, Subsampling); 9] = [
        (&[(1, 1, 1), (2, 1, 1), (3, 1, 1)], Subsampling::S444),
        (&[(1, 2, 1), (2, 1, 1), (3, 1, 1)], Subsampling::S422),
        (&[(1, 2, 2), (2, 1, 1), (3, 1, 1)], Subsampling::S420),
        (&[(1, 1, 2), (2, 1, 1), (3, 1, 1)], Subsampling::S440),
        (&[(1, 4, 1), (2, 1, 1), (3, 1, 1)], Subsampling::S411),
        (&[(1, 4, 2), (2, 1, 1), (3, 1, 1)], Subsampling::S410),
        (&[(1, 2, 2), (2, 1, 2), (3, 1, 2)], Subsampling::Other),
        (&[(1, 2, 2)], Subsampling::Gray),
        (&[(1, 1, 1), (2, 1, 1), (3, 1, 1), (4, 1, 1)], Subsampling::Other),
    ];
    for (comps, want) in table {
        let mut j = Jpeg::new(64, 48);
        j.comps = comps.to_vec();
        let i = parse(&j.bytes()).unwrap();
        assert_eq!(i.subsampling, want, "{comps:?}");
        assert_eq!(i.components as usize, comps.len());
        for (c, &(_, h, v)) in comps.iter().enumerate() {
            assert_eq!(i.sampling[c], (h, v));
        }
    }
}

#[test]
fn exif_orientation_both_byte_orders() {
    for le in [true, false] {
        for o in 1..=8u16 {
            let mut j = Jpeg::new(40, 30);
            j.exif = Some((o, le));
            assert_eq!(parse(&j.bytes()).unwrap().orientation, o as u8, "orientation {o}, little endian {le}");
        }
        // Out-of-range values and a missing tag read as 1.
        for o in [0u16, 9, 0xFFFF] {
            let mut j = Jpeg::new(40, 30);
            j.exif = Some((o, le));
            assert_eq!(parse(&j.bytes()).unwrap().orientation, 1);
        }
    }
    assert_eq!(parse(&Jpeg::new(40, 30).bytes()).unwrap().orientation, 1);
}

#[test]
fn adobe_jfif_icc_dri() {
    let mut j = Jpeg::new(40, 30);
    j.comps = vec![(1, 1, 1), (2, 1, 1), (3, 1, 1), (4, 1, 1)];
    j.adobe = Some(2);
    j.jfif = false;
    j.icc = true;
    j.dri = Some(7);
    let i = parse(&j.bytes()).unwrap();
    assert_eq!((i.adobe_transform, i.jfif, i.icc, i.restart_interval), (Some(2), false, true, 7));
    assert!(i.is_cmyk() && !i.is_gray());
    let i = parse(&Jpeg::new(40, 30).gray().bytes()).unwrap();
    assert_eq!((i.adobe_transform, i.jfif, i.icc, i.restart_interval, i.components), (None, true, false, 0, 1));
    assert!(i.is_gray());
}

#[test]
fn dnl_height() {
    let mut j = Jpeg::new(257, 191);
    j.dnl = Some(191);
    j.scan = 5000;
    let b = j.bytes();
    let i = parse(&b).unwrap();
    assert_eq!((i.width, i.height, i.dnl), (257, 191, true));
    // A prefix that stops before the DNL marker asks for more bytes...
    assert!(matches!(parse(&b[..b.len() - 100]), Err(HeaderError::Truncated { .. })));
    // ...and a stream that ends without one says so.
    let mut no_dnl = j.clone();
    no_dnl.dnl = None;
    let mut b = no_dnl.bytes();
    // Zero the SOF height by hand: find the SOF0 marker.
    let sof = b.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    b[sof + 5] = 0;
    b[sof + 6] = 0;
    let e = parse(&b).unwrap_err().to_string();
    assert!(e.contains("height is 0 and no DNL"), "{e}");
}

#[test]
fn hierarchical_reports_the_full_size() {
    let mut j = Jpeg::new(129, 96);
    j.sof = 0xC1;
    j.dhp = Some((257, 191));
    let i = parse(&j.bytes()).unwrap();
    assert_eq!((i.coding, i.width, i.height, i.sof), (Coding::Hierarchical, 257, 191, 0xC1));
}

#[test]
fn not_a_jpeg_says_what_it_is() {
    let cases: [(&[u8], &str); 5] = [
        (b"", "the file is empty"),
        (b"\x89PNG\r\n\x1a\n0000", "a PNG file"),
        (b"GIF89a......", "a GIF file"),
        (b"RIFF\0\0\0\0WEBPVP8 ", "a WebP file"),
        (b"hello world", "starts with 68 65 6c 6c, not the SOI marker ff d8"),
    ];
    for (b, want) in cases {
        let e = parse(b).unwrap_err();
        assert!(matches!(e, HeaderError::NotJpeg(_)), "{e:?}");
        let msg = e.to_string();
        assert!(msg.starts_with("not a JPEG") && msg.contains(want), "{msg}");
    }
}

#[test]
fn malformed_headers_name_the_problem() {
    // SOS before any SOF.
    let e = parse(&[0xFF, 0xD8, 0xFF, 0xDA, 0, 2, 0xFF, 0xD9]).unwrap_err().to_string();
    assert!(e.contains("before any frame header") && e.contains("byte 2"), "{e}");
    // EOI straight after SOI (an "SOI only + EOI" file).
    let e = parse(&[0xFF, 0xD8, 0xFF, 0xD9]).unwrap_err().to_string();
    assert!(e.contains("end of image"), "{e}");
    // Segment length below 2 (APPn and COM are skipped over as libjpeg does; others fail).
    let e = parse(&[0xFF, 0xD8, 0xFF, 0xDB, 0, 1]).unwrap_err().to_string();
    assert!(e.contains("length 1"), "{e}");
    // Zero width, zero components, bad sampling factor.
    let mut b = Jpeg::new(40, 30).bytes();
    let sof = b.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    b[sof + 7] = 0;
    b[sof + 8] = 0;
    assert!(parse(&b).unwrap_err().to_string().contains("width is 0"));
    let mut j = Jpeg::new(40, 30);
    j.comps = vec![(1, 5, 1)];
    assert!(parse(&j.bytes()).unwrap_err().to_string().contains("sampling factors 5x1"));
    // SOI only: more bytes would be needed.
    assert!(matches!(parse(&[0xFF, 0xD8]), Err(HeaderError::Truncated { .. })));
}

#[test]
fn every_prefix_is_an_error_not_a_panic() {
    let mut j = Jpeg::new(640, 480);
    j.exif = Some((6, false));
    j.adobe = Some(1);
    let b = j.bytes();
    let sos = b.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap();
    let sos_end = sos + 2 + u16::from_be_bytes([b[sos + 2], b[sos + 3]]) as usize;
    for n in 0..b.len() {
        let r = parse(&b[..n]);
        if n >= sos_end {
            assert!(r.is_ok(), "prefix {n} holds the whole header");
        } else {
            assert!(r.is_err(), "prefix {n} of {}", b.len());
        }
    }
}

#[test]
fn junk_between_markers_is_skipped() {
    let b = Jpeg::new(77, 55).bytes();
    let sof = b.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    let mut j = b[..sof].to_vec();
    j.extend_from_slice(&[0x12, 0x34, 0xFF, 0xFF]);
    j.extend_from_slice(&b[sof..]);
    let i = parse(&j).unwrap();
    assert_eq!((i.width, i.height), (77, 55));
}

fn arb_jpeg() -> impl Strategy<Value = Jpeg> {
    (
        1u16..4000,
        1u16..4000,
        prop::sample::select(vec![0xC0u8, 0xC1, 0xC2, 0xC3, 0xC9, 0xCA, 0xCB]),
        prop::option::of((1u16..=8, any::<bool>())),
        prop::option::of(0u8..3),
        prop::sample::select(vec![1usize, 3, 4]),
        0usize..300,
    )
        .prop_map(|(w, h, sof, exif, adobe, nc, scan)| {
            let mut j = Jpeg::new(w, h);
            j.sof = sof;
            j.exif = exif;
            j.adobe = adobe;
            j.comps = (1..=nc as u8).map(|c| (c, if c == 1 { 2 } else { 1 }, if c == 1 { 2 } else { 1 })).collect();
            j.scan = scan;
            j
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = parse(&b);
        let mut with_soi = vec![0xFF, 0xD8];
        with_soi.extend_from_slice(&b);
        let _ = parse(&with_soi);
    }

    #[test]
    fn generated_headers_round_trip(j in arb_jpeg()) {
        let i = parse(&j.bytes()).unwrap();
        prop_assert_eq!((i.width, i.height), (j.width as u32, j.height as u32));
        prop_assert_eq!(i.components as usize, j.comps.len());
        prop_assert_eq!(i.sof, j.sof);
        prop_assert_eq!(i.orientation as u16, j.exif.map(|e| e.0).unwrap_or(1));
        prop_assert_eq!(i.adobe_transform, j.adobe);
    }

    #[test]
    fn mutated_headers_never_panic(
        j in arb_jpeg(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..8),
    ) {
        let mut b = j.bytes();
        for (at, v, op) in edits {
            if b.is_empty() { break; }
            let k = at.index(b.len());
            match op {
                0 => b[k] = v,
                1 => b[k] ^= 1 << (v % 8),
                2 => b.truncate(k),
                _ => { b.insert(k, v); }
            }
        }
        // Must return (ok or error) without panicking; slicing bugs would panic here.
        let _ = parse(&b);
    }
}

/// Opt-in: every corpus file against its manifest row.
#[test]
fn corpus_manifest() {
    let Ok(dir) = std::env::var("STOKE_CORPUS") else {
        eprintln!("skipped: set STOKE_CORPUS=/path/to/corpus/dev");
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let manifest = std::fs::read_to_string(dir.join("manifest.tsv")).expect("manifest.tsv");
    let mut lines = manifest.lines();
    let head: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no column {name}"));
    let (c_path, c_sof, c_prec, c_w, c_h, c_nc, c_samp, c_adobe, c_exif) = (
        col("path"),
        col("sof"),
        col("precision"),
        col("width"),
        col("height"),
        col("ncomp"),
        col("sampling"),
        col("adobe"),
        col("exif_orient"),
    );
    let (mut checked, mut failures) = (0, Vec::new());
    for line in lines {
        let f: Vec<&str> = line.split('\t').collect();
        let bytes = std::fs::read(dir.join(f[c_path])).unwrap();
        let r = parse(&bytes);
        checked += 1;
        let mut check = |ok: bool, what: String| {
            if !ok {
                failures.push(format!("{}: {what}", f[c_path]));
            }
        };
        if f[c_sof] == "none" {
            check(r.is_err(), format!("manifest says not a JPEG, parsed {r:?}"));
            continue;
        }
        let Ok(i) = r else {
            check(false, format!("manifest says {}, got {}", f[c_sof], r.unwrap_err()));
            continue;
        };
        let hierarchical = i.coding == Coding::Hierarchical;
        let want_sof = match i.coding {
            Coding::Baseline => "baseline",
            Coding::Extended | Coding::Hierarchical => "extended",
            Coding::Progressive => "progressive",
            Coding::Lossless => "lossless",
            Coding::ArithmeticSequential => "arith-extended",
            Coding::ArithmeticProgressive => "arith-progressive",
            Coding::ArithmeticLossless => "arith-lossless",
        };
        check(want_sof == f[c_sof], format!("sof {} vs manifest {}", want_sof, f[c_sof]));
        check(i.precision.to_string() == f[c_prec], format!("precision {} vs {}", i.precision, f[c_prec]));
        check(i.components.to_string() == f[c_nc], format!("components {} vs {}", i.components, f[c_nc]));
        // Hierarchical: the manifest gives the first (reduced) frame; we give DHP's full size.
        if !hierarchical {
            check(i.width.to_string() == f[c_w], format!("width {} vs {}", i.width, f[c_w]));
            if f[c_h] == "0" {
                check(i.dnl && i.height > 0, format!("manifest height 0 (DNL): got height {} dnl {}", i.height, i.dnl));
            } else {
                check(i.height.to_string() == f[c_h], format!("height {} vs {}", i.height, f[c_h]));
            }
        }
        let samp = f[c_samp];
        let ok = match i.subsampling {
            Subsampling::Gray => samp.starts_with("gray"),
            Subsampling::Other => samp.starts_with("custom"),
            s => s.name() == samp,
        };
        check(ok, format!("subsampling {:?} vs {samp}", i.subsampling));
        let adobe = i.adobe_transform.map(|t| t.to_string()).unwrap_or_default();
        check(adobe == f[c_adobe], format!("adobe {adobe:?} vs {:?}", f[c_adobe]));
        let want_o = match f[c_exif] {
            "" | "bad" => 1,
            v => v.parse().unwrap(),
        };
        check(i.orientation == want_o, format!("orientation {} vs {:?}", i.orientation, f[c_exif]));
    }
    assert!(failures.is_empty(), "{} of {checked} files disagree:\n{}", failures.len(), failures.join("\n"));
    eprintln!("checked {checked} corpus files");
}
