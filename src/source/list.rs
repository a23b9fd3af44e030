//! The file-list source, as DALI's `file_list`: text lines `relative/path label`, paths
//! relative to the list's folder, integer labels. Blank lines and lines starting with `#` are
//! skipped. A path may contain spaces: the label is the last whitespace-separated field.

use super::folder::key_of;
use super::index::Fingerprint;
use super::{Entry, Listing, Location, SourceKind};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::fs;
use std::path::{Component, Path};

/// Parse one line into `(path, label)`; the error says what was wrong.
fn parse_line(line: &str) -> std::result::Result<(&str, i64), String> {
    let t = line.trim();
    let Some(split) = t.rfind(|c: char| c.is_whitespace()) else {
        return Err(format!("expected `relative/path label`, got {t:?} (no label)"));
    };
    let (path, label) = (t[..split].trim_end(), &t[split + 1..]);
    let label: i64 = label.parse().map_err(|_| format!("label {label:?} is not an integer"))?;
    if label < 0 {
        return Err(format!("label {label} is out of range (labels must be >= 0)"));
    }
    Ok((path, label))
}

/// List a file-list dataset.
pub(crate) fn list(list_path: &Path) -> Result<Listing> {
    let text = fs::read(list_path).map_err(|e| Error::io(list_path, e))?;
    let text = String::from_utf8(text).map_err(|e| {
        Error::dataset(list_path, format!("file list is not UTF-8 text (invalid byte at offset {})", e.utf8_error().valid_up_to()))
    })?;
    let root = list_path.parent().map(Path::to_path_buf).unwrap_or_default();
    let root = if root.as_os_str().is_empty() { Path::new(".").to_path_buf() } else { root };
    let mut fp = Fingerprint::new(SourceKind::List);
    fp.add_bytes(text.as_bytes());
    let mut entries = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut max_label = -1i64;
    for (n, line) in text.lines().enumerate() {
        let lineno = n + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let at = |msg: String| Error::dataset(list_path, format!("line {lineno}: {msg}"));
        let (rel, label) = parse_line(t).map_err(at)?;
        if Path::new(rel).is_absolute() || Path::new(rel).components().any(|c| c == Component::ParentDir) {
            return Err(at(format!("path {rel:?} must be relative to the list's folder, without `..`")));
        }
        let full = root.join(rel);
        let key = key_of(&root, &full)?;
        if let Some(first) = seen.insert(key.clone(), lineno) {
            return Err(at(format!("duplicate key {key:?} (first listed on line {first})")));
        }
        let md = fs::metadata(&full).map_err(|e| at(format!("cannot read {}: {e}", full.display())))?;
        if md.is_dir() {
            return Err(at(format!("{} is a folder, not a file", full.display())));
        }
        fp.add_file(&key, &md);
        max_label = max_label.max(label);
        entries.push(Entry { key, label, len: md.len(), location: Location::File, header: None });
    }
    if entries.is_empty() {
        return Err(Error::dataset(list_path, "empty dataset: the file list names no samples"));
    }
    Ok(Listing {
        root,
        classes: (0..=max_label).map(|l| l.to_string()).collect(),
        ignored: 0,
        shards: Vec::new(),
        entries,
        fingerprint: fp.finish(),
    })
}

#[cfg(test)]
mod tests {
    use super::parse_line;

    #[test]
    fn lines() {
        assert_eq!(parse_line("a/b.jpg 3"), Ok(("a/b.jpg", 3)));
        assert_eq!(parse_line("  with space.jpg\t12 "), Ok(("with space.jpg", 12)));
        assert!(parse_line("a.jpg").unwrap_err().contains("no label"));
        assert!(parse_line("a.jpg x").unwrap_err().contains("\"x\" is not an integer"));
        assert!(parse_line("a.jpg -1").unwrap_err().contains("out of range"));
    }
}
