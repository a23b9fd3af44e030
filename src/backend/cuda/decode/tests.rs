use super::canary::canary_ffi;
use super::*;
use crate::augment::params::{AugParams, FILTER_BICUBIC};
use crate::codec::jpeg::{Coding, JpegInfo, Subsampling};

fn info(coding: Coding, subsampling: Subsampling, components: u8) -> JpegInfo {
    JpegInfo {
        width: 500,
        height: 375,
        components,
        precision: 8,
        sof: 0xc0,
        coding,
        sampling: [(2, 2), (1, 1), (1, 1), (0, 0)],
        subsampling,
        adobe_transform: None,
        orientation: 1,
        jfif: true,
        icc: false,
        restart_interval: 0,
        dnl: false,
        turbo_refuses: false,
    }
}

fn route_of(i: &JpegInfo, hw: Option<bool>) -> Route {
    route(gpu_candidate(Some(i), 100_000_000, false).unwrap(), hw)
}

#[test]
fn routing_table() {
    use Coding::*;
    use Subsampling as S;
    // (header, nvJPEG's hardware answer, expected)
    let cases = [
        (info(Baseline, S::S420, 3), Some(true), Route::Hardware),
        (info(Baseline, S::S420, 3), Some(false), Route::Cuda), // engine refused
        (info(Baseline, S::S420, 3), None, Route::Cuda),        // no engine on this GPU
        (info(Baseline, S::Gray, 1), Some(true), Route::Cuda),  // gray: not asked by default
        (info(Baseline, S::S440, 3), Some(true), Route::Hardware),
        (info(Baseline, S::S411, 3), Some(true), Route::Cuda), // engine lacks 4:1:1
        (info(Baseline, S::S410, 3), Some(true), Route::Cuda),
        (info(Progressive, S::S420, 3), Some(true), Route::Cuda),
        (info(Extended, S::S444, 3), None, Route::Cuda),
        (info(Lossless, S::S444, 3), None, Route::Cpu),
        (info(ArithmeticSequential, S::S420, 3), None, Route::Cpu),
        (info(Hierarchical, S::S420, 3), None, Route::Cpu),
        (info(Baseline, S::Other, 3), Some(true), Route::Cpu), // odd sampling factors
        (info(Baseline, S::Other, 4), Some(true), Route::Cpu), // CMYK
    ];
    for (i, hw, want) in cases {
        assert_eq!(route_of(&i, hw), want, "{:?} {:?} hw={hw:?}", i.coding, i.subsampling);
    }
    let mut rgb = info(Baseline, S::S444, 3);
    rgb.adobe_transform = Some(0);
    assert_eq!(route_of(&rgb, Some(true)), Route::Cpu);
    rgb.adobe_transform = Some(1);
    assert_eq!(route_of(&rgb, Some(true)), Route::Hardware);
    let mut p12 = info(Extended, S::S420, 3);
    p12.precision = 12;
    assert_eq!(route_of(&p12, None), Route::Cpu);
    let mut dnl = info(Baseline, S::S420, 3);
    dnl.dnl = true;
    assert_eq!(route_of(&dnl, Some(true)), Route::Cpu);
    let mut huffman = info(Baseline, S::S420, 3);
    huffman.turbo_refuses = true;
    assert_eq!(route_of(&huffman, Some(true)), Route::Cpu);
    assert_eq!(route(gpu_candidate(None, 100, false).unwrap(), Some(true)), Route::Cpu);
}

#[test]
fn gpu_engine_gray_asks_the_engine_for_gray_baseline_sampled_1x1_only() {
    use Coding::*;
    use Subsampling as S;
    let gray = |coding, sampling| JpegInfo { sampling: [sampling, (0, 0), (0, 0), (0, 0)], ..info(coding, S::Gray, 1) };
    let with = |i: &JpegInfo, engine_gray: bool, hw| route(gpu_candidate(Some(i), 100_000_000, engine_gray).unwrap(), hw);
    let plain = gray(Baseline, (1, 1));
    assert!(engine_gray_candidate(&plain));
    assert_eq!(with(&plain, true, Some(true)), Route::Hardware);
    assert_eq!(with(&plain, false, Some(true)), Route::Cuda, "off by default");
    assert_eq!(with(&plain, true, Some(false)), Route::Cuda, "nvJPEG's check has the last word");
    assert_eq!(with(&plain, true, None), Route::Cuda, "no engine");
    // Declared 2×2 (the H200's wrong decode, corpus inet_dev_0046), 2×1 or 1×2: never.
    for s in [(2, 2), (2, 1), (1, 2)] {
        let odd = gray(Baseline, s);
        assert!(!engine_gray_candidate(&odd));
        assert_eq!(with(&odd, true, Some(true)), Route::Cuda, "{s:?}");
    }
    // Not baseline: the CUDA decoders, as without the switch.
    for coding in [Progressive, Extended] {
        assert_eq!(with(&gray(coding, (1, 1)), true, Some(true)), Route::Cuda, "{coding:?}");
    }
    // Colour images route as they did.
    let colour = info(Baseline, S::S420, 3);
    assert_eq!(with(&colour, true, Some(true)), Route::Hardware);
    assert_eq!(with(&info(Progressive, S::S420, 3), true, Some(true)), Route::Cuda);
}

