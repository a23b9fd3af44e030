//! Whole-file questions about a JPEG's marker segments, past the header `parse` reads: a walk
//! over every segment (`segments`), and what the readers and the CPU decoder ask of it —
//! whether a file defines the tables its scan uses, whether a progressive file's scans refine
//! its first coefficients, and a gray file's sampling declared 1×1.

use super::{parse, Coding};

/// Declare a one-component JPEG's sampling 1×1 where it declares another (`2×2`, as
/// `cjpeg -grayscale` and many cameras' and editors' gray files do: most of the gray photos of
/// the corpus's ImageNet-like set), in place; `true` when `b` was changed. For one component
/// the declaration means nothing: a single-component scan is non-interleaved, its blocks in
/// raster order over the image's own size whatever the factors say (ITU T.81 A.2.2), and no
/// other component is upsampled against it, so every decoder reads the same picture from
/// either header (libjpeg-turbo the same bytes, tests/transcode.rs) — except a decoder that
/// takes the factors at their word, as the H200's hardware engine did (decoding such a file
/// 50 levels off). Only the frame header's one byte changes. Progressive, hierarchical and
/// lossless files are left alone.
pub fn declare_gray_1x1(b: &mut [u8]) -> bool {
    let Ok(info) = parse(b) else { return false };
    // Sequential files only: libjpeg-turbo smooths a progressive file whose first AC
    // coefficients stay unrefined, and how it groups block rows for that follows the factors
    // (found by fuzz/fuzz_targets/jpeg_rewrite.rs).
    if info.components != 1
        || info.sampling[0] == (1, 1)
        || !matches!(info.coding, Coding::Baseline | Coding::Extended | Coding::ArithmeticSequential)
    {
        return false;
    }
    // The first SOF, as `parse` found it: FF Cn, length, then precision, height, width,
    // Nf = 1, C1 and its H1V1 byte (the payload's byte 7, the file's `at + 11`).
    let Some(at) = segments(b)
        .find(|s| Coding::from_sof(s.1).is_some())
        .and_then(|(at, _, seg)| matches!(seg.get(5..8), Some(&[1, _, hv]) if (hv >> 4, hv & 15) == info.sampling[0]).then_some(at))
    else {
        return false;
    };
    b[at + 11] = 0x11;
    true
}

/// The marker segments of a JPEG as libjpeg walks them: from the SOI on, resyncing on the next
/// 0xFF past junk and scan data, fill bytes skipped, standalone markers (SOI, TEM, RSTn) and
/// stuffed zeros passed over. Each is `(offset of its 0xFF, marker, payload after the
/// length)`; the walk ends at an EOI, at the end of the bytes, or at a segment longer than
/// they are. Allocates nothing.
fn segments(b: &[u8]) -> impl Iterator<Item = (usize, u8, &[u8])> + '_ {
    let mut i = 2usize;
    std::iter::from_fn(move || loop {
        i += b.get(i..)?.iter().position(|&x| x == 0xFF)?;
        while b.get(i + 1) == Some(&0xFF) {
            i += 1;
        }
        let m = *b.get(i + 1)?;
        match m {
            0x00 | 0x01 | 0xD0..=0xD8 => {
                i += 2;
                continue;
            }
            0xD9 => return None,
            _ => {}
        }
        let len = b.get(i + 2..i + 4).map(|l| u16::from_be_bytes([l[0], l[1]]) as usize)?.max(2);
        let (at, seg) = (i, b.get(i + 4..i + 2 + len)?);
        i += 2 + len;
        return Some((at, m, seg));
    })
}

