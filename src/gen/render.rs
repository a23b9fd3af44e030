//! The synthetic pictures: ImageNet-like sizes and photo-like content (value noise, shapes,
//! gradients) that compress like photos do.

use super::Rng;

/// ImageNet's shape spread (share in percent, width, height); the remainder is drawn as
/// odd sizes, small and large.
const SHAPES: [(u32, u32, u32); 8] =
    [(40, 500, 375), (14, 375, 500), (10, 500, 333), (7, 500, 400), (7, 500, 500), (6, 333, 500), (2, 400, 500), (2, 640, 480)];

pub(super) fn draw_size(rng: &mut Rng) -> (u32, u32) {
    let mut p = rng.int(0, 99);
    for (share, w, h) in SHAPES {
        if p < share {
            return (w, h);
        }
        p -= share;
    }
    // 12 % left: mostly smaller odd sizes, a few large photos.
    if p < 9 {
        let long = rng.int(120, 500);
        let short = (long as f32 * rng.range(0.35, 1.0)) as u32;
        let short = short.max(32);
        if rng.next() & 1 == 0 {
            (long, short)
        } else {
            (short, long)
        }
    } else {
        let long = rng.int(800, 1600);
        let short = (long as f32 * rng.range(0.6, 0.8)) as u32;
        if rng.next() & 1 == 0 {
            (long, short)
        } else {
            (short, long)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pixels.

/// One octave of value noise: random values on a grid of `cell`-pixel squares, interpolated
/// with smoothstep weights. Added into `out` (one f32 per pixel) times `amp`.
fn add_value_noise(out: &mut [f32], w: usize, h: usize, cell: f32, amp: f32, rng: &mut Rng) {
    let gw = (w as f32 / cell) as usize + 2;
    let gh = (h as f32 / cell) as usize + 2;
    let grid: Vec<f32> = (0..gw * gh).map(|_| rng.f() * 2.0 - 1.0).collect();
    let inv = 1.0 / cell;
    let smooth = |t: f32| t * t * (3.0 - 2.0 * t);
    let cols: Vec<(usize, f32)> = (0..w)
        .map(|x| {
            let fx = x as f32 * inv;
            let ix = fx as usize;
            (ix, smooth(fx - ix as f32))
        })
        .collect();
    for y in 0..h {
        let fy = y as f32 * inv;
        let iy = fy as usize;
        let ty = smooth(fy - iy as f32);
        let r0 = &grid[iy * gw..iy * gw + gw];
        let r1 = &grid[(iy + 1) * gw..(iy + 1) * gw + gw];
        let row = &mut out[y * w..y * w + w];
        for (o, &(ix, tx)) in row.iter_mut().zip(&cols) {
            let a = r0[ix] + (r0[ix + 1] - r0[ix]) * tx;
            let b = r1[ix] + (r1[ix + 1] - r1[ix]) * tx;
            *o += amp * (a + (b - a) * ty);
        }
    }
}

/// A filled region: colour and texture strength inside, painted in order (later on top).
struct Shape {
    kind: u32,
    cx: f32,
    cy: f32,
    /// Half extents along the rotated axes.
    rx: f32,
    ry: f32,
    /// Unit direction of the first axis.
    ux: f32,
    uy: f32,
    color: [f32; 3],
    gain: f32,
}

impl Shape {
    fn contains(&self, x: f32, y: f32) -> bool {
        let dx = x - self.cx;
        let dy = y - self.cy;
        let a = (dx * self.ux + dy * self.uy) / self.rx;
        let b = (-dx * self.uy + dy * self.ux) / self.ry;
        match self.kind {
            0 => a * a + b * b <= 1.0,                    // ellipse
            1 => a.abs() <= 1.0 && b.abs() <= 1.0,        // rectangle
            _ => b >= -1.0 && a.abs() <= (1.0 - b) * 0.5, // triangle
        }
    }
}

fn random_color(rng: &mut Rng, base: &[f32; 3]) -> [f32; 3] {
    // Photos are mostly muted: a random hue mixed with the scene's base colour.
    let mix = rng.range(0.2, 0.8);
    let light = rng.range(0.35, 1.25);
    let mut c = [0.0; 3];
    for (k, v) in c.iter_mut().enumerate() {
        *v = ((rng.range(0.0, 255.0) * (1.0 - mix) + base[k] * mix) * light).min(255.0);
    }
    c
}

/// The RGB pixels (HWC, u8) of one photo-like image.
pub(super) fn render(w: usize, h: usize, rng: &mut Rng) -> Vec<u8> {
    let n = w * h;
    let base = [rng.range(40.0, 220.0), rng.range(40.0, 210.0), rng.range(30.0, 200.0)];
    // Per-image detail: how busy the scene is. Drives the file-size spread.
    let detail = rng.range(0.3, 1.0);
    let detail = detail * detail * 2.2 + 0.3;

    // 1. Background: linear gradient between two colours + low-frequency colour fields.
    let c0 = random_color(rng, &base);
    let c1 = random_color(rng, &base);
    let (gx, gy) = {
        let a = rng.range(-1.0, 1.0);
        let b = rng.range(-1.0, 1.0);
        let l = (a * a + b * b).sqrt().max(1e-3);
        (a / l / w as f32, b / l / h as f32)
    };
    let mut chroma: [Vec<f32>; 3] = [vec![0.0; n], vec![0.0; n], vec![0.0; n]];
    for ch in chroma.iter_mut() {
        add_value_noise(ch, w, h, rng.range(90.0, 180.0), 35.0, rng);
        add_value_noise(ch, w, h, rng.range(25.0, 50.0), 10.0 * detail, rng);
    }
    let mut color = vec![0.0f32; n * 3];
    let mut gain = vec![1.0f32; n];
    for y in 0..h {
        for x in 0..w {
            let t = (x as f32 * gx + y as f32 * gy + 1.0) * 0.5;
            let i = y * w + x;
            for k in 0..3 {
                color[i * 3 + k] = c0[k] + (c1[k] - c0[k]) * t + chroma[k][i];
            }
        }
    }

    // 2. Shapes with hard edges, each with its own colour and texture strength.
    let nshapes = rng.int(3, 14);
    let (wf, hf) = (w as f32, h as f32);
    for _ in 0..nshapes {
        let a = rng.range(-1.0, 1.0);
        let b = rng.range(-1.0, 1.0);
        let l = (a * a + b * b).sqrt().max(1e-3);
        let s = Shape {
            kind: rng.int(0, 2),
            cx: rng.range(0.0, wf),
            cy: rng.range(0.0, hf),
            rx: rng.range(0.04, 0.45) * wf,
            ry: rng.range(0.04, 0.45) * hf,
            ux: a / l,
            uy: b / l,
            color: random_color(rng, &base),
            gain: rng.range(0.2, 2.2),
        };
        let r = s.rx.max(s.ry);
        let x0 = (s.cx - r).max(0.0) as usize;
        let x1 = ((s.cx + r) as usize + 1).min(w);
        let y0 = (s.cy - r).max(0.0) as usize;
        let y1 = ((s.cy + r) as usize + 1).min(h);
        for y in y0..y1 {
            for x in x0..x1 {
                if s.contains(x as f32 + 0.5, y as f32 + 0.5) {
                    let i = y * w + x;
                    color[i * 3..i * 3 + 3].copy_from_slice(&s.color);
                    gain[i] = s.gain;
                }
            }
        }
    }

    // 3. Thin line structures (branches, grass, wires).
    let nlines = (rng.int(0, 30) as f32 * detail) as u32;
    for _ in 0..nlines {
        let (mut x, mut y) = (rng.range(0.0, wf), rng.range(0.0, hf));
        let a = rng.range(-1.0, 1.0);
        let b = rng.range(-1.0, 1.0);
        let l = (a * a + b * b).sqrt().max(1e-3);
        let (dx, dy) = (a / l, b / l);
        let len = rng.range(0.05, 0.6) * wf.max(hf);
        let width = rng.int(1, 3) as i64;
        let c = random_color(rng, &base);
        let mut t = 0.0;
        while t < len {
            for oy in 0..width {
                for ox in 0..width {
                    let px = x as i64 + ox;
                    let py = y as i64 + oy;
                    if px >= 0 && py >= 0 && (px as usize) < w && (py as usize) < h {
                        let i = py as usize * w + px as usize;
                        color[i * 3..i * 3 + 3].copy_from_slice(&c);
                    }
                }
            }
            x += dx;
            y += dy;
            t += 1.0;
        }
    }

    // 4. Luminance texture at several scales, strength per region, and sensor noise.
    let mut tex = vec![0.0f32; n];
    let octaves = [(96.0, 18.0), (32.0, 14.0), (12.0, 14.0), (5.0, 15.0), (2.0, 15.0), (1.0, 10.0)];
    for (cell, amp) in octaves {
        add_value_noise(&mut tex, w, h, cell * rng.range(0.8, 1.25), amp * detail, rng);
    }
    let sigma = rng.range(0.8, 3.5);
    let mut out = vec![0u8; n * 3];
    for i in 0..n {
        let t = tex[i] * gain[i];
        for k in 0..3 {
            // Triangular noise: sum of two uniforms, scaled to about `sigma`.
            let r = rng.next();
            let u = ((r & 0xFFFF) as f32 + ((r >> 16) & 0xFFFF) as f32) * (1.0 / 65536.0) - 1.0;
            let v = color[i * 3 + k] + t + u * sigma * 2.45;
            out[i * 3 + k] = v.clamp(0.0, 255.0) as u8;
        }
    }
    out
}
