//! Tar shards, WebDataset convention: members `key.jpg` (or `.jpeg`, `.png`: the format is sniffed from the bytes) with an optional
//! `key.cls` holding the integer label, where the key is the member path up to the first dot
//! of its file name. A dataset is a brace pattern (`train-{0000..0127}.tar`), one `.tar`, or a
//! folder of `.tar` files.
//!
//! Shards are never unpacked: indexing walks the 512-byte headers with positioned reads and
//! records each member's data offset and length; samples are later read by offset. Handles
//! ustar (name + prefix), GNU long names (`L`) and pax extended headers (`x`: `path`, `size`).
//! A shard that ends inside a header or a member is an error naming the shard and the offset.
//! One that ends at a member boundary without tar's end-of-archive blocks is accepted (as GNU
//! tar and Python accept it) unless its last sample is visibly incomplete: a `.cls` whose
//! image is missing, or an unlabelled image in a labelled shard, is a "truncated tar" error
//! rather than a sample quietly lost or a label quietly missing. A member name that is absolute
//! or has a `..` component, and a link, device or FIFO named as a sample, are refused by name.
//!
//! [`TarWriter`] writes shards for `stoke pack`.

use super::index::Fingerprint;
use super::{Entry, Listing, Location, SourceKind};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const BLOCK: u64 = 512;

/// Expand the brace groups of `pattern`: `{0000..0127}` (zero padding kept from the first
/// bound) and `{a,b,c}`. Several groups multiply out. A pattern without braces is returned as is.
pub fn expand_braces(pattern: &str) -> std::result::Result<Vec<String>, String> {
    let Some(open) = pattern.find('{') else {
        if pattern.contains('}') {
            return Err(format!("unmatched '}}' in pattern {pattern:?}"));
        }
        return Ok(vec![pattern.to_string()]);
    };
    let close = pattern[open..].find('}').map(|c| open + c).ok_or_else(|| format!("unmatched '{{' in pattern {pattern:?}"))?;
    let (head, body, tail) = (&pattern[..open], &pattern[open + 1..close], &pattern[close + 1..]);
    let alts: Vec<String> = if let Some((a, b)) = body.split_once("..") {
        let lo: u64 = a.parse().map_err(|_| format!("range start {a:?} in pattern {pattern:?} is not a number"))?;
        let hi: u64 = b.parse().map_err(|_| format!("range end {b:?} in pattern {pattern:?} is not a number"))?;
        if lo > hi {
            return Err(format!("range {{{body}}} in pattern {pattern:?} is empty (start > end)"));
        }
        if hi - lo >= 10_000_000 {
            return Err(format!("range {{{body}}} in pattern {pattern:?} names more than 10 million shards"));
        }
        let width = if a.len() > 1 && a.starts_with('0') { a.len() } else { 0 };
        (lo..=hi).map(|v| format!("{v:0width$}")).collect()
    } else {
        body.split(',').map(str::to_owned).collect()
    };
    let tails = expand_braces(tail)?;
    let mut out = Vec::with_capacity(alts.len() * tails.len());
    for alt in &alts {
        for rest in &tails {
            out.push(format!("{head}{alt}{rest}"));
        }
    }
    Ok(out)
}

/// The shard paths a tar dataset names, and the folder the index goes beside.
pub(crate) fn shard_paths(path: &Path) -> Result<Vec<PathBuf>> {
    let s = path.to_str().ok_or_else(|| Error::dataset(path, "path is not valid UTF-8"))?;
    if s.contains('{') {
        let shards: Vec<PathBuf> = expand_braces(s).map_err(|m| Error::dataset(path, m))?.into_iter().map(PathBuf::from).collect();
        for p in &shards {
            if !p.exists() {
                return Err(Error::dataset(p, format!("shard named by the pattern {s:?} does not exist")));
            }
        }
        return Ok(shards);
    }
    if path.is_dir() {
        let mut shards = Vec::new();
        for e in fs::read_dir(path).map_err(|e| Error::io(path, e))? {
            let p = e.map_err(|e| Error::io(path, e))?.path();
            if p.extension().is_some_and(|x| x.eq_ignore_ascii_case("tar")) && p.is_file() {
                shards.push(p);
            }
        }
        shards.sort();
        return Ok(shards);
    }
    Ok(vec![path.to_path_buf()])
}

