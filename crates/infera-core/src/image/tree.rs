//! An image's filesystem as the layers build it, in memory: every path with what it is, and
//! the contents of the files that were kept. Layers are merged bottom-up with the OCI
//! image spec's whiteouts: `.wh.NAME` deletes NAME from the lower layers, `.wh..wh..opq`
//! empties its directory of the lower layers' entries (wherever it sits in the layer's tar,
//! it applies before the layer's own entries).

use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most paths a tree holds, and the most bytes of their names: an image's are a few
/// hundred thousand and tens of MB; a layer of deep names whose directories are implied
/// would otherwise grow the tree by the square of their depth.
#[cfg(not(test))]
const MAX_NODES: usize = 8_000_000;
#[cfg(test)]
const MAX_NODES: usize = 100;
const MAX_PATH_BYTES: u64 = 1 << 30;

/// What a path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir {
        mode: u32,
    },
    /// `data`: what the reader kept of the contents, shared by the hard links to it.
    File {
        mode: u32,
        size: u64,
        data: Option<Kept>,
    },
    Symlink {
        target: PathBuf,
    },
    /// A device, FIFO or socket: recorded, never created.
    Special {
        mode: u32,
    },
}

/// What was kept of a file's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// Its first bytes (all of them when as long as the file).
    Head(Arc<[u8]>),
    /// Parts of it, for a reader that seeks (`Keep` gave a [`super::layer::Capture`]).
    Parts(Arc<crate::at::Ranges>),
}

impl Kept {
    /// The first bytes kept, when the file's start was.
    pub fn head(&self) -> Option<&[u8]> {
        match self {
            Kept::Head(d) => Some(d),
            Kept::Parts(r) => r.parts.iter().find(|(o, _)| *o == 0).map(|(_, b)| &b[..]),
        }
    }
}

/// One layer's changes, in tar order.
#[derive(Debug, Default)]
pub struct Changes {
    /// Directories whose lower entries go (`.wh..wh..opq`).
    pub opaque: Vec<PathBuf>,
    /// Paths removed from the lower layers (`.wh.NAME`).
    pub whiteouts: Vec<PathBuf>,
    /// What the layer puts, in order; a hard link names the path it copies.
    pub puts: Vec<(PathBuf, Put)>,
}

#[derive(Debug)]
pub enum Put {
    Node(Node),
    HardLink(PathBuf),
}

/// The merged filesystem: absolute paths (`/usr/bin/python3`) to what they are, and each
/// directory's names. Hashed: a lookup of a long path costs one hash, where an ordered map
/// compares its shared prefix with a few dozen others.
#[derive(Debug, Default)]
pub struct Tree {
    nodes: HashMap<OsString, Node>,
    kids: HashMap<OsString, BTreeSet<OsString>>,
    /// The bytes of the names ever put (a bound, not a count of what is left).
    path_bytes: u64,
}

/// Why a layer cannot be put on the tree.
#[derive(Debug, PartialEq, Eq)]
pub enum ApplyError {
    /// A hard link to a path that is not in the tree.
    HardLink(PathBuf),
    /// The tree would pass its bounds (what, said).
    TooLarge(String),
}

impl Tree {
    pub fn get(&self, p: &Path) -> Option<&Node> {
        self.nodes.get(p.as_os_str())
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every path, in no order.
    pub fn paths(&self) -> impl Iterator<Item = (&Path, &Node)> {
        self.nodes.iter().map(|(k, n)| (Path::new(k), n))
    }

    /// The names directly in directory `dir`, in byte order.
    pub fn children<'a>(&'a self, dir: &Path) -> impl Iterator<Item = &'a OsStr> + 'a {
        self.kids.get(dir.as_os_str()).into_iter().flatten().map(OsString::as_os_str)
    }

    /// Remove `p` and everything below it.
    fn remove(&mut self, p: &Path) {
        if let (Some(parent), Some(name)) = (p.parent(), p.file_name()) {
            if let Some(k) = self.kids.get_mut(parent.as_os_str()) {
                k.remove(name);
            }
        }
        let mut stack = vec![p.to_path_buf()];
        while let Some(q) = stack.pop() {
            self.nodes.remove(q.as_os_str());
            stack.extend(self.kids.remove(q.as_os_str()).into_iter().flatten().map(|n| q.join(n)));
        }
    }

    /// Remove everything below `dir`, keeping it.
    fn clear(&mut self, dir: &Path) {
        let names: Vec<OsString> = self.children(dir).map(OsStr::to_os_string).collect();
        for n in names {
            self.remove(&dir.join(n));
        }
    }

    /// Put a layer on top: its deletions of lower entries first, then its entries.
    pub fn apply(&mut self, layer: Changes) -> Result<(), ApplyError> {
        for dir in &layer.opaque {
            self.clear(dir);
        }
        for p in &layer.whiteouts {
            self.remove(p);
        }
        for (p, put) in layer.puts {
            let node = match put {
                Put::Node(n) => n,
                Put::HardLink(target) => self.get(&target).cloned().ok_or(ApplyError::HardLink(target))?,
            };
            // A directory over a directory keeps what is below it; anything else replaces.
            if !matches!(node, Node::Dir { .. }) {
                self.clear(&p);
            }
            // A tar may leave out an entry's directories: they exist, as a runtime makes them.
            // A path's ancestors are always in the tree, so the walk stops at the first one.
            for dir in p.ancestors().skip(1) {
                if self.nodes.contains_key(dir.as_os_str()) {
                    break;
                }
                self.put(dir.to_path_buf(), Node::Dir { mode: 0o755 })?;
            }
            self.put(p, node)?;
        }
        Ok(())
    }

