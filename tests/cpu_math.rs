//! The shared kernel math (kernels/augment_math.cuh, host build) against an independent naive
//! reference written here in f64: EXIF orientation by explicit buffer operations, Pillow's
//! `precompute_coeffs` and torch's interpolation formulas, torchvision's rotation grid.

use stoke::augment::host::{self, Scratch, SrcImage};
use stoke::augment::params::{FILTER_BICUBIC, FILTER_BILINEAR, ROT_BILINEAR, ROT_NEAREST};
use stoke::augment::AugParams;
use stoke::config::{DType, Layout, OutputSpec};

// ---- naive reference -------------------------------------------------------------------

/// An image as rows of RGB f64 triples.
#[derive(Clone, Debug, PartialEq)]
struct Img {
    w: usize,
    h: usize,
    px: Vec<[f64; 3]>,
}

impl Img {
    fn at(&self, x: usize, y: usize) -> [f64; 3] {
        self.px[y * self.w + x]
    }
    fn from_fn(w: usize, h: usize, mut f: impl FnMut(usize, usize) -> [f64; 3]) -> Img {
        let mut px = Vec::with_capacity(w * h);
        for y in 0..h {
            for x in 0..w {
                px.push(f(x, y));
            }
        }
        Img { w, h, px }
    }
    fn flip_lr(&self) -> Img {
        Img::from_fn(self.w, self.h, |x, y| self.at(self.w - 1 - x, y))
    }
    fn flip_tb(&self) -> Img {
        Img::from_fn(self.w, self.h, |x, y| self.at(x, self.h - 1 - y))
    }
    fn transpose(&self) -> Img {
        Img::from_fn(self.h, self.w, |x, y| self.at(y, x))
    }
    /// Counter-clockwise quarter turn (numpy `rot90`): the top-right corner becomes top-left.
    fn rot90_ccw(&self) -> Img {
        self.transpose().flip_tb()
    }
    /// Pillow `ImageOps.exif_transpose` for `tag`, spelled with the operations Pillow names:
    /// 2 FLIP_LEFT_RIGHT, 3 ROTATE_180, 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE, 6 ROTATE_270,
    /// 7 TRANSVERSE, 8 ROTATE_90 (Pillow's ROTATE_n turn counter-clockwise).
    fn exif_transpose(&self, tag: u32) -> Img {
        match tag {
            2 => self.flip_lr(),
            3 => self.rot90_ccw().rot90_ccw(),
            4 => self.flip_tb(),
            5 => self.transpose(),
            6 => self.rot90_ccw().rot90_ccw().rot90_ccw(),
            7 => self.transpose().rot90_ccw().rot90_ccw(),
            8 => self.rot90_ccw(),
            _ => self.clone(),
        }
    }
    fn crop(&self, x: usize, y: usize, w: usize, h: usize) -> Img {
        Img::from_fn(w, h, |i, j| self.at(x + i, y + j))
    }
}

/// Taps `(index, weight)` of one output index, in f64: Pillow `precompute_coeffs` when
/// antialiased, torch `upsample_bilinear2d` / `upsample_bicubic2d` (align_corners=False,
/// A = −0.75, clamped indices) otherwise.
fn ref_taps(inp: usize, out: usize, i: usize, filter: u32, aa: bool) -> Vec<(usize, f64)> {
    let scale = inp as f64 / out as f64;
    let cubic = |x: f64, a: f64| {
        let x = x.abs();
        if x < 1.0 {
            ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        } else if x < 2.0 {
            (((x - 5.0) * x + 8.0) * x - 4.0) * a
        } else {
            0.0
        }
    };
    if aa {
        let fs = scale.max(1.0);
        let support = if filter == FILTER_BICUBIC { 2.0 } else { 1.0 } * fs;
        let center = (i as f64 + 0.5) * scale;
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(inp as i64) as usize;
        let f = |x: f64| if filter == FILTER_BICUBIC { cubic(x, -0.5) } else { (1.0 - x.abs()).max(0.0) };
        let raw: Vec<f64> = (xmin..xmax).map(|j| f((j as f64 - center + 0.5) / fs)).collect();
        let total: f64 = raw.iter().sum();
        (xmin..xmax).zip(raw).map(|(j, w)| (j, w / total)).collect()
    } else if filter == FILTER_BICUBIC {
        let real = scale * (i as f64 + 0.5) - 0.5;
        let x0 = real.floor();
        let t = real - x0;
        let ws = [cubic(t + 1.0, -0.75), cubic(t, -0.75), cubic(1.0 - t, -0.75), cubic(2.0 - t, -0.75)];
        (0..4).map(|k| (((x0 as i64 - 1 + k as i64).clamp(0, inp as i64 - 1)) as usize, ws[k])).collect()
    } else {
        let real = (scale * (i as f64 + 0.5) - 0.5).max(0.0);
        let x0 = real.floor() as usize;
        let t = real - x0 as f64;
        vec![(x0, 1.0 - t), ((x0 + 1).min(inp - 1), t)]
    }
}

