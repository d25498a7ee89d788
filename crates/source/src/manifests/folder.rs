//! The folder as a whole: which files define which objects, and what
//! changed since the last read.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kproxy_state::{Object, ObjectKey, SourceEvent};
use tracing::debug;

use super::parse::{Parsed, parse_file};
use super::{ManifestError, SourceError};

/// An object and where in its file it was defined (the file is the
/// [`FileEntry`] holding it).
#[derive(Clone, Debug, PartialEq)]
struct Defined {
    document: usize,
    line: usize,
    object: Object,
}

/// The definition that wins for a key: the `index`th object of `file`.
/// The merged view is these references, not a copy of the objects.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Winner {
    file: Arc<Path>,
    index: usize,
}

#[derive(Debug, Default)]
struct FileEntry {
    /// Length and hash of the text last parsed: a file whose text is the
    /// same is not parsed again (the text itself is not kept: at 100k
    /// services it is most of a folder's memory).
    digest: (usize, u64),
    objects: Vec<Defined>,
}

fn digest(text: &str) -> (usize, u64) {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    (text.len(), hasher.finish())
}

/// What one read of the folder found.
#[derive(Debug, Default)]
pub struct Reload {
    /// Changes of the merged view, for the state.
    pub events: Vec<SourceEvent>,
    /// New problems: invalid documents of changed files, unreadable files,
    /// duplicate definitions. Reported once each.
    pub errors: Vec<ManifestError>,
    /// Documents of kinds kproxy does not read, in changed files.
    pub skipped: Vec<String>,
    /// Objects kept from a file's last valid read because the file has
    /// errors now.
    pub kept: Vec<String>,
    /// Fields of changed files read leniently, as kube-proxy reads them
    /// (an address with leading zeros), with file and document.
    pub warnings: Vec<String>,
    /// Unknown fields of served objects in changed files (misspelt, or
    /// newer than kproxy), with file, document and object; ignored.
    pub unknown_fields: Vec<String>,
    pub files: usize,
}

/// The manifest folder and the objects it currently defines.
#[derive(Debug)]
pub struct Folder {
    dir: PathBuf,
    files: BTreeMap<Arc<Path>, FileEntry>,
    /// The merged view: where each key's winning definition is, sorted by
    /// key (exactly sized: a B-tree's half-full nodes cost twice as much).
    active: Vec<(ObjectKey, Winner)>,
    /// Duplicate definitions already reported: (key, file, document).
    duplicates: BTreeSet<(ObjectKey, Arc<Path>, usize)>,
    /// Files that could not be read, already reported.
    unreadable: BTreeSet<PathBuf>,
}

