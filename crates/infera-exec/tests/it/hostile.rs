//! Hardening, round five: the new surfaces as hostile input meets them. Every case is a crafted
//! archive, root or tree; each ends (the runs are bounded), never by a signal, with the
//! documented exit code and a message that names what was found — and nothing outside the
//! archive, root or volume is read.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::image::{gzip, layout, raw_entry, read, tar_of, Raw};
use crate::support::*;
use infera_core::error::Refuse;
use infera_core::image::source::sha256;

fn check_image(reference: &std::ffi::OsStr, extra: &[&str]) -> Out {
    infera(&["check", "--image"]).args([reference]).args(extra).run()
}

fn fifo(p: &Path) {
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
}

/// The blob of `layout`'s one layer (the largest blob: the layer of these tests is).
fn blob_of(d: &Path, content: &[u8]) -> std::path::PathBuf {
    d.join("blobs/sha256").join(&sha256(content)[7..])
}

/// `--image` and every file it names are opened without blocking, as regular files, inside
/// the layout or archive only: a FIFO, a device, a link or a name out of it is refused by
/// what it is, and the host file a link points at is never read.
#[test]
fn an_archives_own_files_are_opened_inside_it_only() {
    let layer = tar_of(&[("f", tar::EntryType::Regular, "", b"data")]);
    let t = tempfile::tempdir().unwrap();
    // `--image` itself a FIFO.
    let f = t.path().join("image.fifo");
    fifo(&f);
    check_image(f.as_os_str(), &[]).assert(65, "is a FIFO, not an image layout directory or an archive file");
    // index.json a FIFO; the manifest blob a FIFO.
    let d = layout(&t.path().join("a"), &layer, None);
    std::fs::remove_file(d.join("index.json")).unwrap();
    fifo(&d.join("index.json"));
    check_image(d.as_os_str(), &[]).assert(65, "the index `index.json` is a FIFO, not a regular file");
    // A layer blob linked to a host file, and to /dev/zero with a descriptor of 1 TiB.
    let host = t.path().join("host-secret");
    std::fs::write(&host, "not the image's").unwrap();
    let d = layout(&t.path().join("b"), &layer, None);
    std::fs::remove_file(blob_of(&d, &layer)).unwrap();
    std::os::unix::fs::symlink(&host, blob_of(&d, &layer)).unwrap();
    check_image(d.as_os_str(), &[]).assert(65, "leaves the image directory (a link or name out of it)");
    std::fs::remove_file(blob_of(&d, &layer)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", blob_of(&d, &layer)).unwrap();
    let manifest = std::fs::read_dir(d.join("blobs/sha256"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read_to_string(p).is_ok_and(|s| s.contains("\"layers\"")));
    let _ = manifest; // the descriptor's size does not matter: the link is refused first
    check_image(d.as_os_str(), &[]).assert(65, "leaves the image directory");
    // A device node inside the layout.
    std::fs::remove_file(blob_of(&d, &layer)).unwrap();
    nix::sys::stat::mknod(
        &blob_of(&d, &layer),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o644),
        nix::sys::stat::makedev(1, 5),
    )
    .unwrap();
    check_image(d.as_os_str(), &[]).assert(65, "is a character device, not a regular file");

    // An unpacked docker-archive whose manifest.json names host paths.
    let dd = t.path().join("docker");
    std::fs::create_dir(&dd).unwrap();
    std::fs::write(
        dd.join("manifest.json"),
        r#"[{"Config": "/etc/passwd", "RepoTags": ["x:1"], "Layers": ["/etc/hostname"]}]"#,
    )
    .unwrap();
    check_image(dd.as_os_str(), &[]).assert(65, "the config `/etc/passwd` leaves the image (an absolute name or `..`)");
    // A docker-archive (tar) whose layer is `../x.tar`.
    let config = br#"{"rootfs": {"type": "layers", "diff_ids": ["sha256:0000000000000000000000000000000000000000000000000000000000000000"]}}"#;
    let manifest = br#"[{"Config": "c.json", "RepoTags": ["x:1"], "Layers": ["../x.tar"]}]"#;
    let archive = tar_of(&[
        ("manifest.json", tar::EntryType::Regular, "", manifest),
        ("c.json", tar::EntryType::Regular, "", config),
    ]);
    let a = t.path().join("docker.tar");
    std::fs::write(&a, archive).unwrap();
    check_image(a.as_os_str(), &[]).assert(65, "layer 1 `../x.tar` leaves the image");
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "not the image's");
}

