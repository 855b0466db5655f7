//! Images read offline (`infera_core::image`): real archives built here with podman and
//! buildah, read without unpacking, give the same filesystem as `podman image mount` of the
//! same image; hand-made hostile layouts are refused by name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use infera_core::image::layer::Want;
use infera_core::image::{self, tree::Node, ImageError, Platform};

/// podman or buildah on a private store in `t` (nothing shared with other tests). The
/// overlay driver, as on a build host: a directory removed and made again is an opaque
/// directory in the layer it commits (vfs would write a whiteout per file instead).
pub(crate) fn tool(name: &str, t: &Path, args: &[&str]) -> String {
    let store = [
        "--root".to_string(),
        t.join("store").display().to_string(),
        "--runroot".into(),
        t.join("run").display().to_string(),
        "--storage-driver".into(),
        "overlay".into(),
    ];
    let o = Command::new(name)
        .env("CONTAINERS_CONF", crate::support::repo().join("tests/containers/containers.conf"))
        .args(store)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {name} ({e}); scripts/setup installs it"));
    assert!(o.status.success(), "{name} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// An image of two layers: a base copied in, then (buildah) a file deleted, a directory
/// replaced and a file added on top: whiteouts in the second layer.
fn build(t: &Path) {
    let ctx = t.join("ctx");
    let files: &[(&str, &str)] = &[
        ("etc/os-release", "ID=ubuntu\nVERSION_ID=\"22.04\"\n"),
        ("opt/rocm/.info/version", "7.2.3-45\n"),
        ("usr/lib/python3.12/site-packages/vllm-0.11.0.dist-info/METADATA", "Name: vllm\nVersion: 0.11.0\n"),
        ("keep/b", "gone later\n"),
        ("keep/sub/c", "gone with its directory\n"),
        ("keep/a", "stays\n"),
    ];
    for (p, c) in files {
        std::fs::create_dir_all(ctx.join(p).parent().unwrap()).unwrap();
        std::fs::write(ctx.join(p), c).unwrap();
    }
    std::fs::create_dir_all(ctx.join("usr/bin")).unwrap();
    std::os::unix::fs::symlink("python3.12", ctx.join("usr/bin/python3")).unwrap();
    std::fs::write(t.join("Containerfile"), "FROM scratch\nCOPY ctx/ /\n").unwrap();
    let tp = t.display().to_string();
    tool("podman", t, &["build", "-q", "-t", "localhost/base:1", "-f", &format!("{tp}/Containerfile"), &tp]);
    let c = tool("buildah", t, &["from", "localhost/base:1"]);
    let m = PathBuf::from(tool("buildah", t, &["mount", &c]));
    std::fs::remove_file(m.join("keep/b")).unwrap();
    std::fs::remove_dir_all(m.join("keep/sub")).unwrap();
    std::fs::create_dir(m.join("keep/sub")).unwrap();
    std::fs::write(m.join("keep/sub/d"), "new\n").unwrap();
    tool("buildah", t, &["umount", &c]);
    tool("buildah", t, &["commit", "-q", &c, "localhost/top:1"]);
}

/// What a filesystem holds, as comparable text: each path with its kind and, for a file,
/// its contents.
fn listing_of_dir(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let key = format!("/{}", p.strip_prefix(root).unwrap().display());
            let m = std::fs::symlink_metadata(&p).unwrap();
            let v = if m.is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else {
                format!("file {}", String::from_utf8_lossy(&std::fs::read(&p).unwrap()))
            };
            out.insert(key, v);
        }
    }
    out
}

pub(crate) fn listing_of_image(img: &image::Image) -> BTreeMap<String, String> {
    img.tree
        .paths()
        .filter(|(p, _)| *p != Path::new("/"))
        .map(|(p, n)| {
            let v = match n {
                Node::Dir { .. } => "dir".to_string(),
                Node::Symlink { target } => format!("link {}", target.display()),
                Node::File { data, .. } => {
                    format!("file {}", String::from_utf8_lossy(data.as_ref().and_then(|d| d.head()).unwrap_or(b"?")))
                }
                Node::Special { .. } => "special".to_string(),
            };
            (p.display().to_string(), v)
        })
        .collect()
}

