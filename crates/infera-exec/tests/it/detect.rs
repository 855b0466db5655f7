//! Each image layout of FACTS.md is detected right: family, interpreter, ROCm version.

use crate::support::*;

fn check(img: &Fx) -> serde_json::Value {
    let ov = shipped_overlay();
    let out = infera(&["check", "--output", "json"]).root(img).overlay(&ov.overlay()).run();
    assert_eq!(out.code, 0, "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    out.json()
}

#[test]
fn vllm_rocm_layout() {
    let img = vllm_image(None);
    let j = check(&img);
    assert_eq!(j["family"], "rocm7-py312");
    assert_eq!(j["facts"]["python"]["executable"], "/usr/bin/python3.12");
    assert_eq!(j["facts"]["python"]["version"], "3.12");
    assert_eq!(j["facts"]["rocm"]["version"], "7.0.0");
    assert_eq!(j["facts"]["rocm"]["major"], 7);
    assert_eq!(j["facts"]["rocm"]["source"], "/opt/rocm/.info/version");
    assert_eq!(j["facts"]["rocm"]["install"], "/opt/rocm-7.0.0");
    assert_eq!(j["engine"]["name"], "vllm");
    assert_eq!(j["engine"]["version"], "0.17.1+rocm700");
    assert_eq!(j["exec"]["argv"][1], "-m");
    assert_eq!(j["exec"]["argv"][2], "infera.engine.vllm");
    let ev = j["facts"]["python"]["evidence"].to_string();
    assert!(ev.contains("interpreter name") && ev.contains("dist-packages") && ev.contains("cpython-312"), "{ev}");
}

/// `python3 -m venv --system-site-packages /opt/venv` on a vLLM image (one venv per model,
/// the base's torch): CPython appends the base's site directories, so vLLM and torch in
/// /usr/local/lib/python3.12/dist-packages are the venv's too; without the flag they are not.
#[test]
fn a_venv_with_system_site_packages_sees_the_base() {
    let img = vllm_image(None);
    img.link("/opt/venv/bin/python3", "/usr/bin/python3.12")
        .dir("/opt/venv/lib/python3.12/site-packages")
        .file("/opt/venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = true\nversion = 3.12.3\n");
    let ov = shipped_overlay();
    let run = || {
        infera(&["check", "--output", "json"])
            .root(&img)
            .overlay(&ov.overlay())
            .env("INFERA_PYTHON", "/opt/venv/bin/python3")
            .run()
    };
    let out = run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    assert_eq!(j["facts"]["python"]["venv"], "/opt/venv");
    assert_eq!(j["facts"]["python"]["executable"], "/opt/venv/bin/python3");
    assert_eq!(
        (j["engine"]["name"].as_str(), j["engine"]["version"].as_str()),
        (Some("vllm"), Some("0.17.1+rocm700")),
        "{}",
        j["engine"]
    );
    assert_eq!(j["facts"]["rocm"]["version"], "7.0.0");
    // Without it, the venv sees only its own (empty) site-packages: no engine there.
    img.file("/opt/venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n");
    let out = infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_PYTHON", "/opt/venv/bin/python3")
        .run();
    assert_eq!(out.code, 66, "{}", out.stderr);
    assert!(out.stderr.contains("error[engine-missing]"), "{}", out.stderr);
}

/// `setup.py install` (ROCm's older vLLM Dockerfiles) leaves an egg named by
/// `easy-install.pth`, with the version in `vllm/__init__.py`; `setup.py develop` leaves the
/// checkout's path there (and an `.egg-link`). Both are on sys.path, as CPython reads .pth files.
#[test]
fn egg_installs_are_found_through_easy_install_pth() {
    let img = vllm_image(None);
    let egg = "vllm-0.5.0+rocm603-py3.12-linux-x86_64.egg";
    img.rm(&format!("{VLLM_SITE}/vllm"))
        .rm(&format!("{VLLM_SITE}/vllm-0.17.1+rocm700.dist-info"))
        .file(&format!("{VLLM_SITE}/{egg}/vllm/__init__.py"), "\"\"\"vLLM\"\"\"\n__version__ = \"0.5.0\"\n")
        .file(&format!("{VLLM_SITE}/{egg}/EGG-INFO/PKG-INFO"), "Name: vllm\nVersion: 0.5.0+rocm603\n")
        .file(&format!("{VLLM_SITE}/easy-install.pth"), format!("# a comment\nimport sys\n./{egg}\n./missing.egg\n"));
    let engine = |img: &Fx| {
        let ov = shipped_overlay();
        // (older than the tree's bound, refused: the facts say what was found)
        let out = infera(&["check", "--output", "json"]).root(img).overlay(&ov.overlay()).run();
        let j = out.json();
        assert_eq!((out.code, j["error"]["code"].as_str()), (69, Some("engine-version")), "{}", out.stderr);
        let e = &j["facts"]["engines"][0];
        (e["name"].as_str().map(String::from), e["version"].as_str().map(String::from))
    };
    assert_eq!(engine(&img), (Some("vllm".into()), Some("0.5.0+rocm603".into())), "the version in the egg's name");
    // Found by its name and EGG-INFO, as pkg_resources finds it, when the package computes
    // its version (`vllm/__init__.py` imports it) or has none to read.
    img.file(&format!("{VLLM_SITE}/{egg}/vllm/__init__.py"), "from .version import __version__\n");
    assert_eq!(engine(&img), (Some("vllm".into()), Some("0.5.0+rocm603".into())));
    // A zipped egg (zip_safe): a real zip file on sys.path, the version from its name.
    img.rm(&format!("{VLLM_SITE}/{egg}"));
    let zipped = img.p(&format!("{VLLM_SITE}/{egg}"));
    let zip = std::process::Command::new("python3")
        .args(["-c", "import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1], 'w') as z:\n    z.writestr('vllm/__init__.py', '__version__ = \"0.5.0\"\\n')\n    z.writestr('EGG-INFO/PKG-INFO', 'Name: vllm\\nVersion: 0.5.0+rocm603\\n')"])
        .arg(&zipped)
        .status()
        .unwrap();
    assert!(zip.success());
    assert_eq!(engine(&img), (Some("vllm".into()), Some("0.5.0+rocm603".into())));
    // `setup.py develop`: the checkout's path, absolute, and its .egg-link.
    img.rm(&format!("{VLLM_SITE}/{egg}"))
        .file("/workspace/vllm/vllm/__init__.py", "__version__ = \"0.4.3\"\n")
        .file(&format!("{VLLM_SITE}/vllm.egg-link"), "/workspace/vllm\n.\n")
        .file(&format!("{VLLM_SITE}/easy-install.pth"), "/workspace/vllm\n");
    assert_eq!(engine(&img), (Some("vllm".into()), Some("0.4.3".into())));
}

/// `setup.py install` without an egg leaves `NAME-VERSION-pyX.Y.egg-info` beside the
/// package: the version is the second part of the name (pkg_resources' EGG_NAME), so the
/// trees' range is checked — vLLM 0.29 is refused, 0.11 runs.
#[test]
fn egg_info_names_carry_the_python_tag_after_the_version() {
    let img = vllm_image(None);
    img.rm(&format!("{VLLM_SITE}/vllm-0.17.1+rocm700.dist-info"))
        .rm(&format!("{VLLM_SITE}/vllm/_version.py"))
        .file(&format!("{VLLM_SITE}/vllm-0.29.0-py3.12.egg-info/PKG-INFO"), "Name: vllm\nVersion: 0.29.0\n");
    let ov = shipped_overlay();
    let out = infera(&["check", "--", "--model", "/m"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(69, "error[engine-version]: the image has vllm 0.29.0 (`/usr/local/lib/python3.12/dist-packages/vllm-0.29.0-py3.12.egg-info`)");
    img.rm(&format!("{VLLM_SITE}/vllm-0.29.0-py3.12.egg-info"))
        .file(&format!("{VLLM_SITE}/vllm-0.11.0-py3.12.egg-info/PKG-INFO"), "Name: vllm\nVersion: 0.11.0\n");
    let out = infera(&["check", "--output", "json", "--", "--model", "/m"]).root(&img).overlay(&ov.overlay()).run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json()["engine"]["version"], "0.11.0");
}

/// A stray `libamdhip64.so.6.bak` beside the real library is not what ld.so loads: the ABI
/// is the real soname's.
#[test]
fn a_stray_soname_backup_is_not_the_hip_abi() {
    let img = vllm_image(None);
    let lib = "/opt/rocm-7.0.0/lib";
    // Without share/hip/version the runtime is found by listing lib/ (TheRock's layout).
    img.rm("/opt/rocm-7.0.0/share/hip/version")
        .file(&format!("{lib}/libamdhip64.so.6.bak"), "")
        .file(&format!("{lib}/libamdhip64.so.7~"), "");
    let ov = shipped_overlay();
    let out = infera(&["check", "--output", "json"]).root(&img).overlay(&ov.overlay()).run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    let hip = &j["facts"]["rocm"]["hip"];
    assert_eq!((j["family"].as_str(), hip["major"].as_u64()), (Some("rocm7-py312"), Some(7)), "{j:#}");
    assert_eq!(hip["source"], "/opt/rocm/lib/libamdhip64.so.7");
}

#[test]
fn sglang_venv_py310_and_py312() {
    let img = sglang_image("3.10", None);
    let j = check(&img);
    assert_eq!(j["family"], "rocm7-py310");
    // The venv's own path is exec'd, so CPython finds pyvenv.cfg.
    assert_eq!(j["facts"]["python"]["executable"], "/opt/venv/bin/python3");
    assert_eq!(j["facts"]["python"]["resolved"], "/usr/bin/python3.10");
    assert_eq!(j["facts"]["python"]["venv"], "/opt/venv");
    assert_eq!(j["facts"]["rocm"]["version"], "7.2.0");
    assert_eq!(j["engine"]["name"], "sglang");
    assert_eq!(j["exec"]["argv"][2], "infera.engine.sglang");

    // sglang on ROCm 7.2.4 is Python 3.12: the py3.12 tree serves sglang too.
    let j = check(&sglang_image("3.12", None));
    assert_eq!((j["family"].as_str(), j["facts"]["python"]["version"].as_str()), (Some("rocm7-py312"), Some("3.12")));
    assert_eq!(
        j["engine"],
        serde_json::json!({"name": "sglang", "version": "0.5.23", "module": "infera.engine.sglang"})
    );
}

fn rocm_of(img: &Fx) -> serde_json::Value {
    check(img)["facts"]["rocm"].clone()
}

#[test]
fn rocm_version_formats() {
    for (text, want) in [
        ("6.4.1-120\n", "6.4.1"),
        ("7.0.0\n", "7.0.0"),
        ("7.0.2.1-45\n", "7.0.2.1"),
        ("7.1.1-2", "7.1.1"),
        // Nightly SDKs write pre-release versions.
        ("10.1.0a20260909\n", "10.1.0a20260909"),
        ("7.15.0a20260716\n", "7.15.0a20260716"),
    ] {
        let img = vllm_image(None);
        img.file("/opt/rocm-7.0.0/.info/version", text);
        let r = rocm_of(&img);
        assert_eq!(r["version"], want, "{text}");
        assert_eq!(r["source"], "/opt/rocm/.info/version");
        // The HIP ABI is the runtime's soname, whatever the release says.
        assert_eq!(r["hip"]["major"], 7, "{text}");
    }
    // Sources of one fact that disagree: a finding naming both, the first one used. The HIP
    // ABI and the release never conflict with each other.
    let img = vllm_image(None);
    img.file("/opt/rocm-7.0.0/.info/version", "6.4.1-120\n");
    let j = check(&img);
    assert_eq!(j["facts"]["rocm"]["version"], "6.4.1");
    let f: Vec<&serde_json::Value> =
        j["findings"].as_array().unwrap().iter().filter(|f| f["code"] == "rocm-release-conflict").collect();
    assert_eq!(f.len(), 1, "{}", j["findings"]);
    assert!(
        f[0]["message"].as_str().unwrap().starts_with("ROCm 6.4.1 from `/opt/rocm/.info/version` but ROCm 7.0.0 from"),
        "{}",
        f[0]
    );
    assert!(!j["findings"].to_string().contains("hip-evidence-conflict"));
}

#[test]
fn rocm_core_layout_and_fallbacks() {
    // /opt/rocm/core -> core-7.13 with the version file there, no /opt/rocm/.info.
    let img = vllm_image(None);
    img.rm("/opt/rocm-7.0.0/.info")
        .file("/opt/rocm-7.0.0/core-7.13/.info/version", "7.13.0\n")
        .link("/opt/rocm-7.0.0/core", "core-7.13");
    let r = rocm_of(&img);
    assert_eq!(r["version"], "7.13.0");
    assert_eq!(r["source"], "/opt/rocm/core/.info/version");

    // No .info at all: rocm_version.h.
    let img = vllm_image(None);
    img.rm("/opt/rocm-7.0.0/.info").file(
        "/opt/rocm-7.0.0/include/rocm-core/rocm_version.h",
        "#pragma once\n#define ROCM_VERSION_MAJOR 7\n#define ROCM_VERSION_MINOR 1\n#define ROCM_VERSION_PATCH 1\n",
    );
    assert_eq!(rocm_of(&img)["version"], "7.1.1");

    // No release record in the install: torch's `+rocm` tag is the release.
    let img = vllm_image(None);
    img.rm("/opt/rocm-7.0.0/.info");
    let r = rocm_of(&img);
    assert_eq!(r["version"], "7.0.0");
    assert!(r["source"].as_str().unwrap().ends_with("torch/version.py"));
    // The HIP ABI: the runtime's soname, with share/hip/version's full version.
    assert_eq!(
        r["hip"],
        serde_json::json!({"major": 7, "version": "7.0.51831", "source": "/opt/rocm/lib/libamdhip64.so.7"})
    );

    // Without the soname: share/hip/version.
    let img = vllm_image(None);
    img.rm("/opt/rocm-7.0.0/lib");
    assert_eq!(rocm_of(&img)["hip"]["source"], "/opt/rocm/share/hip/version");

    // Without either: the soname found by listing lib/.
    let img = vllm_image(None);
    img.rm("/opt/rocm-7.0.0/share/hip/version");
    assert_eq!(rocm_of(&img)["hip"]["source"], "/opt/rocm/lib/libamdhip64.so.7");

    // No ROCm install at all: torch's hip and +rocm tag.
    let img = vllm_image(None);
    img.rm("/opt/rocm").rm("/opt/rocm-7.0.0");
    let r = rocm_of(&img);
    assert_eq!((r["version"].as_str(), r["hip"]["major"].as_i64()), (Some("7.0.0"), Some(7)));
    assert!(r["source"].as_str().unwrap().ends_with("torch/version.py"));
    assert!(r["hip"]["source"].as_str().unwrap().ends_with("torch/version.py"));

    // A release but no HIP runtime anywhere: no tree can be chosen.
    let img = vllm_image(None);
    img.rm("/opt/rocm-7.0.0/lib").rm("/opt/rocm-7.0.0/share").torch(
        VLLM_SITE,
        "2.13.0a0+git733fca1",
        None,
        None,
        false,
    );
    let ov = shipped_overlay();
    infera(&["check"]).root(&img).overlay(&ov.overlay()).run().assert(
        69,
        "error[rocm-missing]: no HIP runtime found in the image (ROCm 7.0.0 from /opt/rocm/.info/version) (looked at",
    );
}

/// The layouts of today's images (examples/make-image-root): the HIP ABI selects the tree,
/// the ROCm release is its own fact, each engine installed is found.
#[test]
fn todays_images_hip_abi_release_and_engines() {
    let ov = shipped_overlay();
    // (kind, python, HIP ABI source, HIP version, release, release source, the engine named, family)
    let cases = [
        (
            "vllm-rocm10",
            "3.12",
            "/usr/local/lib/python3.12/dist-packages/_rocm_sdk_core/lib/libamdhip64.so.7",
            "7.15.26333",
            "10.0.0",
            "/usr/local/lib/python3.12/dist-packages/_rocm_sdk_core/.info/version",
            "vllm 0.33.0+rocm1000",
            "rocm7-py312",
        ),
        (
            "vllm-rocm72",
            "3.12",
            "/opt/rocm/lib/libamdhip64.so.7",
            "7.2.26015",
            "7.2.3",
            "/opt/rocm/.info/version",
            "vllm 0.33.0+rocm723",
            "rocm7-py312",
        ),
        (
            "sglang-rocm700",
            "3.12",
            "/opt/rocm/lib/libamdhip64.so.7",
            "7.0.51831",
            "7.0.0",
            "/opt/rocm/.info/version",
            "sglang 0.5.23",
            "rocm7-py312",
        ),
        (
            "sglang-rocm720",
            "3.10",
            "/opt/rocm/lib/libamdhip64.so.7",
            "7.2.26015",
            "7.2.0",
            "/opt/rocm/.info/version",
            "sglang 0.5.23",
            "rocm7-py310",
        ),
        (
            "sglang-rocm724",
            "3.12",
            "/opt/rocm/lib/libamdhip64.so.7",
            "7.2.26043",
            "7.2.4",
            "/opt/rocm/.info/version",
            "sglang 0.5.23",
            "rocm7-py312",
        ),
        // /opt/rocm links into the venv's _rocm_sdk_devel; the record is in _rocm_sdk_core.
        (
            "sglang-rocm1000",
            "3.12",
            "/opt/venv/lib/python3.12/site-packages/_rocm_sdk_core/lib/libamdhip64.so.7",
            "7.15.26333",
            "10.0.0",
            "/opt/venv/lib/python3.12/site-packages/_rocm_sdk_core/.info/version",
            "sglang 0.5.23",
            "rocm7-py312",
        ),
        (
            "sglang-pip",
            "3.12",
            "/opt/rocm/lib/libamdhip64.so.7",
            "7.2.26015",
            "7.2.0",
            "/opt/rocm/.info/version",
            "sglang 0.5.23",
            "rocm7-py312",
        ),
    ];
    for (kind, py, hip_src, hip_ver, release, rel_src, engines, family) in cases {
        let img = image(kind);
        let out = infera(&[
            "check",
            "--output",
            "json",
            "--engine",
            if kind.starts_with("vllm") { "vllm" } else { "sglang" },
        ])
        .root(&img)
        .overlay(&ov.overlay())
        .run();
        // The facts are the point here; vLLM 0.33 is outside the tree's range (the Infera
        // snapshot's wrapper imports a module 0.33 moved), refused whatever --allow says.
        let outside = engines.contains("vllm 0.33");
        assert_eq!(out.code, if outside { 69 } else { 0 }, "{kind}: {}", out.stderr);
        let j = out.json();
        let r = &j["facts"]["rocm"];
        assert_eq!(j["facts"]["python"]["version"], py, "{kind}");
        assert_eq!(r["hip"], serde_json::json!({"major": 7, "version": hip_ver, "source": hip_src}), "{kind}");
        assert_eq!((r["version"].as_str(), r["source"].as_str()), (Some(release), Some(rel_src)), "{kind}");
        assert_eq!(r["release"]["major"], release.split('.').next().unwrap().parse::<u32>().unwrap(), "{kind}");
        let found: Vec<String> = j["facts"]["engines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| format!("{} {}", e["name"].as_str().unwrap(), e["version"].as_str().unwrap()))
            .collect();
        assert_eq!(found.join(", "), engines, "{kind}");
        assert_eq!(j["family"], family, "{kind}");
        // No false conflicts: ROCm 10 ships HIP 7.15.
        let codes = j["findings"].to_string();
        assert!(!codes.contains("conflict"), "{kind}: {codes}");
    }
}

#[test]
fn rocm10_hip_and_release_from_torch_alone() {
    // TheRock's SDK not found (no ROCM_PATH, not in the site directories): torch 2.14's own
    // record still says HIP 7.15 and ROCm 10.0.0, two facts.
    let mut img = image("sglang-rocm1000");
    img.image_env.clear();
    img.rm("/opt/rocm")
        .rm("/opt/venv/lib/python3.12/site-packages/_rocm_sdk_core")
        .rm("/opt/venv/lib/python3.12/site-packages/_rocm_sdk_devel");
    let r = rocm_of(&img);
    assert_eq!((r["version"].as_str(), r["hip"]["major"].as_i64()), (Some("10.0.0"), Some(7)));
    assert_eq!(r["hip"]["version"], "7.15.26333-0000000");
}

#[test]
fn sglang_from_its_wheel_and_beside_vllm() {
    let ov = shipped_overlay();
    // From the wheel: sglang/version.py computes the version; the literal is in _version.py.
    let img = image("sglang-pip");
    let j = check(&img);
    assert_eq!(j["engine"]["version"], "0.5.23");
    assert_eq!(j["facts"]["engines"][0]["record"], "/opt/venv/lib/python3.12/site-packages/sglang-0.5.23.dist-info");
    // Without _version.py the computed version.py is never taken for a version ("sglang"):
    // the dist-info says.
    img.rm("/opt/venv/lib/python3.12/site-packages/sglang/_version.py");
    assert_eq!(check(&img)["engine"]["version"], "0.5.23");
    // The version bound is checked on it.
    img.rm("/opt/venv/lib/python3.12/site-packages/sglang-0.5.23.dist-info").dist(
        "/opt/venv/lib/python3.12/site-packages",
        "sglang",
        "0.6.1",
    );
    infera(&["check"]).root(&img).overlay(&ov.overlay()).run().assert(69, "the image has sglang 0.6.1");

    // sglang's rocm700 flavour is built on a vLLM base: both are found, --engine picks.
    let img = image("sglang-rocm700");
    infera(&["check"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(2, "the image has several engines (sglang 0.5.23, vllm 0.10.2+rocm700); --engine auto cannot choose");
    let out = infera(&["check", "--output", "json", "--engine", "sglang"]).root(&img).overlay(&ov.overlay()).run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json()["exec"]["argv"][2], "infera.engine.sglang");
    // Its vLLM (0.10.2) passes argparse `deprecated=True`: infera.engine.vllm cannot build its
    // parser on the image's CPython 3.12.
    let out = infera(&["check", "--output", "json", "--engine", "vllm"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(69, "wrapper-parser-fails").assert(69, "vllm 0.10.2+rocm700");
}

#[test]
fn a_broken_interpreter_link_is_named() {
    let ov = shipped_overlay();
    // update-alternatives left /etc/alternatives/python3 pointing at a removed python3.12.
    let img = vllm_image(None);
    img.rm("/usr/bin/python3.12");
    infera(&["check"]).root(&img).overlay(&ov.overlay()).run().assert(
        66,
        "error[python-link-broken]: the interpreter `/usr/bin/python3` is a broken link: `/usr/bin/python3` → \
         `/etc/alternatives/python3` → `/usr/bin/python3.12`, which does not exist in the image",
    );
    // A loop.
    let img = vllm_image(None);
    img.link("/etc/alternatives/python3", "/usr/bin/python3");
    infera(&["check"]).root(&img).overlay(&ov.overlay()).run().assert(
        66,
        "the interpreter `/usr/bin/python3` is a broken link: `/usr/bin/python3` → `/etc/alternatives/python3` → \
         `/usr/bin/python3` loops (too many levels of symbolic links)",
    );
    // A venv whose interpreter link dangles, named through INFERA_PYTHON too.
    let img = sglang_image("3.10", None);
    img.rm("/usr/bin/python3.10");
    infera(&["check"]).env("INFERA_PYTHON", "/opt/venv/bin/python3").root(&img).overlay(&ov.overlay()).run().assert(
        66,
        "`/opt/venv/bin/python3` is a broken link: `/opt/venv/bin/python3` → `/opt/venv/bin/python` → `/usr/bin/python3.10`, which does not exist",
    );
}

#[test]
fn gpus_from_allocation_then_node() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let gpus = |run: Run| {
        run.root(&img).overlay(&ov.overlay()).args(["check", "--output", "json"]).run().json()["facts"]["gpus"].clone()
    };
    assert_eq!(gpus(infera(&[]).env("INFERA_GPUS", "4").env("HIP_VISIBLE_DEVICES", "0,1")), 4);
    assert_eq!(gpus(infera(&[]).env("ROCR_VISIBLE_DEVICES", "0,1,2,3").env("HIP_VISIBLE_DEVICES", "0,1")), 2);
    assert_eq!(gpus(infera(&[]).env("ROCR_VISIBLE_DEVICES", "0,1,2,3")), 4);
    assert_eq!(gpus(infera(&[])), serde_json::Value::Null);
    // An 8-GPU node (the KFD topology is the node's), 3 GPUs allocated to this container.
    for n in 1..=8 {
        img.file(
            &format!("/sys/class/kfd/kfd/topology/nodes/{n}/properties"),
            format!("cpu_cores_count 0\nsimd_count 304\ndrm_render_minor {}\n", 127 + n),
        );
    }
    img.file("/sys/class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 96\nsimd_count 0\n");
    assert_eq!(gpus(infera(&[])), serde_json::Value::Null, "no render node allocated: no GPU");
    for minor in [128, 130, 133] {
        img.file(&format!("/dev/dri/renderD{minor}"), "");
    }
    img.file("/dev/dri/card0", "");
    assert_eq!(gpus(infera(&[])), 3);
}

#[test]
fn conflicting_python_evidence_is_reported() {
    // The interpreter says 3.12 but torch carries a cpython-311 extension.
    let img = vllm_image(None);
    img.file(&format!("{VLLM_SITE}/torch/_C.cpython-312-x86_64-linux-gnu.so",), "");
    img.rm(&format!("{VLLM_SITE}/torch/_C.cpython-312-x86_64-linux-gnu.so"))
        .file(&format!("{VLLM_SITE}/torch/_C.cpython-311-x86_64-linux-gnu.so"), "");
    let j = check(&img);
    assert_eq!(j["facts"]["python"]["version"], "3.12");
    let f = j["findings"].to_string();
    assert!(f.contains("python-evidence-conflict") && f.contains("3.11 from extension"), "{f}");
}

/// vLLM's default ROCm image today ships mooncake-transfer-engine-rocm: the router and a
/// worker start on it, the child imports the image's Mooncake (the shipped trees prefer the
/// engine's own build); the stack's payload layout puts its native build first, with a
/// warning naming both.
#[test]
fn vllm_rocm10_image_that_ships_mooncake_runs_the_router_and_a_worker() {
    let img = image("vllm-rocm10");
    let site = "/usr/local/lib/python3.12/dist-packages";
    let ours = shipped_overlay();
    // vLLM 0.33 is outside this release's range (its wrapper cannot import 0.33's parser): the
    // Mooncake choice is the point, made by an overlay release built for it.
    built_for(&ours.overlay(), "vllm", ">=0.9, <0.34");
    for args in [
        &["server", "--dry-run", "--output", "json", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"][..],
        &["worker", "--dry-run", "--output", "json", "--require", "mooncake", "--", "--model", "/models/kimi-k3"],
    ] {
        let out = infera(args).root(&img).overlay(&ours.overlay()).env("MC_FORCE_TCP", "1").run();
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        let j = out.json();
        assert_eq!(j["family"], "rocm7-py312");
        let mc = j["capabilities"].as_array().unwrap().iter().find(|c| c["name"] == "mooncake").unwrap().clone();
        assert_eq!(
            mc["import"],
            serde_json::json!({"copy": "base", "from": site, "dist": "mooncake_transfer_engine_rocm 0.3.13.post1"}),
            "{args:?}"
        );
        let pp = j["exec"]["env"]["PYTHONPATH"].as_str().unwrap();
        assert!(!pp.contains("capabilities/mooncake"), "{pp}");
        assert!(pp.contains("capabilities/hipfile"), "{pp}");
        // Said to the worker, which imports it; the router imports no capability.
        let f = j["findings"].as_array().unwrap().iter().find(|f| f["code"] == "capability-from-image").cloned();
        if args[0] == "server" {
            assert_eq!(f, None);
            continue;
        }
        assert_eq!(
            f.unwrap()["message"],
            format!(
                "mooncake: the image's `mooncake` (mooncake_transfer_engine_rocm 0.3.13.post1, `{site}/mooncake`) is imported; \
                 the tree's copy (mooncake_standin 0.0.0) stays off the path (prefer = \"base\")"
            )
        );
    }
    // ROCm 10.0.0 is >= 7.2: hipFile's release check passes on it (ROCm 10 ships HIP 7.15).
    let out = infera(&["check", "--output", "json", "--require", "hipfile"]).root(&img).overlay(&ours.overlay()).run();
    let hf = out.json()["capabilities"].as_array().unwrap().iter().find(|c| c["name"] == "hipfile").unwrap().clone();
    assert_eq!(
        hf["reason"], "unknown: the node's devices and limits are only read with --root /",
        "the release check passed"
    );

    // The stack's payload: its native tree first, as its launcher orders it, with a warning.
    let stack = infera_payload();
    let out = infera(&["python3", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
        .root(&img)
        .overlay(&stack.overlay())
        .env("INFERA_DRY_RUN", "1")
        .env("INFERA_OUTPUT", "json")
        .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    let w =
        j["findings"].as_array().unwrap().iter().find(|f| f["code"] == "capability-replaces-image").unwrap().clone();
    assert_eq!(w["level"], "warn");
    assert!(
        w["message"].as_str().unwrap().contains(&format!(
            "ahead of the image's own (mooncake_transfer_engine_rocm 0.3.13.post1, `{site}/mooncake`) (prefer = \"tree\")"
        )),
        "{w}"
    );
}

/// The support matrix (README, `--version`) holds: each image of manifests/images.toml with a
/// layout goes through `check` on that layout and gets the verdict its row says — the tree,
/// or the refusal — and a row's note that names a finding is that finding.
#[test]
fn the_support_matrix_verdicts_hold_on_their_layouts() {
    let ov = shipped_overlay();
    let images = infera_exec::support::images();
    let checked: Vec<_> = images.iter().filter_map(|i| i.layout.as_deref().map(|l| (i, l))).collect();
    assert!(checked.len() >= 8, "{}", checked.len());
    for (row, layout) in checked {
        let img = image(layout);
        let engine = row.engine.split([' ', ',']).next().unwrap();
        let out = infera(&["check", "--output", "json", "--engine", engine]).root(&img).overlay(&ov.overlay()).run();
        let j = out.json();
        let got = match j["error"]["code"].as_str() {
            Some(code) => format!("refused: {code}"),
            None => j["family"].as_str().unwrap_or("none").to_string(),
        };
        assert_eq!(got, row.verdict, "{} ({layout}): exit {} {}", row.name, out.code, out.stderr);
        assert_eq!(out.code, if got.starts_with("refused") { 69 } else { 0 }, "{}", row.name);
        if let Some(code) = row.note.as_deref().and_then(|n| n.split_once(" warning")).map(|(c, _)| c) {
            assert!(j["findings"].to_string().contains(&format!("\"{code}\"")), "{}: {}", row.name, j["findings"]);
        }
    }
}
