//! `manifest generate / verify / schema` on trees holding real ELF shared objects
//! compiled here with gcc.

use std::path::Path;
use std::process::Command;

use crate::support::*;

/// Compile a tiny shared object `out` (soname = its file name) needing `needs` (built as
/// stubs with those sonames in `stubs`).
fn gcc_so(out: &Path, needs: &[&str], stubs: &Path) {
    std::fs::create_dir_all(stubs).unwrap();
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let src = stubs.join("x.c");
    std::fs::write(&src, "int infera_fixture(void) { return 42; }\n").unwrap();
    let mut link = Vec::new();
    for n in needs {
        let stub = stubs.join(n);
        if !stub.exists() {
            let st = Command::new("gcc")
                .args(["-shared", "-fPIC", "-o"])
                .arg(&stub)
                .arg(&src)
                .arg(format!("-Wl,-soname,{n}"))
                .status()
                .unwrap();
            assert!(st.success());
        }
        link.push(format!("-l:{n}"));
    }
    let name = out.file_name().unwrap().to_string_lossy().into_owned();
    let st = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(out)
        .arg(&src)
        .arg(format!("-Wl,-soname,{name}"))
        .arg("-Wl,--no-as-needed")
        .arg(format!("-L{}", stubs.display()))
        .args(&link)
        .status()
        .unwrap();
    assert!(st.success(), "gcc failed for {}", out.display());
}

/// A py312 / ROCm 7 tree: a cpython-312 extension needing libamdhip64.so.7 and libpython3.12.
fn good_tree() -> Fx {
    let fx = custom_overlay(&[(
        "rocm7-py312",
        PY312_MANIFEST,
        &["infera.engine.vllm", "infera.server", "mooncake", "hipfile"],
    )]);
    let t = fx.p("overlay/trees/rocm7-py312");
    gcc_so(
        &t.join("site-packages/mooncake/engine.cpython-312-x86_64-linux-gnu.so"),
        &["libamdhip64.so.7", "libpython3.12.so.1.0"],
        &fx.p("stubs"),
    );
    gcc_so(&t.join("lib/libhipfile.so.0"), &["libamdhip64.so.7"], &fx.p("stubs"));
    fx
}

fn generate(fx: &Fx, extra: &[&str]) -> Out {
    let tree = fx.p("overlay/trees/rocm7-py312");
    infera(&["manifest", "generate"]).args([tree.as_os_str()]).args(extra.iter().copied()).run()
}