fn ref_resize(img: &Img, ow: usize, oh: usize, filter: u32, aa: bool) -> Img {
    let cols: Vec<_> = (0..ow).map(|i| ref_taps(img.w, ow, i, filter, aa)).collect();
    let rows: Vec<_> = (0..oh).map(|i| ref_taps(img.h, oh, i, filter, aa)).collect();
    Img::from_fn(ow, oh, |x, y| {
        let mut acc = [0.0; 3];
        for &(sy, wy) in &rows[y] {
            for &(sx, wx) in &cols[x] {
                let p = img.at(sx, sy);
                for c in 0..3 {
                    acc[c] += wy * wx * p[c];
                }
            }
        }
        acc.map(|v| v.clamp(0.0, 255.0))
    })
}

/// torchvision v2 `rotate(expand=False)` on a float image: inverse affine about the centre,
/// grid_sample(align_corners=False, zeros), fill via the mask channel. Returns the image and,
/// per pixel, whether nearest rounding was too close to a tie to be compared (f32 vs f64).
fn ref_rotate(img: &Img, deg: f64, bilinear: bool, fill: [f64; 3]) -> (Img, Vec<bool>) {
    let (w, h) = (img.w, img.h);
    let a = deg.to_radians();
    let (s, c) = a.sin_cos();
    let mut ambiguous = vec![false; w * h];
    let out = Img::from_fn(w, h, |x, y| {
        let gx = x as f64 - (w as f64 - 1.0) / 2.0;
        let gy = y as f64 - (h as f64 - 1.0) / 2.0;
        let fx = c * gx - s * gy + (w as f64 - 1.0) / 2.0;
        let fy = s * gx + c * gy + (h as f64 - 1.0) / 2.0;
        let inside = |ix: i64, iy: i64| ix >= 0 && iy >= 0 && ix < w as i64 && iy < h as i64;
        if !bilinear {
            let near_tie = |v: f64| ((v - v.floor()) - 0.5).abs() < 1e-3;
            let edge = |v: f64, n: usize| (v.round_ties_even() - v).abs() > 0.499 || v.abs() < 1e-3 || (v - (n as f64 - 1.0)).abs() < 1e-3;
            if near_tie(fx) || near_tie(fy) || edge(fx, w) || edge(fy, h) {
                ambiguous[y * w + x] = true;
            }
            let (ix, iy) = (fx.round_ties_even() as i64, fy.round_ties_even() as i64);
            if inside(ix, iy) {
                img.at(ix as usize, iy as usize)
            } else {
                fill
            }
        } else {
            let (x0, y0) = (fx.floor(), fy.floor());
            let (tx, ty) = (fx - x0, fy - y0);
            let taps = [(0, 0, (1.0 - tx) * (1.0 - ty)), (1, 0, tx * (1.0 - ty)), (0, 1, (1.0 - tx) * ty), (1, 1, tx * ty)];
            let mut v = [0.0; 3];
            let mut mask = 0.0;
            for (dx, dy, wt) in taps {
                let (ix, iy) = (x0 as i64 + dx, y0 as i64 + dy);
                if inside(ix, iy) {
                    mask += wt;
                    let p = img.at(ix as usize, iy as usize);
                    for k in 0..3 {
                        v[k] += wt * p[k];
                    }
                }
            }
            [0, 1, 2].map(|k| (v[k] - fill[k]) * mask + fill[k])
        }
    });
    (out, ambiguous)
}