    fn put(&mut self, p: PathBuf, node: Node) -> Result<(), ApplyError> {
        self.path_bytes += p.as_os_str().len() as u64;
        if self.nodes.len() >= MAX_NODES || self.path_bytes > MAX_PATH_BYTES {
            let what = format!("more than {MAX_NODES} paths or {} MiB of path names", MAX_PATH_BYTES >> 20);
            return Err(ApplyError::TooLarge(what));
        }
        let name = p.file_name().map(OsStr::to_os_string);
        let parent = p.parent().map(|d| d.as_os_str().to_os_string());
        if self.nodes.insert(p.into_os_string(), node).is_none() {
            if let (Some(parent), Some(name)) = (parent, name) {
                self.kids.entry(parent).or_default().insert(name);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &str) -> Put {
        Put::Node(Node::File { mode: 0o644, size: data.len() as u64, data: Some(Kept::Head(data.as_bytes().into())) })
    }

    fn dir() -> Put {
        Put::Node(Node::Dir { mode: 0o755 })
    }

    fn paths(t: &Tree) -> Vec<String> {
        let mut v: Vec<String> = t.paths().map(|(p, _)| p.display().to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn whiteouts_and_opaque_directories_delete_lower_entries_only() {
        let mut t = Tree::default();
        let base = Changes {
            puts: vec![
                ("/a".into(), dir()),
                ("/a/x".into(), file("1")),
                ("/a/y".into(), file("2")),
                ("/b".into(), dir()),
                ("/b/z".into(), file("3")),
                ("/c".into(), file("4")),
            ],
            ..Changes::default()
        };
        t.apply(base).unwrap();
        // The opaque marker comes after the layer's own entry in the tar: it still keeps it.
        let top = Changes {
            opaque: vec!["/a".into()],
            whiteouts: vec!["/b".into(), "/c".into()],
            puts: vec![("/a/new".into(), file("5")), ("/c".into(), file("6"))],
        };
        t.apply(top).unwrap();
        assert_eq!(paths(&t), ["/", "/a", "/a/new", "/c"]);
        assert_eq!(
            t.get(Path::new("/c")),
            Some(&Node::File { mode: 0o644, size: 1, data: Some(Kept::Head(b"6"[..].into())) })
        );
        assert_eq!(t.children(Path::new("/a")).collect::<Vec<_>>(), ["new"]);
    }

    #[test]
    fn children_and_removal_of_a_subtree() {
        let mut t = Tree::default();
        let names = ["/d/a", "/d/a-b", "/d/a/x", "/d/a/x/y", "/d/a0", "/d/b", "/d-e"];
        t.apply(Changes { puts: names.iter().map(|n| (PathBuf::from(n), file("1"))).collect(), ..Changes::default() })
            .unwrap();
        let kids =
            |t: &Tree, d: &str| t.children(Path::new(d)).map(|n| n.to_string_lossy().into_owned()).collect::<Vec<_>>();
        assert_eq!(kids(&t, "/d"), ["a", "a-b", "a0", "b"]);
        assert_eq!(kids(&t, "/"), ["d", "d-e"]);
        assert_eq!(kids(&t, "/d/a/x"), ["y"]);
        assert!(kids(&t, "/d/b").is_empty());
        t.apply(Changes { whiteouts: vec!["/d/a".into()], ..Changes::default() }).unwrap();
        assert_eq!(paths(&t), ["/", "/d", "/d-e", "/d/a-b", "/d/a0", "/d/b"]);
        assert_eq!(kids(&t, "/d"), ["a-b", "a0", "b"]);
        t.apply(Changes { puts: vec![("/d".into(), file("f"))], ..Changes::default() }).unwrap();
        assert_eq!(paths(&t), ["/", "/d", "/d-e"], "a file over a directory replaces what was below");
    }

    #[test]
    fn implied_directories_count_against_the_bound() {
        let mut t = Tree::default();
        let deep: PathBuf = format!("/{}f", "d/".repeat(MAX_NODES)).into();
        let e = t.apply(Changes { puts: vec![(deep, file("x"))], ..Changes::default() }).unwrap_err();
        assert!(matches!(&e, ApplyError::TooLarge(w) if w.starts_with("more than 100 paths")), "{e:?}");
        assert_eq!(t.len(), MAX_NODES, "it stopped at the bound");
    }

    #[test]
    fn a_hard_link_copies_its_target_and_must_have_one() {
        let mut t = Tree::default();
        let l = Changes {
            puts: vec![("/x".into(), file("data")), ("/y".into(), Put::HardLink("/x".into()))],
            ..Changes::default()
        };
        t.apply(l).unwrap();
        assert_eq!(t.get(Path::new("/y")), t.get(Path::new("/x")));
        let bad = Changes { puts: vec![("/z".into(), Put::HardLink("/nowhere".into()))], ..Changes::default() };
        assert_eq!(t.apply(bad), Err(ApplyError::HardLink("/nowhere".into())));
    }
}