/// Read an octal (or GNU base-256) numeric header field.
fn number(field: &[u8]) -> Option<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        // GNU base-256: big-endian, first byte's top bit is the marker.
        let mut v: u64 = (field[0] & 0x7f) as u64;
        for &b in &field[1..] {
            v = v.checked_mul(256)?.checked_add(b as u64)?;
        }
        return Some(v);
    }
    let t: Vec<u8> = field.iter().copied().skip_while(|&b| b == b' ').take_while(|&b| b != 0 && b != b' ').collect();
    if t.is_empty() {
        return Some(0);
    }
    let mut v = 0u64;
    for b in t {
        if !(b'0'..=b'7').contains(&b) {
            return None;
        }
        v = v.checked_mul(8)?.checked_add((b - b'0') as u64)?;
    }
    Some(v)
}

fn cstr(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..end]
}

/// One regular-file member of a shard.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// Full member path.
    pub name: String,
    /// Byte offset of the data in the shard.
    pub offset: u64,
    /// Data length.
    pub len: u64,
}

/// Pax records `"%d %s=%s\n"`: returns `(path, size)` overrides.
fn parse_pax(data: &[u8]) -> (Option<String>, Option<u64>) {
    let (mut path, mut size) = (None, None);
    let mut rest = data;
    while !rest.is_empty() {
        let Some(sp) = rest.iter().position(|&b| b == b' ') else { break };
        let Some(len) = std::str::from_utf8(&rest[..sp]).ok().and_then(|s| s.parse::<usize>().ok()) else { break };
        if len <= sp || len > rest.len() {
            break;
        }
        let rec = &rest[sp + 1..len];
        let rec = rec.strip_suffix(b"\n").unwrap_or(rec);
        if let Some(eq) = rec.iter().position(|&b| b == b'=') {
            let (k, v) = (&rec[..eq], &rec[eq + 1..]);
            match k {
                b"path" => path = String::from_utf8(v.to_vec()).ok(),
                b"size" => size = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()),
                _ => {}
            }
        }
        rest = &rest[len..];
    }
    (path, size)
}