/// The whole augment in f64, step by step in the documented order.
fn ref_augment(stored: &Img, p: &AugParams) -> (Img, Vec<bool>) {
    let o = stored.exif_transpose(p.orientation);
    assert_eq!((o.w as i32, o.h as i32), (p.src_w, p.src_h));
    let c = o.crop(p.crop_x as usize, p.crop_y as usize, p.crop_w as usize, p.crop_h as usize);
    let r = ref_resize(&c, p.resize_w as usize, p.resize_h as usize, p.filter, p.antialias != 0);
    let mut win = r.crop(p.win_x as usize, p.win_y as usize, p.out_w as usize, p.out_h as usize);
    if p.flip_h != 0 {
        win = win.flip_lr();
    }
    if p.flip_v != 0 {
        win = win.flip_tb();
    }
    if p.angle_deg.rem_euclid(360.0) == 0.0 {
        let n = win.px.len();
        return (win, vec![false; n]);
    }
    let fill = p.fill.map(|v| v as f64);
    ref_rotate(&win, p.angle_deg as f64, p.rot_interp == ROT_BILINEAR, fill)
}

// ---- fixtures --------------------------------------------------------------------------

/// A deterministic test picture with edges, gradients and texture in every channel.
fn fixture(w: usize, h: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            v.push(((x * 255) / w.max(2).saturating_sub(1).max(1)).min(255) as u8);
            v.push(((x * 7 + y * 13) % 256) as u8);
            v.push(if (x / 5 + y / 3) % 2 == 0 { 230 } else { 20 });
        }
    }
    v
}

fn to_img(rgb: &[u8], w: usize, h: usize) -> Img {
    Img::from_fn(w, h, |x, y| {
        let i = (y * w + x) * 3;
        [rgb[i] as f64, rgb[i + 1] as f64, rgb[i + 2] as f64]
    })
}

fn params(stored_w: i32, stored_h: i32, orientation: u32) -> AugParams {
    let (w, h) = stoke::augment::params::oriented_size(stored_w, stored_h, orientation);
    AugParams {
        src_w: w,
        src_h: h,
        crop_x: 0,
        crop_y: 0,
        crop_w: w,
        crop_h: h,
        resize_w: w,
        resize_h: h,
        win_x: 0,
        win_y: 0,
        out_w: w,
        out_h: h,
        orientation,
        filter: FILTER_BILINEAR,
        antialias: 1,
        flip_h: 0,
        flip_v: 0,
        rot_interp: ROT_NEAREST,
        angle_deg: 0.0,
        fill: [0.0; 3],
        ..AugParams::default()
    }
}

/// Output spec that leaves values on the 0..255 scale: (x/255 − 0)/(1/255) = x (up to f32).
fn raw_spec(dtype: DType, layout: Layout) -> OutputSpec {
    OutputSpec { dtype, layout, mean: [0.0; 3], std: [1.0 / 255.0; 3] }
}