#[test]
fn a_stream_without_an_eoi_in_its_tail_is_cut_short() {
    let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xDB];
    jpeg.extend(std::iter::repeat_n(0x12u8, 5000));
    assert!(!has_eoi(&jpeg), "cut short");
    jpeg.extend([0xFF, 0xD9]);
    assert!(has_eoi(&jpeg));
    jpeg.extend([0u8; 100]);
    assert!(has_eoi(&jpeg), "padding after the EOI");
    jpeg.extend([0u8; 2000]);
    assert!(!has_eoi(&jpeg), "an EOI only far from the end does not count");
    assert!(!has_eoi(&[]) && !has_eoi(&[0xFF]));
}

#[test]
fn routing_rejects_bombs_and_empty_headers_before_any_decoder() {
    let mut f = info(Coding::Baseline, Subsampling::S420, 3);
    (f.width, f.height) = (64250, 64250);
    let e = gpu_candidate(Some(&f), 100_000_000, false).unwrap_err();
    assert_eq!(e, Reject::TooLarge { width: 64250, height: 64250, max_pixels: 100_000_000 });
    assert!(e.to_string().contains("64250x64250 = 4128062500 pixels"), "{e}");
    f.width = 0;
    assert_eq!(gpu_candidate(Some(&f), 100, false), Err(Reject::Empty));
}

#[test]
fn widening_for_upsampling_adds_a_block_on_every_inner_side() {
    let stored = (1000u32, 600u32);
    // A naive reference: each side moves out by one block unless it is already at the edge.
    for (x, y, w, h) in [(0u32, 0u32, 1000u32, 600u32), (16, 32, 160, 96), (0, 48, 64, 552), (960, 0, 40, 16), (496, 288, 16, 16)] {
        let r = widen_for_upsampling(Roi { x, y, w, h }, stored, 16);
        let want_x0 = if x == 0 { 0 } else { x - 16 };
        let want_y0 = if y == 0 { 0 } else { y - 16 };
        let want_x1 = if x + w == stored.0 { stored.0 } else { (x + w + 16).min(stored.0) };
        let want_y1 = if y + h == stored.1 { stored.1 } else { (y + h + 16).min(stored.1) };
        assert_eq!(r, Roi { x: want_x0, y: want_y0, w: want_x1 - want_x0, h: want_y1 - want_y0 }, "{x} {y} {w} {h}");
        assert!(r.x <= x && r.y <= y && r.x + r.w >= x + w && r.y + r.h >= y + h);
        assert_eq!((r.x % 16, r.y % 16), (0, 0), "still on the block grid");
    }
}

#[test]
fn decoder_switches_follow_the_config_knob() {
    use crate::config::GpuDecoders;
    assert_eq!(DecoderPlan::switches(GpuDecoders::All), (true, true));
    assert_eq!(DecoderPlan::switches(GpuDecoders::Hw), (true, false));
    assert_eq!(DecoderPlan::switches(GpuDecoders::Cuda), (false, true));
}

#[test]
fn gpu_hybrid_only_above_a_megapixel_and_never_for_progressive() {
    let mut f = info(Coding::Baseline, Subsampling::S420, 3);
    assert!(!gpu_hybrid_first(&f)); // 500x375
    (f.width, f.height) = (1000, 1000);
    assert!(!gpu_hybrid_first(&f)); // exactly the threshold
    f.width = 1001;
    assert!(gpu_hybrid_first(&f));
    f.coding = Coding::Extended;
    assert!(gpu_hybrid_first(&f));
    f.coding = Coding::Progressive;
    assert!(!gpu_hybrid_first(&f));
}

