//! Refusals: exit code and the message that says what, where, expected, and what to do.

use crate::support::*;

#[test]
fn no_matching_tree() {
    let img = vllm_image(None);
    img.rm("/usr/bin/python3.12")
        .interpreter("/usr/bin/python3.11", None)
        .link("/etc/alternatives/python3", "/usr/bin/python3.11");
    img.rm("/usr/local/lib/python3.12").dist("/usr/local/lib/python3.11/dist-packages", "vllm", "0.11.0");
    let ov = shipped_overlay();
    let out = infera(&["worker", "--dry-run", "--", "--model", "/models/m"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(
        69,
        "error[no-tree]: no overlay tree for this container (python 3.11 at /usr/bin/python3.11 (interpreter name `/usr/bin/python3.11`, \
         packages in `/usr/local/lib/python3.11/dist-packages`); HIP ABI 7 (from /opt/rocm/lib/libamdhip64.so.7), \
         ROCm 7.0.0 (from /opt/rocm/.info/version)); trees: rocm7-py310 (python 3.10, HIP ABI 7), rocm7-py312 (python 3.12, HIP ABI 7)",
    );
    assert!(out.stderr.contains("hint: "), "{}", out.stderr);
}

#[test]
fn cuda_image() {
    let img = vllm_image(None);
    img.rm("/opt/rocm").rm("/opt/rocm-7.0.0");
    img.torch(VLLM_SITE, "2.9.0+cu128", None, Some("12.8"), true);
    let ov = shipped_overlay();
    let out = infera(&["worker", "--dry-run", "--output", "json"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(69, "this image's torch is a CUDA build (torch 2.9.0+cu128, cuda 12.8, no hip");
    assert_eq!(out.json()["error"]["code"], "cuda-image");
    assert_eq!(out.json()["error"]["exit_code"], 69);
    assert!(out.json()["facts"]["rocm"].is_null(), "no ROCm in this image");
    // A CUDA torch beside a ROCm install: the refusal stands, and the facts say what the
    // install is (a refusal's dry run shows every fact it could read).
    img.file("/opt/rocm-7.2.4/.info/version", "7.2.4-44\n").file("/opt/rocm-7.2.4/lib/libamdhip64.so.7", "\x7fELF");
    let out = infera(&["worker", "--dry-run", "--output", "json"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("ROCM_PATH", "/opt/rocm-7.2.4")
        .run();
    out.assert(69, "this image's torch is a CUDA build");
    let rocm = &out.json()["facts"]["rocm"];
    assert_eq!(
        (rocm["release"]["version"].as_str(), rocm["hip"]["major"].as_u64()),
        (Some("7.2.4"), Some(7)),
        "{rocm}"
    );
}

#[test]
fn missing_capability_names_the_providers() {
    let img = sglang_image("3.10", None);
    let ov = shipped_overlay();
    let out = infera(&["worker", "--dry-run", "--require", "hipfile"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(69, "capability `hipfile` (requested by --require) cannot be supplied: tree rocm7-py310 does not declare it; trees that provide it: rocm7-py312 (for vllm)");

    // A name no tree knows is a usage error (2) listing the known names, with a suggestion
    // for a misspelling.
    let out = infera(&["worker", "--dry-run", "--require", "nixl"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(2, "refused   [capability-unknown] exit 2: --require names the capability `nixl`, which no tree of this overlay knows; known: hipfile, kvd, mooncake\n");
    assert_eq!(out.stderr, "error[capability-unknown]: --require names the capability `nixl`, which no tree of this overlay knows; known: hipfile, kvd, mooncake\n");
    let out = infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .env("INFERA_REQUIRE", "moonckae")
        .root(&img)
        .overlay(&ov.overlay())
        .run();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_eq!(
        out.stderr,
        "error[capability-unknown]: INFERA_REQUIRE names the capability `moonckae`, which no tree of this overlay knows; known: hipfile, kvd, mooncake\nhint: did you mean `mooncake`?\n"
    );
}

#[test]
fn capability_implied_by_engine_args() {
    let img = vllm_image(None);
    let ov = custom_overlay(&[("rocm7-py312", PY312_MANIFEST, &["infera.engine.vllm", "infera.server", "hipfile"])]);
    let out = infera(&["worker", "--dry-run", "--output", "json", "--"])
        .args(["--kv-transfer-config", r#"{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}"#])
        .root(&img)
        .overlay(&ov.overlay())
        .run();
    out.assert(69, "capability `mooncake` (requested by --kv-transfer-config kv_connector=MooncakeConnector) cannot be supplied: module `mooncake` is missing");
    let caps = &out.json()["capabilities"];
    let mc = caps.as_array().unwrap().iter().find(|c| c["name"] == "mooncake").unwrap();
    assert_eq!(mc["requested"], true);
    assert_eq!(mc["provided"], false);
}

#[test]
fn capability_offered_to_the_other_engine_only() {
    // A tree offering both engines, hipfile for vLLM only; the image runs sglang.
    let manifest = PY312_MANIFEST.replace("[server]", "[engines.sglang]\nmodule = \"infera.engine.sglang\"\n[server]");
    let ov = custom_overlay(&[(
        "rocm7-py312",
        &manifest,
        &["infera.engine.vllm", "infera.engine.sglang", "infera.server", "hipfile", "mooncake"],
    )]);
    let img = sglang_image("3.12", None);
    let out = infera(&["worker", "--dry-run", "--require", "hipfile"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(69, "cannot be supplied: tree rocm7-py312 offers it to vllm only, not to sglang");
}

#[test]
fn invalid_manifests() {
    let img = vllm_image(None);
    let cases = [
        (PY312_MANIFEST.replace("schema = 1", "schema = 1\nfamilly = \"x\""), "unknown field `familly`"),
        (PY312_MANIFEST.replace("rocm = \"7\"", "rocm = 7"), "invalid type: integer `7`, expected a string"),
        (PY312_MANIFEST.replace("[abi]\npython = \"3.12\"\n", "[abi]\n"), "missing field `python`"),
        (
            PY312_MANIFEST.replace("modules = [\"hipfile\"]", "libraries = [\"../../../lib/libc.so.6\"]"),
            "escapes the tree's lib/",
        ),
        (PY312_MANIFEST.replace("schema = 1", "schema = [1"), "TOML parse error"),
    ];
    for (text, want) in cases {
        let ov = custom_overlay(&[("rocm7-py312", &text, &["infera.engine.vllm"])]);
        let out =
            infera(&["worker", "--dry-run", "--", "--model", "/models/m"]).root(&img).overlay(&ov.overlay()).run();
        out.assert(65, want);
        assert!(out.stderr.contains("trees/rocm7-py312/manifest.toml"), "the file is named: {}", out.stderr);
    }
}

/// Two trees of one ABI among many others: refused, naming both, whatever lies between.
#[test]
fn two_trees_claiming_one_abi() {
    let img = vllm_image(None);
    let mut trees: Vec<(String, String)> = (100..130)
        .map(|n| {
            let family = format!("rocm{n}-py312");
            let text =
                PY312_MANIFEST.replace("rocm7-py312", &family).replace("rocm = \"7\"", &format!("rocm = \"{n}\""));
            (family, text)
        })
        .collect();
    trees.push(("rocm7-py312".into(), PY312_MANIFEST.into()));
    let mods: &[&str] = &["infera.engine.vllm"];
    let distinct: Vec<(&str, &str, &[&str])> = trees.iter().map(|(f, t)| (f.as_str(), t.as_str(), mods)).collect();
    let ov = custom_overlay(&distinct);
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(0, "tree      rocm7-py312 (");
    let twin = PY312_MANIFEST.replace("rocm7-py312", "rocm7a-py312");
    let mut all = distinct.clone();
    all.push(("rocm7a-py312", &twin, mods));
    let ov = custom_overlay(&all);
    let out = infera(&["worker", "--dry-run", "--", "--model", "/models/m"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(
        65,
        "trees `rocm7-py312` and `rocm7a-py312` both claim python 3.12 / HIP ABI 7; the launcher cannot choose",
    );
}

#[test]
fn symlink_escaping_the_tree() {
    let img = vllm_image(None);
    let ov = custom_overlay(&[("rocm7-py312", PY312_MANIFEST, &["infera.engine.vllm", "infera.server"])]);
    ov.link("overlay/trees/rocm7-py312/site-packages/mooncake", "/usr/lib/python3/dist-packages");
    let out = infera(&["worker", "--dry-run", "--require", "mooncake"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(65, "site-packages/mooncake` resolves to `/usr/lib/python3/dist-packages`, outside its tree");
}

#[test]
fn shadowed_base_package() {
    let img = vllm_image(None); // the base has its own tuned `aiter`
    let ov = custom_overlay(&[("rocm7-py312", PY312_MANIFEST, &["infera.engine.vllm", "infera.server", "aiter"])]);
    let out = infera(&["worker", "--dry-run", "--", "--model", "/models/m"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(65, "tree rocm7-py312 would shadow the image's own packages: `aiter` (base: `/usr/local/lib/python3.12/dist-packages/aiter`)");
    // Allowed explicitly by the manifest: runs.
    let allowed = PY312_MANIFEST.replace("[abi]", "allow_shadow = [\"aiter\"]\n[abi]");
    let ov = custom_overlay(&[("rocm7-py312", &allowed, &["infera.engine.vllm", "infera.server", "aiter"])]);
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(0, "infera.engine.vllm");
}

#[test]
fn writable_tree_when_root() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the writability check applies when the launcher runs as root");
        return;
    }
    let img = vllm_image(None);
    let ov = custom_overlay(&[("rocm7-py312", PY312_MANIFEST, &["infera.engine.vllm"])]);
    ov.chmod("overlay/trees/rocm7-py312", 0o777);
    let out = infera(&["worker", "--dry-run", "--", "--model", "/models/m"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(65, "trees/rocm7-py312` is writable by everyone (mode 777)");
    ov.chmod("overlay/trees/rocm7-py312", 0o755).chmod("overlay/trees/rocm7-py312/manifest.toml", 0o664);
    let out = infera(&["worker", "--dry-run", "--", "--model", "/models/m"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(65, "manifest.toml` is writable by its group (mode 664)");
}

#[test]
fn missing_overlay_and_interpreter() {
    let img = vllm_image(None);
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&img.p("/nonexistent"))
        .run()
        .assert(66, "error[overlay-missing]: the overlay directory");
    // A path that is a loop of links is said as one, not as absent.
    std::os::unix::fs::symlink(img.p("/ov-loop"), img.p("/ov-loop")).unwrap();
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"]).root(&img).overlay(&img.p("/ov-loop")).run().assert(
        65,
        &format!(
            "error[overlay-unreadable]: `{}` cannot be read: too many levels of symbolic links",
            img.p("/ov-loop").display()
        ),
    );
    let ov = shipped_overlay();
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("PATH", "")
        .run()
        .assert(66, "PATH is empty");
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("PATH", "/opt/nothing")
        .run()
        .assert(66, "no `python3` or `python` on the container's PATH (/opt/nothing)");
    img.rm("/usr/bin/python3").link("/usr/bin/python3", "/usr/bin/python3");
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(66, "too many levels of symbolic links");
}

#[test]
fn forced_family_warns() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let out = infera(&[
        "server",
        "--dry-run",
        "--family",
        "rocm7-py310",
        "--output",
        "json",
        "--",
        "--router-tokenizer-path=Qwen/Qwen3-0.6B",
    ])
    .root(&img)
    .overlay(&ov.overlay())
    .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    assert_eq!(j["family"], "rocm7-py310");
    assert!(j["findings"]
        .to_string()
        .contains("tree rocm7-py310 (python 3.10, HIP ABI 7) forced by --family although this image has python 3.12"));
    infera(&["server", "--dry-run", "--family", "nope", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(2, "--family nope: the overlay has no such tree");
}

#[test]
fn engine_choice() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    img.dist(VLLM_SITE, "sglang", "0.5.4").file(&format!("{VLLM_SITE}/sglang/version.py"), "__version__ = \"0.5.4\"\n");
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(2, "the image has several engines (sglang 0.5.4, vllm 0.17.1+rocm700); --engine auto cannot choose");
    infera(&["worker", "--dry-run", "--engine", "vllm", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(0, "-m infera.engine.vllm");
    img.rm(&format!("{VLLM_SITE}/sglang-0.5.4.dist-info"))
        .rm(&format!("{VLLM_SITE}/sglang"))
        .rm(&format!("{VLLM_SITE}/vllm-0.17.1+rocm700.dist-info"))
        .rm(&format!("{VLLM_SITE}/vllm"));
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(66, "no engine installed in the image");
}

#[test]
fn engine_version_outside_the_trees_range() {
    let img = vllm_image(None);
    img.rm(&format!("{VLLM_SITE}/vllm-0.17.1+rocm700.dist-info"))
        .dist(VLLM_SITE, "vllm", "0.8.5")
        .file(&format!("{VLLM_SITE}/vllm/_version.py"), "__version__ = version = '0.8.5'\n");
    let ov = shipped_overlay();
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(69, "the image has vllm 0.8.5");
    let out = infera(&["worker", "--dry-run", "--", "--model", "/models/m"]).root(&img).overlay(&ov.overlay()).run();
    assert!(
        out.stderr.contains(
            "on which tree rocm7-py312's infera.engine.vllm fails: infera.engine.vllm passes --kv-events-config to \
             `vllm serve`, whose parser has it from 0.9.0 on"
        ),
        "{}",
        out.stderr
    );
    assert!(out
        .stderr
        .contains("hint: use an image with vllm >=0.9, <0.29 (the newest release recorded in it: 0.28.0)"));
}

#[test]
fn usage_errors() {
    infera(&["worker", "--engine", "trt"]).run().assert(2, "invalid value 'trt'");
    infera(&["worker", "--model", "x"]).run().assert(2, "unexpected argument '--model'");
    infera(&["--frobnicate", "python3"]).run().assert(2, "unexpected argument '--frobnicate'");
    let out = infera(&["--help"]).run();
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("Exit codes: 0 ok, 2 usage"));
}