pub(crate) fn read(reference: &str) -> Result<image::Image, ImageError> {
    image::read(
        reference,
        &Platform::default(),
        &|_: &Path, size: u64, _| Want::Head(if size < 1 << 20 { size } else { 0 }),
        true,
    )
}

/// Each format podman writes — oci-archive, docker-archive, an OCI layout with gzip and with
/// zstd layers — read without unpacking, is the filesystem `podman image mount` shows.
#[test]
fn every_format_reads_as_the_mounted_image() {
    let t = tempfile::tempdir().unwrap();
    let t = t.path();
    build(t);
    let mounted = PathBuf::from(tool("podman", t, &["image", "mount", "localhost/top:1"]));
    let want = listing_of_dir(&mounted);
    tool("podman", t, &["image", "unmount", "localhost/top:1"]);
    assert_eq!(want.get("/keep/sub/d").map(String::as_str), Some("file new\n"));
    assert!(!want.contains_key("/keep/b") && !want.contains_key("/keep/sub/c"), "{want:?}");
    let tp = t.display().to_string();
    tool("podman", t, &["save", "-q", "--format", "oci-archive", "-o", &format!("{tp}/oci.tar"), "localhost/top:1"]);
    tool(
        "podman",
        t,
        &["save", "-q", "--format", "docker-archive", "-o", &format!("{tp}/docker.tar"), "localhost/top:1"],
    );
    for c in ["gzip", "zstd"] {
        let dest = format!("oci:{tp}/{c}:v1");
        tool("podman", t, &["push", "-q", "--compression-format", c, "localhost/top:1", &dest]);
    }
    // A multi-arch index (a manifest list of one linux/amd64 image): its platform's manifest.
    tool("podman", t, &["manifest", "create", "localhost/multi:1"]);
    tool("podman", t, &["manifest", "add", "localhost/multi:1", "containers-storage:localhost/top:1"]);
    tool("podman", t, &["manifest", "push", "-q", "--all", "localhost/multi:1", &format!("oci:{tp}/multi:v1")]);
    let index = std::fs::read_to_string(t.join("multi/index.json")).unwrap();
    let listed: serde_json::Value = serde_json::from_str(&index).unwrap();
    let media = listed["manifests"][0]["mediaType"].as_str().unwrap().to_string();
    assert!(media.contains("index") || media.contains("manifest.list"), "not an index: {index}");
    docker25(&t.join("docker.tar"), &t.join("docker25.tar"));
    // The top layer holds real whiteouts: a file's, and an opaque directory's.
    let top = top_layer_names(&t.join("gzip"));
    for w in ["keep/.wh.b", "keep/sub/.wh..wh..opq", "keep/sub/d"] {
        assert!(top.iter().any(|n| n == w), "{w} not in the top layer: {top:?}");
    }
    let refs = [format!("{tp}/oci.tar"), format!("{tp}/docker.tar"), format!("{tp}/gzip:v1"), format!("{tp}/zstd")];
    for reference in refs.into_iter().chain([format!("{tp}/multi:v1"), format!("{tp}/docker25.tar")]) {
        let img = read(&reference).unwrap_or_else(|e| panic!("{reference}: {e}"));
        assert_eq!(listing_of_image(&img), want, "{reference}");
        let arm = Platform { os: "linux".into(), architecture: "arm64".into() };
        let e = image::read(&reference, &arm, &|_: &Path, _, _| Want::Head(0), false).unwrap_err();
        assert_eq!(e.to_string(), format!("`{reference}` is an image for linux/amd64, not linux/arm64"));
        assert_eq!(img.identity.layers.len(), 2, "{reference}");
    }
}