#[test]
fn hw_calls_are_multiples_of_the_engine_width() {
    // Shapes like A100 (5 decode cores) and H100 (7 NVJPG engines).
    assert_eq!(hw_calls(0, 5, 64), Vec::<usize>::new());
    assert_eq!(hw_calls(256, 5, 64), vec![55, 55, 50, 50, 46]);
    assert_eq!(hw_calls(256, 7, 64), vec![56, 56, 49, 49, 46]); // not 63, 63, 63, 63, 4
    assert_eq!(hw_calls(256, 7, 256), vec![133, 123]); // not 252, 4
    assert_eq!(hw_calls(252, 7, 256), vec![252]);
    assert_eq!(hw_calls(3, 7, 256), vec![3]);
    assert_eq!(hw_calls(20, 8, 4), vec![8, 8, 4]); // cap below one unit: one unit per call
    for n in 0..300usize {
        for unit in [1usize, 3, 5, 7, 16] {
            for cap in [1usize, 4, 16, 63, 64, 100, 256] {
                let v = hw_calls(n, unit, cap);
                assert_eq!(v.iter().sum::<usize>(), n, "n {n} unit {unit} cap {cap}");
                let per_call = (cap / unit).max(1) * unit;
                // The fewest calls the cap allows, none empty, none over it.
                assert_eq!(v.len(), n.div_ceil(unit).div_ceil(per_call / unit), "{v:?}");
                assert!(v.iter().all(|&c| c > 0 && c <= per_call), "{v:?}");
                if let Some((_, head)) = v.split_last() {
                    assert!(head.iter().all(|&c| c % unit == 0), "{v:?}");
                    // Balanced: no call more than one chunk (plus the remainder) under the first.
                    assert!(v.iter().all(|&c| v[0] - c < 2 * unit), "{v:?}");
                }
            }
        }
    }
}

/// Naive orientation: build the oriented picture by explicit flips/transposes of a stored
/// grid of ids and compare with the point map.
#[test]
fn orientation_point_map_matches_explicit_transforms() {
    let (sw, sh) = (5u32, 3u32);
    let stored: Vec<Vec<u32>> = (0..sh).map(|y| (0..sw).map(|x| y * sw + x).collect()).collect();
    let flip_h = |g: &Vec<Vec<u32>>| g.iter().map(|r| r.iter().rev().copied().collect()).collect::<Vec<Vec<u32>>>();
    let flip_v = |g: &Vec<Vec<u32>>| g.iter().rev().cloned().collect::<Vec<Vec<u32>>>();
    let transpose = |g: &Vec<Vec<u32>>| (0..g[0].len()).map(|x| (0..g.len()).map(|y| g[y][x]).collect()).collect::<Vec<Vec<u32>>>();
    let oriented = |o: u32| match o {
        1 => stored.clone(),
        2 => flip_h(&stored),
        3 => flip_v(&flip_h(&stored)),
        4 => flip_v(&stored),
        5 => transpose(&stored),
        6 => flip_h(&transpose(&stored)), // rotate 90° clockwise
        7 => flip_v(&flip_h(&transpose(&stored))),
        8 => flip_v(&transpose(&stored)), // rotate 90° counter-clockwise
        _ => unreachable!(),
    };
    for o in 1..=8 {
        let g = oriented(o);
        for (y, row) in g.iter().enumerate() {
            for (x, &id) in row.iter().enumerate() {
                let (px, py) = oriented_to_stored(x as u32, y as u32, sw, sh, o);
                assert_eq!(py * sw + px, id, "orientation {o} at ({x},{y})");
            }
        }
    }
}

/// Naive taps (Pillow `precompute_coeffs` bounds for the antialiased case, the two/four
/// neighbours for the plain case) must lie inside [`tap_span`].
fn naive_taps(in_size: u32, out_size: u32, i: u32, filter: u32, antialias: bool) -> (u32, u32) {
    let scale = in_size as f64 / out_size as f64;
    let a = if filter == FILTER_BICUBIC { 2.0 } else { 1.0 };
    let c = (i as f64 + 0.5) * scale;
    if antialias {
        let support = a * scale.max(1.0);
        let lo = ((c - support + 0.5) as i64).max(0) as u32;
        let hi = ((c + support + 0.5) as i64).min(in_size as i64) as u32;
        (lo, hi)
    } else {
        let x = c - 0.5;
        let lo = (x.floor() as i64 - (a as i64 - 1)).clamp(0, in_size as i64 - 1) as u32;
        let hi = (x.floor() as i64 + a as i64 + 1).clamp(1, in_size as i64) as u32;
        (lo, hi)
    }
}

