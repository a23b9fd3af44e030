//! The folder source, torchvision `ImageFolder` convention: one subfolder per class, classes
//! sorted by name → labels `0..C`; image files (`.jpg`/`.jpeg`/`.png`, any case, any depth) are samples;
//! other files are ignored and counted. Symlinks are followed; a symlink loop is an error
//! naming the link (see [`walk`]).

use super::index::Fingerprint;
use super::{Entry, Listing, Location, SourceKind};
use crate::error::{Error, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// True for a name ending in one of [`super::IMAGE_EXTENSIONS`], in any case. The format
/// itself is sniffed from the bytes.
pub(crate) fn is_image_name(name: &str) -> bool {
    name.rsplit_once('.').is_some_and(|(_, ext)| super::is_image_extension(ext))
}

/// A path relative to the dataset root as a `/`-separated key.
pub(crate) fn key_of(root: &Path, path: &Path) -> Result<String> {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let mut parts = Vec::new();
    for c in rel.components() {
        match c.as_os_str().to_str() {
            Some(s) => parts.push(s),
            None => {
                return Err(Error::dataset(path, format!("file name {:?} is not valid UTF-8", c.as_os_str())));
            }
        }
    }
    Ok(parts.join("/"))
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<fs::DirEntry>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        out.push(e.map_err(|e| Error::io(dir, e))?);
    }
    out.sort_by_key(|e| e.file_name());
    Ok(out)
}

/// `(is_dir, metadata)` following symlinks; a dangling link is an error naming it.
fn stat(path: &Path) -> Result<fs::Metadata> {
    fs::metadata(path).map_err(|e| Error::dataset(path, format!("cannot read: {e}")))
}

/// The class folders of `root` (sorted), or an error when there are none.
pub(crate) fn class_dirs(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut classes = Vec::new();
    for e in read_dir_sorted(root)? {
        let p = e.path();
        if stat(&p)?.is_dir() {
            let name = e
                .file_name()
                .to_str()
                .map(str::to_owned)
                .ok_or_else(|| Error::dataset(&p, format!("class folder name {:?} is not valid UTF-8", e.file_name())))?;
            classes.push((name, p));
        }
    }
    Ok(classes)
}

/// A folder's identity on disk, whatever path (or symlink) reached it.
fn dir_id(md: &fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (md.dev(), md.ino())
}

/// Walk `dir` as torchvision's `make_dataset` does: folders in sorted path order, the files
/// of each folder sorted by name. Pushes image files to `out`, counts the rest in `ignored`.
///
/// Symlinks are followed, as `os.walk(followlinks=True)` does for ImageFolder, wherever they
/// point (a class folder linked from shared storage is common; keys stay the paths inside the
/// root, so nothing is read or written by a path outside it that the link did not name). A
/// link to a folder that holds it (the root, the class folder or any folder on the way down)
/// would make the walk endless: it is an error naming the link and where it points.
fn walk(root: &Path, dir: &Path, label: i64, out: &mut Vec<Entry>, fp: &mut Fingerprint, ignored: &mut u64) -> Result<()> {
    let mut above = vec![dir_id(&stat(root)?)];
    above.push(dir_id(&stat(dir)?));
    let mut dirs = vec![(dir.to_path_buf(), above)]; // each folder with the ids of those above it and itself
    let mut all = Vec::new(); // (folder, its sorted files)
    while let Some((d, above)) = dirs.pop() {
        let mut files = Vec::new();
        for e in read_dir_sorted(&d)? {
            let p = e.path();
            let md = stat(&p)?;
            if md.is_dir() {
                let id = dir_id(&md);
                if above.contains(&id) {
                    let to = fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
                    return Err(Error::dataset(
                        &p,
                        format!("symlink loop: this folder is {}, which holds it; remove the link or point it elsewhere", to.display()),
                    ));
                }
                let mut below = above.clone();
                below.push(id);
                dirs.push((p, below));
            } else {
                files.push((p, md));
            }
        }
        all.push((d, files));
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, files) in all {
        for (p, md) in files {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if !is_image_name(&name) {
                *ignored += 1;
                continue;
            }
            let key = key_of(root, &p)?;
            fp.add_file(&key, &md);
            out.push(Entry { key, label, len: md.len(), location: Location::File, header: None });
        }
    }
    Ok(())
}

/// List an ImageFolder dataset, walking the class folders on `threads` threads (0 = all cores).
pub(crate) fn list(root: &Path, threads: usize) -> Result<Listing> {
    let classes = class_dirs(root)?;
    if classes.is_empty() {
        return Err(Error::dataset(
            root,
            "no class folders: expected one subfolder per class holding image files (.jpg/.jpeg/.png) (ImageFolder layout)",
        ));
    }
    // Each class is walked (and fingerprinted) on its own; results are combined in label order.
    let walked = super::index::parallel_map(classes.len(), threads, None, |label| {
        let (name, dir) = &classes[label];
        let mut fp = Fingerprint::new(SourceKind::Folder);
        fp.add_str(name);
        let (mut entries, mut ignored) = (Vec::new(), 0u64);
        walk(root, dir, label as i64, &mut entries, &mut fp, &mut ignored)?;
        if entries.is_empty() {
            return Err(Error::dataset(dir, format!("class folder {name:?} holds no image files (.jpg/.jpeg/.png)")));
        }
        Ok((entries, ignored, fp.finish()))
    });
    let mut fp = Fingerprint::new(SourceKind::Folder);
    let mut entries = Vec::new();
    let mut ignored = 0u64;
    for w in walked {
        let (e, i, h) = w?;
        entries.extend(e);
        ignored += i;
        fp.add_bytes(&h.to_le_bytes());
    }
    Ok(Listing {
        root: root.to_path_buf(),
        classes: classes.into_iter().map(|(n, _)| n).collect(),
        ignored,
        shards: Vec::new(),
        entries,
        fingerprint: fp.finish(),
    })
}