fn run(rgb: &[u8], w: i32, h: i32, p: &AugParams, spec: &OutputSpec) -> Vec<u8> {
    let mut out = vec![0u8; 3 * (p.out_w * p.out_h) as usize * spec.dtype.size()];
    let src = SrcImage::full(rgb, w, h);
    host::augment(src, p, spec, &mut out, 0, &mut Scratch::default()).unwrap();
    out
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Output pixel (x, y), channel c of an NCHW f32 sample.
fn nchw(v: &[f32], w: i32, h: i32, x: i32, y: i32, c: i32) -> f32 {
    v[((c * h + y) * w + x) as usize]
}

// ---- tests -----------------------------------------------------------------------------

#[test]
fn orientation_matches_explicit_buffer_operations_for_all_8_tags() {
    let (sw, sh) = (5usize, 3usize);
    let stored = Img::from_fn(sw, sh, |x, y| [(y * sw + x) as f64, 0.0, 0.0]);
    for tag in 1..=8u32 {
        let o = stored.exif_transpose(tag);
        let (ow, oh) = stoke::augment::params::oriented_size(sw as i32, sh as i32, tag);
        assert_eq!((o.w, o.h), (ow as usize, oh as usize), "tag {tag}");
        for y in 0..o.h {
            for x in 0..o.w {
                let (sx, sy) = host::orient_to_stored(tag, x as i32, y as i32, ow, oh);
                assert_eq!(o.at(x, y), stored.at(sx as usize, sy as usize), "tag {tag} at ({x}, {y})");
            }
        }
        // Through the whole augment (identity geometry) too: bit-exact pixel values.
        let rgb = fixture(sw, sh);
        let p = params(sw as i32, sh as i32, tag);
        let out = f32s(&run(&rgb, sw as i32, sh as i32, &p, &raw_spec(DType::F32, Layout::Nchw)));
        let want = to_img(&rgb, sw, sh).exif_transpose(tag);
        for y in 0..oh {
            for x in 0..ow {
                for c in 0..3 {
                    let got = nchw(&out, ow, oh, x, y, c);
                    let expect = want.at(x as usize, y as usize)[c as usize] as f32;
                    assert!((got - expect).abs() <= 1e-4 * expect.max(1.0), "tag {tag} ({x},{y},{c}): {got} vs {expect}");
                }
            }
        }
    }
}

#[test]
fn filter_taps_match_pillow_and_torch_formulas() {
    let cases = [(500, 224), (375, 224), (224, 224), (100, 224), (7, 3), (3, 7), (1, 5), (5, 1), (4000, 224), (341, 256), (333, 299)];
    for (inp, out) in cases {
        for filter in [FILTER_BILINEAR, FILTER_BICUBIC] {
            for aa in [true, false] {
                for i in 0..out {
                    let want = ref_taps(inp, out, i, filter, aa);
                    let (taps, w) = host::axis_taps(inp as i32, out as i32, i as i32, filter, aa);
                    let ctx = format!("{inp}->{out} i={i} filter={filter} aa={aa}");
                    // f32 vs f64 centre may move a window edge by one tap whose weight is ~0:
                    // compare as maps index → summed weight.
                    let mut got_map = std::collections::BTreeMap::new();
                    for (t, x) in taps.iter().zip(&w) {
                        *got_map.entry(*t as usize).or_insert(0.0) += *x as f64;
                    }
                    let mut want_map = std::collections::BTreeMap::new();
                    for (t, x) in &want {
                        *want_map.entry(*t).or_insert(0.0) += *x;
                    }
                    // Antialiased taps use exact integer positions (one f32 rounding per
                    // argument); the non-antialiased ones copy torch, which computes the source
                    // position `scale·(i + ½) − ½` in f32: its error grows with the position.
                    let tol = if aa { 2e-6 } else { 1e-6 + inp as f64 * 2.5e-7 };
                    for k in got_map.keys().chain(want_map.keys()) {
                        let (g, e) = (got_map.get(k).copied().unwrap_or(0.0), want_map.get(k).copied().unwrap_or(0.0));
                        assert!((g - e).abs() < tol, "{ctx}: tap {k}: {g} vs {e}");
                    }
                    if aa {
                        let s: f64 = w.iter().map(|&x| x as f64).sum();
                        assert!((s - 1.0).abs() < 1e-5, "{ctx}: weights sum to {s}");
                    }
                }
            }
        }
    }
}

#[test]
fn window_and_flip_are_exact_mirrors() {
    let mut p = params(40, 30, 1);
    p.out_w = 10;
    p.out_h = 8;
    p.win_x = 3;
    p.win_y = 5;
    for (fh, fv) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
        p.flip_h = fh;
        p.flip_v = fv;
        for y in 0..8 {
            for x in 0..10 {
                let want = (3 + if fh == 1 { 9 - x } else { x }, 5 + if fv == 1 { 7 - y } else { y });
                assert_eq!(host::window_flip(&p, x, y), want);
            }
        }
    }
    // Through the whole augment: flipped output equals the unflipped output mirrored, bit for bit.
    let (w, h) = (61, 47);
    let rgb = fixture(w, h);
    let mut p = params(w as i32, h as i32, 6);
    p.crop_x = 4;
    p.crop_y = 9;
    p.crop_w = 30;
    p.crop_h = 40;
    p.resize_w = 17;
    p.resize_h = 19;
    p.out_w = 17;
    p.out_h = 19;
    let spec = raw_spec(DType::F32, Layout::Nchw);
    let plain = f32s(&run(&rgb, w as i32, h as i32, &p, &spec));
    p.flip_h = 1;
    p.flip_v = 1;
    let flipped = f32s(&run(&rgb, w as i32, h as i32, &p, &spec));
    for c in 0..3 {
        for y in 0..19 {
            for x in 0..17 {
                assert_eq!(nchw(&flipped, 17, 19, x, y, c).to_bits(), nchw(&plain, 17, 19, 16 - x, 18 - y, c).to_bits());
            }
        }
    }
}

