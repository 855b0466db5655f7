//! Hostile inputs with real processes: a launcher that is not root, FIFOs where files are
//! read, a noexec mount, signals while the integrity check hashes in init mode, a target
//! that glibc's execvp would have run through /bin/sh, code preloaded through a manifest,
//! a model path that is not UTF-8.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

const NOBODY: u32 = 65534;

/// The launcher as uid/gid 65534 (setpriv), on fixtures it can read.
fn as_nobody(img: &Fx, ov: &Fx, args: &[&str], env: &[(&str, &str)]) -> Out {
    for d in [img.path(), ov.path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut c = Command::new("setpriv");
    c.args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"]).arg(BIN).args(args);
    c.env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .env("INFERA_ROOT", img.path())
        .env("INFERA_OVERLAY", ov.overlay());
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.stdin(Stdio::null()).output().unwrap();
    assert!(std::os::unix::process::ExitStatusExt::signal(&o.status).is_none(), "died by a signal");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

#[test]
fn a_non_root_launcher_refuses_a_tree_others_can_change() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    as_nobody(&img, &ov, &["check"], &[]).assert(0, "infera-exec check plan");
    // A file of the tree writable by everyone (an emptyDir copy shared with another
    // container): refused for uid 65534 as it is for root.
    let f = ov.overlay().join("trees/rocm7-py312/site-packages/infera/engine/vllm/__main__.py");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    as_nobody(&img, &ov, &["check"], &[])
        .assert(65, &format!("error[overlay-writable]: `{}` is writable by everyone (mode 666)", f.display()));
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    // A file owned by a third user, who could change what this launcher runs.
    nix::unistd::chown(&f, Some(nix::unistd::Uid::from_raw(1234)), None).unwrap();
    as_nobody(&img, &ov, &["check"], &[]).assert(
        65,
        &format!("`{}` is owned by uid 1234, who could change what the launcher (uid {NOBODY}) runs", f.display()),
    );
    nix::unistd::chown(&f, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    // An image file this uid cannot read is said with the uid, never taken for absent.
    let tv = img.p("/usr/local/lib/python3.12/dist-packages/torch/version.py");
    std::fs::set_permissions(&tv, std::fs::Permissions::from_mode(0o600)).unwrap();
    as_nobody(&img, &ov, &["check"], &[]).assert(
        0,
        &format!(
            "[torch-version-unreadable] `/usr/local/lib/python3.12/dist-packages/torch/version.py` permission denied (uid {NOBODY})"
        ),
    );
    // An overlay whose trees/ this uid cannot list is that, not an overlay without trees.
    let trees = ov.overlay().join("trees");
    std::fs::set_permissions(&trees, std::fs::Permissions::from_mode(0o700)).unwrap();
    as_nobody(&img, &ov, &["check"], &[]).assert(
        65,
        &format!("error[overlay-unreadable]: `{}` cannot be read: permission denied (uid {NOBODY})", trees.display()),
    );
    std::fs::set_permissions(&trees, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn verify_of_a_tree_holding_a_fifo_does_not_block() {
    let ov = shipped_overlay();
    let f = ov.overlay().join("trees/rocm7-py310/site-packages/kvd/__init__.py");
    std::fs::remove_file(&f).unwrap();
    assert!(Command::new("mkfifo").arg(&f).status().unwrap().success());
    let start = Instant::now();
    for args in [&["manifest", "verify"][..], &["manifest", "verify", "--digest"]] {
        infera(args)
            .args([ov.overlay()])
            .run()
            .assert(65, "trees/rocm7-py310/site-packages/kvd/__init__.py: is a FIFO where a file is recorded");
    }
    assert!(start.elapsed() < Duration::from_secs(20));
    // generate refuses to record one.
    infera(&["manifest", "generate"])
        .args([ov.overlay().join("trees/rocm7-py310")])
        .run()
        .assert(65, "site-packages/kvd/__init__.py: is a FIFO where a file is recorded");
}

/// A tmpfs mounted noexec, unmounted when dropped.
struct Noexec(std::path::PathBuf);

impl Noexec {
    fn mount(dir: &Path) -> Noexec {
        std::fs::create_dir_all(dir).unwrap();
        let st =
            Command::new("mount").args(["-t", "tmpfs", "-o", "noexec,size=512m", "tmpfs"]).arg(dir).status().unwrap();
        assert!(st.success(), "mount -o noexec (the tests run as root)");
        Noexec(dir.to_path_buf())
    }
}

impl Drop for Noexec {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn an_extension_module_outside_lib_on_a_noexec_mount_is_refused() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let mnt = Fx::new();
    let _m = Noexec::mount(&mnt.p("noexec"));
    let copy = mnt.p("noexec/overlay");
    assert!(Command::new("cp").arg("-a").arg(ov.overlay()).arg(&copy).status().unwrap().success());
    // Pure Python and an empty lib/: nothing to map, the run is fine.
    infera(&["check"]).root(&img).overlay(&copy).run().assert(0, "infera-exec check plan");
    // An extension module in site-packages (not in lib/): it cannot be mapped executable.
    let ext = copy.join("trees/rocm7-py312/capabilities/hipfile/hipfile/_native.cpython-312-x86_64-linux-gnu.so");
    std::fs::write(&ext, b"\x7fELF").unwrap();
    infera(&["check"]).root(&img).overlay(&copy).run().assert(
        65,
        &format!(
            "error[overlay-noexec]: the tree `{}` holds shared objects but is mounted noexec",
            copy.join("trees/rocm7-py312").display()
        ),
    );
}

/// Wait until `pid` runs more than one thread (the integrity check's hashing pool).
fn wait_for_threads(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let threads: u32 =
            status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        if threads > 1 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

#[test]
fn init_survives_signals_sent_while_the_integrity_check_hashes() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    // A tree large enough that hashing takes a while (sparse: no disk), recorded.
    let tree = ov.overlay().join("trees/rocm7-py312");
    std::fs::File::create(tree.join("lib/libweights.so.1")).unwrap().set_len(6 << 30).unwrap();
    infera(&["manifest", "generate"]).args([&tree]).run().assert(0, "wrote");
    let mut child = Command::new(BIN)
        .env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("INFERA_ROOT", img.path())
        .env("INFERA_OVERLAY", ov.overlay())
        .env("INFERA_VERIFY", "digest")
        .env("INFERA_STANDIN_WAIT", "20")
        .env("INFERA_STANDIN_EXIT", "7")
        .args(["server", "--init", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    assert!(wait_for_threads(child.id()), "the hashing pool never started");
    // While the pool hashes: signals with a default action that would kill the process.
    for sig in [nix::sys::signal::SIGUSR1, nix::sys::signal::SIGUSR2, nix::sys::signal::SIGUSR1] {
        nix::sys::signal::kill(pid, sig).unwrap();
    }
    nix::sys::signal::kill(pid, nix::sys::signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "the launcher did not finish");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let mut err = String::new();
    use std::io::Read;
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    // The launcher was not killed (it used to die with 138 and orphan the engine): it kept the
    // signals pending, started the engine, forwarded them, and exits with the engine's code
    // (its handler's 7, or 128+signal when a signal arrived before the handler was set).
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), None, "killed by a signal: {err}");
    let code = status.code().unwrap();
    assert!([7, 128 + 10, 128 + 12, 128 + 15].contains(&code), "exit {code}\n{out}\n{err}");
    if code == 7 {
        assert!(out.contains("INFERA-STANDIN "), "{out}");
    }
}

#[test]
fn a_script_whose_interpreter_has_no_valid_header_is_not_run_by_the_shell() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    // The program is a valid `#!` script, but its interpreter is text without one: execve
    // fails with ENOEXEC, where glibc's execvp would have run the script with /bin/sh.
    // (With --root the kernel resolves `#!` on this host: the interpreter's host path.)
    let interp = img.p("/usr/local/bin/notinterp");
    img.exe("/usr/local/bin/notinterp", "echo RAN-UNDER-SH\n")
        .exe("/usr/local/bin/tool", &format!("#!{}\necho RAN-UNDER-SH\n", interp.display()));
    for extra in [&[][..], &["--init"]] {
        let out = infera(extra).args(["tool"]).root(&img).overlay(&ov.overlay()).run();
        assert!(!out.stdout.contains("RAN-UNDER-SH"), "{extra:?}: ran under /bin/sh:\n{}", out.stdout);
        out.assert(126, "Exec format error");
        assert!(out.stderr.contains("it is not run through /bin/sh"), "{}", out.stderr);
    }
    // Named directly, the text file is refused by the plan (and the dry run says the same).
    for env in [&[][..], &[("INFERA_DRY_RUN", "1")]] {
        let mut r = infera(&["notinterp"]).root(&img).overlay(&ov.overlay());
        for (k, v) in env {
            r = r.env(k, v);
        }
        r.run().assert(126, "error[exec-format]: the program `/usr/local/bin/notinterp` is text without a `#!` line");
    }
}

/// A `#!` script whose interpreter is missing is refused before the exec, naming the
/// interpreter (execve's ENOENT would name only the script, which exists), dry run and real
/// run alike; one that is not executable is 126. With `--root` the kernel reads the `#!`
/// path from this host, and so does the plan; in an image archive, from the image.
#[test]
fn a_script_whose_interpreter_is_missing_is_refused_naming_it() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    let plain = img.p("/usr/local/bin/plain");
    img.exe("/usr/local/bin/launch-api", "#!/usr/bin/python9 -u\nprint('RAN')\n")
        .file("/usr/local/bin/plain", "")
        .exe("/usr/local/bin/launch-plain", &format!("#!{}\n", plain.display()));
    for env in [&[][..], &[("INFERA_DRY_RUN", "1")]] {
        let mut r = infera(&["launch-api"]).root(&img).overlay(&ov.overlay());
        for (k, v) in env {
            r = r.env(k, v);
        }
        let out = r.run();
        out.assert(
            127,
            "error[exec-interpreter-missing]: the program `/usr/local/bin/launch-api` is a `#!` script whose interpreter \
             `/usr/bin/python9` cannot be found",
        );
        assert!(out.stderr.contains("install that interpreter in the image"), "{}", out.stderr);
        assert!(!out.stdout.contains("RAN"), "{}", out.stdout);
    }
    infera(&["launch-plain"]).root(&img).overlay(&ov.overlay()).run().assert(
        126,
        &format!(
            "error[exec-interpreter-unusable]: the program `/usr/local/bin/launch-plain` is a `#!` script whose interpreter \
             `{0}` cannot be executed: the interpreter `{0}` is not an executable file (mode 644)",
            plain.display()
        ),
    );
}

/// A shared object whose constructor leaves a marker: what LD_PRELOAD would run.
fn preload_lib(out: &Path, marker: &Path) {
    let src = out.with_extension("c");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void m(void) {{ FILE *f = fopen(\"{}\", \"w\"); if (f) fclose(f); }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let st = Command::new("gcc").args(["-shared", "-fPIC", "-o"]).arg(out).arg(&src).status().unwrap();
    assert!(st.success());
}

#[test]
fn code_preloaded_through_the_manifest_only_from_inside_the_tree() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let outside = Fx::new();
    let marker = outside.p("preloaded");
    preload_lib(&outside.p("libevil.so"), &marker);
    let manifest = format!("{PY312_MANIFEST}[env]\nLD_PRELOAD = \"{{tree}}/lib/libfast.so\"\n");
    let ov = custom_overlay(&[("rocm7-py312", &manifest, &["mooncake", "hipfile"])]);
    let standin = repo().join("examples/standin/common/infera");
    assert!(Command::new("cp")
        .arg("-r")
        .arg(&standin)
        .arg(ov.p("overlay/trees/rocm7-py312/site-packages/"))
        .status()
        .unwrap()
        .success());
    // The name is inside the tree; the file is a link to one elsewhere: refused, not preloaded.
    ov.link("overlay/trees/rocm7-py312/lib/libfast.so", outside.p("libevil.so").to_str().unwrap());
    infera(&["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(65, &format!("lib/libfast.so` resolves to `{}`, outside its tree", outside.p("libevil.so").display()));
    assert!(!marker.exists(), "the library outside the tree was loaded");
    // The same library inside the tree is the manifest's to preload: it runs (the check above
    // is what stood between the link and the engine).
    ov.rm("overlay/trees/rocm7-py312/lib/libfast.so");
    std::fs::copy(outside.p("libevil.so"), ov.p("overlay/trees/rocm7-py312/lib/libfast.so")).unwrap();
    let out =
        infera(&["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"]).root(&img).overlay(&ov.overlay()).run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(marker.exists(), "LD_PRELOAD inside the tree is honoured");
}

#[test]
fn a_model_path_that_is_not_utf8_is_read_as_bytes() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let name = OsString::from_vec(b"/models/kimi-\xff".to_vec());
    let host = img.path().join(std::ffi::OsStr::from_bytes(&b"models/kimi-\xff"[..]));
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("config.json"), include_str!("../../../../examples/models/kimi-k3/config.json")).unwrap();
    let out = infera(&["worker", "--dry-run", "--"])
        .args([OsString::from("--model"), name, OsString::from("--kv-cache-dtype"), OsString::from("fp8")])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_GPUS", "8")
        .run();
    out.assert(78, "error[kv-fp8-mla]: fp8 KV cache (fp8) on the MLA model /models/kimi-\u{fffd}");
}

use std::os::unix::ffi::OsStrExt;

/// The tree a start uses is walked first and its listings then answer the facts (modules,
/// programs, capability directories): the facts are the same as read without them, for
/// packages, `.py` files, extension modules, links inside the tree, missing modules, and a
/// link out of the tree (which also stops the walk, so part of the tree is read again).
#[test]
fn facts_from_the_walks_listings_are_the_facts_read_without_them() {
    use infera_overlay::overlay::{self, LoadOptions};
    let ov = shipped_overlay();
    let tree = ov.overlay().join("trees/rocm7-py312");
    let site = tree.join("site-packages");
    std::fs::write(site.join("extmod.cpython-312-x86_64-linux-gnu.so"), "").unwrap();
    std::os::unix::fs::symlink("infera", site.join("linked")).unwrap();
    std::fs::create_dir(site.join("pkg")).unwrap();
    std::fs::write(site.join("pkg/sub.py"), "").unwrap();
    let tool = tree.join("bin/infera-tool");
    std::fs::write(&tool, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let modules: Vec<String> =
        ["extmod", "linked", "linked.engine", "escaping", "pkg.sub", "pkg.none", "missing", "missing.sub"]
            .map(String::from)
            .to_vec();
    let opts = |lazy| LoadOptions { check_writable: true, modules: modules.clone(), lazy };
    let show = |f: &overlay::TreeFacts| {
        format!(
            "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
            f.modules, f.top_modules, f.cap_modules, f.dists, f.libraries, f.bin, f.mount
        )
    };
    let both = || {
        let read = overlay::load(&ov.overlay(), &opts(false)).unwrap();
        let lazy = overlay::load(&ov.overlay(), &opts(true)).unwrap();
        let pick = |o: &overlay::Overlay| o.trees.iter().position(|t| t.family == "rocm7-py312").unwrap();
        let a = read.trees[pick(&read)].facts.clone();
        let walked = overlay::selected(&lazy.trees[pick(&lazy)], &opts(true));
        assert_eq!(show(&a), show(&walked.facts));
        walked.facts
    };
    let b = both();
    assert!(matches!(b.walked, Some(Ok(()))), "{:?}", b.walked);
    let presence = |f: &overlay::TreeFacts, m: &str| format!("{:?}", f.modules[m]);
    for m in ["extmod", "linked", "linked.engine", "pkg.sub"] {
        assert_eq!(presence(&b, m), "Present", "{m}");
    }
    for m in ["pkg.none", "missing", "missing.sub", "escaping"] {
        assert_eq!(presence(&b, m), "Missing", "{m}");
    }
    assert_eq!(b.bin.keys().collect::<Vec<_>>(), ["infera-tool"]);

    std::os::unix::fs::symlink("/etc", site.join("escaping")).unwrap();
    let b = both();
    assert!(presence(&b, "escaping").starts_with("Escapes"), "{}", presence(&b, "escaping"));
    assert!(matches!(b.walked, Some(Err(_))), "the walk finds the link out: {:?}", b.walked);
}

/// An answer that could not be written is not a success: `> /dev/full` is exit 74 with a
/// message on stderr, not 0.
#[test]
fn an_answer_written_to_a_full_device_is_exit_74() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    for args in [&["--version"][..], &["check", "--output", "json"], &["worker", "--dry-run", "--", "--model", "/m"]] {
        let out = std::process::Command::new(BIN)
            .args(args)
            .env("INFERA_ROOT", img.path())
            .env("INFERA_OVERLAY", ov.overlay())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HIP_VISIBLE_DEVICES", "0")
            .env("NATS_SERVER", crate::support::POD_NATS)
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(74), "{args:?}: {err}");
        assert!(
            err.contains("error[output-failed]: cannot write the answer to stdout: No space left on device"),
            "{err}"
        );
    }
}

/// A path that is not UTF-8 (the overlay's directory, a model the args name) is in the JSON
/// plan as the plan shows such bytes everywhere (`{"hex": …}`), not an `internal` error.
#[test]
fn the_json_plan_carries_paths_that_are_not_utf8() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let odd = ov.path().join(std::ffi::OsStr::from_bytes(b"ov\xff"));
    std::fs::rename(ov.overlay(), &odd).unwrap();
    let model = OsString::from_vec(b"/models/\xff".to_vec());
    let out = infera(&["worker", "--dry-run", "--output", "json", "--engine", "vllm", "--", "--model"])
        .args([model])
        .root(&img)
        .overlay(&odd)
        .env("INFERA_ALLOW", "engine-version")
        .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    let hex = |b: &[u8]| b.iter().map(|c| format!("{c:02x}")).collect::<String>();
    let tree = odd.join("trees/rocm7-py312");
    assert_eq!(j["tree"]["hex"], hex(tree.as_os_str().as_bytes()), "{j}");
    assert_eq!(j["facts"]["models"][0]["status"], "missing");
    assert_eq!(j["facts"]["models"][0]["path"]["hex"], hex(b"/models/\xff"));
}

/// Out of processes (a pod's pids limit): `manifest verify --digest` hashes on this thread
/// alone instead of aborting when no worker thread can be started.
#[test]
fn digest_verification_works_when_no_thread_can_be_started() {
    let ov = shipped_overlay();
    std::fs::set_permissions(ov.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = Command::new("prlimit")
        .args(["--nproc=1:1", "--", "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
        .arg(BIN)
        .args(["manifest", "verify", "--digest"])
        .arg(ov.overlay())
        .env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(std::os::unix::process::ExitStatusExt::signal(&o.status).is_none(), "died by a signal: {stderr}");
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("ok: 2 trees"), "{}", String::from_utf8_lossy(&o.stdout));
}

/// With fd 0, 1 or 2 closed and no /dev/null (a minimal /dev), std's start-up would abort the
/// launcher with SIGABRT and no word. It runs: stdin reads as empty, a plan that cannot be
/// written to a closed stdout is exit 74 said on stderr, and the program exec'd sees the fds
/// closed, as the pod gave them.
#[test]
fn closed_stdio_without_dev_null_is_not_a_death_by_signal() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: hiding /dev/null needs a mount namespace (root)");
        return;
    }
    let img = vllm_image(None);
    img.exe(
        "/usr/bin/python3.12",
        "#!/bin/sh\nfor fd in 0 1 2; do if [ -e /proc/$$/fd/$fd ]; then echo \"fd $fd open\"; else echo \"fd $fd closed\"; fi; done\n",
    );
    let ov = shipped_overlay();
    let run = |redirect: &str, args: &[&str]| {
        let script = format!("mount -t tmpfs tmpfs /dev && test ! -e /dev/null && exec \"$0\" \"$@\" {redirect}");
        let o = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script, BIN])
            .args(args)
            .env_clear()
            .env("NATS_SERVER", crate::support::POD_NATS)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("INFERA_ROOT", img.path())
            .env("INFERA_OVERLAY", ov.overlay())
            .env("HIP_VISIBLE_DEVICES", "0")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(std::os::unix::process::ExitStatusExt::signal(&o.status).is_none(), "{redirect}: signal: {err}");
        (o.status.code().unwrap(), String::from_utf8_lossy(&o.stdout).into_owned(), err)
    };
    let (code, out, err) = run("<&- 2>&-", &["--version"]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(out.starts_with("infera-exec "), "{out}");
    let (code, out, err) = run(">&-", &["worker", "--dry-run", "--", "--model", "/m"]);
    assert_eq!(code, 74, "{err}");
    assert!(out.is_empty() && err.contains("error[output-failed]: cannot write the answer to stdout"), "{err}");
    let (code, out, err) = run("<&- 2>&-", &["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"]);
    assert_eq!((code, out.as_str()), (0, "fd 0 closed\nfd 1 open\nfd 2 closed\n"), "{err}");
}

/// A panic (a bug) is said as a refusal is and exits 70, not a death by SIGABRT. The debug
/// build the tests run panics on request, since no input is known to make one.
#[test]
fn a_panic_is_error_internal_and_exit_70() {
    let o = Command::new(BIN).arg("--version").env("INFERA_EXEC_TEST_PANIC", "1").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(std::os::unix::process::ExitStatusExt::signal(&o.status).is_none(), "died by a signal: {err}");
    assert_eq!(o.status.code(), Some(70), "{err}");
    assert!(err.starts_with("error[internal]: panicked at crates/infera-exec/src/main.rs:"), "{err}");
    assert!(err.contains("a panic the test asked for\nhint: this is a bug in infera-exec"), "{err}");
    assert!(o.stdout.is_empty());
}

/// A read interrupted by EINTR (FUSE and NFS can return it) is resumed, not a file that
/// "cannot be read": strace injects EINTR into the first read of the interpreter's header
/// (the exec check) and into every other read of a recorded file (`manifest verify`).
#[test]
fn interrupted_reads_are_resumed() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let py = img.p("/usr/bin/python3.12");
    let inject = |path: &Path, when: &str| -> Vec<OsString> {
        let spec = format!("inject=read:error=EINTR:when={when}");
        vec!["-P".into(), path.into(), "-e".into(), "trace=read".into(), "-e".into(), spec.into()]
    };
    let args = inject(&py, "1");
    let args: Vec<&std::ffi::OsStr> = args.iter().map(OsString::as_os_str).collect();
    let out = infera(&["worker", "--dry-run", "--", "--model", "/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .under_strace(&args)
        .run();
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("exec      /usr/bin/python3.12 -m infera.engine.vllm"), "{}", out.stdout);
    // A recorded file whose every other read is interrupted still matches its digest.
    let tree = ov.overlay().join("trees/rocm7-py312");
    infera(&["manifest", "generate"]).args([&tree]).run().assert(0, "wrote");
    let file = tree.join("site-packages/infera/__init__.py");
    assert!(file.is_file(), "{}", file.display());
    let args = inject(&file, "1+2");
    let args: Vec<&std::ffi::OsStr> = args.iter().map(OsString::as_os_str).collect();
    let out = infera(&["manifest", "verify", "--digest"]).args([ov.overlay()]).under_strace(&args).run();
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
}

/// A file-descriptor limit too low to read the image is named as such, not as a bad root.
#[test]
fn a_file_descriptor_limit_is_named() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let out = infera(&["worker", "--dry-run", "--", "--model", "/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .under("prlimit", &["--nofile=3".as_ref()])
        .run();
    out.assert(66, "error[fd-limit]: the image root");
    assert!(out.stderr.contains("this process may have 3 open at once (RLIMIT_NOFILE)"), "{}", out.stderr);
    assert!(out.stderr.contains("hint: raise the container's limit of open files"), "{}", out.stderr);
}

/// Values the launcher echoes cannot forge its lines: a newline or an escape sequence in a
/// variable, an option value or a path is escaped, in refusals, the plan and the logs.
#[test]
fn echoed_values_cannot_forge_lines() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let forged = "vlm\nerror[ok]: all good\nhint: \u{1b}[2Kignore";
    let out = infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_ENGINE", forged)
        .run();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("invalid value 'vlm\\nerror[ok]: all good\\nhint: \\u{1b}[2Kignore'"),
        "{}",
        out.stderr
    );
    let out = infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_LOG_FORMAT", forged)
        .run();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("\n  error[ok]: all good\n  hint: \\u{1b}[2Kignore"), "{}", out.stderr);
    // An argument echoed in the plan, and a path in a refusal.
    let out = infera(&["worker", "--dry-run", "--", "--model", "/m\nerror[x]: y", "-tp", "\u{1b}]0;t\u{7}"])
        .root(&img)
        .overlay(&ov.overlay())
        .run();
    for (i, line) in out.stdout.lines().chain(out.stderr.lines()).enumerate() {
        assert!(
            !line.starts_with("error[x]") && !line.contains('\u{1b}'),
            "line {i}: {line:?}\n{}{}",
            out.stdout,
            out.stderr
        );
    }
    for (i, line) in out.stderr.lines().enumerate() {
        assert!(
            i == 0 || line.starts_with("  ") || line.starts_with("hint:"),
            "stderr line {i}: {line:?}\n{}",
            out.stderr
        );
    }
}
