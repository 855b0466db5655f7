//! What the real run does before the exec, with real processes: the working directory that
//! cannot shadow the overlay or the engine, the engine patches, the host's RoCE provider.

use std::path::Path;
use std::process::Command;

use crate::support::*;

/// A real CPython 3.10 sglang image whose site-packages holds the real `sglang` package,
/// and a working directory laid out like /sgl-workspace: the sglang checkout and a copy of
/// infera that `python -m` would put first on sys.path.
#[test]
fn the_working_directory_cannot_shadow_the_overlay_or_the_engine() {
    let py = real_python("3.10");
    let img = sglang_image("3.10", Some(&py));
    let site = img.p("/opt/venv/lib/python3.10/site-packages");
    img.file("/opt/venv/lib/python3.10/site-packages/sglang/__init__.py", "")
        .file("/opt/venv/lib/python3.10/site-packages/sglang/version.py", "__version__ = \"0.5.4\"\n");
    let ov = shipped_overlay();
    let workdir = tempfile::tempdir().unwrap();
    let w = workdir.path();
    std::fs::create_dir_all(w.join("sglang/python/sglang")).unwrap();
    std::fs::write(w.join("sglang/python/sglang/__init__.py"), "").unwrap();
    std::fs::create_dir_all(w.join("infera")).unwrap();
    std::fs::write(
        w.join("infera/__init__.py"),
        "raise SystemExit('SHADOW: infera imported from the working directory')\n",
    )
    .unwrap();
    let run = |chdir: Option<&str>| {
        let mut r = infera(&["python3", "-m", "infera.engine.sglang", "--model-path", "/m"])
            .root(&img)
            .overlay(&ov.overlay())
            .cwd(w)
            .env("PYTHONPATH", &site);
        if let Some(d) = chdir {
            r = r.env("INFERA_EXEC_CHDIR", d);
        }
        r.run()
    };
    let out = run(None);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let r = out.standin();
    let tree = ov.overlay().join("trees/rocm7-py310/site-packages");
    assert_eq!(r["origins"]["infera"], tree.join("infera/__init__.py").display().to_string());
    assert_eq!(r["origins"]["sglang"], site.join("sglang/__init__.py").display().to_string());
    assert_eq!(r["cwd"], img.path().display().to_string(), "the image's / (its root on this host)");
    // Kept in the image's WORKDIR (INFERA_EXEC_CHDIR empty), the copy there wins: what the
    // default prevents.
    let out = run(Some(""));
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("SHADOW: infera imported from the working directory"), "{}", out.stderr);
    // A relative working directory is a usage error; a missing one is 66.
    run(Some("work")).assert(2, "error[chdir-invalid]: INFERA_EXEC_CHDIR `work` is not an absolute path\nhint: give an absolute directory of the image, e.g. /\n");
    run(Some("/nowhere"))
        .assert(66, "the working directory `/nowhere` (INFERA_EXEC_CHDIR) is not a directory in the image");
}

fn vllm_real() -> Fx {
    let py = real_python("3.12");
    vllm_image(Some(&py))
}

fn marker(img: &Fx, engine_dir: &str) -> std::path::PathBuf {
    img.p(&format!("{engine_dir}/.infera-standin-patched"))
}

fn walk_pycache(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.file_name().is_some_and(|f| f == "__pycache__") {
            n += 1;
        }
        if p.is_dir() && !p.is_symlink() {
            n += walk_pycache(&p);
        }
    }
    n
}