/// An archive cut short, a corrupt compressed layer and a path that is not there each say
/// what happened, with the exit code a CI step can tell apart.
#[test]
fn damaged_and_missing_archives_say_what_happened() {
    let t = tempfile::tempdir().unwrap();
    let layer = gzip(&tar_of(&[("f", tar::EntryType::Regular, "", &[7u8; 200_000])]));
    let d = layout(t.path(), &layer, None);
    // A flipped byte in the gzip stream: damaged, not a format this reads.
    let blob = blob_of(&d, &layer);
    let mut bad = layer.clone();
    bad[layer.len() / 2] ^= 0xff;
    std::fs::write(&blob, &bad).unwrap();
    let out = check_image(d.as_os_str(), &[]);
    out.assert(65, "error[image-damaged]").assert(65, "copy the image again");
    std::fs::write(&blob, &layer).unwrap();
    // A flipped byte in a plain tar layer's header: no tar to read, and the blob is not the
    // one the manifest names: altered, "copy it again", not a format this does not read.
    let plain = tar_of(&[("f", tar::EntryType::Regular, "", &[7u8; 2_000])]);
    let p = layout(&t.path().join("plain"), &plain, None);
    let mut bad = plain.clone();
    bad[100] ^= 0x5a; // in the first header's mode field
    std::fs::write(blob_of(&p, &plain), &bad).unwrap();
    check_image(p.as_os_str(), &[])
        .assert(65, "error[image-digest-mismatch]")
        .assert(65, "layer 1's blob")
        .assert(65, "hint: copy the image again");
    // The same image as an oci-archive, cut short.
    let tarball = t.path().join("oci.tar");
    let st = std::process::Command::new("tar").arg("-C").arg(&d).arg("-cf").arg(&tarball).arg(".").status().unwrap();
    assert!(st.success());
    let whole = std::fs::read(&tarball).unwrap();
    let cut = t.path().join("cut.tar");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    check_image(cut.as_os_str(), &[]).assert(65, "error[image-damaged]").assert(65, "truncated? copy it again");
    // Not there at all: 66, the copy step failed.
    let out = check_image(t.path().join("never-copied").as_os_str(), &[]);
    out.assert(66, "error[image-missing]").assert(66, "may have failed");
    // A tag the layout does not have: the names it has.
    let e = read(&format!("{}:v2", d.display())).unwrap_err();
    assert_eq!(e.code(), "image-format", "{e}");
    assert!(e.to_string().contains("it has no names"), "{e}");
}

/// A layer whose whiteouts name `.` or `..` is refused: no runtime removes a directory's own
/// entry, and the tree would keep paths of a directory gone from its parent.
#[test]
fn whiteouts_of_dot_and_dotdot_are_refused() {
    for name in ["etc/.wh..", "etc/.wh..."] {
        let layer = tar_of(&[("etc/x", tar::EntryType::Regular, "", b"x"), (name, tar::EntryType::Regular, "", b"")]);
        let t = tempfile::tempdir().unwrap();
        let e = read(&layout(t.path(), &layer, None).display().to_string()).unwrap_err();
        assert_eq!(e.code(), "image-unsafe-entry", "{name}: {e}");
        assert!(e.to_string().contains("a whiteout of `.` or `..`"), "{name}: {e}");
    }
}

