//! `--init` with real processes: signal forwarding, exit codes, reaping orphans;
//! `--drop-caps` read back from the child's /proc/self/status; a noexec overlay.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

fn launcher(img: &Fx, ov: &Fx, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(BIN);
    c.env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("INFERA_ROOT", img.path())
        .env("INFERA_OVERLAY", ov.overlay())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// Read stdout lines until one starts with `prefix`; returns all lines read.
fn read_until(child: &mut Child, prefix: &str) -> Vec<String> {
    let out = child.stdout.as_mut().unwrap();
    let mut r = BufReader::new(out);
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap() == 0 {
            panic!("EOF before {prefix:?}; got {lines:?}");
        }
        let done = l.starts_with(prefix);
        lines.push(l);
        if done {
            return lines;
        }
    }
}

fn finish(mut child: Child) -> (i32, String, String) {
    let st = child.wait().unwrap();
    let mut out = String::new();
    let mut err = String::new();
    use std::io::Read;
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(std::os::unix::process::ExitStatusExt::signal(&st).is_none(), "the launcher died by a signal: {err}");
    (st.code().unwrap(), out, err)
}

#[test]
fn forwards_signals_and_exits_with_the_childs_code() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    for (sig, n) in [
        (nix::sys::signal::SIGTERM, 15),
        (nix::sys::signal::SIGINT, 2),
        (nix::sys::signal::SIGHUP, 1),
        (nix::sys::signal::SIGUSR1, 10),
    ] {
        let mut child = launcher(
            &img,
            &ov,
            &["server", "--init", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
            &[("INFERA_STANDIN_WAIT", "20"), ("INFERA_STANDIN_EXIT", "7")],
        )
        .spawn()
        .unwrap();
        let lines = read_until(&mut child, "INFERA-STANDIN ");
        let report: serde_json::Value =
            serde_json::from_str(lines.last().unwrap().trim_start_matches("INFERA-STANDIN ")).unwrap();
        assert_ne!(report["pid"], child.id(), "in init mode the engine is a child, not the launcher's exec");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
        let (code, out, err) = finish(child);
        assert!(out.contains(&format!("INFERA-STANDIN-SIGNAL {n}")), "signal {n} forwarded: {out}\n{err}");
        assert_eq!(code, 7, "the child's exit code: {err}");
    }
}