#[test]
fn roi_contains_every_tap_for_every_orientation() {
    let mut rng = crate::augment::params::SampleRng::new(3, 0, 0, 9);
    for _ in 0..4000 {
        let sw = 1 + rng.below(700) as u32;
        let sh = 1 + rng.below(700) as u32;
        let o = 1 + rng.below(8) as u32;
        let (w, h) = if o >= 5 { (sh, sw) } else { (sw, sh) };
        let cw = 1 + rng.below(w as u64) as u32;
        let ch = 1 + rng.below(h as u64) as u32;
        let cx = rng.below((w - cw + 1) as u64) as u32;
        let cy = rng.below((h - ch + 1) as u64) as u32;
        let rw = 1 + rng.below(400) as u32;
        let rh = 1 + rng.below(400) as u32;
        let ow = 1 + rng.below(rw as u64) as u32;
        let oh = 1 + rng.below(rh as u64) as u32;
        let wx = rng.below((rw - ow + 1) as u64) as u32;
        let wy = rng.below((rh - oh + 1) as u64) as u32;
        let filter = rng.below(2) as u32;
        let aa = rng.below(2) == 1;
        let p = AugParams {
            src_w: w as i32,
            src_h: h as i32,
            crop_x: cx as i32,
            crop_y: cy as i32,
            crop_w: cw as i32,
            crop_h: ch as i32,
            resize_w: rw as i32,
            resize_h: rh as i32,
            win_x: wx as i32,
            win_y: wy as i32,
            out_w: ow as i32,
            out_h: oh as i32,
            orientation: o,
            filter,
            antialias: aa as u32,
            ..Default::default()
        };
        let roi = decode_roi(&p, sw, sh, 16);
        assert!(roi.x + roi.w <= sw && roi.y + roi.h <= sh && roi.w > 0 && roi.h > 0, "{roi:?} in {sw}x{sh}");
        assert!(roi.x % 16 == 0 && roi.y % 16 == 0);
        for (ox, oy) in [(wx, wy), (wx + ow - 1, wy + oh - 1), (wx, wy + oh - 1), (wx + ow - 1, wy)] {
            let (x0, x1) = naive_taps(cw, rw, ox, filter, aa);
            let (y0, y1) = naive_taps(ch, rh, oy, filter, aa);
            for (tx, ty) in [(x0, y0), (x1 - 1, y1 - 1), (x0, y1 - 1), (x1 - 1, y0)] {
                let (sx, sy) = oriented_to_stored(cx + tx, cy + ty, sw, sh, o);
                assert!(
                    sx >= roi.x && sx < roi.x + roi.w && sy >= roi.y && sy < roi.y + roi.h,
                    "tap ({sx},{sy}) outside {roi:?} for {p:?}"
                );
            }
        }
    }
}

#[test]
fn roi_of_a_small_crop_is_small() {
    // 500x375, a 100x80 crop resized to 224: the region is the crop plus a filter margin
    // on the 16-pixel grid, far less than the image.
    let p = AugParams {
        src_w: 500,
        src_h: 375,
        crop_x: 200,
        crop_y: 100,
        crop_w: 100,
        crop_h: 80,
        resize_w: 224,
        resize_h: 224,
        out_w: 224,
        out_h: 224,
        orientation: 1,
        antialias: 1,
        ..Default::default()
    };
    let r = decode_roi(&p, 500, 375, 16);
    assert_eq!(r, Roi { x: 192, y: 96, w: 112, h: 96 });
}

