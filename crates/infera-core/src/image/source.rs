//! Where an image's blobs are: a directory (an OCI image layout) or an archive (a tar of an
//! OCI layout, or a docker-archive), whose members are found once and then read in place.
//! The manifest for the platform is chosen here, from an OCI index or a docker-archive's
//! `manifest.json` (also the fallback for docker 25+'s OCI layout with a broken index:
//! `"manifests": null`, moby#47210).

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::Digest as _;

use super::{ImageError, LayerBlob, Plan, Platform};

/// The manifests, index and configs read whole are small; more is not an image.
const SMALL: u64 = 8 << 20;

pub struct Source {
    reference: String,
    tag: Option<String>,
    digest: Option<String>,
    kind: Kind,
}

enum Kind {
    Dir(PathBuf),
    /// The archive, and each member's offset and size (a symlink member: its target).
    Tar {
        path: PathBuf,
        members: HashMap<String, Member>,
    },
}

enum Member {
    File { offset: u64, size: u64 },
    Link(String),
}

impl Source {
    /// `PATH`, `PATH:TAG` or `PATH@sha256:HEX`.
    pub fn open(reference: &str) -> Result<Source, ImageError> {
        let (path, tag, digest) = split(reference);
        let fail = |reason: String| ImageError::Format { reference: reference.to_string(), reason };
        let meta = std::fs::metadata(&path).map_err(|e| fail(format!("`{}`: {e}", path.display())))?;
        let kind = if meta.is_dir() {
            Kind::Dir(path)
        } else {
            let members = index(&path).map_err(|e| fail(format!("not a tar archive ({e})")))?;
            Kind::Tar { path, members }
        };
        Ok(Source { reference: reference.to_string(), tag, digest, kind })
    }

    pub fn format(&self, reason: String) -> ImageError {
        ImageError::Format { reference: self.reference.clone(), reason }
    }

    pub fn missing(&self, what: &str, name: &str) -> ImageError {
        ImageError::BlobMissing { reference: self.reference.clone(), what: what.into(), name: name.into() }
    }

    pub fn reference(&self) -> &str {
        &self.reference
    }

    /// A member (a path in the layout or archive), streamed.
    pub fn member(&self, name: &str) -> Option<Box<dyn Read + Send>> {
        let name = name.trim_start_matches("./");
        if name.split('/').any(|c| c == "..") {
            return None;
        }
        match &self.kind {
            Kind::Dir(d) => File::open(d.join(name)).ok().map(|f| Box::new(f) as Box<dyn Read + Send>),
            Kind::Tar { path, members } => {
                let mut name = name.to_string();
                for _ in 0..8 {
                    match members.get(&name)? {
                        Member::Link(target) => name = target.clone(),
                        Member::File { offset, size } => {
                            let mut f = File::open(path).ok()?;
                            f.seek(SeekFrom::Start(*offset)).ok()?;
                            return Some(Box::new(f.take(*size)));
                        }
                    }
                }
                None
            }
        }
    }