fn record(fx: &Fx) -> serde_json::Value {
    let text = std::fs::read_to_string(fx.p("overlay/trees/rocm7-py312/payload.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn generate_correct_tree() {
    let fx = good_tree();
    let out = generate(&fx, &[]);
    out.assert(0, "tree rocm7-py312: python 3.12 (0 abi3 modules), HIP ABI 7, libpython libpython3.12.so.1.0");
    assert!(out.stdout.contains("capabilities: hipfile present, mooncake present"), "{}", out.stdout);
    let r = record(&fx);
    assert_eq!(r["derived"]["python"], serde_json::json!(["3.12"]));
    assert_eq!(r["derived"]["hip"], serde_json::json!([7]));
    let so = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "site-packages/mooncake/engine.cpython-312-x86_64-linux-gnu.so")
        .unwrap();
    assert_eq!(so["blake3"].as_str().unwrap().len(), 64);
    // --check agrees, until a file changes.
    generate(&fx, &["--check"]).assert(0, "is up to date");
    fx.file("overlay/trees/rocm7-py312/site-packages/mooncake/__init__.py", "changed = True\n");
    generate(&fx, &["--check"]).assert(65, "site-packages/mooncake/__init__.py: changed");
}

#[test]
fn generate_refuses_a_py310_module_in_a_py312_tree() {
    let fx = good_tree();
    gcc_so(
        &fx.p("overlay/trees/rocm7-py312/site-packages/mooncake/_old.cpython-310-x86_64-linux-gnu.so"),
        &[],
        &fx.p("stubs"),
    );
    let out = generate(&fx, &[]);
    out.assert(65, "site-packages/mooncake/_old.cpython-310-x86_64-linux-gnu.so: extension module for CPython 3.10, but [abi] python = \"3.12\"");
    assert!(!fx.p("overlay/trees/rocm7-py312/payload.json").exists(), "nothing written on refusal");
}

#[test]
fn generate_abi3_only_tree() {
    let fx = custom_overlay(&[(
        "rocm7-py312",
        PY312_MANIFEST,
        &["infera.engine.vllm", "infera.server", "mooncake", "hipfile"],
    )]);
    gcc_so(&fx.p("overlay/trees/rocm7-py312/site-packages/mooncake/_fast.abi3.so"), &[], &fx.p("stubs"));
    generate(&fx, &[]).assert(0, "tree rocm7-py312: python - (1 abi3 modules), HIP ABI -");
    assert_eq!(record(&fx)["derived"]["python"], serde_json::json!([]));
    assert_eq!(record(&fx)["derived"]["abi3_modules"], 1);
}

#[test]
fn generate_refuses_a_missing_capability_module() {
    let fx = good_tree();
    fx.rm("overlay/trees/rocm7-py312/site-packages/hipfile");
    generate(&fx, &[]).assert(65, "site-packages/hipfile: declared by capability `hipfile` but missing");
}

#[test]
fn generate_refuses_rocm6_libraries_in_a_rocm7_tree() {
    let fx = good_tree();
    gcc_so(&fx.p("overlay/trees/rocm7-py312/lib/libold.so.1"), &["libamdhip64.so.6"], &fx.p("stubs"));
    generate(&fx, &[]).assert(65, "lib/libold.so.1: needs libamdhip64.so.6 (HIP ABI 6), but [abi] hip = \"7\"");
}

fn verified() -> Fx {
    let fx = good_tree();
    generate(&fx, &[]).assert(0, "wrote");
    infera(&["manifest", "verify", "--digest"]).args([fx.overlay()]).run().assert(0, "ok: 1 trees");
    fx
}

#[test]
fn verify_reports_each_kind_of_damage() {
    let so = "overlay/trees/rocm7-py312/site-packages/mooncake/engine.cpython-312-x86_64-linux-gnu.so";
    let verify = |fx: &Fx, digest: bool| {
        let mut a = vec!["manifest", "verify"];
        if digest {
            a.push("--digest");
        }
        infera(&a).args([fx.overlay()]).run()
    };
    // A changed byte: sizes agree, the digest does not.
    let fx = verified();
    let mut bytes = std::fs::read(fx.p(so)).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(fx.p(so), &bytes).unwrap();
    verify(&fx, false).assert(0, "ok: 1 trees, 7 files match their records (presence and sizes)"); // sizes alone cannot see it
    verify(&fx, true)
        .assert(65, "trees/rocm7-py312/site-packages/mooncake/engine.cpython-312-x86_64-linux-gnu.so: content changed");
    // Truncated.
    let fx = verified();
    bytes = std::fs::read(fx.p(so)).unwrap();
    std::fs::write(fx.p(so), &bytes[..100]).unwrap();
    verify(&fx, false).assert(65, "engine.cpython-312-x86_64-linux-gnu.so: size 100 bytes, recorded");
    // Extra and missing.
    let fx = verified();
    fx.file("overlay/trees/rocm7-py312/site-packages/evil.py", "import os\n")
        .rm("overlay/trees/rocm7-py312/lib/libhipfile.so.0");
    let out = verify(&fx, false);
    out.assert(65, "trees/rocm7-py312/site-packages/evil.py: extra file, not in the integrity record");
    out.assert(65, "trees/rocm7-py312/lib/libhipfile.so.0: missing (in the integrity record)");
    // A symlink escaping the tree.
    let fx = verified();
    fx.link("overlay/trees/rocm7-py312/lib/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6");
    verify(&fx, false).assert(65, "trees/rocm7-py312/lib/libc.so.6: `");
    let out = verify(&fx, false);
    assert!(out.stderr.contains("outside its tree"), "{}", out.stderr);
}

#[test]
fn launcher_opt_in_digest_check() {
    let img = vllm_image(None);
    let fx = verified();
    let run = |v: &str| {
        infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
            .root(&img)
            .overlay(&fx.overlay())
            .env("INFERA_VERIFY", v)
            .run()
    };
    run("digest").assert(0, "infera.engine.vllm");
    let p = "overlay/trees/rocm7-py312/site-packages/mooncake/__init__.py";
    std::fs::write(fx.p(p), "X").unwrap(); // was empty: the size check sees it
    run("size").assert(65, "error[integrity]: tree rocm7-py312 does not match its integrity record");
    run("sometimes").assert(2, "INFERA_VERIFY=`sometimes`");
    // Without INFERA_VERIFY the normal run does not read the record.
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&fx.overlay())
        .run()
        .assert(0, "infera.engine.vllm");
}

