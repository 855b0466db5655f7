//! Docker, for real: the archives `docker save` writes, read by `check --image` and compared
//! with what the Docker daemon itself says of the image (`docker image inspect`, `docker
//! export`). The images are built by `examples/images/build --docker` (scripts/test runs it).
//! The entrypoint, the refusal, PID 1 and the multi-node groups as containers are
//! tests/docker/e2e.py's (run by scripts/test).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::image::read;
use crate::support::*;

const VLLM: &str = "localhost/infera-standin-vllm-rocm72:test";
const SGLANG: &str = "localhost/infera-standin-sglang:test";
const TOP: &str = "localhost/infera-docker-top:test";

/// Whether a Docker daemon answers, with the images built. Without one the test says so and
/// passes, unless INFERA_REQUIRE_DOCKER=1 (scripts/test sets it where `docker version` reaches
/// a daemon).
fn daemon() -> bool {
    let up = Command::new("docker").args(["version", "--format", "{{.Server.Version}}"]).output();
    let up = up.is_ok_and(|o| o.status.success());
    assert!(up || std::env::var("INFERA_REQUIRE_DOCKER").as_deref() != Ok("1"), "no Docker daemon answers");
    if !up {
        eprintln!("SKIPPED: no Docker daemon answers (`docker version`)");
        return false;
    }
    // Build (or find up to date) the images, one build at a time.
    let built = Command::new("flock")
        .arg(repo().join("target/e2e.lock"))
        .arg(repo().join("examples/images/build"))
        .arg("--docker")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(built.success(), "examples/images/build --docker failed");
    true
}

fn docker(args: &[&str]) -> String {
    let o = Command::new("docker").args(args).output().expect("docker");
    assert!(o.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Docker's own view of /keep: `docker export` of a container of the image.
fn exported(image: &str, t: &Path) -> BTreeMap<String, String> {
    let c = docker(&["create", image]);
    let tar = t.join("export.tar");
    docker(&["export", "-o", tar.to_str().unwrap(), &c]);
    docker(&["rm", &c]);
    let mut out = BTreeMap::new();
    let mut a = tar::Archive::new(std::fs::File::open(&tar).unwrap());
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        let path = format!("/{}", e.path().unwrap().display()).trim_end_matches('/').to_string();
        if !path.starts_with("/keep") {
            continue;
        }
        let v = if e.header().entry_type().is_dir() {
            "dir".to_string()
        } else {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).unwrap();
            format!("file {s}")
        };
        out.insert(path, v);
    }
    out
}

/// Images built by Docker's builder — on the vLLM stand-in, a layer of files, then a layer
/// that deletes a file and a directory and adds another (whiteouts, as Docker's storage driver
/// writes them) — saved alone, and with the sglang image in one archive: read by tag, by digest and
/// as the only image, each the filesystem `docker export` gives, with the digests, layers and
/// environment `docker image inspect` gives; `check --image` plans each image's tree.
#[test]
fn docker_save_archives_read_as_docker_sees_them() {
    if !daemon() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let t = t.path();
    for (p, c) in
        [("ctx/keep/a", "stays\n"), ("ctx/keep/b", "gone later\n"), ("ctx/keep/sub/c", "gone with its directory\n")]
    {
        std::fs::create_dir_all(t.join(p).parent().unwrap()).unwrap();
        std::fs::write(t.join(p), c).unwrap();
    }
    let rm = "import os, shutil; os.remove('/keep/b'); shutil.rmtree('/keep/sub'); os.mkdir('/keep/new'); \
              open('/keep/new/d', 'w').write('new' + chr(10))";
    let dockerfile = format!(
        "FROM {VLLM}\nCOPY ctx/ /\nRUN [\"python3\", \"-c\", \"{}\"]\nENV INFERA_DOCKER_LAYER=top\n",
        rm.replace('"', "\\\"")
    );
    std::fs::write(t.join("Dockerfile"), dockerfile).unwrap();
    docker(&["build", "-q", "-t", TOP, t.to_str().unwrap()]);
    let want = exported(TOP, t);
    assert_eq!(want.get("/keep/new/d").map(String::as_str), Some("file new\n"), "{want:?}");
    assert!(!want.contains_key("/keep/b") && !want.contains_key("/keep/sub"), "{want:?}");

    let single = t.join("single.tar").display().to_string();
    let multi = t.join("multi.tar").display().to_string();
    docker(&["save", "-o", &single, TOP]);
    docker(&["save", "-o", &multi, TOP, SGLANG]);
    let inspect = |image: &str| -> serde_json::Value {
        serde_json::from_str::<serde_json::Value>(&docker(&["image", "inspect", image])).unwrap()[0].clone()
    };
    let top = inspect(TOP);
    let id = top["Id"].as_str().unwrap();
    for reference in [single.clone(), format!("{multi}:{TOP}"), format!("{multi}@{id}")] {
        let img = read(&reference).unwrap_or_else(|e| panic!("{reference}: {e}"));
        let keep: BTreeMap<String, String> =
            crate::image::listing_of_image(&img).into_iter().filter(|(p, _)| p.starts_with("/keep")).collect();
        assert_eq!(keep, want, "{reference}: the filesystem `docker export` gives");
        assert_eq!(img.identity.config_digest, id, "{reference}: the image ID");
        assert_eq!(img.identity.layers, strs(&top["RootFS"]["Layers"]), "{reference}: the layers");
        assert_eq!(img.identity.names, [TOP], "{reference}");
        assert_eq!(img.config.env.as_ref(), Some(&strs(&top["Config"]["Env"])), "{reference}: the environment");
    }
    // The names are said sorted: `docker save` orders its manifest as it likes.
    let e = read(&multi).unwrap_err().to_string();
    assert!(e.ends_with(&format!("it holds 2 images: name one (PATH:NAME or PATH@sha256:ID): {TOP}, {SGLANG}")), "{e}");

    // Each image of the archive plans its own tree, named by Docker's digests.
    let ov = shipped_overlay();
    for (image, tree, args) in [(TOP, "rocm7-py312", "--model"), (SGLANG, "rocm7-py310", "--model-path")] {
        let reference = format!("{multi}:{image}");
        let o = infera(&["check", "--image", &reference, "--family", "all", "-o", "json", "--", args, "/models/m"])
            .overlay(&ov.overlay())
            .run();
        let json = o.json();
        let row = &json["images"][0];
        assert_eq!(row["config_digest"], inspect(image)["Id"], "{reference}: {}", o.stdout);
        assert_eq!(row["names"], serde_json::json!([image]), "{reference}");
        let planned: Vec<&str> = row["families"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["verdict"] == "ok")
            .map(|c| c["plan"]["family"].as_str().unwrap())
            .collect();
        assert_eq!((planned, o.code), (vec![tree], 0), "{reference}: {}{}", o.stdout, o.stderr);
    }
}

fn strs(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}