/// The canary kernels write only inside their target's region: every canary lies on a row
/// and column of it, spread over every row band when the region is tall enough, and the
/// kernels agree with [`CANARIES`].
#[test]
fn canaries_stay_inside_their_region_and_spread_over_it() {
    // SAFETY: returns a constant.
    assert_eq!(unsafe { canary_ffi::stoke_host_canaries() }, CANARIES);
    for (w, h) in [(1u32, 1u32), (2, 3), (31, 33), (64, 32), (500, 375), (7, 4000), (4000, 7)] {
        let t = DecodeTarget { offset: 4096, width: w, height: h, pitch: 3 * w, pad: 0 };
        let mut rows = std::collections::BTreeSet::new();
        let mut values = std::collections::BTreeSet::new();
        for k in 0..CANARIES {
            let (off, v) = canary_at(&t, k);
            let rel = off - t.offset;
            let (y, x) = (rel / t.pitch as u64, (rel % t.pitch as u64) / 3);
            assert!(rel % 3 == 0 && y < h as u64 && x < w as u64, "{w}x{h} canary {k} at ({x},{y})");
            rows.insert(y);
            values.insert(v);
            assert!(v[0] != v[1] && v[1] != v[2] && v[0] != v[2]);
        }
        assert_eq!(rows.len() as u32, CANARIES.min(h), "{w}x{h}: rows {rows:?}");
        assert_eq!(values.len() as u32, CANARIES, "every canary has its own value");
    }
}

#[test]
fn hardware_preallocation_stays_within_one_arena() {
    // ImageNet-like index: 500x375 max, 256 per call, arena for 256 such images: as is.
    let arena = ArenaPlan::new(std::iter::repeat_n(500 * 375, 300), 256, u64::MAX).bytes;
    assert_eq!(prealloc_dims((500, 375), 256, arena), (500, 375));
    // One 20000x15000 image in the index: scaled down, aspect kept, budget respected.
    let (w, h) = prealloc_dims((20000, 15000), 256, arena);
    assert!((w as u64 * h as u64 * 3 * 256) <= arena && w >= 490 && (w as f64 / h as f64 - 4.0 / 3.0).abs() < 0.01, "{w}x{h}");
}

#[test]
fn arena_fits_any_batch_of_the_index_and_refuses_overflow() {
    let pixels = [500u64 * 375, 375 * 500, 64 * 64, 1000 * 1000, 1];
    let plan = ArenaPlan::new(pixels, 2, u64::MAX);
    assert_eq!(plan.bytes, decoded_bytes(1000, 1000) + decoded_bytes(500, 375));
    let mut c = ArenaCursor::new(plan.bytes);
    assert_eq!(c.place(1000, 1000), Some(0));
    assert_eq!(c.place(375, 500), Some(decoded_bytes(1000, 1000)));
    assert_eq!(c.place(1, 1), None, "full");
    c.reset();
    assert_eq!(c.place(1, 1), Some(0));
    assert_eq!(c.place(1, 1), Some(ARENA_ALIGN));
    // The guard caps what the index can ask for.
    assert_eq!(ArenaPlan::new([u64::MAX / 8], 1, 100).bytes, ARENA_ALIGN * 2);
}

#[test]
fn cpu_retries_of_a_full_arena_reuse_the_failed_gpu_places() {
    // A batch of four same-size images fills its arena exactly (the index's worst case).
    let plan = ArenaPlan::new(std::iter::repeat_n(500 * 375, 10), 4, u64::MAX);
    let one = decoded_bytes(500, 375);
    assert_eq!(plan.bytes, 4 * one);
    let mut c = ArenaCursor::new(plan.bytes);
    let places: Vec<u64> = (0..4).map(|_| c.place(500, 375).expect("fits")).collect();
    assert_eq!(places, [0, one, 2 * one, 3 * one]);
    // The hardware call holding images 1 and 2 failed: both are decoded on the CPU and
    // must land where their GPU decodes would have (a fresh place no longer exists).
    assert_eq!(c.place(500, 375), None, "no room for a second place");
    assert_eq!(c.place_or_reuse(Some((places[1], one)), 500, 375), Some(one));
    assert_eq!(c.place_or_reuse(Some((places[2], one)), 496, 368), Some(2 * one), "a smaller region fits");
    // A region larger than the old place needs a new one (none left here)...
    assert_eq!(c.place_or_reuse(Some((places[3], one)), 512, 384), None);
    // ...and a CPU-routed image (no earlier place) takes one from the cursor.
    let mut c = ArenaCursor::new(plan.bytes);
    assert_eq!(c.place_or_reuse(None, 500, 375), Some(0));
    assert_eq!(c.place_or_reuse(Some((0, one)), 512, 384), Some(one));
}

