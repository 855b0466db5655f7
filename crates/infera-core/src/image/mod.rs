//! An engine image read offline, without unpacking it: an OCI image layout (a directory),
//! an oci-archive or a docker-archive (a tar of either), `REF[:TAG|@sha256:…]`. Each layer
//! is read in one streaming pass — its blob digest and its diff_id checked while it is
//! decompressed (gzip, zstd or plain tar) — and only what the reader asks for is kept
//! (`Keep`): every path and what it is, and the contents of the small files the facts read.
//! The layers are merged bottom-up with their whiteouts into a [`tree::Tree`]. Nothing is
//! written to disk.

pub mod layer;
pub mod source;
pub mod sparse;
mod tarstream;
pub mod tree;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::Deserialize;

use crate::image::layer::Keep;
use source::Source;
use tree::Tree;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, infera_exec_derive::Refuse)]
pub enum ImageError {
    #[error("`{reference}` is not an image this reads: {reason}")]
    #[refuse(
        code = "image-format",
        exit = Invalid,
        hint = "give an OCI image layout directory, an oci-archive or a docker-archive (`skopeo copy docker://IMAGE oci:DIR:TAG`, `podman save --format oci-archive`)"
    )]
    Format { reference: String, reason: String },
    #[error("`{reference}` does not exist")]
    #[refuse(
        code = "image-missing",
        exit = Missing,
        hint = "check the path: the step that copies the image here (`skopeo copy`, `podman save`) may have failed or written elsewhere; an image in a registry is not read here: `skopeo copy docker://IMAGE oci:DIR:TAG` first"
    )]
    Missing { reference: String },
    #[error("`{reference}` names {what}, which is not read here: only an image's archive or layout directory is (nothing is pulled)")]
    #[refuse(
        code = "image-not-local",
        exit = Usage,
        hint = "copy it here first: `skopeo copy {copy_from} oci:DIR:TAG` (or `docker save -o FILE IMAGE`, `podman save --format oci-archive -o FILE IMAGE`), then --image DIR:TAG or FILE"
    )]
    NotLocal { reference: String, what: &'static str, copy_from: String },
    #[error("`{reference}` is not an image this reads: it holds {count} images: name one ({form}): {names}")]
    #[refuse(code = "image-ambiguous", exit = Usage, hint = "add the image's name or digest to the reference, as the line above writes it")]
    Ambiguous { reference: String, count: usize, names: String, form: &'static str },
    #[error("`{reference}`: {what} is damaged: {reason}")]
    #[refuse(code = "image-damaged", exit = Invalid, hint = "copy the image again: the archive is damaged, cut short or was altered")]
    Damaged { reference: String, what: String, reason: String },
    #[error("`{reference}` names {what} `{name}`, which is not in it")]
    #[refuse(code = "image-blob-missing", exit = Invalid, hint = "copy the image again: the archive is incomplete")]
    BlobMissing { reference: String, what: String, name: String },
    #[error("`{reference}`: {what} `{name}` has digest {found}, not {expected}")]
    #[refuse(code = "image-digest-mismatch", exit = Invalid, hint = "copy the image again: the archive is damaged or was altered")]
    DigestMismatch { reference: String, what: String, name: String, expected: String, found: String },
    #[error("`{reference}`: layer {layer} has {what} (`{entry}`)")]
    #[refuse(
        code = "image-unsafe-entry",
        exit = Invalid,
        hint = "nothing of an image is followed out of it: rebuild the layer without that entry"
    )]
    UnsafeEntry { reference: String, layer: usize, what: String, entry: String },
    #[error("`{reference}` is an image for {found}, not {wanted}")]
    #[refuse(
        code = "image-platform",
        exit = Invalid,
        hint = "give --platform OS/ARCH of an image it holds (`skopeo inspect --raw` lists a multi-arch image's), or copy the image for this platform (`skopeo copy --override-arch`)"
    )]
    Platform { reference: String, found: String, wanted: String },
    #[error("`{reference}`: layer {layer} is larger than this reads ({what})")]
    #[refuse(code = "image-too-large", exit = Invalid, hint = "an engine image's layers are a few tens of GB and millions of entries at most: check the archive")]
    TooLarge { reference: String, layer: usize, what: String },
}