#[test]
fn sincos_is_accurate() {
    for i in -2000..2000 {
        let deg = i as f32 * 0.37;
        let (s, c) = host::sincos_deg(deg);
        let r = (deg as f64).to_radians();
        assert!((s - r.sin()).abs() < 1e-14 && (c - r.cos()).abs() < 1e-14, "{deg}: {s} {c}");
    }
    assert_eq!(host::sincos_deg(90.0), (1.0, 0.0));
    assert_eq!(host::sincos_deg(-180.0), (0.0, -1.0));
}

#[test]
fn rotation_grid_matches_torchvision() {
    let mut p = params(9, 7, 1);
    for (deg, kind) in [(0.0f32, 0u32), (360.0, 0), (180.0, 1), (-180.0, 1), (90.0, 2), (33.0, 2), (-71.5, 2)] {
        p.angle_deg = deg;
        for y in 0..7 {
            for x in 0..9 {
                let (k, fx, fy) = host::rotate_src(&p, x, y);
                assert_eq!(k, kind, "{deg}");
                let a = (deg as f64).to_radians();
                let (gx, gy) = (x as f64 - 4.0, y as f64 - 3.0);
                let (ex, ey) = (a.cos() * gx - a.sin() * gy + 4.0, a.sin() * gx + a.cos() * gy + 3.0);
                assert!((fx as f64 - ex).abs() < 1e-5 && (fy as f64 - ey).abs() < 1e-5, "{deg} ({x},{y}): {fx},{fy} vs {ex},{ey}");
            }
        }
    }
    // 90° is an exact quarter turn on square outputs only, as torchvision's fast path.
    let mut sq = params(8, 8, 1);
    sq.angle_deg = 90.0;
    assert_eq!(host::rotate_src(&sq, 0, 0), (1, 7.0, 0.0));
}

/// Every geometry combination against the f64 reference, all dtypes/layouts on the way.
#[test]
fn whole_augment_matches_the_naive_reference() {
    let (w, h) = (53usize, 37usize);
    let rgb = fixture(w, h);
    let stored = to_img(&rgb, w, h);
    let mut cases = Vec::new();
    for orientation in [1u32, 3, 6, 7] {
        for filter in [FILTER_BILINEAR, FILTER_BICUBIC] {
            for aa in [1u32, 0] {
                for (angle, interp) in [(0.0f32, ROT_NEAREST), (180.0, ROT_NEAREST), (23.0, ROT_NEAREST), (-37.0, ROT_BILINEAR)] {
                    let mut p = params(w as i32, h as i32, orientation);
                    p.crop_x = 3;
                    p.crop_y = 2;
                    p.crop_w = p.src_w - 7;
                    p.crop_h = p.src_h - 5;
                    // Downscale on one axis, upscale on the other; eval-like window.
                    p.resize_w = 24;
                    p.resize_h = 61;
                    p.win_x = 2;
                    p.win_y = 5;
                    p.out_w = 20;
                    p.out_h = 50;
                    p.filter = filter;
                    p.antialias = aa;
                    p.flip_h = orientation % 2;
                    p.flip_v = (orientation / 3) % 2;
                    p.angle_deg = angle;
                    p.rot_interp = interp;
                    p.fill = [10.0, 128.0, 250.0];
                    cases.push(p);
                }
            }
        }
    }
    for p in cases {
        let (want, ambiguous) = ref_augment(&stored, &p);
        let got = f32s(&run(&rgb, w as i32, h as i32, &p, &raw_spec(DType::F32, Layout::Nchw)));
        let mut worst = 0.0f64;
        for y in 0..p.out_h {
            for x in 0..p.out_w {
                if ambiguous[(y * p.out_w + x) as usize] {
                    continue;
                }
                for c in 0..3 {
                    let d = (nchw(&got, p.out_w, p.out_h, x, y, c) as f64 - want.at(x as usize, y as usize)[c as usize]).abs();
                    worst = worst.max(d);
                }
            }
        }
        // f32 accumulation of ≤ a few dozen taps on the 0..255 scale.
        assert!(worst < 2e-3, "{p:?}: max abs diff {worst}");
    }
}