#[test]
fn the_cpu_pool_returns_one_result_per_listed_image_while_the_caller_works() {
    let pool = CpuPool::new(3).unwrap();
    let bad: &[u8] = b"not a jpeg";
    let p: AugParams = bytemuck::Zeroable::zeroed();
    let jobs: Vec<(&[u8], AugParams)> = (0..10).map(|_| (bad, p)).collect();
    let out: Vec<Result<Decoded, SlotError>> = (0..10).map(|_| Err(SlotError::Capacity("no place".to_string()))).collect();
    for _ in 0..3 {
        // The same pool serves batch after batch.
        let list = [1usize, 4, 5, 9];
        let (r, mut got, secs) = pool.decode_while(&list, &jobs, &out, 1 << 20, || 42);
        assert_eq!(r, 42);
        got.sort_by_key(|g| g.0);
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), list);
        assert!(got.iter().all(|g| g.1.is_err()), "garbage must not decode");
        assert!(secs >= 0.0);
    }
    let (_, none, _) = pool.decode_while(&[], &jobs, &out, 1 << 20, || ());
    assert!(none.is_empty());
}

/// A naive placement: every image copied on its own, one after another, `None` past the end.
fn naive_copies(images: &[(usize, usize)], capacity: u64) -> BitstreamPlan {
    let mut used = 0u64;
    let mut at = Vec::new();
    let mut copies = Vec::new();
    for &(p, len) in images {
        if used + len as u64 > capacity {
            at.push(None);
            continue;
        }
        at.push(Some(used));
        if len > 0 {
            copies.push((p, used, len));
        }
        used += len as u64;
    }
    BitstreamPlan { at, copies }
}

/// The bytes each copy plan puts in the device buffer, byte by byte from a fake host memory
/// where byte `a` holds `a % 251`: every placed image must read its own bytes there.
fn check_plan(images: &[(usize, usize)], at: &[Option<u64>], copies: &[(usize, u64, usize)], capacity: u64) {
    let mut dev = vec![None::<u8>; capacity as usize];
    for &(host, off, len) in copies {
        assert!(off + len as u64 <= capacity, "copy {host:#x}+{len} at {off} past {capacity}");
        for k in 0..len {
            dev[off as usize + k] = Some(((host + k) % 251) as u8);
        }
    }
    for (&(p, len), a) in images.iter().zip(at) {
        let Some(a) = a else { continue };
        for k in 0..len {
            assert_eq!(dev[*a as usize + k], Some(((p + k) % 251) as u8), "image at {p:#x}, byte {k}");
        }
    }
}

#[test]
fn device_bitstreams_are_copied_once_from_a_place_and_run_by_run_otherwise() {
    // Three images in one staging place, padded to 64 bytes as a pooled buffer places them,
    // and a fourth elsewhere.
    let base = 0x10_0000usize;
    let images = [(base, 100), (base + 128, 50), (base + 192, 64), (0x90_0000, 30)];
    let span = Some((base, 4096));
    // Inside the span: one copy from the first image's start to the last one's end.
    let BitstreamPlan { at, copies } = bitstream_copies(&images[..3], span, 1 << 20);
    assert_eq!(copies, vec![(base, 0, 256)]);
    assert_eq!(at, vec![Some(0), Some(128), Some(192)]);
    check_plan(&images[..3], &at, &copies, 1 << 20);
    // One image outside it: one after another, as the naive plan, each on its own (none adjacent).
    let BitstreamPlan { at, copies } = bitstream_copies(&images, span, 1 << 20);
    assert_eq!(BitstreamPlan { at: at.clone(), copies: copies.clone() }, naive_copies(&images, 1 << 20));
    check_plan(&images, &at, &copies, 1 << 20);
    // The covering range does not fit but the images do: one after another.
    let BitstreamPlan { at, copies } = bitstream_copies(&images[..3], span, 220);
    assert_eq!(at, vec![Some(0), Some(100), Some(150)]);
    check_plan(&images[..3], &at, &copies, 220);
    // No room for the rest: `None`, and nothing copied for them.
    let BitstreamPlan { at, copies } = bitstream_copies(&images[..3], None, 160);
    assert_eq!(at, vec![Some(0), Some(100), None]);
    assert_eq!(copies.len(), 2);
    // Adjacent in host memory (heap-packed bytes): one copy per run.
    let packed = [(base, 10), (base + 10, 20), (base + 30, 5), (base + 100, 7), (base + 107, 3)];
    let BitstreamPlan { at, copies } = bitstream_copies(&packed, None, 1 << 20);
    assert_eq!(copies, vec![(base, 0, 35), (base + 100, 35, 10)]);
    check_plan(&packed, &at, &copies, 1 << 20);
    // A run is not extended past an image that found no room.
    let BitstreamPlan { at, copies } = bitstream_copies(&[(base, 10), (base + 10, 100), (base + 110, 5)], None, 20);
    assert_eq!(at, vec![Some(0), None, Some(10)]);
    assert_eq!(copies, vec![(base, 0, 10), (base + 110, 10, 5)]);
    // Nothing to copy.
    assert_eq!(bitstream_copies(&[], span, 100), BitstreamPlan::default());
}