/// Sparse members — GNU's old format and PAX 0.0, 0.1 and 1.0, as GNU tar writes them — are
/// the regular files they are: their real names and sizes, holes read as zeros.
#[test]
fn sparse_members_are_read_as_the_files_they_are() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("usr/bin")).unwrap();
    // 1 MiB of hole, "ELF" data, 1 MiB of hole, more data, a hole to the end.
    let f = std::fs::File::create(src.join("usr/bin/python3.12")).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"\x7fELF-head", 1 << 20).unwrap();
    f.write_all_at(b"tail-data", 3 << 20).unwrap();
    f.set_len(4 << 20).unwrap();
    drop(f);
    let want = std::fs::read(src.join("usr/bin/python3.12")).unwrap();
    for (format, extra) in [
        ("gnu", &[][..]),
        ("posix", &["--sparse-version=0.0"][..]),
        ("posix", &["--sparse-version=0.1"][..]),
        ("posix", &["--sparse-version=1.0"][..]),
    ] {
        let format_option = format!("--format={format}");
        let layer = sparse_tar(&src, &[&[format_option.as_str()][..], extra].concat());
        let l = tempfile::tempdir().unwrap();
        let img = infera_core::image::read(
            &layout(l.path(), &layer, None),
            &infera_core::image::Platform::default(),
            &|_: &Path, size: u64, _| infera_core::image::layer::Want::Head(size),
            true,
        )
        .unwrap_or_else(|e| panic!("{format} {extra:?}: {e}"));
        match img.tree.get(Path::new("/usr/bin/python3.12")) {
            Some(infera_core::image::tree::Node::File { size, data, .. }) => {
                assert_eq!(*size, 4 << 20, "{format} {extra:?}");
                assert_eq!(data.as_ref().and_then(|d| d.head()), Some(&want[..]), "{format} {extra:?}: contents");
            }
            other => panic!("{format} {extra:?}: {other:?}"),
        }
        assert!(img.tree.paths().all(|(p, _)| !p.as_os_str().as_bytes().windows(14).any(|w| w == b"GNUSparseFile.")));
    }
}

/// What a descriptor says a blob is, it is: an index called a manifest is refused naming
/// both; indexes nested past the bound say the nesting.
#[test]
fn descriptors_are_held_to_what_their_blobs_are() {
    let layer = tar_of(&[("f", tar::EntryType::Regular, "", b"data")]);
    let t = tempfile::tempdir().unwrap();
    let d = layout(t.path(), &layer, None);
    let put = |b: &[u8]| {
        let digest = sha256(b);
        std::fs::write(d.join("blobs/sha256").join(&digest[7..]), b).unwrap();
        digest
    };
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("index.json")).unwrap()).unwrap();
    let manifest = index["manifests"][0]["digest"].as_str().unwrap().to_string();
    let wrap = |inner: &str, kind: &str| {
        put(format!(
            r#"{{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [{{"mediaType": "{kind}", "digest": "{inner}", "size": 1, "platform": {{"os": "linux", "architecture": "amd64"}}}}]}}"#
        ).as_bytes())
    };
    // The top descriptor says manifest; the blob is an index.
    let one = wrap(&manifest, "application/vnd.oci.image.manifest.v1+json");
    let top = |digest: &str, kind: &str| {
        std::fs::write(
            d.join("index.json"),
            format!(
                r#"{{"schemaVersion": 2, "manifests": [{{"mediaType": "{kind}", "digest": "{digest}", "size": 1}}]}}"#
            ),
        )
        .unwrap();
    };
    top(&one, "application/vnd.oci.image.manifest.v1+json");
    let e = read(&d.display().to_string()).unwrap_err();
    assert!(
        e.to_string().contains("says a manifest (application/vnd.oci.image.manifest.v1+json), the blob is an index"),
        "{e}"
    );
    // Five indexes deep.
    let mut digest = manifest.clone();
    let mut kind = "application/vnd.oci.image.manifest.v1+json";
    for _ in 0..5 {
        digest = wrap(&digest, kind);
        kind = "application/vnd.oci.image.index.v1+json";
    }
    top(&digest, kind);
    let e = read(&d.display().to_string()).unwrap_err();
    assert!(e.to_string().contains("its indexes nest more than 4 deep"), "{e}");
}