#[test]
fn committed_schema_is_fresh() {
    let out = infera(&["manifest", "schema"]).run();
    assert_eq!(out.code, 0);
    let committed = std::fs::read_to_string(repo().join("manifests/manifest.schema.json")).unwrap();
    assert_eq!(
        committed, out.stdout,
        "`manifest schema` prints manifests/manifest.schema.json (kept fresh by manifest::schema_tests)"
    );
    let schema: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(schema["additionalProperties"], false);
    assert!(schema["required"].to_string().contains("abi"));
}

#[test]
fn shipped_manifests_are_valid_and_staged_trees_verify() {
    let ov = shipped_overlay(); // stage runs generate + verify itself
    infera(&["manifest", "verify", "--digest"]).args([ov.overlay()]).run().assert(0, "ok: 2 trees");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ov.overlay().join("trees/rocm7-py310/payload.json")).unwrap())
            .unwrap();
    assert!(r["derived"]["capabilities"].get("hipfile").is_none(), "py310 ships no hipfile");
}

#[test]
fn install_copies_the_overlay_and_checks_the_copy() {
    let ov = shipped_overlay();
    let dest = tempfile::tempdir().unwrap();
    let target = dest.path().join("emptydir");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = infera(&["install"]).args([target.as_os_str()]).args(["--from".as_ref(), ov.overlay().as_os_str()]).run();
    out.assert(0, "(46 files); trees match their records");
    infera(&["manifest", "verify", "--digest"]).args([&target]).run().assert(0, "ok: 2 trees");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&target).unwrap().permissions()) & 0o777;
    assert_eq!(mode, 0o755, "the emptyDir root is no longer world-writable");
    // Never into the source, nor over a directory that is not an earlier copy.
    let out = infera(&["install"])
        .args([ov.overlay().join("trees/x").as_os_str()])
        .args(["--from".as_ref(), ov.overlay().as_os_str()])
        .run();
    out.assert(2, "overlap");
    let busy = dest.path().join("busy");
    std::fs::create_dir_all(busy.join("bin")).unwrap();
    std::fs::write(busy.join("precious"), "keep me").unwrap();
    let out = infera(&["install"]).args([busy.as_os_str()]).args(["--from".as_ref(), ov.overlay().as_os_str()]).run();
    out.assert(2, "holds what this launcher did not install there (bin, precious); nothing was removed");
    assert_eq!(std::fs::read_to_string(busy.join("precious")).unwrap(), "keep me");
    // A `trees/` it did not write is never removed, whatever it holds (no marker of ours).
    let other = dest.path().join("other");
    std::fs::create_dir_all(other.join("trees/data")).unwrap();
    std::fs::write(other.join("trees/data/results.csv"), "months of work").unwrap();
    let out = infera(&["install"]).args([other.as_os_str()]).args(["--from".as_ref(), ov.overlay().as_os_str()]).run();
    out.assert(
        2,
        &format!(
            "error[install-not-empty]: `{}` holds what this launcher did not install there (trees)",
            other.display()
        ),
    );
    assert_eq!(std::fs::read_to_string(other.join("trees/data/results.csv")).unwrap(), "months of work");
    // Nor is what sits beside an earlier copy.
    std::fs::write(target.join("notes.txt"), "mine").unwrap();
    let out = infera(&["install"]).args([target.as_os_str()]).args(["--from".as_ref(), ov.overlay().as_os_str()]).run();
    out.assert(2, "(notes.txt); nothing was removed");
    std::fs::remove_file(target.join("notes.txt")).unwrap();
    assert_eq!(std::fs::read_to_string(target.join(".infera-install")).unwrap(), "bin\npatches\nrdma\ntrees\n");
    // Re-installing over an earlier copy (a restarted initContainer) is fine.
    let out = infera(&["install"]).args([target.as_os_str()]).args(["--from".as_ref(), ov.overlay().as_os_str()]).run();
    out.assert(0, "(46 files)");
    // A source that does not match its record is not installed silently.
    std::fs::write(ov.overlay().join("trees/rocm7-py312/site-packages/kvd/__init__.py"), "tampered").unwrap();
    let out = infera(&["install"]).args([target.as_os_str()]).args(["--from".as_ref(), ov.overlay().as_os_str()]).run();
    out.assert(65, "trees/rocm7-py312/site-packages/kvd/__init__.py: size");
}

