//! Where an image's blobs are: a directory (an OCI image layout) or an archive (a tar of an
//! OCI layout, or a docker-archive), whose members are found once and then read in place.
//! The manifest for the platform is chosen here, from an OCI index or a docker-archive's
//! `manifest.json` (also the fallback for docker 25+'s OCI layout with a broken index:
//! `"manifests": null`, moby#47210).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use serde::Deserialize;
use sha2::Digest as _;

use super::{ImageError, LayerBlob, Plan, Platform};

/// The manifests, index and configs read whole are small; more is not an image.
const SMALL: u64 = 8 << 20;
/// How deep indexes may nest (an index of an index of a manifest is the deepest seen).
const MAX_NESTING: usize = 4;

pub struct Source {
    reference: String,
    tag: Option<String>,
    digest: Option<String>,
    kind: Kind,
}

enum Kind {
    /// A layout directory, opened once: every member is opened beneath it.
    Dir(OwnedFd),
    /// The archive, opened once and read at offsets, and each member's offset and size (a
    /// symlink member: its target); `cut`: why it seems cut short (no tar end marker).
    Tar { file: Arc<File>, members: HashMap<String, Member>, cut: Option<String> },
}

enum Member {
    File { offset: u64, size: u64 },
    Link(String),
}

/// Why a member cannot be read.
pub enum Unread {
    /// Not in the layout or archive.
    Missing,
    /// Found, and not what a blob is, or reached out of the image (said).
    Refused(String),
}

/// A member of an archive: its bytes read at offsets of the archive's one descriptor (layers
/// read in parallel share it).
struct Slice {
    file: Arc<File>,
    at: u64,
    end: u64,
}