/// An archive of a few hundred KB holding dozens of "GPU libraries" that are nothing but
/// bundle magics: what the GPU-code capture keeps (its parts and every mark) counts against
/// the image's one budget, so the read is refused by name instead of taking a GiB.
#[test]
fn the_gpu_code_capture_counts_against_the_images_budget() {
    let magics = b"CCOB".repeat(1 << 20); // 4 MiB: a million marks
    let names: Vec<String> =
        (0..40).map(|i| format!("usr/lib/python3.12/site-packages/sgl_kernel/lib{i}.so")).collect();
    let entries: Vec<Raw> = names.iter().map(|n| (n.as_str(), tar::EntryType::Regular, "", &magics[..])).collect();
    let layer = gzip(&tar_of(&entries));
    assert!(layer.len() < 4 << 20, "{} bytes", layer.len());
    let t = tempfile::tempdir().unwrap();
    let d = layout(t.path(), &layer, None);
    // Peak memory as the kernel counts it for the child (GNU time's maximum resident set).
    let out = std::process::Command::new("/usr/bin/time")
        .args(["-f", "maxrss-kb=%M"])
        .arg(BIN)
        .args(["check", "--image"])
        .arg(&d)
        .env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "{stderr}");
    assert!(stderr.contains("error[image-too-large]") && stderr.contains("of the files the facts read"), "{stderr}");
    let kb: u64 = stderr.lines().find_map(|l| l.strip_prefix("maxrss-kb=")).unwrap().trim().parse().unwrap();
    eprintln!("refused at a peak of {} MiB: {stderr}", kb >> 10);
    assert!(kb < 400 << 10, "peak {} MiB", kb >> 10);
}

/// `install DEST` where DEST is a link, or has one on its way, writes nothing through it.
#[test]
fn install_refuses_a_linked_destination() {
    let ov = shipped_overlay();
    let t = tempfile::tempdir().unwrap();
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, t.path().join("dest")).unwrap();
    for dest in [t.path().join("dest"), t.path().join("dest/sub")] {
        infera(&["install"])
            .args([dest.as_os_str()])
            .args(["--from".as_ref(), ov.overlay().as_os_str()])
            .run()
            .assert(2, "is a symbolic link on the way to the destination");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");
    }
}