// ---- Wheels: each family's for its own CPython, whatever Python stages them ----

/// A wheel built here (PEP 427: a zip with `<dist>-<version>.dist-info/{METADATA,WHEEL,RECORD}`)
/// holding `files` (path in the archive, file on this host). The host's python3 is only the
/// zip tool.
fn wheel(dir: &Path, dist: &str, version: &str, tag: &str, files: &[(&str, &Path)]) -> std::path::PathBuf {
    let out = dir.join(format!("{dist}-{version}-{tag}.whl"));
    let mut args: Vec<String> = vec![out.display().to_string(), dist.into(), version.into(), tag.into()];
    for (arc, host) in files {
        args.push(format!("{arc}={}", host.display()));
    }
    let script = r#"
import sys, zipfile
out, dist, version, tag, *files = sys.argv[1:]
info = f"{dist}-{version}.dist-info"
with zipfile.ZipFile(out, "w") as z:
    record = []
    for f in files:
        arc, host = f.split("=", 1)
        z.write(host, arc)
        record.append(f"{arc},,")
    z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    z.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n")
    z.writestr(f"{info}/top_level.txt", "mooncake\n")
    record += [f"{info}/METADATA,,", f"{info}/WHEEL,,", f"{info}/top_level.txt,,", f"{info}/RECORD,,"]
    z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
"#;
    let st = Command::new("python3").arg("-c").arg(script).args(&args).status().unwrap();
    assert!(st.success(), "building {}", out.display());
    out
}

/// Mooncake as mooncake-transfer-engine-rocm ships it: `engine.so` without a CPython suffix,
/// linked against libamdhip64.so.7; the CPython is only in the wheel's tag.
fn mooncake_wheel(dir: &Path, py: &str) -> std::path::PathBuf {
    let engine = dir.join(format!("build{py}/engine.so"));
    gcc_so(&engine, &["libamdhip64.so.7"], &dir.join("stubs"));
    let init = dir.join(format!("build{py}/__init__.py"));
    std::fs::write(&init, "").unwrap();
    let tag = format!("cp{py}-cp{py}-manylinux_2_35_x86_64");
    wheel(
        dir,
        "mooncake_transfer_engine_rocm",
        "0.3.13.post1",
        &tag,
        &[("mooncake/__init__.py", &init), ("mooncake/engine.so", &engine)],
    )
}