/// The separable CPU path and the per-pixel form the GPU kernel evaluates give the same bits.
#[test]
fn separable_and_per_pixel_resize_agree_bit_for_bit() {
    let (w, h) = (97i32, 71i32);
    let rgb = fixture(w as usize, h as usize);
    let src = SrcImage::full(&rgb, w, h);
    for (orientation, filter, aa, cw, ch, rw, rh) in [
        (1u32, FILTER_BILINEAR, 1u32, 90, 60, 31, 17),
        (5, FILTER_BICUBIC, 1, 50, 80, 64, 23),
        (8, FILTER_BICUBIC, 0, 40, 41, 99, 11),
        (2, FILTER_BILINEAR, 0, 13, 9, 50, 3),
    ] {
        let mut p = params(w, h, orientation);
        p.crop_x = 2;
        p.crop_y = 1;
        p.crop_w = cw;
        p.crop_h = ch;
        p.resize_w = rw;
        p.resize_h = rh;
        p.out_w = rw;
        p.out_h = rh;
        p.filter = filter;
        p.antialias = aa;
        // Identity normalisation in f32 is not exact, so compare before it: mean 0, std 1
        // gives x/255, and the reference applies the same division.
        let spec = OutputSpec { dtype: DType::F32, layout: Layout::Nhwc, mean: [0.0; 3], std: [1.0; 3] };
        let got = f32s(&run(&rgb, w, h, &p, &spec));
        for y in 0..rh {
            for x in 0..rw {
                let v = host::resized_pixel(src, &p, x, y).unwrap();
                for (c, vc) in v.iter().enumerate() {
                    let want = host::normalize(vc.clamp(0.0, 255.0), 0.0, 1.0);
                    let i = host::out_index(Layout::Nhwc, 0, c as i32, y, x, rh, rw) as usize;
                    assert_eq!(got[i].to_bits(), want.to_bits(), "{p:?} ({x},{y},{c})");
                }
            }
        }
    }
}

#[test]
fn dtypes_and_layouts_store_the_same_values() {
    let (w, h) = (30i32, 20i32);
    let rgb = fixture(w as usize, h as usize);
    let mut p = params(w, h, 1);
    p.resize_w = 12;
    p.resize_h = 9;
    p.out_w = 12;
    p.out_h = 9;
    let spec = |dtype, layout| OutputSpec { dtype, layout, ..OutputSpec::default() };
    let base = f32s(&run(&rgb, w, h, &p, &spec(DType::F32, Layout::Nchw)));
    let nhwc = f32s(&run(&rgb, w, h, &p, &spec(DType::F32, Layout::Nhwc)));
    let f16: Vec<u16> =
        run(&rgb, w, h, &p, &spec(DType::F16, Layout::Nchw)).chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    let bf16: Vec<u16> =
        run(&rgb, w, h, &p, &spec(DType::Bf16, Layout::Nhwc)).chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    for c in 0..3 {
        for y in 0..9 {
            for x in 0..12 {
                let v = nchw(&base, 12, 9, x, y, c);
                assert_eq!(nhwc[((y * 12 + x) * 3 + c) as usize].to_bits(), v.to_bits());
                assert_eq!(f16[((c * 9 + y) * 12 + x) as usize], half::f16::from_f32(v).to_bits());
                assert_eq!(bf16[((y * 12 + x) * 3 + c) as usize], half::bf16::from_f32(v).to_bits());
            }
        }
    }
}