/// The read-ahead reads what the engine in the pod would read: a shard linked out of the
/// root is the root's file of that name (here none: not read ahead, and said), a Hugging
/// Face cache's relative snapshot links resolve to its blobs, and no host file is named.
#[test]
fn the_read_ahead_reads_only_inside_the_root() {
    let img = image("vllm-0.28");
    let ov = shipped_overlay();
    let host = tempfile::tempdir().unwrap();
    let secret = host.path().join("host-weights.safetensors");
    std::fs::write(&secret, vec![0u8; 4096]).unwrap();
    img.file("/models/m/config.json", r#"{"model_type": "llama", "num_attention_heads": 8}"#);
    std::fs::write(img.p("/models/m/model-00001-of-00002.safetensors"), vec![0u8; 4096]).unwrap();
    std::os::unix::fs::symlink(&secret, img.p("/models/m/model-00002-of-00002.safetensors")).unwrap();
    // A Hugging Face cache: the snapshot's files are relative links to its blobs.
    let hub = "/root/.cache/huggingface/hub/models--org--m";
    img.file(&format!("{hub}/refs/main"), "abc");
    img.file(&format!("{hub}/blobs/0123"), vec![0u8; 4096]);
    img.file(&format!("{hub}/snapshots/abc/config.json"), r#"{"model_type": "llama", "num_attention_heads": 8}"#);
    img.link(&format!("{hub}/snapshots/abc/model.safetensors"), "../../blobs/0123");
    let plan = |model: &str| {
        let out = infera(&["worker", "--dry-run", "--output", "json", "--prefetch", "on", "--", "--model", model])
            .root(&img)
            .overlay(&ov.overlay())
            .env("HOME", "/root")
            .run();
        assert_eq!(out.code, 0, "{}", out.stderr);
        out.json()
    };
    let j = plan("/models/m");
    let files: Vec<String> =
        j["exec"]["prefetch"]["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect();
    assert_eq!(files, [img.p("/models/m/model-00001-of-00002.safetensors").display().to_string()], "{j:#}");
    assert!(
        j["findings"].to_string().contains("model-00002-of-00002.safetensors"),
        "the skipped shard is said: {}",
        j["findings"]
    );
    let j = plan("org/m");
    let files = j["exec"]["prefetch"]["files"].to_string();
    assert!(files.contains(&img.p(&format!("{hub}/blobs/0123")).display().to_string()), "{files}");
    // `__prefetch` run by hand is bounded in what it takes.
    infera(&["__prefetch", "--parent", "1", "--lead", "1", "--ranges", "4294967295", "--", "/x"])
        .run()
        .assert(2, "4294967295");
}

/// Output for CI even on failure: a path that is not UTF-8 is a path, a refusal before the
/// matrix is a JUnit report of one error, and attribute values keep their tabs and newlines.
#[test]
fn ci_gets_its_report_in_the_format_it_asked_for() {
    let t = tempfile::tempdir().unwrap();
    let odd = t.path().join(std::ffi::OsStr::from_bytes(b"image-\xff"));
    let out = infera(&["check", "--output", "json", "--image"]).args([odd.as_os_str()]).run();
    assert_eq!(out.code, 66, "{}", out.stderr);
    assert_eq!(out.json()["error"]["code"], "image-missing");
    let out = infera(&["check", "--image"]).args([odd.as_os_str()]).args(["--output", "junit"]).run();
    assert_eq!(out.code, 66, "{}", out.stderr);
    let doc = roxmltree::Document::parse(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.stdout));
    let error = doc.descendants().find(|n| n.has_tag_name("error")).unwrap();
    assert_eq!(error.attribute("type"), Some("image-missing"));
    // No overlay: still a report.
    let out = infera(&["check", "--output", "junit", "--family", "all", "--overlay"])
        .args([t.path().join("no-overlay").as_os_str()])
        .run();
    assert_ne!(out.code, 0);
    let doc = roxmltree::Document::parse(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.stdout));
    assert_eq!(doc.descendants().filter(|n| n.has_tag_name("error")).count(), 1, "{}", out.stdout);
    // A usage error, with `--output junit` anywhere before it.
    let out = infera(&["check", "--output", "junit", "--no-such-option"]).run();
    assert_eq!(out.code, 2);
    roxmltree::Document::parse(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.stdout));
    // A name with a tab and a newline reads back whole from an attribute.
    let named = t.path().join("a\tb\nc");
    let out = infera(&["check", "--output", "junit", "--image"]).args([named.as_os_str()]).run();
    let doc = roxmltree::Document::parse(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.stdout));
    let error = doc.descendants().find(|n| n.has_tag_name("error")).unwrap();
    assert!(error.attribute("message").unwrap().contains("a\tb\nc"), "{:?}", error.attribute("message"));
}

