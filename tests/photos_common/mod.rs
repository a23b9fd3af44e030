//! Small decodable photos for pipeline tests: `root/{a,b}/NN.jpg`, assorted sizes large enough
//! that random crops differ, made with jpeg_encoder from smooth patterns (shared by
//! tests/cpu_views.rs and tests/cpu_resolution.rs).
#![allow(dead_code)]

use jpeg_encoder::{ColorType, Encoder};
use std::path::Path;

/// A `w × h` JPEG of a pattern keyed by `seed`.
pub fn write_jpeg(path: &Path, w: u16, h: u16, seed: usize) {
    let rgb: Vec<u8> = (0..h as usize)
        .flat_map(|y| {
            (0..w as usize).flat_map(move |x| [((x * 3 + seed * 37) % 256) as u8, ((y * 5 + seed) % 256) as u8, ((x ^ y) % 256) as u8])
        })
        .collect();
    let mut out = Vec::new();
    Encoder::new(&mut out, 90).encode(&rgb, w, h, ColorType::Rgb).unwrap();
    std::fs::write(path, out).unwrap();
}

/// `root/a` with `first` images and `root/b` with one more, of sizes 120..+29 × 90..+17.
pub fn photo_folder(root: &Path, first: usize) {
    for (c, class) in ["a", "b"].iter().enumerate() {
        std::fs::create_dir_all(root.join(class)).unwrap();
        for i in 0..(first + c) {
            write_jpeg(&root.join(class).join(format!("{i:02}.jpg")), 120 + 29 * i as u16, 90 + 17 * (c + i) as u16, c * 10 + i);
        }
    }
}
