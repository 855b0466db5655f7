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
    assert_eq!(j["engine"]["version"], "0.11.0+rocm700");
    assert_eq!(j["exec"]["argv"][1], "-m");
    assert_eq!(j["exec"]["argv"][2], "infera.engine.vllm");
    let ev = j["facts"]["python"]["evidence"].to_string();
    assert!(ev.contains("interpreter name") && ev.contains("dist-packages") && ev.contains("cpython-312"), "{ev}");
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

    // sglang on ROCm 7.2.4 is Python 3.12: the vLLM tree has no sglang module.
    let img = sglang_image("3.12", None);
    let ov = shipped_overlay();
    let out = infera(&["check", "--output", "json"]).root(&img).overlay(&ov.overlay()).run();
    out.assert(69, "tree rocm7-py312 has no sglang engine module; trees offering sglang: rocm7-py310");
    assert_eq!(out.json()["facts"]["python"]["version"], "3.12");
    assert_eq!(out.json()["family"], "rocm7-py312");
}

fn rocm_of(img: &Fx) -> serde_json::Value {
    check(img)["facts"]["rocm"].clone()
}

#[test]
fn rocm_version_formats() {
    for (text, want) in [
        ("6.4.1-120\n", None),
        ("7.0.0\n", Some("7.0.0")),
        ("7.0.2.1-45\n", Some("7.0.2.1")),
        ("7.1.1-2", Some("7.1.1")),
    ] {
        let img = vllm_image(None);
        img.file("/opt/rocm-7.0.0/.info/version", text);
        match want {
            Some(v) => assert_eq!(rocm_of(&img)["version"], v, "{text}"),
            None => {
                // ROCm 6 with a ROCm-7 torch: the install wins, with a warning.
                let ov = shipped_overlay();
                let out = infera(&["check", "--output", "json"]).root(&img).overlay(&ov.overlay()).run();
                out.assert(69, "ROCm 6.4.1 from /opt/rocm/.info/version");
                let j = out.json();
                assert_eq!(j["facts"]["rocm"]["version"], "6.4.1");
                assert!(j["findings"].to_string().contains("rocm-evidence-conflict"));
            }
        }
    }
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

    // Then share/hip/version (major only).
    let img = vllm_image(None);
    img.rm("/opt/rocm-7.0.0/.info").file(
        "/opt/rocm-7.0.0/share/hip/version",
        "HIP_VERSION_MAJOR=7\nHIP_VERSION_MINOR=0\nHIP_VERSION_PATCH=51831\n",
    );
    let r = rocm_of(&img);
    assert_eq!(r["version"], "7");
    assert_eq!(r["source"], "/opt/rocm/share/hip/version");

    // Then the soname of libamdhip64.
    let img = vllm_image(None);
    img.rm("/opt/rocm-7.0.0/.info")
        .file("/opt/rocm-7.0.0/lib/libamdhip64.so.7.0.51831", "")
        .link("/opt/rocm-7.0.0/lib/libamdhip64.so.7", "libamdhip64.so.7.0.51831");
    assert_eq!(rocm_of(&img)["major"], 7);

    // No ROCm install at all: torch's hip.
    let img = vllm_image(None);
    img.rm("/opt/rocm").rm("/opt/rocm-7.0.0");
    let r = rocm_of(&img);
    assert_eq!(r["version"], "7.0");
    assert!(r["source"].as_str().unwrap().ends_with("torch/version.py"));
}

#[test]
fn rocm10_pip_layout_has_no_tree() {
    // ROCm 10 from pip wheels: ROCM_PATH into site-packages, /opt/rocm a symlink to it.
    let img = sglang_image("3.12", None);
    let sdk = "/opt/venv/lib/python3.12/site-packages/_rocm_sdk_devel";
    img.rm("/opt/rocm").rm("/opt/rocm-7.2.0").file(&format!("{sdk}/.info/version"), "10.0.0\n").link("/opt/rocm", sdk);
    img.torch("/opt/venv/lib/python3.12/site-packages", "2.10.0+rocm10.0.0", Some("10.0.25400-abc"), None, true);
    let ov = shipped_overlay();
    let out = infera(&["check", "--output", "json"]).root(&img).overlay(&ov.overlay()).env("ROCM_PATH", sdk).run();
    out.assert(69, "ROCm 10.0.0 from /opt/venv/lib/python3.12/site-packages/_rocm_sdk_devel/.info/version");
    assert_eq!(out.json()["facts"]["rocm"]["install"], sdk);
    assert_eq!(out.json()["error"]["code"], "no-tree");
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