    /// A small member read whole.
    fn small(&self, what: &str, name: &str) -> Result<Vec<u8>, ImageError> {
        let r = self.member(name).ok_or_else(|| self.missing(what, name))?;
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
        let oci = self.member("oci-layout").is_some();
        let index: Option<Index> = if oci { Some(self.json("the index", "index.json")?) } else { None };
        match index {
            Some(i) if !i.manifests.as_deref().unwrap_or_default().is_empty() => self.oci(i, platform),
            _ if self.member("manifest.json").is_some() => self.docker(),
            Some(_) => Err(self.format("its index.json lists no manifest".into())),
            None => Err(self.format("it has neither an oci-layout nor a manifest.json".into())),
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
            [] => return Err(self.format(format!("no manifest in it is named {}", self.wanted()))),
            _ => {
                return Err(
                    self.format(format!("it holds {} images: name one (PATH:TAG or PATH@sha256:…)", found.len()))
                )
            }
        };
        // An index (a multi-arch image): the platform's manifest.
        for _ in 0..4 {
            if !d.media_type.contains("index") && !d.media_type.contains("manifest.list") {
                break;
            }
            let inner: Index = serde_json::from_slice(&self.blob("an index", &d.digest)?)
                .map_err(|e| self.format(format!("the index {}: {e}", d.digest)))?;
            let m = inner.manifests.unwrap_or_default();
            d = m
                .iter()
                .find(|m| {
                    m.platform.as_ref().is_some_and(|p| p.os == platform.os && p.architecture == platform.architecture)
                })
                .cloned()
                .ok_or_else(|| {
                    let held: Vec<String> = m
                        .iter()
                        .filter_map(|m| m.platform.as_ref().map(|p| format!("{}/{}", p.os, p.architecture)))
                        .collect();
                    ImageError::Platform {
                        reference: self.reference.clone(),
                        found: held.join(", "),
                        wanted: format!("{}/{}", platform.os, platform.architecture),
                    }
                })?;
        }
        let manifest: Manifest = serde_json::from_slice(&self.blob("the manifest", &d.digest)?)
            .map_err(|e| self.format(format!("the manifest {}: {e}", d.digest)))?;
        let config = self.blob("the config", &manifest.config.digest)?;
        let layers = manifest
            .layers
            .iter()
            .map(|l| blob_path(&l.digest).map(|name| LayerBlob { name, digest: Some(l.digest.clone()), size: l.size }))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| self.format("a layer digest is not sha256".into()))?;
        Ok(Plan { manifest_digest: Some(d.digest), config_digest: manifest.config.digest, config, layers })
    }

    fn docker(&self) -> Result<Plan, ImageError> {
        let entries: Vec<DockerEntry> = self.json("the manifest", "manifest.json")?;
        let found: Vec<&DockerEntry> = entries
            .iter()
            .filter(|e| match &self.tag {
                Some(t) => e.repo_tags.iter().flatten().any(|r| r == t || r.ends_with(&format!(":{t}"))),
                None => true,
            })
            .collect();
        let e = match found.as_slice() {
            [one] => *one,
            [] => return Err(self.format(format!("no image in it is named {}", self.wanted()))),
            _ => return Err(self.format(format!("it holds {} images: name one (PATH:TAG)", found.len()))),
        };
        let config = self.small("the config", &e.config)?;
        let layers = e.layers.iter().map(|l| LayerBlob { name: l.clone(), digest: None, size: None }).collect();
        Ok(Plan { manifest_digest: None, config_digest: sha256(&config), config, layers })
    }

    fn wanted(&self) -> String {
        match (&self.tag, &self.digest) {
            (_, Some(d)) => d.clone(),
            (Some(t), None) => format!("`{t}`"),
            (None, None) => "anything".into(),
        }
    }
}

/// `PATH`, `PATH:TAG`, `PATH@sha256:HEX`: a path that exists is taken whole.
fn split(reference: &str) -> (PathBuf, Option<String>, Option<String>) {
    if Path::new(reference).exists() {
        return (reference.into(), None, None);
    }
    if let Some((p, d)) = reference.rsplit_once('@') {
        return (p.into(), None, Some(d.to_string()));
    }
    match reference.rsplit_once(':') {
        Some((p, t)) if !t.contains('/') => (p.into(), Some(t.to_string()), None),
        _ => (reference.into(), None, None),
    }
}

/// The most members an image archive has (blobs and a few files: dozens to hundreds).
const MAX_MEMBERS: usize = 100_000;

/// Each member of a tar archive: where its data starts and its size, or a link's target.
fn index(path: &Path) -> std::io::Result<HashMap<String, Member>> {
    let (stream, left) = super::layer::Between::new(File::open(path)?);
    let mut a = tar::Archive::new(stream);
    let mut members = HashMap::new();
    // Seeking past each member: the layers are read once, when they are read.
    for e in a.entries_with_seek()? {
        let e = e?;
        left.set(super::layer::after(e.size(), 0));
        if members.len() == MAX_MEMBERS {
            return Err(std::io::Error::other(format!("more than {MAX_MEMBERS} members")));
        }
        let name = e.path()?.to_string_lossy().trim_start_matches("./").to_string();
        let member = match e.header().entry_type() {
            tar::EntryType::Symlink | tar::EntryType::Link => {
                let target = e.link_name()?.map(|t| t.to_string_lossy().into_owned()).unwrap_or_default();
                let dir = Path::new(&name).parent().unwrap_or(Path::new(""));
                let joined = if e.header().entry_type() == tar::EntryType::Link {
                    PathBuf::from(&target)
                } else {
                    dir.join(&target)
                };
                Member::Link(member_name(&joined).unwrap_or_default())
            }
            _ => Member::File { offset: e.raw_file_position(), size: e.size() },
        };
        members.insert(name, member);
    }
    if members.is_empty() {
        return Err(std::io::Error::other("no members"));
    }
    Ok(members)
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
    #[test]
    fn a_link_target_as_a_member_name() {
        let name = |p: &str| super::member_name(std::path::Path::new(p));
        assert_eq!(name("abc/../def.tar").as_deref(), Some("def.tar"));
        assert_eq!(name("./blobs/sha256/x").as_deref(), Some("blobs/sha256/x"));
        assert_eq!(name("abc/../../etc/passwd"), None);
    }
}
