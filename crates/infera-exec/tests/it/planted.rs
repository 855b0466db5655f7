//! Hostile places: nothing written, created or locked through a planted link or FIFO, and
//! every wait ended by SIGTERM/SIGINT — plainly, under `--init`, and as PID 1. Planted paths
//! outside a test's scratch (the old lock in /tmp) are planted in a private mount namespace,
//! over a private /tmp: nothing is written outside the scratch.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::time::Duration;

use crate::support::*;

fn install(target: &Path, ov: &Fx) -> Out {
    infera(&["install"]).args([target.as_os_str()]).args(["--from".as_ref(), ov.overlay().as_os_str()]).run()
}

/// `install DEST` writes its marker and files from a descriptor of DEST, creating each
/// exclusively: a marker planted as a link to another file, or as a FIFO, is refused (that
/// file untouched, nothing hangs); a listed part planted as a link is removed, not followed.
#[test]
fn install_writes_nothing_through_a_planted_link_or_fifo() {
    let ov = shipped_overlay();
    let scratch = tempfile::tempdir().unwrap();
    let victim = scratch.path().join("victim");
    std::fs::write(&victim, "host file\n").unwrap();
    let dest = scratch.path().join("emptydir");
    std::fs::create_dir(&dest).unwrap();
    std::os::unix::fs::symlink(&victim, dest.join(".infera-install")).unwrap();
    install(&dest, &ov).assert(
        2,
        &format!(
            "error[install-unsafe]: `{}` is a symbolic link where install keeps its marker",
            dest.join(".infera-install").display()
        ),
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "host file\n");
    std::fs::remove_file(dest.join(".infera-install")).unwrap();
    nix::unistd::mkfifo(&dest.join(".infera-install"), nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    install(&dest, &ov).assert(2, "is a FIFO where install keeps its marker");
    std::fs::remove_file(dest.join(".infera-install")).unwrap();
    // An earlier install, then `trees` swapped for a link to a directory elsewhere.
    install(&dest, &ov).assert(0, "trees match their records");
    let elsewhere = scratch.path().join("elsewhere");
    std::fs::create_dir_all(elsewhere.join("rocm7-py312")).unwrap();
    std::fs::write(elsewhere.join("rocm7-py312/keep"), "keep").unwrap();
    std::fs::remove_dir_all(dest.join("trees")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dest.join("trees")).unwrap();
    install(&dest, &ov).assert(0, "trees match their records");
    assert!(dest.join("trees").symlink_metadata().unwrap().is_dir(), "the link was replaced by a copy");
    assert_eq!(std::fs::read_to_string(elsewhere.join("rocm7-py312/keep")).unwrap(), "keep");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 1, "nothing written through the link");
}

/// The termination message is written only into an existing regular file reached without a
/// link in any component.
#[test]
fn the_termination_log_is_not_written_through_a_linked_directory() {
    let scratch = tempfile::tempdir().unwrap();
    let real = scratch.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("termination-log"), "").unwrap();
    std::os::unix::fs::symlink(&real, scratch.path().join("linked")).unwrap();
    let refused =
        |log: &Path| infera(&["worker", "--dry-run", "--engine", "vlm"]).env("INFERA_TERMINATION_LOG", log).run().code;
    assert_eq!(refused(&scratch.path().join("linked/termination-log")), 2);
    assert_eq!(std::fs::read_to_string(real.join("termination-log")).unwrap(), "", "not through the link");
    assert_eq!(refused(&real.join("termination-log")), 2);
    assert!(std::fs::read_to_string(real.join("termination-log")).unwrap().starts_with("infera-exec refused [usage]"));
}

/// `sh -c SCRIPT` in a private mount namespace, then exec of the launcher: /tmp becomes a
/// private tmpfs (the fixtures under the real /tmp bound back at their paths) where the
/// script plants what it plants.
fn in_private_tmp(run: Run, fixtures: &[&Path], plant: &str) -> Run {
    let mut script = String::from(
        "set -e\nmount --make-rprivate /\nmount --rbind /tmp /mnt\nmount -t tmpfs tmpfs /tmp\n\
         for d in $FIXTURES; do mkdir -p \"$d\"; mount --rbind \"/mnt/${d#/tmp/}\" \"$d\"; done\n",
    );
    script.push_str(plant);
    script.push_str("\nexec \"$@\"\n");
    // The launcher (and the checkout) stay visible when the checkout itself is under /tmp.
    let bin_dir = Path::new(BIN).parent().unwrap();
    let mut dirs: Vec<String> = fixtures.iter().map(|p| p.display().to_string()).collect();
    for d in [repo(), bin_dir.to_path_buf()] {
        if d.starts_with("/tmp") && !dirs.iter().any(|x| d.starts_with(x)) {
            dirs.push(d.display().to_string());
        }
    }
    let args: Vec<OsString> = vec!["--mount".into(), "sh".into(), "-c".into(), script.into(), "sh".into()];
    let args: Vec<&OsStr> = args.iter().map(OsString::as_os_str).collect();
    run.env("FIXTURES", dirs.join(" ")).under("unshare", &args)
}