impl Read for Slice {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min(usize::try_from(self.end - self.at).unwrap_or(usize::MAX));
        let n = self.file.read_at(&mut buf[..want], self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

impl Source {
    /// `PATH`, `PATH:TAG` or `PATH@sha256:HEX`, also as skopeo names them (`oci:`,
    /// `oci-archive:`, `docker-archive:`). The path is opened without blocking (a FIFO is
    /// refused, never read) and must be a directory or a regular file.
    pub fn open(given: &std::ffi::OsStr) -> Result<Source, ImageError> {
        let local = local(given)?;
        let (path, tag, digest) = split(local);
        let reference = &given.to_string_lossy().into_owned();
        let fail = |reason: String| ImageError::Format { reference: reference.to_string(), reason };
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match rustix::fs::open(&path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Err(not_found(reference, local, &path)),
            Err(e) => return Err(fail(format!("`{}`: {}", path.display(), io::Error::from(e)))),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| fail(format!("`{}`: {}", path.display(), io::Error::from(e))))?;
        let kind = match crate::filekind::Kind::of_mode(st.st_mode) {
            crate::filekind::Kind::Dir => Kind::Dir(fd),
            crate::filekind::Kind::File => {
                let file = File::from(fd);
                let (members, cut) =
                    index(&file).map_err(|e| match e.get_ref().and_then(|i| i.downcast_ref::<Truncated>()) {
                        Some(Truncated(reason)) => ImageError::Damaged {
                            reference: reference.to_string(),
                            what: "the archive".into(),
                            reason: reason.clone(),
                        },
                        None => fail(format!("not a tar archive ({e})")),
                    })?;
                Kind::Tar { file: Arc::new(file), members, cut }
            }
            other => {
                return Err(fail(format!(
                    "`{}` is {}, not an image layout directory or an archive file",
                    path.display(),
                    other.describe()
                )))
            }
        };
        Ok(Source { reference: reference.to_string(), tag, digest, kind })
    }

    pub fn format(&self, reason: String) -> ImageError {
        ImageError::Format { reference: self.reference.clone(), reason }
    }

    pub fn missing(&self, what: &str, name: &str) -> ImageError {
        ImageError::BlobMissing { reference: self.reference.clone(), what: what.into(), name: name.into() }
    }

    /// The refusal for a member that cannot be read as `what`.
    pub fn unread(&self, what: &str, name: &str, why: Unread) -> ImageError {
        match why {
            Unread::Missing => self.missing(what, name),
            Unread::Refused(reason) => self.format(format!("{what} `{name}` {reason}")),
        }
    }

    pub fn reference(&self) -> &str {
        &self.reference
    }

    /// A member (a path in the layout or archive), streamed: only inside the layout or
    /// archive (no absolute name, no `..` or link out of it), only a regular file.
    pub fn member(&self, name: &str) -> Result<Box<dyn Read + Send>, Unread> {
        let name = name.trim_start_matches("./");
        if name.starts_with('/') || name.split('/').any(|c| c == "..") {
            return Err(Unread::Refused("leaves the image (an absolute name or `..`)".into()));
        }
        match &self.kind {
            Kind::Dir(dir) => open_beneath(dir, Path::new(name)).map(|f| Box::new(f) as Box<dyn Read + Send>),
            Kind::Tar { file, members, .. } => {
                let mut name = name.to_string();
                for _ in 0..8 {
                    match members.get(&name).ok_or(Unread::Missing)? {
                        Member::Link(target) if target.is_empty() => {
                            return Err(Unread::Refused(format!("is a link out of the archive (`{name}`)")))
                        }
                        Member::Link(target) => name = target.clone(),
                        Member::File { offset, size } => {
                            let slice = Slice { file: file.clone(), at: *offset, end: offset + size };
                            return Ok(Box::new(slice));
                        }
                    }
                }
                Err(Unread::Refused("is a chain of more than 8 links".into()))
            }
        }
    }

    /// Whether the layout or archive has the member (a regular file inside it).
    fn has(&self, name: &str) -> bool {
        self.member(name).is_ok()
    }

    /// A small member read whole.
    fn small(&self, what: &str, name: &str) -> Result<Vec<u8>, ImageError> {
        let r = self.member(name).map_err(|why| self.unread(what, name, why))?;
        let mut v = Vec::new();
        r.take(SMALL + 1).read_to_end(&mut v).map_err(|e| self.format(format!("{what} `{name}`: {e}")))?;
        if v.len() as u64 > SMALL {
            return Err(self.format(format!("{what} `{name}` is larger than {} MiB", SMALL >> 20)));
        }
        Ok(v)
    }

    /// A blob by digest, read whole and checked.
    fn blob(&self, what: &str, digest: &str) -> Result<Vec<u8>, ImageError> {
        let name = blob_path(digest).ok_or_else(|| self.format(format!("{what} digest `{digest}` is not sha256")))?;
        let v = self.small(what, &name)?;
        let found = sha256(&v);
        if found != digest {
            return Err(ImageError::DigestMismatch {
                reference: self.reference.clone(),
                what: what.into(),
                name,
                expected: digest.into(),
                found,
            });
        }
        Ok(v)
    }

    /// The manifest for `platform` and what its layers are read from.
    pub(crate) fn plan(&self, platform: &Platform) -> Result<Plan, ImageError> {
        let oci = self.has("oci-layout");
        let index: Option<Index> = if oci { Some(self.json("the index", "index.json")?) } else { None };
        match index {
            Some(i) if !i.manifests.as_deref().unwrap_or_default().is_empty() => self.oci(i, platform),
            _ if self.has("manifest.json") => self.docker(),
            Some(_) => Err(self.format("its index.json lists no manifest".into())),
            None => Err(match &self.kind {
                Kind::Tar { cut: Some(reason), .. } => ImageError::Damaged {
                    reference: self.reference.clone(),
                    what: "the archive".into(),
                    reason: format!("{reason}, and it holds no oci-layout or manifest.json"),
                },
                Kind::Tar { members, .. } => self.format(format!(
                    "it is a tar archive of {} members, none of them an oci-layout or a manifest.json: not an image archive",
                    members.len()
                )),
                Kind::Dir(_) => self.format("the directory has neither an oci-layout nor a manifest.json".into()),
            }),
        }
    }

    fn json<T: for<'de> Deserialize<'de>>(&self, what: &str, name: &str) -> Result<T, ImageError> {
        let v = self.small(what, name)?;
        serde_json::from_slice(&v).map_err(|e| self.format(format!("{what} `{name}`: {e}")))
    }

    fn oci(&self, index: Index, platform: &Platform) -> Result<Plan, ImageError> {
        let all = index.manifests.unwrap_or_default();
        let named = |d: &&Descriptor| {
            let name = d.annotations.get("org.opencontainers.image.ref.name");
            match (&self.tag, &self.digest) {
                (_, Some(digest)) => &d.digest == digest,
                (Some(t), None) => name.is_some_and(|n| n == t || n.ends_with(&format!(":{t}"))),
                (None, None) => true,
            }
        };
        let found: Vec<&Descriptor> = all.iter().filter(named).collect();
        let mut d = match found.as_slice() {
            [one] => (*one).clone(),
            [] => {
                let names: Vec<&str> = all
                    .iter()
                    .filter_map(|d| d.annotations.get("org.opencontainers.image.ref.name").map(String::as_str))
                    .collect();
                let has = if names.is_empty() { "no names".to_string() } else { names.join(", ") };
                return Err(self.format(format!("no manifest in it is named {}; it has {has}", self.wanted())));
            }
            _ => {
                let mut names: Vec<&str> = found
                    .iter()
                    .map(|d| d.annotations.get("org.opencontainers.image.ref.name").unwrap_or(&d.digest).as_str())
                    .collect();
                names.sort_unstable();
                return Err(ImageError::Ambiguous {
                    reference: self.reference.clone(),
                    count: found.len(),
                    names: names.join(", "),
                    form: "PATH:TAG or PATH@sha256:…",
                });
            }
        };
        let names = d.annotations.get("org.opencontainers.image.ref.name").cloned().into_iter().collect();
        // An index (a multi-arch image): the platform's manifest. Each blob is read for what it
        // is (its own mediaType and fields), which must be what its descriptor said.
        let mut depth = 0;
        let manifest = loop {
            let want_index = is_index_type(&d.media_type);
            let what = if want_index { "an index" } else { "the manifest" };
            let blob = self.blob(what, &d.digest)?;
            let doc: Document = serde_json::from_slice(&blob)
                .map_err(|e| self.format(format!("{what} {} is not JSON of an image ({e})", d.digest)))?;
            let is_index = doc.manifests.is_some() || is_index_type(doc.media_type.as_deref().unwrap_or_default());
            if !d.media_type.is_empty() && want_index != is_index {
                let (said, is) = if want_index { ("an index", "a manifest") } else { ("a manifest", "an index") };
                return Err(self.format(format!(
                    "its descriptor of {} says {said} ({}), the blob is {is}",
                    d.digest, d.media_type
                )));
            }
            if !is_index {
                break serde_json::from_slice::<Manifest>(&blob)
                    .map_err(|e| self.format(format!("the manifest {} is not an image manifest ({e})", d.digest)))?;
            }
            depth += 1;
            if depth > MAX_NESTING {
                return Err(self.format(format!("its indexes nest more than {MAX_NESTING} deep")));
            }
            d = self.for_platform(doc.manifests.unwrap_or_default(), platform)?;
        };
        if !manifest.config.media_type.is_empty() && !CONFIG_TYPES.contains(&manifest.config.media_type.as_str()) {
            return Err(self.format(format!(
                "the manifest {} is not an image's: its config is `{}`",
                d.digest, manifest.config.media_type
            )));
        }
        let config = self.blob("the config", &manifest.config.digest)?;
        let mut layers = Vec::with_capacity(manifest.layers.len());
        for l in &manifest.layers {
            if !l.media_type.is_empty() && !LAYER_TYPES.contains(&l.media_type.as_str()) {
                return Err(self.format(format!("layer {} is `{}`, not a tar layer", l.digest, l.media_type)));
            }
            let name = blob_path(&l.digest).ok_or_else(|| self.format("a layer digest is not sha256".into()))?;
            layers.push(LayerBlob { name, digest: Some(l.digest.clone()), size: l.size });
        }
        Ok(Plan { manifest_digest: Some(d.digest), config_digest: manifest.config.digest, names, config, layers })
    }

    /// The manifest an index lists for the platform.
    fn for_platform(&self, m: Vec<Descriptor>, platform: &Platform) -> Result<Descriptor, ImageError> {
        let fits = |m: &&Descriptor| {
            m.platform.as_ref().is_some_and(|p| p.os == platform.os && p.architecture == platform.architecture)
        };
        if let Some(d) = m.iter().find(fits) {
            return Ok(d.clone());
        }
        let held: Vec<String> =
            m.iter().filter_map(|m| m.platform.as_ref().map(|p| format!("{}/{}", p.os, p.architecture))).collect();
        Err(ImageError::Platform {
            reference: self.reference.clone(),
            found: if held.is_empty() { "no platform (its index names none)".into() } else { held.join(", ") },
            wanted: format!("{}/{}", platform.os, platform.architecture),
        })
    }

    fn docker(&self) -> Result<Plan, ImageError> {
        let entries: Vec<DockerEntry> = self.json("the manifest", "manifest.json")?;
        let found: Vec<&DockerEntry> = entries
            .iter()
            .filter(|e| match (&self.tag, &self.digest) {
                // A docker-archive has no manifest: its image is named by its ID, the config's digest.
                (_, Some(d)) => {
                    Path::new(&e.config).file_stem().is_some_and(|h| format!("sha256:{}", h.to_string_lossy()) == *d)
                }
                (Some(t), None) => e.repo_tags.iter().flatten().any(|r| r == t || r.ends_with(&format!(":{t}"))),
                (None, None) => true,
            })
            .collect();
        let e = match found.as_slice() {
            [one] => *one,
            [] => {
                let mut tags: Vec<&str> =
                    entries.iter().flat_map(|e| e.repo_tags.iter().flatten()).map(String::as_str).collect();
                tags.sort_unstable();
                let has = if tags.is_empty() { "no tags".to_string() } else { tags.join(", ") };
                return Err(self.format(format!("no image in it is named {}; it has {has}", self.wanted())));
            }
            _ => {
                let mut names: Vec<String> = found
                    .iter()
                    .map(|e| e.repo_tags.iter().flatten().next().cloned().unwrap_or_else(|| e.config.clone()))
                    .collect();
                names.sort();
                return Err(ImageError::Ambiguous {
                    reference: self.reference.clone(),
                    count: found.len(),
                    names: names.join(", "),
                    form: "PATH:NAME or PATH@sha256:ID",
                });
            }
        };
        let config = self.small("the config", &e.config)?;
        let layers = e.layers.iter().map(|l| LayerBlob { name: l.clone(), digest: None, size: None }).collect();
        let names = e.repo_tags.clone().unwrap_or_default();
        Ok(Plan { manifest_digest: None, config_digest: sha256(&config), names, config, layers })
    }

    fn wanted(&self) -> String {
        match (&self.tag, &self.digest) {
            (_, Some(d)) => d.clone(),
            (Some(t), None) => format!("`{t}`"),
            (None, None) => "anything".into(),
        }
    }
}

/// skopeo's transports of a local image (`oci:DIR[:TAG]`, `oci-archive:FILE[:REF]`,
/// `docker-archive:FILE[:REF]`) name their path; those of a registry or a container store
/// (`docker://`, `containers-storage:`, `docker-daemon:`) are refused. A path that exists is
/// taken whole, whatever it starts with.
fn local(reference: &std::ffi::OsStr) -> Result<&std::ffi::OsStr, ImageError> {
    use std::os::unix::ffi::OsStrExt;
    let b = reference.as_bytes();
    if Path::new(reference).symlink_metadata().is_ok() {
        return Ok(reference);
    }
    for t in ["oci:", "oci-archive:", "docker-archive:"] {
        if let Some(rest) = b.strip_prefix(t.as_bytes()) {
            return Ok(std::ffi::OsStr::from_bytes(rest));
        }
    }
    let remote = [
        ("docker://", "an image in a registry"),
        ("containers-storage:", "an image in podman's store"),
        ("docker-daemon:", "an image in Docker's store"),
    ];
    match remote.iter().find(|(t, _)| b.starts_with(t.as_bytes())) {
        Some((_, what)) => {
            let reference = reference.to_string_lossy().into_owned();
            Err(ImageError::NotLocal { copy_from: reference.clone(), reference, what })
        }
        None => Ok(reference),
    }
}

/// A path that is not there: a registry's name (`registry.example.com/infera/x:tag`: its
/// first part a host, its last a tag or a digest) is said to be one; anything else does not
/// exist.
fn not_found(reference: &str, local: &std::ffi::OsStr, path: &Path) -> ImageError {
    let parts = local.to_str().and_then(|s| Some((s.split_once('/')?.0, s.rsplit('/').next()?)));
    let is_host = |h: &str| h == "localhost" || (h.contains(['.', ':']) && !h.starts_with('.'));
    let named = |last: &str| last.contains([':', '@']);
    match parts.filter(|(h, last)| path.as_os_str() == local && is_host(h) && named(last)) {
        Some(_) => ImageError::NotLocal {
            reference: reference.to_string(),
            what: "an image in a registry",
            copy_from: format!("docker://{reference}"),
        },
        None => ImageError::Missing { reference: reference.to_string() },
    }
}

/// `PATH`, `PATH:TAG`, `PATH@sha256:HEX` (a path in any bytes; a tag or digest is text): a
/// path that exists is taken whole; else the longest part before a `:` or `@` that exists is
/// the path, and what follows names the image in it — a tag, or a whole name with its own `:`
/// as `docker save` records it (`images.tar:localhost/vllm:v1`).
fn split(reference: &std::ffi::OsStr) -> (PathBuf, Option<String>, Option<String>) {
    use std::os::unix::ffi::OsStrExt;
    let b = reference.as_bytes();
    let exists = |p: &[u8]| Path::new(std::ffi::OsStr::from_bytes(p)).symlink_metadata().is_ok();
    if exists(b) {
        return (reference.into(), None, None);
    }
    let cut = |at: usize| -> (PathBuf, Option<String>) {
        let rest = std::str::from_utf8(&b[at + 1..]).ok().map(str::to_string);
        (std::ffi::OsStr::from_bytes(&b[..at]).into(), rest)
    };
    let found = (0..b.len()).rev().find(|&at| matches!(b[at], b':' | b'@') && exists(&b[..at]));
    match found {
        Some(at) if b[at] == b'@' => {
            let (p, d) = cut(at);
            (p, None, d)
        }
        Some(at) => {
            let (p, t) = cut(at);
            (p, t, None)
        }
        None => (reference.into(), None, None),
    }
}

/// The most members an image archive has (blobs and a few files: dozens to hundreds).
const MAX_MEMBERS: usize = 100_000;

/// An archive that ends inside a member: cut short (a copy that did not finish).
#[derive(Debug)]
pub(crate) struct Truncated(pub String);

impl std::fmt::Display for Truncated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Truncated {}

/// Each member of a tar archive: where its data starts and its size, or a link's target (an
/// empty target: one that leaves the archive). Members that are not regular files are left
/// out; an archive that ends inside a member is [`Truncated`]; one that ends after a member
/// without the two zero blocks every tar writer ends with is said to be cut short (`cut`).
fn index(file: &File) -> io::Result<(HashMap<String, Member>, Option<String>)> {
    let len = file.metadata()?.len();
    let (stream, left) = super::tarstream::Between::new(file);
    let mut a = tar::Archive::new(stream);
    let mut members = HashMap::new();
    let mut end = 0u64;
    // Seeking past each member: the layers are read once, when they are read.
    for e in a.entries_with_seek()? {
        let e = e?;
        end = e.raw_file_position().saturating_add(e.size().div_ceil(512) * 512);
        left.set(super::tarstream::after(e.size(), 0));
        if members.len() == MAX_MEMBERS {
            return Err(io::Error::other(format!("more than {MAX_MEMBERS} members")));
        }
        let name = e.path()?.to_string_lossy().trim_start_matches("./").to_string();
        let (offset, size) = (e.raw_file_position(), e.size());
        if offset.saturating_add(size) > len {
            return Err(io::Error::other(Truncated(format!(
                "the archive ends at byte {len}, inside its member `{name}` (bytes {offset} to {}): truncated? copy it again",
                offset.saturating_add(size)
            ))));
        }
        let member = match e.header().entry_type() {
            tar::EntryType::Symlink | tar::EntryType::Link => {
                let target = e.link_name()?.map(|t| t.to_string_lossy().into_owned()).unwrap_or_default();
                let dir = Path::new(&name).parent().unwrap_or(Path::new(""));
                let joined = match e.header().entry_type() {
                    _ if target.starts_with('/') => None,
                    tar::EntryType::Link => Some(PathBuf::from(&target)),
                    _ => Some(dir.join(&target)),
                };
                Member::Link(joined.and_then(|j| member_name(&j)).unwrap_or_default())
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => Member::File { offset, size },
            _ => continue,
        };
        members.insert(name, member);
    }
    if members.is_empty() {
        return Err(io::Error::other("no members"));
    }
    let cut = (len < end.saturating_add(1024)).then(|| {
        format!("it ends at byte {len}, right after a member, without a tar's end marker: truncated? copy it again")
    });
    Ok((members, cut))
}

/// A member of a layout directory, opened beneath it: links followed only while they stay
/// inside it (no absolute name, no `..` out of it), without blocking, and only a regular file.
fn open_beneath(dir: &OwnedFd, name: &Path) -> Result<File, Unread> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat2(
        dir.as_fd(),
        name,
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Err(Unread::Missing),
        Err(rustix::io::Errno::XDEV) => {
            return Err(Unread::Refused("leaves the image directory (a link or name out of it)".into()))
        }
        // A kernel without openat2 (before 5.6, or a seccomp profile): no link followed at all.
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
            return crate::nofollow::open_at(dir.as_fd(), name, OFlags::RDONLY, Mode::empty())
                .map_err(|e| match e.kind() {
                    io::ErrorKind::NotFound => Unread::Missing,
                    _ => Unread::Refused(format!("cannot be opened without following a link: {e}")),
                })
                .and_then(|f| crate::nofollow::regular(f).map_err(|e| Unread::Refused(e.to_string())))
        }
        Err(e) => return Err(Unread::Refused(format!("cannot be opened: {}", io::Error::from(e)))),
    };
    crate::nofollow::regular(File::from(fd)).map_err(|e| Unread::Refused(e.to_string()))
}

/// A link's target as a member name: `.` dropped, `..` taken back (docker-archive's
/// `<id>/layer.tar -> ../<diff_id>.tar`); None when it leaves the archive.
fn member_name(p: &Path) -> Option<String> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in p.components() {
        match c {
            std::path::Component::Normal(n) => parts.push(n),
            std::path::Component::ParentDir => {
                parts.pop()?;
            }
            _ => {}
        }
    }
    Some(parts.iter().map(|n| n.to_string_lossy()).collect::<Vec<_>>().join("/"))
}