/// linux/amd64 and the like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
}

impl Default for Platform {
    fn default() -> Self {
        Platform { os: "linux".into(), architecture: "amd64".into() }
    }
}

/// An image, read: which it is, its runtime config and its filesystem.
#[derive(Debug)]
pub struct Image {
    pub identity: Identity,
    pub config: RunConfig,
    pub tree: Tree,
}

/// Which image was read: the reference given and the digests that name its contents.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Identity {
    pub reference: String,
    /// None for a docker-archive (it has no manifest blob).
    pub manifest_digest: Option<String>,
    pub config_digest: String,
    /// The names the archive gives the image: its `org.opencontainers.image.ref.name`
    /// annotation, or a docker-archive's `RepoTags`.
    pub names: Vec<String>,
    /// Each layer's blob digest (a docker-archive's: its diff_id), bottom first.
    pub layers: Vec<String>,
}

/// The image config's `config`: its `Env`, what `--image-env` gives for a directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RunConfig {
    #[serde(default)]
    pub env: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct Config {
    #[serde(default)]
    config: RunConfig,
    rootfs: RootFs,
    #[serde(default)]
    os: Option<String>,
    #[serde(default)]
    architecture: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RootFs {
    diff_ids: Vec<String>,
}

/// What to read the layers from: one blob (or archive member) each, with the digest it must
/// have (None: a docker-archive's uncompressed layer, checked by its diff_id only).
pub(crate) struct Plan {
    pub manifest_digest: Option<String>,
    pub config_digest: String,
    pub names: Vec<String>,
    pub config: Vec<u8>,
    pub layers: Vec<LayerBlob>,
}

/// A layer's member (a blob path or an archive member), and the digest and size its
/// descriptor gives (none for a docker-archive's layer).
pub(crate) struct LayerBlob {
    pub name: String,
    pub digest: Option<String>,
    pub size: Option<u64>,
}

/// What is said of a long read, as each layer ends and every `layer::PROGRESS_EVERY`
/// uncompressed bytes of a long one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The layer's number (1 = the bottom one), of `layers`.
    pub layer: usize,
    pub layers: usize,
    /// Its uncompressed bytes so far.
    pub bytes: u64,
    /// Its blob's bytes read so far, and the blob's size where the manifest gives it.
    pub blob_read: u64,
    pub blob_size: Option<u64>,
    pub done: bool,
}

pub type Progress<'a> = dyn Fn(&Step) + Sync + 'a;

/// Read `reference` (`PATH`, `PATH:TAG` or `PATH@sha256:…`): the manifest for `platform`,
/// its config, and every layer in parallel, keeping what `keep` asks for. `verify`: check
/// the layers' digests (the manifest's and config's are always checked).
pub fn read<R: AsRef<std::ffi::OsStr> + ?Sized>(
    reference: &R,
    platform: &Platform,
    keep: &Keep,
    verify: bool,
) -> Result<Image, ImageError> {
    read_with_progress(reference, platform, keep, verify, &|_| {})
}