/// The old patch lock, `/tmp/.infera-exec-patches.lock`, planted as a FIFO (it hung every
/// start) or as a link to a file to create: neither is opened; the lock is a `flock` of the
/// engine's install directory, which exists already.
#[test]
fn the_patch_lock_creates_nothing_and_a_planted_tmp_lock_is_never_opened() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    let scratch = tempfile::tempdir().unwrap();
    let victim = scratch.path().join("created-through-a-link");
    let start = || {
        infera(&["python3", "-m", "infera.engine.vllm", "--model", "/m"])
            .root(&img)
            .overlay(&ov.overlay())
            .env("PYTHONPATH", img.p(VLLM_SITE))
            .env("INFERA_LOG", "info")
    };
    let fixtures = [img.path(), ov.path(), scratch.path()];
    for plant in [
        "mkfifo /tmp/.infera-exec-patches.lock".to_string(),
        format!("ln -s {} /tmp/.infera-exec-patches.lock", victim.display()),
    ] {
        let out = in_private_tmp(start(), &fixtures, &plant).run();
        assert_eq!(out.code, 0, "{plant}: {}", out.stderr);
        assert!(out.stderr.contains("[engine-patch] "), "{}", out.stderr);
        assert!(out.stdout.contains("INFERA-STANDIN "), "{}", out.stdout);
        assert!(!victim.exists(), "created through the planted link");
    }
    // The dry run names the lock: the directory the engine is recorded in.
    let j = infera(&["worker", "--dry-run", "--output", "json", "--", "--model", "/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .json();
    let step = &j["exec"]["steps"][0];
    assert_eq!((step["kind"].as_str(), step["lock"].as_str()), (Some("patch"), Some(VLLM_SITE)), "{j:#}");
}

/// Another start holding the engine's patch lock: this one waits (saying so), then patches
/// once the lock is released.
#[test]
fn a_start_waits_for_another_starts_patches() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    let mut holder = hold_lock(&img.p(VLLM_SITE));
    let child = infera(&["python3", "-m", "infera.engine.vllm", "--model", "/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("PYTHONPATH", img.p(VLLM_SITE))
        .env("INFERA_LOG", "info")
        .spawn();
    let pid = child.id();
    assert!(wait_until(Duration::from_secs(20), || in_sigtimedwait(pid)), "the start never waited for the lock");
    assert!(holder.0.try_wait().unwrap().is_none());
    drop(holder);
    let out = child.wait_with_output().unwrap();
    let (code, stderr) = (out.status.code(), String::from_utf8_lossy(&out.stderr));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("[patch-lock-wait] another start is patching the engine"), "{stderr}");
    assert!(stderr.contains("[engine-patch] "), "{stderr}");
}

/// A wait: its name, the start that waits, when it is waiting (given the launcher's pid),
/// and how the launcher says what it was doing when stopped.
type Wait<'a> = (&'static str, Box<dyn Fn() -> Run + 'a>, fn(u32) -> bool, &'static str);

#[derive(Clone, Copy, Debug)]
enum Mode {
    Plain,
    Init,
    Pid1,
}

