//! The Infera payload layout read as it ships: trees from py3XX + native/rocmN-py3XX,
//! capabilities from CAPABILITIES and the files, INFERA_REQUIRE_NATIVE, a missing native
//! tree as a warning, `manifest generate/verify` on it, a real exec from it.

use crate::support::*;

fn plan(img: &Fx, ov: &Fx, command: &[&str], env: &[(&str, &str)]) -> Out {
    let mut r =
        infera(command).root(img).overlay(&ov.overlay()).env("INFERA_DRY_RUN", "1").env("INFERA_OUTPUT", "json");
    for (k, v) in env {
        r = r.env(k, *v);
    }
    r.run()
}

fn caps(j: &serde_json::Value) -> Vec<(String, bool)> {
    j["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), c["provided"].as_bool().unwrap()))
        .collect()
}

#[test]
fn native_and_python_trees_are_paired_as_the_stack_orders_them() {
    let img = vllm_image(None);
    let ov = infera_payload();
    let o = ov.overlay();
    let out = plan(&img, &ov, &["python3", "-m", "infera.engine.vllm", "--model", "/m"], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    assert_eq!(j["family"], "rocm7-py312");
    assert_eq!(j["tree"], o.join("py312").display().to_string());
    let env = &j["exec"]["env"];
    // Native first, then the Python tree (the stack's launcher's order); native lib/ and bin/,
    // then the payload's bin/.
    assert_eq!(env["PYTHONPATH"], format!("{}:{}", o.join("native/rocm7-py312").display(), o.join("py312").display()));
    assert_eq!(env["LD_LIBRARY_PATH"], o.join("native/rocm7-py312/lib").display().to_string());
    assert!(
        env["PATH"].as_str().unwrap().starts_with(&format!(
            "{}:{}:",
            o.join("native/rocm7-py312/bin").display(),
            o.join("bin").display()
        )),
        "{}",
        env["PATH"]
    );
    assert_eq!(caps(&j), [("hipfile".into(), true), ("kvd".into(), true), ("mooncake".into(), true)]);
    // sglang on 3.10: its native tree carries mooncake only.
    let sg = sglang_image("3.10", None);
    let j = plan(&sg, &ov, &["python3", "-m", "infera.engine.sglang"], &[]).json();
    assert_eq!(j["family"], "rocm7-py310");
    assert_eq!(caps(&j), [("kvd".into(), true), ("mooncake".into(), true)]);
    plan(&sg, &ov, &["python3", "-m", "infera.engine.sglang"], &[("INFERA_REQUIRE_NATIVE", "hipfile")]).assert(
        69,
        "capability `hipfile` (requested by INFERA_REQUIRE_NATIVE) cannot be supplied: tree rocm7-py310 does not declare it; trees that provide it: rocm7-py312",
    );
    // Both spellings of the stack's variable.
    let j = plan(
        &img,
        &ov,
        &["python3", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
        &[("INFERA_REQUIRE_NATIVE", "mooncake, hipfile")],
    )
    .json();
    let req: Vec<&str> = j["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["requested"] == true)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(req, ["hipfile", "mooncake"]);
}

#[test]
fn no_native_tree_for_the_images_hip_abi_is_a_warning_until_required() {
    // A HIP 8 runtime (libamdhip64.so.8): the payload has native trees for HIP ABI 7 only.
    let img = vllm_image(None);
    img.file("/opt/rocm-7.0.0/.info/version", "8.0.0\n")
        .rm("/opt/rocm-7.0.0/lib")
        .file("/opt/rocm-7.0.0/lib/libamdhip64.so.8.0.1", "")
        .link("/opt/rocm-7.0.0/lib/libamdhip64.so.8", "libamdhip64.so.8.0.1")
        .file("/opt/rocm-7.0.0/share/hip/version", "HIP_VERSION_MAJOR=8\nHIP_VERSION_MINOR=0\nHIP_VERSION_PATCH=1\n");
    img.torch(VLLM_SITE, "2.9.0+rocm8.0.0", Some("8.0.1-x"), None, false);
    let ov = infera_payload();
    let out = plan(&img, &ov, &["python3", "-m", "infera.engine.vllm", "--model", "/m"], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    assert_eq!(j["family"], "py312");
    assert_eq!(j["exec"]["env"]["PYTHONPATH"], ov.overlay().join("py312").display().to_string());
    let f = j["findings"].as_array().unwrap().iter().find(|f| f["code"] == "native-missing").unwrap().clone();
    assert_eq!(f["level"], "warn");
    assert_eq!(
        f["message"],
        "no native payload for rocm8-py312 (native trees: rocm7-py310, rocm7-py312); PD (Mooncake) and kvd GPU-direct L3 (hipFile) will be unavailable"
    );
    for (value, code) in [("0", 0), ("", 0), ("mooncake", 69), ("1", 69), ("all", 69)] {
        let out = plan(
            &img,
            &ov,
            &["python3", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
            &[("INFERA_REQUIRE_NATIVE", value)],
        );
        assert_eq!(out.code, code, "INFERA_REQUIRE_NATIVE={value}: {}", out.stderr);
        if code == 69 {
            assert!(out.stderr.contains("capability `mooncake`"), "{}", out.stderr);
        }
    }
}

#[test]
fn capabilities_are_what_the_files_hold() {
    let img = vllm_image(None);
    let ov = infera_payload();
    // CAPABILITIES says hipfile, but its module is gone: not provided, and said why.
    ov.chmod("overlay/native/rocm7-py312", 0o755).rm("overlay/native/rocm7-py312/hipfile");
    let j = plan(&img, &ov, &["python3", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B"], &[]).json();
    let row = j["capabilities"].as_array().unwrap().iter().find(|c| c["name"] == "hipfile").unwrap().clone();
    assert_eq!(row["provided"], false);
    assert_eq!(
        row["reason"],
        format!("module `hipfile` is missing from `{}`", ov.overlay().join("native/rocm7-py312").display())
    );
    // A bad word in CAPABILITIES is a bad payload (65), naming the file.
    ov.file("overlay/native/rocm7-py312/CAPABILITIES", "mooncake ../hipfile\n");
    plan(&img, &ov, &["python3", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B"], &[])
        .assert(65, "native/rocm7-py312/CAPABILITIES`: capability `../hipfile`");
}

#[test]
fn generate_and_verify_work_on_the_stacks_layout() {
    let ov = infera_payload();
    let o = ov.overlay();
    for d in ["py312", "py310", "native/rocm7-py312", "native/rocm7-py310"] {
        ov.chmod(&format!("overlay/{d}"), 0o755);
        infera(&["manifest", "generate"]).args([o.join(d)]).run().assert(0, "wrote");
    }
    infera(&["manifest", "verify", "--digest"]).args([&o]).run().assert(0, "ok: 4 trees");
    let out = infera(&["manifest", "generate"]).args([o.join("native/rocm7-py312")]).run();
    assert!(out.stdout.contains("capabilities: hipfile present, mooncake present"), "{}", out.stdout);
    // A changed file is named as the payload holds it.
    ov.file("overlay/native/rocm7-py312/mooncake/__init__.py", "tampered = True\n");
    infera(&["manifest", "verify"]).args([&o]).run().assert(65, "native/rocm7-py312/mooncake/__init__.py: size");
    // CAPABILITIES naming a module the tree lacks: generate refuses.
    ov.rm("overlay/native/rocm7-py312/hipfile");
    infera(&["manifest", "generate"])
        .args([o.join("native/rocm7-py312")])
        .run()
        .assert(65, "hipfile: declared by capability `hipfile` but missing");
}

#[test]
fn a_real_cpython_imports_from_the_native_tree() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = infera_payload();
    let out = infera(&["python3", "-m", "infera.engine.vllm", "--model", "/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_REQUIRE_NATIVE", "mooncake")
        .env("MC_FORCE_TCP", "1")
        .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let r = out.standin();
    assert_eq!(r["standin"], "infera.engine.vllm");
    let native = ov.overlay().join("native/rocm7-py312");
    assert_eq!(r["imports"]["mooncake"]["file"], native.join("mooncake/__init__.py").display().to_string());
    assert_eq!(r["imports"]["hipfile"]["file"], native.join("hipfile/__init__.py").display().to_string());
    assert_eq!(r["imports"]["kvd"]["file"], ov.overlay().join("py312/kvd/__init__.py").display().to_string());
    assert_eq!(r["env"]["INFERA_TREE_FAMILY"], "rocm7-py312");
}
