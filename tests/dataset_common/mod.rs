//! Fixture builders shared by the dataset tests: hand-built JPEG headers (every field known),
//! raw tar blocks (for the variants the crate's writer never produces), folder/list/tar trees.
#![allow(dead_code)]

use std::fs;
use std::path::Path;

/// A JPEG whose header fields are chosen by the test. Its scan data is filler: the header
/// parser and the readers never decode pixels.
#[derive(Clone, Debug)]
pub struct Jpeg {
    pub sof: u8,
    pub precision: u8,
    pub width: u16,
    pub height: u16,
    /// (component id, h, v)
    pub comps: Vec<(u8, u8, u8)>,
    /// (orientation value, little endian?)
    pub exif: Option<(u16, bool)>,
    pub adobe: Option<u8>,
    pub jfif: bool,
    pub icc: bool,
    pub dri: Option<u16>,
    /// Height to put in a DNL marker after the first scan (the SOF then says 0).
    pub dnl: Option<u16>,
    /// Hierarchical: DHP with this (width, height) before the first frame.
    pub dhp: Option<(u16, u16)>,
    /// Bytes of COM padding before the frame (to push the header past a prefix).
    pub padding: usize,
    /// Bytes of filler scan data.
    pub scan: usize,
}

impl Jpeg {
    pub fn new(width: u16, height: u16) -> Self {
        Jpeg {
            sof: 0xC0,
            precision: 8,
            width,
            height,
            comps: vec![(1, 2, 2), (2, 1, 1), (3, 1, 1)],
            exif: None,
            adobe: None,
            jfif: true,
            icc: false,
            dri: None,
            dnl: None,
            dhp: None,
            padding: 0,
            scan: 64,
        }
    }

    pub fn gray(mut self) -> Self {
        self.comps = vec![(1, 1, 1)];
        self
    }

    fn segment(out: &mut Vec<u8>, marker: u8, payload: &[u8]) {
        out.extend_from_slice(&[0xFF, marker]);
        out.extend_from_slice(&((payload.len() + 2) as u16).to_be_bytes());
        out.extend_from_slice(payload);
    }

    fn frame(&self, width: u16, height: u16) -> Vec<u8> {
        let mut f = vec![self.precision];
        f.extend_from_slice(&height.to_be_bytes());
        f.extend_from_slice(&width.to_be_bytes());
        f.push(self.comps.len() as u8);
        for &(id, h, v) in &self.comps {
            f.extend_from_slice(&[id, h << 4 | v, 0]);
        }
        f
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut out = vec![0xFF, 0xD8];
        if self.jfif {
            Self::segment(&mut out, 0xE0, b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
        }
        if let Some((o, le)) = self.exif {
            let mut t: Vec<u8> = b"Exif\0\0".to_vec();
            let u16b = |v: u16| if le { v.to_le_bytes() } else { v.to_be_bytes() };
            let u32b = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
            t.extend_from_slice(if le { b"II*\0" } else { b"MM\0*" });
            t.extend_from_slice(&u32b(8));
            t.extend_from_slice(&u16b(2)); // two entries: XResolution-ish filler, then orientation
            t.extend_from_slice(&u16b(0x011A));
            t.extend_from_slice(&u16b(5));
            t.extend_from_slice(&u32b(1));
            t.extend_from_slice(&u32b(38));
            t.extend_from_slice(&u16b(0x0112));
            t.extend_from_slice(&u16b(3));
            t.extend_from_slice(&u32b(1));
            t.extend_from_slice(&u16b(o));
            t.extend_from_slice(&[0, 0]);
            t.extend_from_slice(&u32b(0)); // no next IFD
            t.extend_from_slice(&u32b(72));
            t.extend_from_slice(&u32b(1));
            Self::segment(&mut out, 0xE1, &t);
        }
        if self.icc {
            Self::segment(&mut out, 0xE2, b"ICC_PROFILE\0\x01\x01fakeprofile");
        }
        let mut rest = self.padding;
        while rest > 0 {
            let n = rest.min(65533);
            Self::segment(&mut out, 0xFE, &vec![b'x'; n]);
            rest -= n;
        }
        Self::segment(&mut out, 0xDB, &[0u8; 65]);
        if let Some((w, h)) = self.dhp {
            Self::segment(&mut out, 0xDE, &self.frame(w, h));
        }
        let sof_height = if self.dnl.is_some() { 0 } else { self.height };
        Self::segment(&mut out, self.sof, &self.frame(self.width, sof_height));
        if let Some(t) = self.adobe {
            Self::segment(&mut out, 0xEE, &[b'A', b'd', b'o', b'b', b'e', 0, 100, 0, 0, 0, 0, t]);
        }
        if let Some(r) = self.dri {
            Self::segment(&mut out, 0xDD, &r.to_be_bytes());
        }
        let mut sos = vec![self.comps.len() as u8];
        for &(id, _, _) in &self.comps {
            sos.extend_from_slice(&[id, 0]);
        }
        sos.extend_from_slice(&[0, 63, 0]);
        Self::segment(&mut out, 0xDA, &sos);
        for i in 0..self.scan {
            // Filler that includes stuffed 0xFF00 pairs and restart markers, as real scans do.
            match i % 16 {
                7 => out.extend_from_slice(&[0xFF, 0x00]),
                15 => out.extend_from_slice(&[0xFF, 0xD0 + (i / 16 % 8) as u8]),
                _ => out.push((i * 37 % 251) as u8),
            }
        }
        if let Some(h) = self.dnl {
            Self::segment(&mut out, 0xDC, &h.to_be_bytes());
        }
        out.extend_from_slice(&[0xFF, 0xD9]);
        out
    }
}

/// A small valid JPEG of the given size (4:2:0 baseline).
pub fn jpeg(width: u16, height: u16) -> Vec<u8> {
    Jpeg::new(width, height).bytes()
}

pub fn write(path: &Path, bytes: &[u8]) {
    if let Some(d) = path.parent() {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(path, bytes).unwrap();
}

/// An ImageFolder tree: `classes[c]` holds `per_class[c]` JPEGs whose widths encode (c, i).
pub fn folder(root: &Path, classes: &[&str], per_class: &[usize]) {
    for (c, (name, &n)) in classes.iter().zip(per_class).enumerate() {
        for i in 0..n {
            write(&root.join(name).join(format!("img_{i:04}.jpg")), &jpeg(10 + c as u16, 20 + i as u16));
        }
    }
}

/// A raw ustar header block (checksum filled in).
pub fn tar_header(name: &str, size: u64, kind: u8) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len().min(100)].copy_from_slice(&name.as_bytes()[..name.len().min(100)]);
    h[100..108].copy_from_slice(b"0000644\0");
    h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| b as u32).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

/// Append one member (header + data + padding) to a raw tar.
pub fn tar_member(out: &mut Vec<u8>, name: &str, data: &[u8], kind: u8) {
    out.extend_from_slice(&tar_header(name, data.len() as u64, kind));
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

/// A pax record `"%d path=...\n"` with its self-inclusive length.
pub fn pax_record(key: &str, value: &str) -> String {
    let body = format!(" {key}={value}\n");
    let mut n = body.len() + 1;
    while format!("{n}{body}").len() != n {
        n += 1;
    }
    format!("{n}{body}")
}
