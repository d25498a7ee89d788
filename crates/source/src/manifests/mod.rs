//! A folder of Kubernetes manifests as a source.
//!
//! Files ending in `.yaml`, `.yml` or `.json` anywhere under the folder are
//! read, through symlinks, each once (hidden files and folders are skipped,
//! so editor swap files and a ConfigMap volume's `..data` do not count
//! twice). Each document is one object, or a `kind: List` of them (a
//! `kubectl get -o yaml|json` dump); aliases are limited per object, never
//! per file. A document that fails to parse or validate is reported with its
//! file, index, line and object, counted, and skipped; the rest keeps being
//! served. A key an object's type has no field for is named as unknown
//! (`spec.clusterIp: unknown field (did you mean clusterIP?)`), as kubectl's
//! strict decoding names it: a warning when the object is served anyway,
//! the lead of its error when it is not. While a file has errors, objects it used to define and no longer
//! validly defines are kept, so a typo never drops a running service;
//! deleting the file removes its objects. Changes are read once they settle,
//! and at least every `max_wait` while they do not.

mod budget;
mod folder;
mod json_list;
mod parse;
mod strict;
mod subset;
mod watch;

use std::fmt;
use std::path::PathBuf;

pub use folder::{Folder, Reload};
pub use parse::{Parsed, parse_file};
pub use strict::UnknownField;
/// The plain-YAML reader on its own, for `kproxy-bench parsers`.
pub use subset::tree as subset_tree;
pub use watch::{ManifestSource, SourceCounters, WatchOptions};

/// Why a folder cannot be used at all.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The folder does not exist or is not a directory.
    #[error("{}: not a directory", path.display())]
    NotADirectory { path: PathBuf },
    /// Listing the folder failed.
    #[error("{}: cannot list", path.display())]
    List {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Setting up change notifications failed.
    #[error("{}: cannot watch for changes", path.display())]
    Watch {
        path: PathBuf,
        #[source]
        source: notify::Error,
    },
}

/// One document that could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestError {
    pub file: PathBuf,
    /// 1-based index among the file's non-empty documents; 0 for an error
    /// about the whole file.
    pub document: usize,
    /// 1-based line where the document starts (or where the error is, for
    /// syntax errors).
    pub line: usize,
    /// `Service default/web`, when the document got far enough to say.
    pub object: Option<String>,
    pub reason: String,
}

/// `examples/web.yaml: document 2 (line 14): Service default/web: spec.ports[0].port: ...`
impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if self.document > 0 {
            write!(f, "document {} (line {}): ", self.document, self.line)?;
        }
        if let Some(object) = &self.object {
            write!(f, "{object}: ")?;
        }
        f.write_str(&self.reason)
    }
}