fn stage(out: &Path, families: &[(&str, &str)]) -> Out {
    let r = repo();
    let mut args: Vec<String> = vec![out.display().to_string(), "--binary".into(), BIN.into()];
    for (family, mooncake) in families {
        args.extend([
            "--family".into(),
            family.to_string(),
            "--manifest".into(),
            r.join(format!("manifests/{family}.toml")).display().to_string(),
            "--site".into(),
            r.join("examples/standin/common").display().to_string(),
            "--capability".into(),
            format!("mooncake={mooncake}"),
        ]);
        if *family == "rocm7-py312" {
            args.extend([
                "--capability".into(),
                format!("hipfile={}", r.join("examples/standin/capabilities/hipfile").display()),
            ]);
        }
    }
    let o = Command::new(r.join("overlay-layout/stage")).args(&args).env_remove("PYTHONPATH").output().unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

#[test]
fn a_cp312_and_a_cp310_family_stage_whatever_python_runs_the_stage() {
    let fx = Fx::new();
    let (w312, w310) = (mooncake_wheel(fx.path(), "312"), mooncake_wheel(fx.path(), "310"));
    let out = fx.p("overlay");
    let o = stage(&out, &[("rocm7-py312", &w312.display().to_string()), ("rocm7-py310", &w310.display().to_string())]);
    o.assert(0, "staged");
    for (family, py) in [("rocm7-py312", "3.12"), ("rocm7-py310", "3.10")] {
        let t = out.join("trees").join(family);
        assert!(t.join("capabilities/mooncake/mooncake/engine.so").is_file(), "{family}");
        assert!(t.join("capabilities/mooncake/mooncake_transfer_engine_rocm-0.3.13.post1.dist-info/RECORD").is_file());
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(t.join("payload.json")).unwrap()).unwrap();
        assert_eq!(r["derived"]["wheels"]["mooncake_transfer_engine_rocm-0.3.13.post1"], py, "{family}");
        assert_eq!(r["derived"]["hip"], serde_json::json!([7]), "{family}: engine.so needs libamdhip64.so.7");
    }
    infera(&["manifest", "verify", "--digest"]).args([&out]).run().assert(0, "ok: 2 trees");
}

#[test]
fn a_wheel_for_another_cpython_is_refused_at_staging() {
    let fx = Fx::new();
    let w312 = mooncake_wheel(fx.path(), "312");
    let o = stage(&fx.p("overlay"), &[("rocm7-py310", &w312.display().to_string())]);
    assert_eq!(o.code, 65, "{}", o.stderr);
    assert!(
        o.stderr.contains("built for cp312-cp312-manylinux_2_35_x86_64; this tree is for CPython 3.10 on x86_64 Linux"),
        "{}",
        o.stderr
    );
}

#[test]
fn generate_refuses_a_cp312_distribution_without_suffixed_modules_in_a_py310_tree() {
    let manifest = "schema = 1\nfamily = \"rocm7-py310\"\n[abi]\npython = \"3.10\"\nhip = \"7\"\n[server]\nmodule = \"infera.server\"\n[capabilities.mooncake]\nmodules = [\"mooncake\"]\n";
    let fx = custom_overlay(&[("rocm7-py310", manifest, &["infera.server"])]);
    let w312 = mooncake_wheel(fx.path(), "312");
    // Copied in as an installed directory (a `--site` of a pip target built elsewhere): no
    // file name says CPython 3.12, only the distribution's WHEEL tag.
    let site = fx.p("overlay/trees/rocm7-py310/site-packages");
    let st = Command::new(repo().join("overlay-layout/unpack-wheel"))
        .arg(&w312)
        .arg(&site)
        .args(["--python", "3.12"])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let tree = fx.p("overlay/trees/rocm7-py310");
    let out = infera(&["manifest", "generate"]).args([&tree]).run();
    out.assert(
        65,
        "site-packages/mooncake/engine.so: from distribution mooncake_transfer_engine_rocm-0.3.13.post1, whose wheel is \
         tagged cp312-cp312-manylinux_2_35_x86_64 (CPython 3.12), but [abi] python = \"3.10\"",
    );
    assert!(!tree.join("payload.json").exists(), "nothing written on refusal");
    // Without a RECORD, the distribution itself is named.
    std::fs::remove_file(site.join("mooncake_transfer_engine_rocm-0.3.13.post1.dist-info/RECORD")).unwrap();
    infera(&["manifest", "generate"]).args([&tree]).run().assert(
        65,
        "site-packages/mooncake_transfer_engine_rocm-0.3.13.post1.dist-info/WHEEL: from distribution mooncake_transfer_engine_rocm-0.3.13.post1",
    );
}