#[test]
fn device_bitstream_plans_agree_with_the_naive_one_on_random_batches() {
    // Random batches: images packed, padded or scattered, spans that hold them or not, small
    // and large buffers. Whatever the plan, every placed image reads its own bytes, and it
    // places at least the images the naive plan does.
    let mut x = 0x9e3779b97f4a7c15u64;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    for _ in 0..2000 {
        let n = next(12) as usize;
        let mut p = 0x4000usize;
        let images: Vec<(usize, usize)> = (0..n)
            .map(|_| {
                p += match next(3) {
                    0 => 0,
                    1 => next(64) as usize,
                    _ => next(5000) as usize,
                };
                let len = next(300) as usize;
                let im = (p, len);
                p += len;
                im
            })
            .collect();
        let span = match next(3) {
            0 => None,
            1 => Some((0x4000, p - 0x4000)),
            _ => Some((0x4000, (p - 0x4000) / 2)),
        };
        let capacity = next(4000);
        let BitstreamPlan { at, copies } = bitstream_copies(&images, span, capacity);
        check_plan(&images, &at, &copies, capacity);
        let placed = |a: &[Option<u64>]| a.iter().filter(|a| a.is_some()).count();
        assert!(placed(&at) >= placed(&naive_copies(&images, capacity).at), "{images:?} {span:?} {capacity}");
        assert!(copies.len() <= images.len().max(1));
    }
}

/// The engine's idle parts are the gaps between the producer's marks, in its order; the
/// arena's wait is carved out of the head; a mark the backend did not give counts nothing.
#[test]
fn engine_idle_parts_are_the_gaps_between_the_marks() {
    use std::time::{Duration, Instant};
    let t = Instant::now();
    let ms = |k: u64| t + Duration::from_millis(k);
    // returned 0, started 2, first call 10 (arena waited 3 ms of it), engine done 50, joined 51,
    // CPU done 54, checked 55, decoded 59.
    let marks = [ms(10), ms(50), ms(51), ms(54), ms(55), ms(59)];
    let i = super::idle::idle_parts(Some(ms(0)), Some(ms(2)), (0.003, 0.0), marks);
    let got = i.rows().map(|r| (r.0, (r.1 * 1e6).round() / 1e3));
    let want = [
        ("join", 1.0),
        ("cpu", 3.0),
        ("check", 1.0),
        ("retry", 4.0),
        ("tail", 0.0),
        ("outside", 2.0),
        ("arena", 3.0),
        ("head", 5.0),
        ("hybrid", 0.0),
        ("worker", 0.0),
    ];
    assert_eq!(got, want);
    assert_eq!(i.batches, 1.0);
    // The batched GPU-hybrid call made before the first engine call: 2 ms of the head.
    let h = super::idle::idle_parts(Some(ms(0)), Some(ms(2)), (0.003, 0.002), marks);
    assert_eq!(((h.arena * 1e6).round(), (h.hybrid * 1e6).round(), (h.head * 1e6).round()), (3000.0, 2000.0, 3000.0));
    assert!((h.total() - i.total()).abs() < 1e-12, "the call is carved out of the head, not added");
    // The first batch: nothing returned before it; without a start mark the head is unsplit
    // and the arena's wait is not taken out of a head it was not measured in.
    let first = super::idle::idle_parts(None, Some(ms(2)), (0.003, 0.0), marks);
    assert_eq!(first.outside, 0.0);
    let unstarted = super::idle::idle_parts(Some(ms(0)), None, (0.003, 0.002), marks);
    assert_eq!((unstarted.outside, unstarted.arena, unstarted.hybrid, unstarted.head), (0.0, 0.0, 0.0, 0.0));
    // An arena wait longer than the head measured (clocks read apart) is held to the head, and
    // the call to what is left of it.
    let long = super::idle::idle_parts(None, Some(ms(2)), (1.0, 1.0), marks);
    assert_eq!(((long.arena * 1e3).round(), long.hybrid, long.head), (8.0, 0.0, 0.0));
}