/// Every wait before the exec — the model volume, the leader's name, the patch lock, a patch
/// that hangs — ends on SIGTERM with 143 and on SIGINT with 130, nothing started: as a plain
/// process, under `--init`, and as PID 1 of a PID namespace (where a signal without a
/// handler would be ignored, were it not held and waited for).
#[test]
fn every_wait_ends_on_sigterm_and_sigint_in_every_mode() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    let _ns = UdpSocketGuard::bind("127.0.53.41");
    let scratch = tempfile::tempdir().unwrap();
    std::fs::write(scratch.path().join("resolv.conf"), "nameserver 127.0.53.41\noptions timeout:5\n").unwrap();
    std::fs::write(scratch.path().join("hosts"), "127.0.0.1 localhost\n").unwrap();
    img.file("/etc/resolv.conf", "nameserver 127.0.53.41\noptions timeout:5\n")
        .file("/etc/hosts", "127.0.0.1 localhost\n");
    let mut held = Some(hold_lock(&img.p(VLLM_SITE)));
    let engine = || {
        infera(&["python3", "-m", "infera.engine.vllm", "--model", "/m"])
            .root(&img)
            .overlay(&ov.overlay())
            .env("PYTHONPATH", img.p(VLLM_SITE))
    };
    let waits: Vec<Wait> = vec![
        (
            "model",
            Box::new(|| {
                let run = infera(&["worker", "--wait-model", "600", "--", "--model", "/models/not-yet"]);
                in_image_root(run, &img, &ov.overlay())
            }),
            in_sigtimedwait,
            "waiting for the model",
        ),
        (
            "leader",
            Box::new(|| {
                engine()
                    .env("LWS_GROUP_SIZE", "2")
                    .env("LWS_WORKER_INDEX", "1")
                    .env("LWS_LEADER_ADDRESS", "kimi-0.kimi.infera")
                    .env("INFERA_GPUS", "8")
            }),
            has_socket,
            "waiting for the leader",
        ),
        ("lock", Box::new(engine), in_sigtimedwait, "running the engine patches"),
        (
            "patch",
            Box::new(|| engine().env("INFERA_STANDIN_PATCH", "hang")),
            |pid| {
                children_of(pid).iter().any(|(c, _)| {
                    std::fs::read_to_string(format!("/proc/{c}/comm")).is_ok_and(|c| c.starts_with("python"))
                })
            },
            "running the engine patches",
        ),
    ];
    for (name, run, ready, during) in &waits {
        if *name == "patch" {
            held.take(); // released: the patch itself runs, and hangs
        }
        for mode in [Mode::Plain, Mode::Init, Mode::Pid1] {
            for (sig, code) in [(nix::sys::signal::SIGTERM, 143), (nix::sys::signal::SIGINT, 130)] {
                let mut r = run();
                if matches!(mode, Mode::Init) {
                    r = r.env("INFERA_INIT", "1");
                }
                // The name server this host's resolver asks (musl's and the image's alike).
                let binds = format!(
                    "mount --bind {0}/resolv.conf /etc/resolv.conf; mount --bind {0}/hosts /etc/hosts",
                    scratch.path().display()
                );
                let mut args: Vec<OsString> = vec!["--mount".into()];
                if matches!(mode, Mode::Pid1) {
                    args.extend(["--pid", "--fork", "--mount-proc", "--kill-child"].map(OsString::from));
                }
                args.extend(["sh", "-c"].map(OsString::from));
                args.push(format!("{binds}; exec \"$@\"").into());
                args.push("sh".into());
                let args: Vec<&OsStr> = args.iter().map(OsString::as_os_str).collect();
                let mut child = r.under("unshare", &args).spawn();
                let launcher = |outer: u32| match mode {
                    Mode::Pid1 => children_of(outer).first().map(|c| c.0),
                    _ => Some(outer),
                };
                let outer = child.id();
                let found = wait_until(Duration::from_secs(20), || launcher(outer).is_some_and(ready));
                if !found {
                    let _ = child.kill();
                    let out = child.wait_with_output().unwrap();
                    panic!("{name} {mode:?}: never waited\n{}", String::from_utf8_lossy(&out.stderr));
                }
                let pid = launcher(outer).unwrap();
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
                assert!(
                    wait_until(Duration::from_secs(5), || child.try_wait().unwrap().is_some()),
                    "{name} {mode:?} {sig}: still running 5 s after the signal"
                );
                let out = child.wait_with_output().unwrap();
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(code), "{name} {mode:?} {sig}: {stderr}");
                assert!(stderr.contains(&format!("while {during}")), "{name} {mode:?} {sig}: {stderr}");
                assert!(
                    !String::from_utf8_lossy(&out.stdout).contains("INFERA-STANDIN "),
                    "{name}: the engine started"
                );
            }
        }
    }
}

/// A UDP socket bound on a loopback address that never answers (a name server that is down).
struct UdpSocketGuard(#[allow(dead_code)] std::net::UdpSocket);

impl UdpSocketGuard {
    fn bind(ip: &str) -> Self {
        UdpSocketGuard(std::net::UdpSocket::bind((ip, 53)).expect("bind :53 on a loopback address (root)"))
    }
}