impl Folder {
    pub fn new(dir: &Path) -> Result<Self, SourceError> {
        if !dir.is_dir() {
            return Err(SourceError::NotADirectory { path: dir.to_owned() });
        }
        Ok(Self {
            dir: dir.to_owned(),
            files: BTreeMap::new(),
            active: Vec::new(),
            duplicates: BTreeSet::new(),
            unreadable: BTreeSet::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Re-reads the folder; only files whose content changed are parsed.
    pub fn reload(&mut self) -> Result<Reload, SourceError> {
        let mut reload = Reload::default();
        let paths = manifest_files(&self.dir)?;
        reload.files = paths.len();
        // The versions of the files this read replaces or drops: the merged
        // view of the last read refers to them until the new one is made.
        let mut replaced: BTreeMap<Arc<Path>, FileEntry> = BTreeMap::new();
        let gone: Vec<Arc<Path>> = self.files.keys().filter(|path| !paths.contains(&***path)).cloned().collect();
        for path in gone {
            replaced.extend(self.files.remove_entry(&*path));
        }
        self.unreadable.retain(|path| paths.contains(path));
        for path in &paths {
            let text = match std::fs::read_to_string(path) {
                Ok(text) => {
                    self.unreadable.remove(path);
                    text
                }
                // Gone since it was listed: as if it had not been listed.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    replaced.extend(self.files.remove_entry(path.as_path()));
                    self.unreadable.remove(path);
                    reload.files -= 1;
                    continue;
                }
                Err(e) => {
                    // Unreadable now (being rewritten, permissions): keep
                    // what it defined before, and say so once.
                    if self.unreadable.insert(path.clone()) {
                        let reason = format!("cannot read: {e}");
                        let error = ManifestError { file: path.clone(), document: 0, line: 0, object: None, reason };
                        reload.errors.push(error);
                    }
                    continue;
                }
            };
            if self.files.get(path.as_path()).is_some_and(|entry| entry.digest == digest(&text)) {
                continue;
            }
            let previous = self.files.remove_entry(path.as_path());
            let entry = self.read_file(path, text, previous.as_ref().map(|(_, e)| e), &mut reload);
            let key = previous.as_ref().map_or_else(|| Arc::from(path.as_path()), |(key, _)| Arc::clone(key));
            self.files.insert(key, entry);
            replaced.extend(previous);
        }
        self.merge(&replaced, &mut reload);
        Ok(reload)
    }

    fn read_file(&self, path: &Path, text: String, previous: Option<&FileEntry>, reload: &mut Reload) -> FileEntry {
        let mut objects = Vec::new();
        let mut failed = false;
        for parsed in parse_file(path, &text) {
            match parsed {
                Parsed::Object { document, line, object } => {
                    objects.push(Defined { document, line, object });
                }
                Parsed::Lenient { document, warning } => {
                    reload.warnings.push(format!("{}: document {document}: {warning}", path.display()));
                }
                Parsed::Invalid(e) => {
                    failed = true;
                    reload.errors.push(e);
                }
                Parsed::Unknown { document, object, field } => {
                    reload.unknown_fields.push(format!("{}: document {document}: {object}: {field}", path.display()));
                }
                Parsed::Skipped { document, kind, .. } => {
                    reload.skipped.push(format!("{}: document {document}: kind {kind}", path.display()));
                }
            }
        }
        if failed {
            let now: BTreeSet<ObjectKey> = objects.iter().map(|d| d.object.key()).collect();
            let old = previous.into_iter().flat_map(|p| &p.objects);
            for old in old.filter(|d| !now.contains(&d.object.key())) {
                reload.kept.push(old.object.key().to_string());
                objects.push(old.clone());
            }
        }
        objects.shrink_to_fit();
        FileEntry { digest: digest(&text), objects }
    }

    /// The definition `winner` refers to, in the current files.
    fn defined(&self, winner: &Winner) -> &Defined {
        &self.files[&winner.file].objects[winner.index]
    }

    /// Recomputes the merged view (first definition in path, then document
    /// order wins) and turns its differences into events. The last view
    /// refers to the files of `replaced` where this read replaced them.
    fn merge(&mut self, replaced: &BTreeMap<Arc<Path>, FileEntry>, reload: &mut Reload) {
        let mut active: BTreeMap<ObjectKey, Winner> = BTreeMap::new();
        let mut duplicates = BTreeSet::new();
        for (file, entry) in &self.files {
            for (index, defined) in entry.objects.iter().enumerate() {
                let key = defined.object.key();
                let Some(first) = active.get(&key) else {
                    active.insert(key, Winner { file: Arc::clone(file), index });
                    continue;
                };
                let id = (key, Arc::clone(file), defined.document);
                if !self.duplicates.contains(&id) {
                    reload.errors.push(ManifestError {
                        file: file.to_path_buf(),
                        document: defined.document,
                        line: defined.line,
                        object: Some(id.0.to_string()),
                        reason: format!(
                            "also defined in {} document {}; this copy is ignored",
                            first.file.display(),
                            self.defined(first).document
                        ),
                    });
                }
                duplicates.insert(id);
            }
        }
        self.duplicates = duplicates;
        let before = |winner: &Winner| match replaced.get(&winner.file) {
            Some(old) => &old.objects[winner.index].object,
            None => &self.defined(winner).object,
        };
        for (key, _) in self.active.iter().filter(|(k, _)| !active.contains_key(k)) {
            reload.events.push(SourceEvent::Delete(key.clone()));
        }
        let old = |key: &ObjectKey| self.active.binary_search_by(|(k, _)| k.cmp(key)).ok().map(|i| &self.active[i].1);
        for (key, winner) in &active {
            let object = &self.defined(winner).object;
            if old(key).is_none_or(|old| before(old) != object) {
                reload.events.push(SourceEvent::Apply(object.clone()));
            }
        }
        self.active = active.into_iter().collect();
    }
}

/// Every `.yaml`, `.yml` and `.json` file under `dir`, sorted.
///
/// Hidden entries are skipped: editor swap files, and a ConfigMap volume's
/// `..data` and `..2026_01_15_...` directories, whose files the volume's
/// top-level names already link to. Symlinks are followed, but a directory
/// or file reached a second time (a symlink loop, two links to one place)
/// is not read again: the first path in sorted order keeps it.
fn manifest_files(dir: &Path) -> Result<BTreeSet<PathBuf>, SourceError> {
    let mut out = BTreeSet::new();
    let mut seen = BTreeSet::new();
    if let Ok(meta) = std::fs::metadata(dir) {
        seen.insert((meta.dev(), meta.ino()));
    }
    walk(dir, &mut seen, &mut out)?;
    Ok(out)
}

fn walk(dir: &Path, seen: &mut BTreeSet<(u64, u64)>, out: &mut BTreeSet<PathBuf>) -> Result<(), SourceError> {
    let list = |source| SourceError::List { path: dir.to_owned(), source };
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(list)? {
        entries.push(entry.map_err(list)?.path());
    }
    entries.sort();
    for path in entries {
        let hidden = path.file_name().and_then(|n| n.to_str()).is_none_or(|n| n.starts_with('.'));
        let manifest = path.extension().and_then(|e| e.to_str()).is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if hidden {
            continue;
        }
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => {
                if seen.insert((meta.dev(), meta.ino())) {
                    walk(&path, seen, out)?;
                }
            }
            Ok(meta) => {
                if manifest && seen.insert((meta.dev(), meta.ino())) {
                    out.insert(path);
                }
            }
            // A symlink to nothing (yet): a ConfigMap volume links a new
            // key's name before its data appears, and unlinks a removed
            // key's name only after its data is gone.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                debug!(path = %path.display(), "skipping a symlink to nothing");
            }
            // Cannot tell (permissions, a link to itself): reading it will
            // say why.
            Err(_) => {
                if manifest {
                    out.insert(path);
                }
            }
        }
    }
    Ok(())
}