/// An image config's `Env` entries that no process can be given are left out, and said.
#[test]
fn config_env_entries_no_process_can_hold_are_dropped_and_said() {
    let t = tempfile::tempdir().unwrap();
    let layer = tar_of(&[("f", tar::EntryType::Regular, "", b"data")]);
    let d = layout(t.path(), &layer, None);
    // The config blob rewritten with bad Env entries (the manifest names it by digest).
    let config_path = std::fs::read_dir(d.join("blobs/sha256"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read_to_string(p).is_ok_and(|s| s.contains("diff_ids")))
        .unwrap();
    let old = std::fs::read_to_string(&config_path).unwrap();
    let new = old.replacen('{', r#"{"config": {"Env": ["GOOD=1", "NOEQUALS", "NUL=a\u0000b", "LINE=a\nb"]}, "#, 1);
    let new_digest = sha256(new.as_bytes());
    std::fs::write(d.join("blobs/sha256").join(&new_digest[7..]), &new).unwrap();
    let old_digest = format!("sha256:{}", config_path.file_name().unwrap().to_string_lossy());
    for m in std::fs::read_dir(d.join("blobs/sha256")).unwrap().flatten() {
        let text = std::fs::read_to_string(m.path()).unwrap_or_default();
        if text.contains(&old_digest) && text.contains("\"layers\"") {
            let text = text.replace(&old_digest, &new_digest);
            let digest = sha256(text.as_bytes());
            std::fs::write(d.join("blobs/sha256").join(&digest[7..]), &text).unwrap();
            let index = std::fs::read_to_string(d.join("index.json")).unwrap();
            let manifest = format!("sha256:{}", m.file_name().to_string_lossy());
            std::fs::write(d.join("index.json"), index.replace(&manifest, &digest)).unwrap();
        }
    }
    let out = check_image(d.as_os_str(), &[]);
    assert!(out.stderr.contains("image-env-dropped") && out.stderr.contains("NOEQUALS"), "{}", out.stderr);
    assert!(out.stderr.contains("NUL=a\\0b") && out.stderr.contains("LINE=a\\nb"), "{}", out.stderr);
    let _ = raw_entry; // the helper set shared with tests/it/image.rs
}

/// An interpreter that is a FIFO is said as one, not by its permission bits.
#[test]
fn an_interpreter_that_is_a_fifo_is_named() {
    let img = image("vllm");
    let ov = shipped_overlay();
    img.rm("/usr/bin/python3.12");
    fifo(&img.p("/usr/bin/python3.12"));
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(126, "is a FIFO, not an executable file");
}

/// A weight index naming more files than any checkpoint has is not read for its files: its
/// `total_size` still counts, the read-ahead plans nothing and says why, and no start holds
/// or sorts the names.
#[test]
fn a_weight_index_of_a_million_names_is_bounded() {
    let img = image("vllm-0.28");
    let ov = shipped_overlay();
    img.file("/models/m/config.json", r#"{"model_type": "llama", "num_attention_heads": 8}"#);
    let map: Vec<String> = (0..70_000).map(|i| format!("\"t{i}\": \"model-{i:07}.safetensors\"")).collect();
    let index = format!("{{\"metadata\": {{\"total_size\": 4096}}, \"weight_map\": {{{}}}}}", map.join(", "));
    img.file("/models/m/model.safetensors.index.json", index);
    let out = infera(&["worker", "--dry-run", "--output", "json", "--prefetch", "on", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    assert!(j["exec"]["prefetch"].is_null(), "{}", j["exec"]["prefetch"]);
    assert!(j["findings"].to_string().contains("lists more than 65536 files"), "{}", j["findings"]);
}

/// `usr` under `src` as GNU tar writes it with `--sparse` and `options` (its holes as holes).
pub(crate) fn sparse_tar(src: &Path, options: &[&str]) -> Vec<u8> {
    let tarball = src.with_extension("tar");
    let st = std::process::Command::new("tar")
        .arg("--sparse")
        .args(options)
        .arg("-C")
        .arg(src)
        .arg("-cf")
        .arg(&tarball)
        .arg("usr")
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::read(&tarball).unwrap()
}
