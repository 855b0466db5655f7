//! An image's filesystem as the layers build it, in memory: every path with what it is, and
//! the contents of the files that were kept. Layers are merged bottom-up with the OCI
//! image spec's whiteouts: `.wh.NAME` deletes NAME from the lower layers, `.wh..wh..opq`
//! empties its directory of the lower layers' entries (wherever it sits in the layer's tar,
//! it applies before the layer's own entries).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir {
        mode: u32,
    },
    /// `data`: what the reader kept of the contents (all of them, or their first bytes).
    File {
        mode: u32,
        size: u64,
        data: Option<Vec<u8>>,
    },
    Symlink {
        target: PathBuf,
    },
    /// A device, FIFO or socket: recorded, never created.
    Special {
        mode: u32,
    },
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

/// The merged filesystem: absolute paths (`/usr/bin/python3`) to what they are.
#[derive(Debug, Default)]
pub struct Tree {
    nodes: BTreeMap<PathBuf, Node>,
}

impl Tree {
    pub fn get(&self, p: &Path) -> Option<&Node> {
        self.nodes.get(p)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every path, in order.
    pub fn paths(&self) -> impl Iterator<Item = (&PathBuf, &Node)> {
        self.nodes.iter()
    }

    /// The names directly in directory `dir`.
    pub fn children<'a>(&'a self, dir: &'a Path) -> impl Iterator<Item = &'a PathBuf> + 'a {
        self.below(dir).filter(move |p| p.parent() == Some(dir))
    }

    fn below<'a>(&'a self, dir: &'a Path) -> impl Iterator<Item = &'a PathBuf> + 'a {
        self.nodes
            .range(dir.to_path_buf()..)
            .map(|(p, _)| p)
            .skip_while(move |p| *p == dir)
            .take_while(move |p| p.starts_with(dir))
    }

    /// Put a layer on top: its deletions of lower entries first, then its entries. Returns
    /// the hard links whose target is not in the tree.
    pub fn apply(&mut self, layer: Changes) -> Result<(), PathBuf> {
        for dir in &layer.opaque {
            let gone: Vec<PathBuf> = self.below(dir).cloned().collect();
            for p in gone {
                self.nodes.remove(&p);
            }
        }
        for p in &layer.whiteouts {
            let gone: Vec<PathBuf> = self.below(p).cloned().collect();
            for g in gone {
                self.nodes.remove(&g);
            }
            self.nodes.remove(p);
        }
        for (p, put) in layer.puts {
            let node = match put {
                Put::Node(n) => n,
                Put::HardLink(target) => self.nodes.get(&target).cloned().ok_or(target)?,
            };
            // A directory over a directory keeps what is below it; anything else replaces.
            if !matches!(node, Node::Dir { .. }) {
                let gone: Vec<PathBuf> = self.below(&p).cloned().collect();
                for g in gone {
                    self.nodes.remove(&g);
                }
            }
            // A tar may leave out an entry's directories: they exist, as a runtime makes them.
            for dir in p.ancestors().skip(1) {
                self.nodes.entry(dir.to_path_buf()).or_insert(Node::Dir { mode: 0o755 });
            }
            self.nodes.insert(p, node);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &str) -> Put {
        Put::Node(Node::File { mode: 0o644, size: data.len() as u64, data: Some(data.as_bytes().to_vec()) })
    }

    fn dir() -> Put {
        Put::Node(Node::Dir { mode: 0o755 })
    }

    fn paths(t: &Tree) -> Vec<String> {
        t.paths().map(|(p, _)| p.display().to_string()).collect()
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
        assert_eq!(t.get(Path::new("/c")), Some(&Node::File { mode: 0o644, size: 1, data: Some(b"6".to_vec()) }));
        assert_eq!(t.children(Path::new("/a")).collect::<Vec<_>>(), [Path::new("/a/new")]);
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
        assert_eq!(t.apply(bad), Err(PathBuf::from("/nowhere")));
    }
}