#[test]
fn exits_128_plus_signal_when_the_child_dies_of_it() {
    let img = vllm_image(None);
    img.exe("/usr/bin/python3.12", "#!/bin/sh\necho started\nexec sleep 30\n");
    let ov = shipped_overlay();
    let mut child = launcher(&img, &ov, &["server", "--init", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"], &[])
        .spawn()
        .unwrap();
    read_until(&mut child, "started");
    assert!(child_execed(child.id(), "sleep"), "the child never became `sleep 30`");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGTERM).unwrap();
    let (code, _, err) = finish(child);
    assert_eq!(code, 143, "{err}");
}

/// Real-time signals: a child killed by one (`kill -64`) is exit 128+64, not a hang (nix's
/// waitpid has no enum value for it and would lose the status), and one sent to init is
/// forwarded like any other (here it kills the child: 128+n).
#[test]
fn real_time_signals_are_forwarded_and_deaths_by_them_are_128_plus_n() {
    let img = vllm_image(None);
    img.exe("/usr/bin/python3.12", "#!/bin/sh\necho started\nexec sleep 30\n");
    let ov = shipped_overlay();
    let rtmax = nix::libc::SIGRTMAX();
    let rtmin3 = nix::libc::SIGRTMIN() + 3;
    // A child killed by SIGRTMAX.
    let mut child = launcher(&img, &ov, &["server", "--init", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"], &[])
        .spawn()
        .unwrap();
    read_until(&mut child, "started");
    let kids = children_of(child.id());
    assert_eq!(kids.len(), 1, "{kids:?}");
    // SAFETY: kill(2) on the launcher's own child, a process this test started.
    assert_eq!(unsafe { nix::libc::kill(kids[0].0 as i32, rtmax) }, 0);
    let (code, _, err) = finish(child);
    assert_eq!(code, 128 + rtmax, "{err}");
    // SIGRTMIN+3 sent to init reaches the child.
    let mut child = launcher(&img, &ov, &["server", "--init", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"], &[])
        .spawn()
        .unwrap();
    read_until(&mut child, "started");
    assert!(child_execed(child.id(), "sleep"), "the child never became `sleep 30`");
    // SAFETY: kill(2) on the launcher this test started.
    assert_eq!(unsafe { nix::libc::kill(child.id() as i32, rtmin3) }, 0);
    let (code, _, err) = finish(child);
    assert_eq!(code, 128 + rtmin3, "{err}");
}

#[test]
fn grace_period_then_sigkill() {
    let img = vllm_image(None);
    // A child that ignores SIGTERM.
    img.exe("/usr/bin/python3.12", "#!/bin/sh\ntrap '' TERM\necho started\nwhile :; do sleep 0.1; done\n");
    let ov = shipped_overlay();
    let mut child = launcher(
        &img,
        &ov,
        &["server", "--init", "--init-group", "--init-grace", "0.5", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
        &[],
    )
    .spawn()
    .unwrap();
    read_until(&mut child, "started");
    let t = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGTERM).unwrap();
    let (code, _, err) = finish(child);
    assert_eq!(code, 137, "SIGKILL after the grace period: {err}");
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(err.contains("init-grace"), "{err}");
}

/// Wait (20 s at most) until the launcher's one child runs the program `comm`.
fn child_execed(launcher: u32, comm: &str) -> bool {
    wait_until(Duration::from_secs(20), || {
        children_of(launcher)
            .iter()
            .any(|(p, _)| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim_end() == comm))
    })
}

#[test]
fn reaps_100_orphaned_grandchildren() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    let mut child = launcher(
        &img,
        &ov,
        &["server", "--init", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
        &[("INFERA_STANDIN_ORPHANS", "100"), ("INFERA_STANDIN_WAIT", "30"), ("INFERA_STANDIN_EXIT", "5")],
    )
    .spawn()
    .unwrap();
    let init = child.id();
    read_until(&mut child, "INFERA-STANDIN ");
    // The orphans were reparented to the launcher (a subreaper, not PID 1 here) and, once they
    // exit, reaped: only the engine itself remains its child, and no zombie.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut kids = children_of(init);
    while (kids.len() != 1 || kids.iter().any(|(_, s)| *s == 'Z')) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        kids = children_of(init);
    }
    assert_eq!(kids.len(), 1, "children of init: {kids:?}");
    assert!(kids.iter().all(|(_, s)| *s != 'Z'), "zombies: {kids:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(init as i32), nix::sys::signal::SIGTERM).unwrap();
    let (code, _, err) = finish(child);
    assert_eq!(code, 5, "{err}");
}

#[test]
fn orphans_are_reparented_to_init_not_lost() {
    // Each orphan must have passed through the launcher: with sleeping orphans, count them.
    let img = vllm_image(None);
    img.exe(
        "/usr/bin/python3.12",
        "#!/bin/sh\n( for i in $(seq 100); do sleep 1 & done )\necho started\nsleep 3\nexit 4\n",
    );
    let ov = shipped_overlay();
    let mut child = launcher(&img, &ov, &["server", "--init", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"], &[])
        .spawn()
        .unwrap();
    let init = child.id();
    read_until(&mut child, "started");
    let kids = children_of(init);
    assert!(kids.len() >= 100, "the orphans are the launcher's children now: {}", kids.len());
    let (code, _, err) = finish(child);
    assert_eq!(code, 4, "{err}");
}

#[test]
fn exec_failures_give_126_and_127_in_init_mode() {
    let ov = shipped_overlay();
    let img = vllm_image(None);
    // An ELF file execve refuses (ENOEXEC), which the plan takes for one: the child's execve.
    let mut elf = b"\x7fELF".to_vec();
    elf.resize(64, 0);
    img.exe("/usr/bin/python3.12", "").file("/usr/bin/python3.12", elf);
    let (code, _, err) = finish(
        launcher(&img, &ov, &["server", "--init", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"], &[])
            .spawn()
            .unwrap(),
    );
    assert_eq!(code, 126, "{err}");
    assert!(err.contains("execve"), "{err}");
    // The same failure without --init: the launcher's own execve.
    let (code, _, err) =
        finish(launcher(&img, &ov, &["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"], &[]).spawn().unwrap());
    assert_eq!(code, 126, "{err}");
    assert!(err.contains("error[exec-failed]: execve") && err.contains("Exec format error"), "{err}");
    // An ELF whose loader is missing: ENOENT from execve, 127, in both modes.
    img.elf_without_its_loader("/usr/bin/python3.12");
    for mode in [
        &["server", "--init", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"][..],
        &["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"][..],
    ] {
        let (code, _, err) = finish(launcher(&img, &ov, mode, &[]).spawn().unwrap());
        assert_eq!(code, 127, "{mode:?}: {err}");
        assert!(err.contains("error[exec-not-found]: execve") && err.contains("No such file"), "{mode:?}: {err}");
    }
    // A `#!` interpreter that is a directory: refused by the plan, before any execve.
    img.exe("/usr/bin/python3.12", "#!/usr\n");
    for mode in [
        &["server", "--init", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"][..],
        &["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"][..],
    ] {
        let (code, _, err) = finish(launcher(&img, &ov, mode, &[]).spawn().unwrap());
        assert_eq!(code, 126, "{mode:?}: {err}");
        assert!(err.contains("error[exec-interpreter-unusable]") && err.contains("`/usr` is a directory"), "{err}");
    }
}

/// Bit positions in /proc/<pid>/status Cap* masks (capabilities(7)).
const CAP_KILL: u64 = 1 << 5;
const CAP_NET_BIND_SERVICE: u64 = 1 << 10;

#[test]
fn drop_caps_leaves_only_the_kept_set() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: dropping capabilities is observable only as root");
        return;
    }
    let img = vllm_image(None);
    img.exe("/usr/bin/python3.12", "#!/bin/sh\nexec grep -E '^(Cap|NoNewPrivs)' /proc/self/status\n");
    let ov = shipped_overlay();
    let out = infera(&[
        "server",
        "--drop-caps",
        "net_bind_service,CAP_KILL",
        "--no-new-privs",
        "--",
        "--router-tokenizer-path=Qwen/Qwen3-0.6B",
    ])
    .root(&img)
    .overlay(&ov.overlay())
    .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let field = |name: &str| -> u64 {
        let v =
            out.stdout.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_else(|| panic!("{name}: {}", out.stdout));
        u64::from_str_radix(v.trim(), 16).unwrap()
    };
    let keep = CAP_KILL | CAP_NET_BIND_SERVICE;
    assert_eq!(field("CapBnd:"), keep, "{}", out.stdout);
    assert_eq!(field("CapPrm:"), keep);
    assert_eq!(field("CapEff:"), keep);
    assert_eq!(field("CapInh:"), 0);
    assert_eq!(field("CapAmb:"), 0);
    assert!(out.stdout.contains("NoNewPrivs:\t1"), "{}", out.stdout);
    // The plan says so, and a bad name is a usage error before anything runs.
    let j = infera(&[
        "server",
        "--dry-run",
        "--output",
        "json",
        "--drop-caps",
        "kill",
        "--",
        "--router-tokenizer-path=Qwen/Qwen3-0.6B",
    ])
    .root(&img)
    .overlay(&ov.overlay())
    .run()
    .json();
    assert_eq!(j["exec"]["privileges"]["keep_caps"], serde_json::json!(["CAP_KILL"]));
    infera(&["server", "--drop-caps", "cap_flying", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(2, "`cap_flying` is not a Linux capability");
}

#[test]
fn noexec_overlay_with_shared_objects_is_refused() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: mounting a noexec tmpfs needs root");
        return;
    }
    let img = vllm_image(None);
    let ov = shipped_overlay();
    ov.file("overlay/trees/rocm7-py312/lib/libmooncake.so.1", "\x7fELF");
    let mnt = tempfile::tempdir().unwrap();
    let script = format!(
        "mount -t tmpfs -o noexec,mode=0755 tmpfs {m} && cp -a {o}/. {m}/ && INFERA_OVERLAY={m} {b} worker --dry-run",
        m = mnt.path().display(),
        o = ov.overlay().display(),
        b = BIN
    );
    let o = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("INFERA_ROOT", img.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(65), "{err}");
    assert!(err.contains("holds shared objects but is mounted noexec"), "{err}");
}

/// As PID 1 of its own PID namespace (what a container's command is): the kernel delivers no
/// signal to PID 1 that it has no handler for, so each one here reaches the engine only because
/// the init forwards it. SIGTERM and a real-time signal sent to the init end the child and the
/// exit is 128+n; a child killed by a real-time signal is 128+n; orphans are reaped.
#[test]
fn as_pid_1_of_a_pid_namespace_signals_are_forwarded_and_deaths_are_128_plus_n() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: a PID namespace needs root");
        return;
    }
    let img = vllm_image(None);
    img.exe("/usr/bin/python3.12", "#!/bin/sh\n( sleep 0.2 & ) ; echo \"started $$\"\nexec sleep 30\n");
    let ov = shipped_overlay();
    let rt = nix::libc::SIGRTMIN() + 5;
    // (who gets the signal, which signal, the exit expected)
    for (to_init, sig, want) in [(true, 15, 143), (true, rt, 128 + rt), (false, rt, 128 + rt), (false, 9, 137)] {
        let mut unshare = Command::new("unshare");
        unshare
            .args([
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child",
                BIN,
                "server",
                "--init",
                "--",
                "--router-tokenizer-path=Qwen/Qwen3-0.6B",
            ])
            .env_clear()
            .env("NATS_SERVER", crate::support::POD_NATS);
        for (k, v) in launcher(&img, &ov, &[], &[]).get_envs() {
            if let Some(v) = v {
                unshare.env(k, v);
            }
        }
        unshare.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = unshare.spawn().unwrap();
        let lines = read_until(&mut child, "started ");
        assert_eq!(lines.last().unwrap().trim(), "started 2", "the engine is PID 2, under the init: {lines:?}");
        let init = children_of(child.id());
        assert_eq!(init.len(), 1, "unshare's one child is the init: {init:?}");
        let init = init[0].0;
        let status = std::fs::read_to_string(format!("/proc/{init}/status")).unwrap();
        assert!(status.lines().any(|l| l.starts_with("NSpid:") && l.ends_with("\t1")), "{status}");
        // The orphan (`sleep 0.2`) exits and is reaped: only the engine is left under the init.
        let only_engine = || matches!(children_of(init)[..], [(_, s)] if s != 'Z');
        assert!(wait_until(Duration::from_secs(20), only_engine), "children of init: {:?}", children_of(init));
        let target = if to_init { init } else { children_of(init)[0].0 };
        // SAFETY: kill(2) on a process this test started (the init, or the engine under it).
        assert_eq!(unsafe { nix::libc::kill(target as i32, sig) }, 0);
        let (code, _, err) = finish(child);
        assert_eq!(code, want, "signal {sig} to {}: {err}", if to_init { "the init" } else { "the engine" });
    }
}