/// Positioned reads of a shard: an open file, or the shard's bytes in memory (read whole from
/// a store).
pub(crate) trait ReadAt {
    /// Fill `buf` from byte `offset`; an error when the source ends first.
    fn read_at_exact(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
}

impl ReadAt for File {
    fn read_at_exact(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.read_exact_at(buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_at_exact(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let src = usize::try_from(offset).ok().and_then(|o| self.get(o..o.checked_add(buf.len())?));
        let src = src.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past the end of the shard"))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// Walk a shard's headers and list its regular-file members, and whether the shard ends with
/// tar's end-of-archive block (false: the file simply ends at a member boundary).
pub(crate) fn members(shard: &Path, file: &(impl ReadAt + ?Sized), file_len: u64) -> Result<(Vec<Member>, bool)> {
    let err = |msg: String| Error::dataset(shard, msg);
    let mut out = Vec::new();
    let mut off = 0u64;
    let mut hdr = [0u8; BLOCK as usize];
    let (mut long_name, mut pax_path, mut pax_size): (Option<String>, Option<String>, Option<u64>) = (None, None, None);
    let read_data = |off: u64, len: u64, what: &str| -> Result<Vec<u8>> {
        if len > 16 << 20 {
            return Err(err(format!("{what} at byte {off} is {len} bytes long, more than 16 MiB")));
        }
        let mut v = vec![0u8; len as usize];
        file.read_at_exact(&mut v, off).map_err(|e| Error::io(shard, e))?;
        Ok(v)
    };
    let mut marker = false;
    loop {
        if off == file_len {
            break; // no end-of-archive blocks: accepted, as GNU tar and Python do
        }
        if off + BLOCK > file_len {
            return Err(err(format!("truncated tar: header at byte {off} is cut short (the file ends at byte {file_len})")));
        }
        file.read_at_exact(&mut hdr, off).map_err(|e| Error::io(shard, e))?;
        if hdr.iter().all(|&b| b == 0) {
            marker = true;
            break; // end-of-archive marker
        }
        let stored = number(&hdr[148..156]);
        let sum: u64 = hdr.iter().enumerate().map(|(i, &b)| if (148..156).contains(&i) { b' ' as u64 } else { b as u64 }).sum();
        if stored != Some(sum) {
            return Err(err(format!(
                "not a tar file or corrupt: bad header checksum at byte {off} (stored {:?}, computed {sum})",
                String::from_utf8_lossy(cstr(&hdr[148..156])).trim()
            )));
        }
        let size = match pax_size.take() {
            Some(s) => s,
            None => number(&hdr[124..136]).ok_or_else(|| err(format!("bad size field in the tar header at byte {off}")))?,
        };
        let data = off + BLOCK;
        let end = data.checked_add(size).ok_or_else(|| err(format!("absurd member size {size} at byte {off}")))?;
        let name_from_header = || {
            let name = cstr(&hdr[0..100]);
            let prefix = if &hdr[257..262] == b"ustar" { cstr(&hdr[345..500]) } else { &[][..] };
            let mut s = String::from_utf8_lossy(prefix).into_owned();
            if !s.is_empty() {
                s.push('/');
            }
            s.push_str(&String::from_utf8_lossy(name));
            s
        };
        if end > file_len {
            return Err(err(format!(
                "truncated tar: member {:?} at byte {off} needs {size} bytes of data up to byte {end}, but the file ends at byte {file_len}",
                long_name.clone().or(pax_path.clone()).unwrap_or_else(name_from_header)
            )));
        }
        match hdr[156] {
            b'L' => long_name = Some(String::from_utf8_lossy(cstr(&read_data(data, size, "GNU long name")?)).into_owned()),
            b'x' => {
                let (p, s) = parse_pax(&read_data(data, size, "pax header")?);
                pax_path = p.or(pax_path);
                pax_size = s;
            }
            b'0' | 0 | b'7' => {
                let name = long_name.take().or(pax_path.take()).unwrap_or_else(name_from_header);
                // `tar cf x.tar .` writes `./a/b.jpg`: the key is `a/b`.
                let name = name.trim_start_matches("./").to_string();
                // Names are keys only (nothing is extracted), but a key is a path inside the
                // data set: the rule of a file list holds here too.
                if name.starts_with('/') || name.split('/').any(|c| c == "..") {
                    return Err(err(format!(
                        "member {name:?} at byte {off}: an absolute path or one with `..` is not a key inside the shard; re-create the shard with relative names"
                    )));
                }
                out.push(Member { name, offset: data, len: size });
            }
            kind @ (b'1' | b'2' | b'3' | b'4' | b'6') => {
                // Links and special files carry no bytes of their own: a sample named by one
                // would be read as empty (or as the bytes that follow), so it is refused by name.
                let name = long_name.take().or(pax_path.take()).unwrap_or_else(name_from_header);
                let (_, ext) = split_key(&name);
                if super::is_image_extension(ext) || ext.eq_ignore_ascii_case("cls") {
                    let what = match kind {
                        b'1' => "a hard link",
                        b'2' => "a symbolic link",
                        b'3' => "a character device",
                        b'4' => "a block device",
                        _ => "a FIFO",
                    };
                    let target = String::from_utf8_lossy(cstr(&hdr[157..257])).into_owned();
                    let to = if kind <= b'2' { format!(" to {target:?}") } else { String::new() };
                    return Err(err(format!(
                        "member {name:?} at byte {off} is {what}{to}, not a regular file: it holds no image bytes; re-create the shard with the files themselves (GNU tar: --hard-dereference, --dereference)"
                    )));
                }
            }
            b'K' => {} // GNU long link target: belongs to the link member that follows
            _ => {
                // Directories, links, global pax headers, ...: no sample data.
                long_name = None;
                pax_path = None;
            }
        }
        off = data + size.div_ceil(BLOCK) * BLOCK;
    }
    Ok((out, marker))
}

/// WebDataset split: `dir/base.ext.more` → (`dir/base`, `ext.more`).
pub(crate) fn split_key(name: &str) -> (&str, &str) {
    let base_start = name.rfind('/').map(|i| i + 1).unwrap_or(0);
    match name[base_start..].find('.') {
        Some(dot) => (&name[..base_start + dot], &name[base_start + dot + 1..]),
        None => (name, ""),
    }
}

/// The stem a shard contributes to its samples' keys: the file name without `.tar`.
pub(crate) fn shard_stem(p: &Path) -> String {
    let n = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    match n.len().checked_sub(4) {
        Some(cut) if n[cut..].eq_ignore_ascii_case(".tar") => n[..cut].to_string(),
        _ => n,
    }
}

/// Stat the shards and fingerprint them (size + mtime), without reading them.
pub(crate) fn fingerprint(shards: &[PathBuf]) -> Result<u64> {
    let mut fp = Fingerprint::new(SourceKind::Tar);
    for s in shards {
        let md = fs::metadata(s).map_err(|e| Error::dataset(s, format!("cannot read shard: {e}")))?;
        fp.add_file(&s.to_string_lossy(), &md);
    }
    Ok(fp.finish())
}

/// List the samples of the shards (`root` is where keys and the index are anchored).
pub(crate) fn list(root: &Path, shards: Vec<PathBuf>, fingerprint: u64, threads: usize, progress: bool) -> Result<Listing> {
    if shards.is_empty() {
        return Err(Error::dataset(root, "empty dataset: no .tar shards found"));
    }
    // Walk the shards in parallel (headers only), then assemble in shard order.
    let pb = super::index::progress(progress, shards.len() as u64, "reading shard headers");
    let results = super::index::parallel_map(shards.len(), threads, Some(&pb), |i| scan_shard(&shards[i]));
    pb.finish_and_clear();
    let classes = read_class_names(root).unwrap_or_default();
    assemble(root, shards, results, classes, fingerprint)
}

/// The samples of shards in a store: each shard is read whole (one GET) and its members and
/// image headers are parsed from memory, so indexing costs one pass over the bytes.
#[cfg(feature = "remote")]
pub(crate) fn list_remote(
    store: &super::remote::Store,
    root: &Path,
    shards: Vec<PathBuf>,
    fingerprint: u64,
    threads: usize,
    progress: bool,
) -> Result<Listing> {
    let pb = super::index::progress(progress, shards.len() as u64, "reading shards");
    // Requests wait on the network, not the CPU: more of them than cores.
    let threads = threads.max(8);
    let results = super::index::parallel_map(shards.len(), threads, Some(&pb), |i| {
        let url = shards[i].to_string_lossy();
        let bytes = store.get(&url)?;
        scan_members(&shards[i], &bytes[..], bytes.len() as u64, true)
    });
    pb.finish_and_clear();
    let classes_url = format!("{}/{CLASSES_FILE}", root.to_string_lossy().trim_end_matches('/'));
    let classes = match store.get_if_present(&classes_url)? {
        Some(b) => String::from_utf8_lossy(&b).lines().map(str::to_owned).collect(),
        None => Vec::new(),
    };
    assemble(root, shards, results, classes, fingerprint)
}

/// The data set's listing from each shard's samples, in shard order: keys prefixed with the
/// shard's stem, labels checked (all or none), class names from `classes.txt` (`names`) and
/// label numbers beyond it.
fn assemble(
    root: &Path,
    shards: Vec<PathBuf>,
    results: Vec<Result<(Vec<Entry>, u64)>>,
    names: Vec<String>,
    fingerprint: u64,
) -> Result<Listing> {
    let mut entries = Vec::new();
    let mut ignored = 0u64;
    let mut stems: HashMap<String, usize> = HashMap::new();
    let mut any_label = false;
    let mut unlabeled: Option<(String, usize)> = None;
    for (i, r) in results.into_iter().enumerate() {
        let (es, ign) = r?;
        let stem = shard_stem(&shards[i]);
        if let Some(j) = stems.insert(stem.clone(), i) {
            return Err(Error::dataset(&shards[i], format!("duplicate keys: shard name {stem:?} is also used by {}", shards[j].display())));
        }
        ignored += ign;
        for mut e in es {
            if e.label >= 0 {
                any_label = true;
            } else if unlabeled.is_none() {
                unlabeled = Some((format!("{stem}/{}", e.key), i));
            }
            e.key = format!("{stem}/{}", e.key);
            if let Location::Tar { shard, .. } = &mut e.location {
                *shard = i as u32;
            }
            entries.push(e);
        }
    }
    if entries.is_empty() {
        let at = if shards.len() == 1 { shards[0].as_path() } else { root };
        return Err(Error::dataset(at, format!("empty dataset: the {} shard(s) hold no image (.jpg/.jpeg/.png) members", shards.len())));
    }
    if any_label {
        if let Some((k, i)) = unlabeled {
            return Err(Error::dataset(&shards[i], format!("sample {k} has no .cls label while other samples have one")));
        }
    }
    let max_label = entries.iter().map(|e| e.label).max().unwrap_or(-1);
    let mut classes = names;
    for l in classes.len() as i64..=max_label {
        classes.push(l.to_string());
    }
    Ok(Listing { root: root.to_path_buf(), classes, ignored, shards, entries, fingerprint })
}

/// `classes.txt` beside the shards (written by `stoke pack`): one class name per line.
fn read_class_names(root: &Path) -> Option<Vec<String>> {
    let text = fs::read_to_string(root.join(CLASSES_FILE)).ok()?;
    Some(text.lines().map(str::to_owned).collect())
}

/// File written beside packed shards with the class names, label order.
pub const CLASSES_FILE: &str = "classes.txt";

/// The samples of one shard file; see [`scan_members`].
fn scan_shard(shard: &Path) -> Result<(Vec<Entry>, u64)> {
    let file = File::open(shard).map_err(|e| Error::io(shard, e))?;
    let file_len = file.metadata().map_err(|e| Error::io(shard, e))?.len();
    scan_members(shard, &file, file_len, false)
}

/// The samples of one shard (keys without the shard stem; labels −1 where no `.cls`), and the
/// number of members that are neither images ([`super::IMAGE_EXTENSIONS`]) nor `.cls`. With
/// `headers`, each image's header is parsed too (the shard is in memory).
pub(crate) fn scan_members(shard: &Path, file: &(impl ReadAt + ?Sized), file_len: u64, headers: bool) -> Result<(Vec<Entry>, u64)> {
    let (ms, marker) = members(shard, file, file_len)?;
    let mut buf = Vec::new();
    let mut entries: Vec<Entry> = Vec::new();
    let mut by_key: HashMap<&str, u64> = HashMap::new(); // key → offset of its image
    let mut labels: HashMap<&str, (i64, u64)> = HashMap::new();
    let mut ignored = 0u64;
    for m in &ms {
        let (key, ext) = split_key(&m.name);
        let ext = ext.to_ascii_lowercase();
        if super::is_image_extension(&ext) {
            if let Some(&first) = by_key.get(key) {
                return Err(Error::dataset(
                    shard,
                    format!("duplicate keys: {key:?} has image members at byte {first} and at byte {}", m.offset),
                ));
            }
            by_key.insert(key, m.offset);
            let header = if headers {
                let parsed = super::index::header_of(m.len, &mut buf, |n, b| {
                    b.resize(n, 0);
                    file.read_at_exact(b, m.offset)
                });
                Some(
                    parsed
                        .map_err(|e| Error::dataset(shard, format!("cannot read sample {key} at byte {}: {e}", m.offset)))?
                        .map_err(|h| h.to_string().into_boxed_str()),
                )
            } else {
                None
            };
            entries.push(Entry {
                key: key.to_string(),
                label: -1,
                len: m.len,
                location: Location::Tar { shard: 0, offset: m.offset },
                header,
            });
        } else if ext == "cls" {
            if let Some((_, at)) = labels.get(key) {
                return Err(Error::dataset(
                    shard,
                    format!("duplicate keys: {key:?} has .cls members at byte {at} and at byte {}", m.offset),
                ));
            }
            if m.len > 64 {
                return Err(Error::dataset(shard, format!("{key}.cls at byte {} is {} bytes, too long for a label", m.offset, m.len)));
            }
            let mut b = vec![0u8; m.len as usize];
            file.read_at_exact(&mut b, m.offset).map_err(|e| Error::io(shard, e))?;
            let t = String::from_utf8_lossy(&b);
            let label: i64 = t
                .trim()
                .parse()
                .map_err(|_| Error::dataset(shard, format!("{key}.cls at byte {}: label {:?} is not an integer", m.offset, t.trim())))?;
            if label < 0 {
                return Err(Error::dataset(
                    shard,
                    format!("{key}.cls at byte {}: label {label} is out of range (labels must be >= 0)", m.offset),
                ));
            }
            labels.insert(key, (label, m.offset));
        } else {
            ignored += 1;
        }
    }
    if !marker {
        if let Some(last) = ms.last() {
            cut_short_check(shard, file_len, last, &by_key, &labels)?;
        }
    }
    // A label without an image counts as ignored.
    ignored += labels.keys().filter(|k| !by_key.contains_key(*k)).count() as u64;
    for e in &mut entries {
        if let Some((l, _)) = labels.get(e.key.as_str()) {
            e.label = *l;
        }
    }
    Ok((entries, ignored))
}

/// A shard without end-of-archive blocks may have been cut at a member boundary: its last
/// member then shows it when the sample it belongs to is incomplete (a `.cls` whose image is
/// gone, or an image without the `.cls` its shard's other samples have).
fn cut_short_check(
    shard: &Path,
    file_len: u64,
    last: &Member,
    images: &HashMap<&str, u64>,
    labels: &HashMap<&str, (i64, u64)>,
) -> Result<()> {
    let (key, ext) = split_key(&last.name);
    let missing = if ext.eq_ignore_ascii_case("cls") && !images.contains_key(key) {
        "its image"
    } else if images.contains_key(key) && !labels.contains_key(key) && !labels.is_empty() {
        "its .cls label (the shard's other samples have one)"
    } else {
        return Ok(());
    };
    Err(Error::dataset(
        shard,
        format!(
            "truncated tar: the file ends at byte {file_len} right after member {:?}, with no end-of-archive blocks, and sample {key} lacks {missing}: cut short at a member boundary?",
            last.name
        ),
    ))
}

/// Writes one ustar shard, with GNU long-name entries for names over 100 bytes.
pub struct TarWriter<W: Write> {
    out: W,
    written: u64,
}

impl<W: Write> TarWriter<W> {
    /// Start a shard on `out`.
    pub fn new(out: W) -> Self {
        Self { out, written: 0 }
    }

    /// Bytes written so far (headers and padding included).
    pub fn written(&self) -> u64 {
        self.written
    }

    fn header(&mut self, name: &[u8], size: u64, kind: u8) -> std::io::Result<()> {
        let mut h = [0u8; BLOCK as usize];
        let n = name.len().min(100);
        h[..n].copy_from_slice(&name[..n]);
        h[100..108].copy_from_slice(b"0000644\0");
        h[108..116].copy_from_slice(b"0000000\0");
        h[116..124].copy_from_slice(b"0000000\0");
        if size < 0o77777777777 {
            h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
        } else {
            h[124] = 0x80;
            h[128..136].copy_from_slice(&size.to_be_bytes());
        }
        h[136..148].copy_from_slice(b"00000000000\0");
        h[156] = kind;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u64 = h.iter().map(|&b| b as u64).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        self.out.write_all(&h)?;
        self.written += BLOCK;
        Ok(())
    }

    fn data(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.out.write_all(data)?;
        let pad = (BLOCK - data.len() as u64 % BLOCK) % BLOCK;
        self.out.write_all(&[0u8; BLOCK as usize][..pad as usize])?;
        self.written += data.len() as u64 + pad;
        Ok(())
    }

    /// Append a regular file `name` holding `data`.
    pub fn append(&mut self, name: &str, data: &[u8]) -> std::io::Result<()> {
        if name.len() > 100 {
            let mut long = name.as_bytes().to_vec();
            long.push(0);
            self.header(b"././@LongLink", long.len() as u64, b'L')?;
            self.data(&long)?;
        }
        self.header(name.as_bytes(), data.len() as u64, b'0')?;
        self.data(data)
    }

    /// Append a member of type `kind` (a pax header `x`, a link...) holding `data`, its name
    /// as given (at most 100 bytes kept): hand-made shards for the fuzz targets' seeds.
    pub(crate) fn append_kind(&mut self, name: &str, data: &[u8], kind: u8) -> std::io::Result<()> {
        self.header(name.as_bytes(), data.len() as u64, kind)?;
        self.data(data)
    }

    /// Write the end-of-archive blocks and return the writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.write_all(&[0u8; 2 * BLOCK as usize])?;
        self.written += 2 * BLOCK;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces() {
        assert_eq!(expand_braces("a-{08..11}.tar").unwrap(), ["a-08.tar", "a-09.tar", "a-10.tar", "a-11.tar"]);
        assert_eq!(expand_braces("s{1..2}-{x,y}").unwrap(), ["s1-x", "s1-y", "s2-x", "s2-y"]);
        assert_eq!(expand_braces("plain.tar").unwrap(), ["plain.tar"]);
        assert!(expand_braces("a{3..1}").unwrap_err().contains("empty"));
        assert!(expand_braces("a{1..2").unwrap_err().contains("unmatched"));
        assert!(expand_braces("a{x..2}").unwrap_err().contains("\"x\""));
    }

    #[test]
    fn keys() {
        assert_eq!(split_key("a/b.c/n01_1.JPEG"), ("a/b.c/n01_1", "JPEG"));
        assert_eq!(split_key("img.0.jpg"), ("img", "0.jpg"));
        assert_eq!(split_key("noext"), ("noext", ""));
    }

    #[test]
    fn numbers() {
        assert_eq!(number(b"00000001750\0"), Some(1000));
        assert_eq!(number(b"     1750 \0\0"), Some(1000));
        assert_eq!(number(&[0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]), Some(256));
        assert_eq!(number(b"0000000009\0\0"), None);
    }

    #[test]
    fn pax() {
        let rec = b"27 path=some/long/name.jpg\n14 size=12345\n";
        let (p, s) = parse_pax(rec);
        assert_eq!(p.as_deref(), Some("some/long/name.jpg"));
        assert_eq!(s, Some(12345));
    }
}