/// A docker-archive as docker 25+ writes it, with an OCI layout beside `manifest.json`, and
/// that layout's bug (moby#47210): `"manifests": null` in its index.json.
fn docker25(from: &Path, to: &Path) {
    let mut out = tar::Builder::new(std::fs::File::create(to).unwrap());
    let mut a = tar::Archive::new(std::fs::File::open(from).unwrap());
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        let mut h = e.header().clone();
        let path = e.path().unwrap().into_owned();
        out.append_data(&mut h, path, &mut e).unwrap();
    }
    for (name, data) in [
        ("oci-layout", r#"{"imageLayoutVersion": "1.0.0"}"#),
        ("index.json", r#"{"schemaVersion": 2, "manifests": null}"#),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        out.append_data(&mut h, name, data.as_bytes()).unwrap();
    }
    out.finish().unwrap();
}

/// The entry names of the top layer (gzip) of the OCI layout `dir`.
fn top_layer_names(dir: &Path) -> Vec<String> {
    let json = |p: PathBuf| -> serde_json::Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };
    let blob = |d: &serde_json::Value| dir.join("blobs/sha256").join(&d.as_str().unwrap()[7..]);
    let index = json(dir.join("index.json"));
    let manifest = json(blob(&index["manifests"][0]["digest"]));
    let layers = manifest["layers"].as_array().unwrap();
    let gz = std::fs::File::open(blob(&layers[layers.len() - 1]["digest"])).unwrap();
    let mut t = tar::Archive::new(flate2::read::GzDecoder::new(gz));
    t.entries().unwrap().map(|e| e.unwrap().path().unwrap().display().to_string()).collect()
}

/// A hand-made OCI layout with `layer` as its one layer (a plain tar); returns its path.
pub(crate) fn layout(t: &Path, layer: &[u8], diff_id: Option<&str>) -> PathBuf {
    layout_sized(t, layer, diff_id.map(|d| vec![d]).as_deref(), layer.len())
}