pub fn blob_path(digest: &str) -> Option<String> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| format!("blobs/sha256/{hex}"))
}

pub fn sha256(b: &[u8]) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(b))
}

#[derive(Debug, Deserialize)]
struct Index {
    manifests: Option<Vec<Descriptor>>,
}

/// What a blob of an index's or manifest's says it is.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    media_type: Option<String>,
    manifests: Option<Vec<Descriptor>>,
}

fn is_index_type(t: &str) -> bool {
    t.contains("image.index") || t.contains("manifest.list")
}

/// An image's config (OCI's, docker's).
const CONFIG_TYPES: &[&str] =
    &["application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json"];

/// The layers a runtime applies: tar, plain or compressed (OCI's, their non-distributable
/// forms, docker's).
const LAYER_TYPES: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
];

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    /// The blob's length; checked for layers (read whole for the small blobs).
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    annotations: HashMap<String, String>,
    platform: Option<PlatformField>,
}

#[derive(Debug, Clone, Deserialize)]
struct PlatformField {
    os: String,
    architecture: String,
}

#[derive(Debug, Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::{ImageError, Source};

    /// What a reference that is not here is said to be: a registry's image (refused, with the
    /// copy to run), an image store's, or a path that does not exist.
    #[test]
    fn references_that_are_not_here() {
        let said = |r: &str| match Source::open(std::ffi::OsStr::new(r)) {
            Err(ImageError::NotLocal { what, copy_from, .. }) => format!("not local: {what}: {copy_from}"),
            Err(ImageError::Missing { .. }) => "missing".into(),
            Err(e) => format!("{e}"),
            Ok(_) => "read".into(),
        };
        let registry = "not local: an image in a registry: docker://registry.example.com/infera/vllm:kimi-k3";
        assert_eq!(said("registry.example.com/infera/vllm:kimi-k3"), registry);
        assert_eq!(
            said("localhost/vllm@sha256:abc"),
            "not local: an image in a registry: docker://localhost/vllm@sha256:abc"
        );
        assert_eq!(said("docker://quay.io/x/y:1"), "not local: an image in a registry: docker://quay.io/x/y:1");
        assert_eq!(
            said("containers-storage:localhost/y:1"),
            "not local: an image in podman's store: containers-storage:localhost/y:1"
        );
        // Paths: relative with a dot, absolute, skopeo's local transports of a missing path.
        for missing in [
            "images.v2/vllm.tar",
            "/nonexistent/x.tar",
            "./out/vllm:v1",
            "oci:/nonexistent/l:v1",
            "oci-archive:/nonexistent/a.tar",
        ] {
            assert_eq!(said(missing), "missing", "{missing}");
        }
    }

    #[test]
    fn a_link_target_as_a_member_name() {
        let name = |p: &str| super::member_name(std::path::Path::new(p));
        assert_eq!(name("abc/../def.tar").as_deref(), Some("def.tar"));
        assert_eq!(name("./blobs/sha256/x").as_deref(), Some("blobs/sha256/x"));
        assert_eq!(name("abc/../../etc/passwd"), None);
    }
}