/// Whether a sequential Huffman-coded JPEG (baseline or extended) defines, before its one
/// interleaved scan, every quantization and Huffman table that scan uses. A decoder that
/// decodes image after image keeps the tables an earlier image defined (JPEG's abbreviated
/// format: tables-only streams, then images without them; libjpeg-turbo keeps them in its
/// handle, and falls back to the standard Huffman tables only for a slot never filled, the
/// Motion-JPEG convention). A file that leans on them — a Motion-JPEG frame without its DHT,
/// a damaged file without its DQT — would decode to whatever the previous image on the
/// thread left there: not the same bytes whatever the thread count (docs/CONTRACTS.md
/// contract 1; found by fuzz/fuzz_targets/jpeg_rewrite.rs). `false` — decode it on a fresh
/// handle — for those, for progressive, arithmetic-coded and lossless files (several scans,
/// or tables of their own kinds: a fresh handle costs little beside their decode), and for
/// anything that does not parse.
pub fn defines_its_tables(b: &[u8]) -> bool {
    // Its own walk, not `parse`: this runs before every CPU decode and allocates nothing
    // (tests/cpu_alloc.rs).
    if !b.starts_with(&[0xFF, 0xD8]) {
        return false;
    }
    let (mut quant, mut dc, mut ac) = ([false; 4], [false; 4], [false; 4]);
    // The frame's components (id, quantization table), up to four.
    let (mut comps, mut n_comps) = ([(0u8, 0u8); 4], None::<usize>);
    for (_, m, seg) in segments(b) {
        match m {
            0xDB => {
                let mut k = 0;
                while let Some(&pt) = seg.get(k) {
                    if let Some(slot) = quant.get_mut((pt & 0x0F) as usize) {
                        *slot = true;
                    }
                    k += 1 + if pt >> 4 == 0 { 64 } else { 128 };
                }
            }
            0xC4 => {
                let mut k = 0;
                while let (Some(&tc), Some(counts)) = (seg.get(k), seg.get(k + 1..k + 17)) {
                    let table = if tc >> 4 == 0 { &mut dc } else { &mut ac };
                    if let Some(slot) = table.get_mut((tc & 0x0F) as usize) {
                        *slot = true;
                    }
                    k += 17 + counts.iter().map(|&c| c as usize).sum::<usize>();
                }
            }
            // Sequential Huffman frames only; any other coding is decoded afresh.
            0xC0 | 0xC1 if n_comps.is_none() => {
                let n = seg.get(5).copied().unwrap_or(0) as usize;
                if !(1..=4).contains(&n) {
                    return false;
                }
                for (k, c) in comps.iter_mut().enumerate().take(n) {
                    let (Some(&id), Some(&tq)) = (seg.get(6 + 3 * k), seg.get(8 + 3 * k)) else { return false };
                    *c = (id, tq);
                }
                n_comps = Some(n);
            }
            0xC2 | 0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => return false,
            0xDA => {
                let Some(n) = n_comps else { return false };
                // One scan over every component: no later scan can lean on other tables.
                if seg.first().copied() != Some(n as u8) {
                    return false;
                }
                let has = |t: &[bool; 4], k: u8| t.get(k as usize).copied().unwrap_or(false);
                return (0..n).all(|k| {
                    let (Some(&id), Some(&tables)) = (seg.get(1 + 2 * k), seg.get(2 + 2 * k)) else { return false };
                    let Some(&(_, tq)) = comps[..n].iter().find(|c| c.0 == id) else { return false };
                    has(&quant, tq) && has(&dc, tables >> 4) && has(&ac, tables & 0x0F)
                });
            }
            _ => {}
        }
    }
    false
}

/// Whether a progressive JPEG's scans leave the DC and the first nine AC coefficients of every
/// component fully refined (their last scan's Al is 0): then libjpeg-turbo decodes it without
/// its block smoothing (`jdcoefct.c`'s `smoothing_ok`, which guesses coefficients a scan
/// script never sent), so a sequential file with the same coefficients decodes to the same
/// pixels. Every encoder's full scan script does; a file cut after its first scans does not.
/// `true` for sequential files; `false` when the scan headers cannot be walked.
pub fn progressive_complete(b: &[u8]) -> bool {
    let Ok(info) = parse(b) else { return false };
    if !info.coding.is_progressive() {
        return true;
    }
    // Per component id: the Al of the last scan that carried each coefficient 0..=9.
    let mut bits: Vec<(u8, [i8; 10])> = Vec::new();
    for (_, m, seg) in segments(b) {
        if m == info.sof && bits.is_empty() {
            let n = seg.get(5).copied().unwrap_or(0) as usize;
            bits = (0..n).filter_map(|k| seg.get(6 + 3 * k).map(|&id| (id, [-1i8; 10]))).collect();
        }
        if m == 0xDA {
            let n = *seg.first().unwrap_or(&0) as usize;
            let Some(&[ss, se, a]) = seg.get(1 + 2 * n..4 + 2 * n) else { return false };
            for k in 0..n {
                let id = seg[1 + 2 * k];
                let Some(c) = bits.iter_mut().find(|c| c.0 == id) else { return false };
                for coef in (ss as usize..=(se as usize).min(9)).filter(|_| ss <= se) {
                    c.1[coef] = (a & 0x0F) as i8;
                }
            }
        }
    }
    !bits.is_empty() && bits.iter().all(|c| c.1.iter().all(|&al| al == 0))
}