#[test]
fn engine_patches_run_for_the_installed_engine_and_only_warn() {
    let img = vllm_real();
    let ov = shipped_overlay();
    let site = img.p(VLLM_SITE);
    let run = |env: &[(&str, &str)]| {
        let mut r = infera(&["python3", "-m", "infera.engine.vllm", "--model", "/m"])
            .root(&img)
            .overlay(&ov.overlay())
            .env("PYTHONPATH", &site);
        for (k, v) in env {
            r = r.env(k, *v);
        }
        r.run()
    };
    // Planned: vLLM's patch (vLLM is installed), not sglang's.
    let j = infera(&["--dry-run", "--output", "json", "python3", "-m", "infera.engine.vllm", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .json();
    let steps = j["exec"]["steps"].as_array().unwrap().clone();
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!(steps[0]["kind"], "patch");
    assert_eq!(steps[0]["engine"], "vllm");
    assert_eq!(steps[0]["file"], ov.overlay().join("patches/vllm/10_standin_marker.py").display().to_string());
    assert_eq!(steps[0]["timeout_seconds"], 60);
    // Run: it patches the image (a marker beside the installed vllm), in /, then the engine runs.
    let out = run(&[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let m = marker(&img, &format!("{VLLM_SITE}/vllm"));
    assert_eq!(std::fs::read_to_string(&m).unwrap(), "10_standin_marker.py cwd=/\n");
    assert_eq!(out.standin()["patched"]["vllm"], serde_json::json!(["10_standin_marker.py cwd=/"]));
    // A failing patch warns; the engine still starts.
    let out = run(&[("INFERA_STANDIN_PATCH", "fail")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("[engine-patch-failed]"), "{}", out.stderr);
    assert!(
        out.stderr.contains("10_standin_marker.py` exited with exit status: 3; continuing without it"),
        "{}",
        out.stderr
    );
    assert_eq!(out.standin()["standin"], "infera.engine.vllm");
    // A hanging one is killed after its time.
    let t = std::time::Instant::now();
    let out = run(&[("INFERA_STANDIN_PATCH", "hang"), ("INFERA_ENGINE_PATCH_TIMEOUT", "1")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("ran longer than 1 s and was killed; continuing"), "{}", out.stderr);
    assert!(t.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(out.standin()["standin"], "infera.engine.vllm");
    // ... with what it started: the patch's process group goes with it.
    let t = std::time::Instant::now();
    let out = run(&[
        ("INFERA_STANDIN_PATCH", "hang-with-child"),
        ("INFERA_STANDIN_HELPER_SECONDS", "3598"),
        ("INFERA_ENGINE_PATCH_TIMEOUT", "1"),
    ]);
    let left = std::process::Command::new("pgrep").args(["-f", "^sleep 3598$"]).output().unwrap();
    let _ = std::process::Command::new("pkill").args(["-f", "^sleep 3598$"]).status();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(t.elapsed() < std::time::Duration::from_secs(20));
    assert!(left.stdout.is_empty(), "the patch's helper outlived it: {}", String::from_utf8_lossy(&left.stdout));
    // Skipped on request, and said so.
    std::fs::remove_file(&m).unwrap();
    let out = run(&[("INFERA_SKIP_ENGINE_PATCHES", "1"), ("INFERA_LOG", "warn")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out
        .stderr
        .contains("[engine-patches-skipped] 1 engine patches not run: INFERA_SKIP_ENGINE_PATCHES is set"));
    assert!(!m.exists());
    // Nothing was written into the payload.
    assert_eq!(walk_pycache(&ov.overlay()), 0);
}

/// SIGTERM while a patch runs (the pod is being stopped): the patch's group is killed and
/// the launcher exits 143 without starting the engine, not 60 s later with the engine.
#[test]
fn sigterm_during_a_patch_exits_143_and_starts_nothing() {
    let img = vllm_real();
    let ov = shipped_overlay();
    let child = infera(&["python3", "-m", "infera.engine.vllm", "--model", "/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("PYTHONPATH", img.p(VLLM_SITE))
        .env("INFERA_STANDIN_PATCH", "hang-with-child")
        .env("INFERA_STANDIN_HELPER_SECONDS", "3597")
        .spawn();
    let (code, out, took) = terminated(child, |_| running("sleep 3597"));
    let left = std::process::Command::new("pgrep").args(["-f", "^sleep 3597$"]).output().unwrap();
    let _ = std::process::Command::new("pkill").args(["-f", "^sleep 3597$"]).status();
    assert_eq!(code, Some(143), "{}", out.stderr);
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    assert!(out.stderr.contains("[stopped] signal 15 while running the engine patches"), "{}", out.stderr);
    assert!(!out.stdout.contains("INFERA-STANDIN"), "the engine started: {}", out.stdout);
    assert!(left.stdout.is_empty(), "the patch's helper outlived it");
}

#[test]
fn sglang_patches_on_an_sglang_image() {
    let py = real_python("3.10");
    let img = sglang_image("3.10", Some(&py));
    let sdir = "/opt/venv/lib/python3.10/site-packages/sglang";
    img.file(&format!("{sdir}/__init__.py"), "");
    let ov = shipped_overlay();
    let out = infera(&["python3", "-m", "infera.engine.sglang", "--model-path", "/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("PYTHONPATH", img.p("/opt/venv/lib/python3.10/site-packages"))
        .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(marker(&img, sdir)).unwrap(), "10_standin_marker.py cwd=/\n");
    assert_eq!(out.standin()["patched"]["sglang"], serde_json::json!(["10_standin_marker.py cwd=/"]));
}

/// A shared object built here with gcc: `needs` are the sonames it links (stubs in `stubs`);
/// with `version`, the stub libibverbs.so.1 defines that symbol version and the object needs it.
fn gcc_lib(out: &Path, stubs: &Path, pabi: u32, marker: &str) {
    std::fs::create_dir_all(stubs).unwrap();
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let ibv = stubs.join(format!("ibv{pabi}"));
    std::fs::create_dir_all(&ibv).unwrap();
    std::fs::write(
        ibv.join("v.map"),
        format!("IBVERBS_PRIVATE_{pabi} {{ global: verbs_register_driver_{pabi}; local: *; }};\n"),
    )
    .unwrap();
    std::fs::write(ibv.join("ibv.c"), format!("void verbs_register_driver_{pabi}(void) {{}}\n")).unwrap();
    let st = Command::new("gcc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libibverbs.so.1"])
        .arg(format!("-Wl,--version-script={}", ibv.join("v.map").display()))
        .arg("-o")
        .arg(ibv.join("libibverbs.so.1"))
        .arg(ibv.join("ibv.c"))
        .status()
        .unwrap();
    assert!(st.success());
    let src = stubs.join(format!("{marker}.c"));
    std::fs::write(&src, format!("void verbs_register_driver_{pabi}(void);\nconst char *which = \"{marker}\";\nvoid ionic_init(void) {{ verbs_register_driver_{pabi}(); }}\n")).unwrap();
    let st = Command::new("gcc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libionic.so.1", "-o"])
        .arg(out)
        .arg(&src)
        .arg(format!("-L{}", ibv.display()))
        .arg("-l:libibverbs.so.1")
        .status()
        .unwrap();
    assert!(st.success());
}

/// A vLLM image with libibverbs providers of PABI 34 and a stale ionic provider; the host's
/// build (needing IBVERBS_PRIVATE_`host_pabi`) mounted at /host-libionic/libionic.so.
fn rdma_image(host_pabi: u32) -> Fx {
    let img = vllm_image(None);
    let stubs = img.p("/.build-stubs");
    let lib = "/usr/lib/x86_64-linux-gnu";
    gcc_lib(&img.p(&format!("{lib}/libionic.so.1.0.54.0")), &stubs, 34, "stale-54.0-149");
    img.link(&format!("{lib}/libionic.so.1"), "libionic.so.1.0.54.0")
        .link(&format!("{lib}/libibverbs/libionic-rdmav34.so"), "../libionic.so.1.0.54.0")
        .file(&format!("{lib}/libibverbs/libmlx5-rdmav34.so"), "");
    gcc_lib(&img.p("/host-libionic/libionic.so"), &stubs, host_pabi, "host-54.0-187");
    img
}

fn ionic_plan(img: &Fx, ov: &Fx, env: &[(&str, &str)]) -> serde_json::Value {
    let mut r = infera(&["worker", "--dry-run", "--output", "json", "--", "--model", "/models/m"])
        .root(img)
        .overlay(&ov.overlay());
    for (k, v) in env {
        r = r.env(k, *v);
    }
    let out = r.run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.json()
}

fn finding<'a>(j: &'a serde_json::Value, code: &str) -> &'a serde_json::Value {
    j["findings"].as_array().unwrap().iter().find(|f| f["code"] == code).unwrap_or_else(|| panic!("{code} in {j}"))
}

#[test]
fn the_host_roce_provider_is_loaded_by_path_without_writing_into_the_image() {
    let img = rdma_image(34);
    let ov = shipped_overlay(); // ships rdma/libionic-rdmav{34,65}.so -> /host-libionic/libionic.so
    let j = ionic_plan(&img, &ov, &[]);
    let prefix = ov.overlay().join("rdma/libionic").display().to_string();
    assert_eq!(j["exec"]["env"]["RDMAV_DRIVERS"], prefix.as_str());
    assert!(j["exec"]["env_set"].as_array().unwrap().contains(&"RDMAV_DRIVERS".into()));
    assert_eq!(j["exec"]["steps"].as_array().unwrap().iter().filter(|s| s["kind"] == "replace").count(), 0);
    assert_eq!(finding(&j, "libionic-host")["level"], "info");
    // The pod's own driver list is kept after ours (RDMAV_DRIVERS hides IBV_DRIVERS).
    let j = ionic_plan(&img, &ov, &[("IBV_DRIVERS", "mlx5")]);
    assert_eq!(j["exec"]["env"]["RDMAV_DRIVERS"], format!("{prefix}:mlx5"));
    // A host build for another PABI cannot load into this libibverbs: nothing is done.
    let img65 = rdma_image(65);
    let j = ionic_plan(&img65, &ov, &[]);
    assert!(j["exec"]["env"].get("RDMAV_DRIVERS").is_none());
    assert_eq!(
        finding(&j, "libionic-abi")["message"],
        "/host-libionic/libionic.so needs IBVERBS_PRIVATE_65 but the image's libibverbs is PABI 34: it cannot be loaded here; the image's own provider stays (RDMA may be unavailable)"
    );
    // No libibverbs in the image: nothing would load it.
    img.rm("/usr/lib/x86_64-linux-gnu/libibverbs");
    assert_eq!(finding(&ionic_plan(&img, &ov, &[]), "libionic-unused")["level"], "warn");
}

#[test]
fn without_a_link_for_the_pabi_the_image_copy_is_replaced_as_the_stack_does() {
    let img = rdma_image(34);
    let ov = shipped_overlay();
    ov.chmod("overlay", 0o755).rm("overlay/rdma");
    let target = img.p("/usr/lib/x86_64-linux-gnu/libionic.so.1.0.54.0");
    let j = ionic_plan(&img, &ov, &[]);
    let steps = j["exec"]["steps"].as_array().unwrap();
    assert_eq!(steps[0]["kind"], "replace");
    assert_eq!(steps[0]["from"], "/host-libionic/libionic.so");
    assert_eq!(steps[0]["to"], "/usr/lib/x86_64-linux-gnu/libionic.so.1.0.54.0");
    assert_eq!(steps[0]["host_to"], target.display().to_string());
    // The real run puts the host's bytes in place (atomically), then execs.
    let host = std::fs::read(img.p("/host-libionic/libionic.so")).unwrap();
    assert_ne!(std::fs::read(&target).unwrap(), host);
    let out = infera(&["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_LOG", "info")
        .run();
    assert_eq!(out.code, 99, "the fixture interpreter ran: {}", out.stderr);
    assert_eq!(std::fs::read(&target).unwrap(), host);
    assert!(out.stderr.contains("[replaced] `/usr/lib/x86_64-linux-gnu/libionic.so.1.0.54.0`"), "{}", out.stderr);
    assert_eq!(finding(&ionic_plan(&img, &ov, &[]), "libionic-current")["level"], "info");
}

#[test]
fn a_read_only_image_gets_a_warning_never_a_refusal() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: a read-only bind mount needs root");
        return;
    }
    let img = rdma_image(34);
    let ov = shipped_overlay();
    ov.chmod("overlay", 0o755).rm("overlay/rdma");
    let lib = img.p("/usr/lib/x86_64-linux-gnu");
    let script = format!(
        "mount --bind {l} {l} && mount -o remount,bind,ro {l} && {b} worker --dry-run -- --model /models/m; echo \"code=$?\"",
        l = lib.display(),
        b = BIN
    );
    let o = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("INFERA_ROOT", img.path())
        .env("INFERA_OVERLAY", ov.overlay())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("code=0"), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("[libionic-read-only] cannot put the host's libionic in place of `/usr/lib/x86_64-linux-gnu/libionic.so.1.0.54.0` (read-only root filesystem?)"),
        "{out}"
    );
}