/// [`layout`] whose manifest gives the layer's size as `size`, and whose config lists
/// `diff_ids` (default: the layer's digest).
pub(crate) fn layout_sized(t: &Path, layer: &[u8], diff_ids: Option<&[&str]>, size: usize) -> PathBuf {
    use infera_core::image::source::sha256;
    let d = t.join("layout");
    std::fs::create_dir_all(d.join("blobs/sha256")).unwrap();
    let put = |b: &[u8]| {
        let digest = sha256(b);
        std::fs::write(d.join("blobs/sha256").join(&digest[7..]), b).unwrap();
        digest
    };
    let l = put(layer);
    let diffs = serde_json::to_string(&diff_ids.map_or(vec![l.as_str()], <[&str]>::to_vec)).unwrap();
    let config = put(format!(r#"{{"rootfs": {{"type": "layers", "diff_ids": {diffs}}}}}"#).as_bytes());
    let manifest = put(
        format!(
            r#"{{"schemaVersion": 2, "config": {{"digest": "{config}", "size": 1}}, "layers": [{{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "{l}", "size": {size}}}]}}"#
        )
        .as_bytes(),
    );
    std::fs::write(d.join("oci-layout"), r#"{"imageLayoutVersion": "1.0.0"}"#).unwrap();
    let index = format!(
        r#"{{"schemaVersion": 2, "manifests": [{{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "{manifest}", "size": 1}}]}}"#
    );
    std::fs::write(d.join("index.json"), index).unwrap();
    d
}

/// A raw tar entry: name, type, link target, contents.
pub(crate) type Raw<'a> = (&'a str, tar::EntryType, &'a str, &'a [u8]);

/// A tar of raw entries.
pub(crate) fn tar_of(entries: &[Raw]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, kind, link, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        // Names written raw: the builder's own checks would refuse the hostile ones.
        let raw = &mut h.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        if !link.is_empty() {
            h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap()
}

/// Each hostile layer is refused by name, saying what it found where.
#[test]
fn hostile_layers_are_refused_by_name() {
    use tar::EntryType::{Link, Regular};
    let cases: &[(&[Raw], &str, &str)] = &[
        (&[("../etc/passwd", Regular, "", b"x")], "image-unsafe-entry", "a name that leaves the image"),
        (&[("/etc/passwd", Regular, "", b"x")], "image-unsafe-entry", "a name that leaves the image"),
        (&[("a/.wh.", Regular, "", b"")], "image-unsafe-entry", "an empty whiteout"),
        (&[("x", Link, "../../etc/shadow", b"")], "image-unsafe-entry", "a hard link out of the image"),
        (&[("x", Link, "nowhere", b"")], "image-unsafe-entry", "a hard link to a path that is not in the image"),
    ];
    for (entries, code, what) in cases {
        let t = tempfile::tempdir().unwrap();
        let d = layout(t.path(), &tar_of(entries), None);
        let e = read(&d.display().to_string()).unwrap_err();
        assert_eq!(infera_core::error::Refuse::code(&e), *code, "{e}");
        assert!(e.to_string().contains(what), "{e}");
    }
}

/// A layer whose bytes are not what the manifest and the config say, a blob that is not
/// there, a layer count unlike the config's: each refused.
#[test]
fn damaged_layouts_are_refused() {
    let layer = tar_of(&[("f", tar::EntryType::Regular, "", b"data")]);
    let t = tempfile::tempdir().unwrap();
    let d = layout(t.path(), &layer, Some("sha256:0000000000000000000000000000000000000000000000000000000000000000"));
    let e = read(&d.display().to_string()).unwrap_err();
    assert!(matches!(&e, ImageError::DigestMismatch { what, .. } if what == "layer 1's diff_id"), "{e}");
    // Unchecked with verify off: the layer's digests are not computed.
    let ok =
        image::read(&d.display().to_string(), &Platform::default(), &|_: &Path, size: u64, _| Want::Head(size), false)
            .unwrap();
    assert!(
        matches!(ok.tree.get(Path::new("/f")), Some(Node::File { data: Some(v), .. }) if v.head() == Some(&b"data"[..]))
    );

    let t = tempfile::tempdir().unwrap();
    let d = layout(t.path(), &layer, None);
    let blob = std::fs::read_dir(d.join("blobs/sha256"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read(p).unwrap() == layer);
    let blob = blob.unwrap();
    let mut changed = layer.clone();
    changed[600] ^= 1; // in the data of `f`
    std::fs::write(&blob, &changed).unwrap();
    let e = read(&d.display().to_string()).unwrap_err();
    assert!(matches!(&e, ImageError::DigestMismatch { what, .. } if what == "layer 1's blob"), "{e}");
    std::fs::remove_file(&blob).unwrap();
    let e = read(&d.display().to_string()).unwrap_err();
    assert_eq!(infera_core::error::Refuse::code(&e), "image-blob-missing", "{e}");
    let t = tempfile::tempdir().unwrap();
    let zero = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    let two = [zero, zero];
    let d = layout_sized(t.path(), &layer, Some(&two), layer.len());
    let e = read(&d.display().to_string()).unwrap_err();
    assert_eq!(infera_core::error::Refuse::code(&e), "image-format", "{e}");
    assert!(e.to_string().contains("the manifest lists 1 layers, the config's rootfs.diff_ids 2"), "{e}");
    let e = read(&t.path().join("nothing-here").display().to_string()).unwrap_err();
    assert_eq!(infera_core::error::Refuse::code(&e), "image-missing", "{e}");
    assert_eq!(infera_core::error::Refuse::exit(&e), infera_core::error::Exit::Missing, "{e}");
}

/// A tar entry as the tar crate writes it, for the headers a builder would not write.
pub(crate) fn raw_entry(kind: tar::EntryType, name: &str, data: &[u8]) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_cksum();
    let mut out = h.as_bytes().to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

/// A pax record (`LEN key=value\n`, LEN counting itself).
pub(crate) fn pax(key: &str, value: &[u8]) -> Vec<u8> {
    let body = [format!(" {key}=").as_bytes(), value, b"\n"].concat();
    let mut len = body.len() + 1;
    while format!("{len}").len() + body.len() != len {
        len += 1;
    }
    [format!("{len}").as_bytes(), &body].concat()
}

/// A tar of one regular file `f` of `size` zero bytes, as repeated compressed members of
/// 64 MiB (gzip members and zstd frames both concatenate): a decompression bomb of a few
/// hundred KB.
fn zero_bomb(size: u64, compress: fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_path("f").unwrap();
    h.set_cksum();
    let chunk = compress(&vec![0u8; 64 << 20]);
    let mut out = compress(h.as_bytes());
    for _ in 0..size / (64 << 20) {
        out.extend_from_slice(&chunk);
    }
    out.extend(compress(&[0u8; 1024]));
    out
}

pub(crate) fn gzip(b: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn zstd(b: &[u8]) -> Vec<u8> {
    zstd::encode_all(b, 3).unwrap()
}

/// Bombs and hostile headers: each refused by name before it costs memory or time, what
/// it found said.
#[test]
fn bombs_are_refused_before_they_cost() {
    use tar::EntryType::{GNULongName, Regular, XHeader};
    let end = [0u8; 1024];
    let long_name =
        [raw_entry(GNULongName, "././@LongLink", &vec![b'a'; 2 << 20]), raw_entry(Regular, "x", b"")].concat();
    let long_pax =
        [raw_entry(XHeader, "pax", &pax("comment", &vec![b'c'; 2 << 20])), raw_entry(Regular, "x", b"")].concat();
    let path_max =
        [raw_entry(GNULongName, "././@LongLink", "d/".repeat(2100).as_bytes()), raw_entry(Regular, "x", b"")].concat();
    let nul = [raw_entry(XHeader, "pax", &pax("path", b"usr/a\0b")), raw_entry(Regular, "x", b"")].concat();
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        ("gzip bomb", zero_bomb(2 << 30, gzip), "image-too-large", "a ratio over 100:1 (a decompression bomb)"),
        ("zstd bomb", zero_bomb(2 << 30, zstd), "image-too-large", "a ratio over 100:1 (a decompression bomb)"),
        (
            "GNU long name",
            [long_name, end.to_vec()].concat(),
            "image-too-large",
            "long-name or pax headers over 1 MiB before one entry",
        ),
        (
            "pax header",
            [long_pax, end.to_vec()].concat(),
            "image-too-large",
            "long-name or pax headers over 1 MiB before one entry",
        ),
        (
            "deep name",
            [path_max, end.to_vec()].concat(),
            "image-unsafe-entry",
            "a name longer than PATH_MAX (4096 bytes) (`d/d/d/",
        ),
        ("NUL", [nul, end.to_vec()].concat(), "image-unsafe-entry", "a name with a NUL byte"),
    ];
    for (what, layer, code, said) in cases {
        let t = tempfile::tempdir().unwrap();
        let d = layout(t.path(), &layer, None);
        let started = std::time::Instant::now();
        let e = read(&d.display().to_string()).unwrap_err();
        assert_eq!(infera_core::error::Refuse::code(&e), code, "{what}: {e}");
        assert!(e.to_string().contains(said), "{what}: {e}");
        eprintln!("{what}: refused in {:?}: {e}", started.elapsed());
    }
}

/// A blob longer or shorter than its descriptor says is refused without reading past it; a
/// nested archive is a file (never opened), a twice-compressed layer no tar; a device node
/// is recorded, never created.
#[test]
fn sizes_nesting_and_devices() {
    let layer = tar_of(&[("f", tar::EntryType::Regular, "", b"data")]);
    let t = tempfile::tempdir().unwrap();
    let size = layer.len() - 1;
    let e = read(&layout_sized(t.path(), &layer, None, size).display().to_string()).unwrap_err();
    assert!(matches!(&e, ImageError::DigestMismatch { what, .. } if what == "layer 1's size"), "{e}");
    assert!(e.to_string().contains(&format!("{size} bytes (the manifest's)")), "{e}");
    // A blob that ends before its size: a copy cut short, said so.
    let t = tempfile::tempdir().unwrap();
    let size = layer.len() + 1;
    let e = read(&layout_sized(t.path(), &layer, None, size).display().to_string()).unwrap_err();
    assert_eq!(infera_core::error::Refuse::code(&e), "image-damaged", "{e}");
    assert!(e.to_string().contains(&format!("ends at byte {} of the {size}", layer.len())), "{e}");

    let bomb = zero_bomb(2 << 30, zstd);
    let nested = tar_of(&[("bomb.tar.zst", tar::EntryType::Regular, "", &bomb)]);
    let t = tempfile::tempdir().unwrap();
    let img = read(&layout(t.path(), &nested, None).display().to_string()).unwrap();
    let kept = |p: &str| match img.tree.get(Path::new(p)) {
        Some(Node::File { size, data, .. }) => (*size, data.as_ref().and_then(|d| d.head()).map(<[u8]>::len)),
        other => panic!("{p}: {other:?}"),
    };
    assert_eq!(kept("/bomb.tar.zst"), (bomb.len() as u64, Some(bomb.len())), "a file, its bytes as they are");

    let t = tempfile::tempdir().unwrap();
    let e = read(&layout(t.path(), &gzip(&gzip(&layer)), None).display().to_string()).unwrap_err();
    assert_eq!(infera_core::error::Refuse::code(&e), "image-format", "{e}");

    let dev = tar_of(&[("dev/null", tar::EntryType::Char, "", b""), ("run/fifo", tar::EntryType::Fifo, "", b"")]);
    let t = tempfile::tempdir().unwrap();
    let img = read(&layout(t.path(), &dev, None).display().to_string()).unwrap();
    assert!(
        matches!(img.tree.get(Path::new("/dev/null")), Some(Node::Special { mode }) if mode & nix::libc::S_IFMT == nix::libc::S_IFCHR)
    );
    assert!(
        matches!(img.tree.get(Path::new("/run/fifo")), Some(Node::Special { mode }) if mode & nix::libc::S_IFMT == nix::libc::S_IFIFO)
    );
    let on_disk: Vec<_> = walk(t.path());
    assert!(
        on_disk.iter().all(|p| p.starts_with(t.path().join("layout"))),
        "nothing made outside the layout: {on_disk:?}"
    );
    assert!(!on_disk.iter().any(|p| p.ends_with("null") || p.ends_with("fifo")), "{on_disk:?}");
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// A long layer says how far it has got as it goes, not only when it ends: a plain tar of
/// one file of 2.5 GiB, its data a hole of the blob's sparse file (read unverified: hashing it
/// would be the test's time).
#[test]
fn a_long_layer_says_its_progress_as_it_goes() {
    let t = tempfile::tempdir().unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(5 << 29);
    h.set_mode(0o644);
    h.set_path("big").unwrap();
    h.set_cksum();
    let blob_len = 512 + (5u64 << 29) + 1024;
    let hex = "ab".repeat(32);
    let diff = format!("sha256:{hex}");
    let d = layout_sized(t.path(), b"placeholder", Some(&[diff.as_str()]), blob_len as usize);
    // The layer's blob: the header, then zeros (a hole) and the end-of-archive blocks.
    let manifest_layer = std::fs::read_dir(d.join("blobs/sha256"))
        .unwrap()
        .flatten()
        .find(|e| std::fs::read(e.path()).unwrap() == b"placeholder")
        .unwrap()
        .path();
    let f = std::fs::File::create(&manifest_layer).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, h.as_bytes(), 0).unwrap();
    f.set_len(blob_len).unwrap();
    let said = std::sync::Mutex::new(Vec::new());
    let keep = |_: &Path, _: u64, _: u32| Want::Head(0);
    let img = image::read_with_progress(&d.display().to_string(), &Platform::default(), &keep, false, &|s| {
        said.lock().unwrap().push(*s)
    })
    .unwrap();
    assert!(matches!(img.tree.get(Path::new("/big")), Some(Node::File { size, data: None, .. }) if *size == 5 << 29));
    let said = said.into_inner().unwrap();
    assert_eq!(said.len(), 2, "{said:?}");
    let s = said[0];
    assert!(
        (s.layer, s.layers, s.done) == (1, 1, false) && (2 << 30..5 << 29).contains(&s.bytes),
        "at 2 GiB: {said:?}"
    );
    // An uncompressed layer: its blob is read as far as its tar, of the size the manifest says.
    assert!(s.blob_read >= s.bytes && s.blob_read <= s.bytes + (1 << 20) && s.blob_size == Some(blob_len), "{said:?}");
    let end = said[1];
    assert_eq!(
        (end.bytes, end.blob_read, end.done),
        (blob_len, blob_len, true),
        "the tar's bytes when it ends: {said:?}"
    );
}

/// A library whose `.hip_fatbin` holds `bundles` plain and CCOB v2 bundles, alternating,
/// followed by `bulk` bytes of another section (gcc, then objcopy).
fn hip_library(dir: &Path, bulk: usize, bundles: usize) -> PathBuf {
    use crate::preflight::{ccob_v2, plain};
    let all: Vec<Vec<u8>> = (0..bundles)
        .map(|k| {
            let inner = plain(&[if k.is_multiple_of(3) { "gfx942" } else { "gfx950" }]);
            if k.is_multiple_of(2) {
                inner
            } else {
                ccob_v2(&inner)
            }
        })
        .collect();
    let so = crate::preflight::hip_library(dir, "libbig", &all);
    let mut noise = vec![0u8; bulk];
    let mut x = 0x9e3779b97f4a7c15u64;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let bulk_file = dir.join("bulk.bin");
    std::fs::write(&bulk_file, noise).unwrap();
    let st = Command::new("objcopy").arg(format!("--add-section=.bulk={}", bulk_file.display())).arg(&so).status();
    assert!(st.unwrap().success(), "objcopy");
    so
}

/// The GPU code of an image's libraries, read from its archive, is what the same reader
/// finds in the files themselves: real ROCm binaries (plain bundles, CCOB v3 zstd) and a
/// generated library of 100 bundles and 96 MiB of another section, of which only the parts
/// the reader reads are kept.
#[test]
fn gpu_code_read_from_an_archive_is_the_files() {
    use infera_facts::{fatbin, image_keep};
    let t = tempfile::tempdir().unwrap();
    let real = crate::gpu_code::rocm_binaries();
    let site = "usr/lib/python3.12/site-packages";
    let ctx = t.path().join("ctx");
    let big = hip_library(t.path(), 96 << 20, 100);
    let libs: Vec<(String, PathBuf)> = vec![
        (format!("{site}/torch/lib/libtorch_hip.so"), big),
        (format!("{site}/vllm/_C.abi3.so"), real.join("gafime_rocm/libgafime_rocm.so")),
        (format!("{site}/vllm/_rocm_C.abi3.so"), real.join("jax_rocm7_plugin/_linalg.so")),
        (format!("{site}/sgl_kernel/common_ops.so"), real.join("jax_rocm7_plugin/_prng.so")),
        (format!("{site}/sgl_kernel/solver.so"), real.join("jax_rocm7_plugin/_solver.so")),
        (format!("{site}/sgl_kernel/sparse.so"), real.join("jax_rocm7_plugin/_sparse.so")),
    ];
    for (at, from) in &libs {
        std::fs::create_dir_all(ctx.join(at).parent().unwrap()).unwrap();
        std::fs::copy(from, ctx.join(at)).unwrap();
    }
    std::fs::write(t.path().join("Containerfile"), "FROM scratch\nCOPY ctx/ /\n").unwrap();
    let tp = t.path().display().to_string();
    tool("podman", t.path(), &["build", "-q", "-t", "localhost/gpu:1", "-f", &format!("{tp}/Containerfile"), &tp]);
    tool(
        "podman",
        t.path(),
        &["push", "-q", "--compression-format", "gzip", "localhost/gpu:1", &format!("oci:{tp}/oci:1")],
    );
    let img = image::read(&format!("{tp}/oci:1"), &Platform::default(), &image_keep, true).unwrap();
    match img.tree.get(Path::new(&format!("/{site}/torch/lib/libtorch_hip.so"))) {
        Some(Node::File { size, data: Some(image::tree::Kept::Parts(r)), .. }) => {
            assert!(*size > 96 << 20, "{size}");
            assert!(r.kept() < 12 << 20, "kept {} of {size}", r.kept());
        }
        other => panic!("{other:?}"),
    }
    let root = infera_core::rootfs::Root::of_image(img.tree, img.identity);
    let (mut sampled, mut with_code) = (0, 0);
    for (at, _) in &libs {
        let p = Path::new("/").join(at);
        let (kept, size) = root.open_at(&p).unwrap();
        let f = std::fs::File::open(ctx.join(at)).unwrap();
        let want = fatbin::read(&f, f.metadata().unwrap().len()).unwrap();
        assert_eq!(fatbin::read(kept.as_ref(), size).unwrap(), want, "{at}");
        with_code += usize::from(want.is_some());
        sampled += usize::from(want.is_some_and(|w| w.sampled));
    }
    assert_eq!(with_code, 5, "jax's _sparse.so has no GPU code, read as such from both");
    assert_eq!(sampled, 1, "the generated library has more bundles than are read");
}

/// This process's bytes read so far (`rchar` of /proc/self/io: every read call's bytes).
fn bytes_read() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines().find_map(|l| l.strip_prefix("rchar: ")).unwrap().trim().parse().unwrap()
}

/// An archive's layers are read once: indexing the archive seeks past its members' data.
/// An oci-archive of one 48 MiB layer costs about 48 MiB of reads, not twice that.
#[test]
fn an_archive_is_read_once() {
    let t = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..48u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let d = layout(t.path(), &tar_of(&[("big", tar::EntryType::Regular, "", &data)]), None);
    let archive = t.path().join("oci.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&archive).unwrap());
    b.append_dir_all(".", &d).unwrap();
    b.finish().unwrap();
    let before = bytes_read();
    let img = image::read(&archive.display().to_string(), &Platform::default(), &|_: &Path, _, _| Want::Head(0), false)
        .unwrap();
    let read = bytes_read() - before;
    assert!(img.tree.get(Path::new("/big")).is_some());
    assert!(read < (56 << 20), "{} MiB read for a 48 MiB layer", read >> 20);
    assert!(read >= (48 << 20), "the layer itself is read: {} MiB", read >> 20);
}

/// An archive cut short right after a member (no tar end marker), whose index was in the part
/// lost, says it was cut short (image-damaged, "truncated? copy it again"); the same members
/// with the end marker are a tar that is not an image archive.
#[test]
fn an_archive_cut_at_a_member_boundary_says_so() {
    let t = tempfile::tempdir().unwrap();
    let mut bytes = raw_entry(tar::EntryType::Regular, "blobs/sha256/aa", b"layer bytes");
    bytes.extend(raw_entry(tar::EntryType::Regular, "blobs/sha256/bb", b"more"));
    let cut = t.path().join("cut.tar");
    std::fs::write(&cut, &bytes).unwrap();
    let e = read(cut.to_str().unwrap()).err().unwrap();
    assert!(matches!(&e, ImageError::Damaged { what, .. } if what == "the archive"), "{e}");
    let said = e.to_string();
    assert!(said.contains("ends at byte 2048, right after a member, without a tar's end marker: truncated?"), "{said}");
    bytes.extend([0u8; 1024]);
    let whole = t.path().join("whole.tar");
    std::fs::write(&whole, &bytes).unwrap();
    let e = read(whole.to_str().unwrap()).err().unwrap();
    assert!(matches!(&e, ImageError::Format { .. }), "{e}");
    assert!(e.to_string().contains("none of them an oci-layout or a manifest.json"), "{e}");
}