#[test]
fn inconsistent_params_are_refused_with_a_sentence() {
    let (w, h) = (10i32, 8i32);
    let rgb = fixture(w as usize, h as usize);
    let src = SrcImage::full(&rgb, w, h);
    let spec = OutputSpec::default();
    let mut out = vec![0u8; 3 * 100 * 4];
    let mut s = Scratch::default();
    let mut p = params(w, h, 1);
    p.crop_w = 11;
    let e = host::augment(src, &p, &spec, &mut out, 0, &mut s).unwrap_err();
    assert!(e.contains("crop box 11x8"), "{e}");
    let p = params(w, h, 6); // params say 8x10 oriented; the image is 10x8 stored: consistent
    assert!(host::augment(src, &p, &spec, &mut vec![0u8; 3 * 80 * 4], 0, &mut s).is_ok());
    let mut p = params(h, w, 1); // params for an 8x10 image
    p.orientation = 1;
    let e = host::augment(src, &p, &spec, &mut out, 0, &mut s).unwrap_err();
    assert!(e.contains("decoded image is 10x8"), "{e}");
    let mut p = params(w, h, 1);
    p.angle_deg = f32::NAN;
    assert!(host::augment(src, &p, &spec, &mut out, 0, &mut s).unwrap_err().contains("finite"));
    let p = params(w, h, 1);
    let e = host::augment(src, &p, &spec, &mut [0u8; 16], 0, &mut s).unwrap_err();
    assert!(e.contains("output holds 16 bytes"), "{e}");
    let short = SrcImage { rgb: &rgb[..100], ..src };
    assert!(host::augment(short, &p, &spec, &mut out, 0, &mut s).unwrap_err().contains("decoded buffer"));
}

/// Augmenting from a decoded region that holds the crop gives the same bits as from the whole
/// image, for every orientation; a region that misses the crop is refused.
#[test]
fn region_input_gives_the_same_bits_as_the_whole_image() {
    let (w, h) = (45i32, 33i32);
    let rgb = fixture(w as usize, h as usize);
    let spec = OutputSpec::default();
    for orientation in 1..=8u32 {
        let mut p = params(w, h, orientation);
        p.crop_x = 5;
        p.crop_y = 7;
        p.crop_w = p.src_w - 12;
        p.crop_h = p.src_h - 15;
        p.resize_w = 16;
        p.resize_h = 14;
        p.out_w = 16;
        p.out_h = 14;
        let whole = run(&rgb, w, h, &p, &spec);
        // Stored bounding box of the crop, then cut that region out of the image.
        let a = host::orient_to_stored(orientation, p.crop_x, p.crop_y, p.src_w, p.src_h);
        let b = host::orient_to_stored(orientation, p.crop_x + p.crop_w - 1, p.crop_y + p.crop_h - 1, p.src_w, p.src_h);
        let (x0, y0, x1, y1) = (a.0.min(b.0), a.1.min(b.1), a.0.max(b.0) + 1, a.1.max(b.1) + 1);
        let mut region = Vec::new();
        for y in y0..y1 {
            region.extend_from_slice(&rgb[((y * w + x0) * 3) as usize..((y * w + x1) * 3) as usize]);
        }
        let src = SrcImage { rgb: &region, width: w, height: h, region: (x0, y0, x1 - x0, y1 - y0), row_stride: ((x1 - x0) * 3) as usize };
        let mut out = vec![0u8; whole.len()];
        host::augment(src, &p, &spec, &mut out, 0, &mut Scratch::default()).unwrap();
        assert_eq!(out, whole, "orientation {orientation}");
        // One column short of the crop: refused, nothing read out of bounds.
        let short = SrcImage { region: (x0 + 1, y0, x1 - x0 - 1, y1 - y0), ..src };
        let e = host::augment(short, &p, &spec, &mut out, 0, &mut Scratch::default()).unwrap_err();
        assert!(e.contains("does not hold the crop box"), "{e}");
    }
}