/// [`read`], calling `progress` as each layer ends and as a long one goes on.
pub fn read_with_progress<R: AsRef<std::ffi::OsStr> + ?Sized>(
    reference: &R,
    platform: &Platform,
    keep: &Keep,
    verify: bool,
    progress: &Progress<'_>,
) -> Result<Image, ImageError> {
    let src = Source::open(reference.as_ref())?;
    let reference = src.reference();
    let plan = src.plan(platform)?;
    let config: Config = serde_json::from_slice(&plan.config)
        .map_err(|e| src.format(format!("its config {} is not an image config ({e})", plan.config_digest)))?;
    matches(&src, &config, &plan, platform)?;
    let changes = read_layers(&src, &plan, &config.rootfs.diff_ids, keep, verify, progress)?;
    let mut tree = Tree::default();
    for (i, c) in changes.into_iter().enumerate() {
        tree.apply(c).map_err(|e| match e {
            tree::ApplyError::HardLink(target) => ImageError::UnsafeEntry {
                reference: reference.to_string(),
                layer: i + 1,
                what: "a hard link to a path that is not in the image".into(),
                entry: target.display().to_string(),
            },
            tree::ApplyError::TooLarge(what) => {
                ImageError::TooLarge { reference: reference.to_string(), layer: i + 1, what }
            }
        })?;
    }
    let layers =
        plan.layers.iter().zip(&config.rootfs.diff_ids).map(|(b, id)| b.digest.clone().unwrap_or(id.clone())).collect();
    let identity = Identity {
        reference: reference.to_string(),
        manifest_digest: plan.manifest_digest,
        config_digest: plan.config_digest,
        names: plan.names,
        layers,
    };
    Ok(Image { identity, config: config.config, tree })
}

/// Every layer's changes, bottom first: the layers read by as many threads as this process
/// may run on (more would share a core and each other's caches), the largest first; after a
/// refusal no other layer is started.
fn read_layers(
    src: &Source,
    plan: &Plan,
    diff_ids: &[String],
    keep: &Keep,
    verify: bool,
    progress: &Progress<'_>,
) -> Result<Vec<tree::Changes>, ImageError> {
    let n = plan.layers.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|i| std::cmp::Reverse(plan.layers[*i].size.unwrap_or(0)));
    let (next, failed) = (AtomicUsize::new(0), AtomicBool::new(false));
    let done: Mutex<Vec<Option<Result<tree::Changes, ImageError>>>> = Mutex::new((0..n).map(|_| None).collect());
    let totals = layer::Totals::default();
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get()).min(n);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let (b, diff_id) = (&plan.layers[i], &diff_ids[i]);
                    let l =
                        layer::Layer { n: i + 1, name: &b.name, digest: b.digest.as_deref(), size: b.size, diff_id };
                    let step = |bytes, blob_read, done| Step {
                        layer: i + 1,
                        layers: n,
                        bytes,
                        blob_read,
                        blob_size: b.size,
                        done,
                    };
                    let every = |bytes, blob_read| progress(&step(bytes, blob_read, false));
                    let r = layer::read(src, &l, keep, &totals, verify, &every).map(|(changes, bytes, blob_read)| {
                        progress(&step(bytes, blob_read, true));
                        changes
                    });
                    // Not a tar: a blob that is not the manifest's says "copy it again".
                    let r = r.map_err(|e| match e {
                        ImageError::Format { .. } if verify => layer::altered(src, &l).unwrap_or(e),
                        e => e,
                    });
                    failed.fetch_or(r.is_err(), Ordering::Relaxed);
                    done.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                }
            });
        }
    });
    // After a refusal some layers were not read (None): the first refusal is the answer.
    let done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::with_capacity(n);
    for r in done.into_iter().flatten() {
        out.push(r?);
    }
    Ok(out)
}

/// The config agrees with the platform asked for and with the manifest's layers.
fn matches(src: &Source, config: &Config, plan: &Plan, platform: &Platform) -> Result<(), ImageError> {
    if let (Some(os), Some(arch)) = (&config.os, &config.architecture) {
        if (os, arch) != (&platform.os, &platform.architecture) {
            return Err(ImageError::Platform {
                reference: src.reference().to_string(),
                found: format!("{os}/{arch}"),
                wanted: format!("{}/{}", platform.os, platform.architecture),
            });
        }
    }
    if config.rootfs.diff_ids.len() != plan.layers.len() {
        let reason = format!(
            "the manifest lists {} layers, the config's rootfs.diff_ids {}",
            plan.layers.len(),
            config.rootfs.diff_ids.len()
        );
        return Err(src.format(reason));
    }
    Ok(())
}
