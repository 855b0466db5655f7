//! The launcher's read-ahead of the weights (`--prefetch`): started beside the engine, it
//! reads ahead of the engine's loader within its lead, and leaves no process and no zombie
//! behind, whether the engine exits early, is stopped, or runs under `--init`.

use std::path::Path;
use std::time::Duration;

use crate::support::*;

const MIB: usize = 1 << 20;

/// A model directory on this host: a config.json and three weight files of `mib` MiB each,
/// written to disk and out of the page cache.
fn model(mib: usize) -> Fx {
    let fx = Fx::new();
    fx.file("m/config.json", "{}");
    for i in 1..=3 {
        let rel = format!("m/model-0000{i}-of-00003.safetensors");
        fx.file(&rel, vec![i as u8; mib * MIB]);
        evict(&fx.p(&rel));
    }
    fx
}

fn evict(p: &Path) {
    let f = std::fs::File::open(p).unwrap();
    f.sync_all().unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    nix::fcntl::posix_fadvise(fd, 0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED).unwrap();
}

/// The bytes of `p` in the page cache (util-linux's fincore).
fn cached(p: &Path) -> u64 {
    let out = std::process::Command::new("fincore").args(["-b", "-n", "-o", "RES"]).arg(p).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// The read-ahead among the children of `pid`: (its pid, its state).
fn read_ahead_of(pid: u32) -> Option<(u32, char)> {
    children_of(pid).into_iter().find(|(c, _)| {
        std::fs::read(format!("/proc/{c}/cmdline")).is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"__prefetch"))
    })
}

/// Reap `pid` (an orphan reparented to this test, a subreaper) within 20 s: how it ended.
fn reap(pid: u32) -> nix::sys::wait::WaitStatus {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let mut st = WaitStatus::StillAlive;
    let ended = wait_until(Duration::from_secs(20), || {
        st = waitpid(nix::unistd::Pid::from_raw(pid as i32), Some(WaitPidFlag::WNOHANG)).unwrap();
        st != WaitStatus::StillAlive
    });
    assert!(ended, "the read-ahead {pid} outlived the engine");
    st
}

/// Whether `pid` catches SIGTERM: the stand-in engine is up (its handler is set).
fn catches_term(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let cgt = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).map(str::trim).unwrap_or("0");
    u64::from_str_radix(cgt, 16).is_ok_and(|m| m & (1 << 14) != 0)
}

/// `infera-exec __prefetch` of `files` with this test process as the loader (its parent).
fn read_ahead_for_me(files: &[std::path::PathBuf], args: &[&str]) -> std::process::Child {
    let me = std::process::id().to_string();
    std::process::Command::new(env!("CARGO_BIN_EXE_infera-exec"))
        .args(["__prefetch", "--parent", &me])
        .args(args)
        .arg("--")
        .args(files)
        .spawn()
        .unwrap()
}

fn worker(img: &Fx, ov: &Fx, m: &Fx, extra: &[&str]) -> Run {
    let volume = format!("/models={}", m.path().display());
    infera(&["worker", "--prefetch", "on", "--volume", &volume])
        .args(extra)
        .args(["--", "--model", "/models/m"])
        .root(img)
        .overlay(&ov.overlay())
        .env("INFERA_STANDIN_LOAD", m.p("m"))
}

/// Without `--init` the read-ahead is the engine's child: once done it stays asleep (never a
/// zombie of an engine that does not reap it), and dies with the engine.
#[test]
fn without_init_it_waits_for_the_engine_then_dies_with_it() {
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    // Files large enough that the loader is still at them when the read-ahead first looks.
    let (py, m) = (real_python("3.12"), model(64));
    let (img, ov) = (vllm_image(Some(&py)), shipped_overlay());
    let dry = worker(&img, &ov, &m, &["--dry-run", "--output", "json"]).run();
    let p = &dry.json()["exec"]["prefetch"];
    assert_eq!(p["files"].as_array().map(Vec::len), Some(3), "{}", dry.stdout);
    assert_eq!((p["bytes"].as_u64(), p["ranges"].as_u64()), (Some(192 << 20), Some(16)));
    let child = worker(&img, &ov, &m, &[]).env("INFERA_STANDIN_WAIT", "60").spawn();
    let engine = child.id();
    let asleep = |pid: u32| {
        read_ahead_of(pid).is_some_and(|(c, _)| {
            std::fs::read_to_string(format!("/proc/{c}/wchan")).is_ok_and(|w| w.contains("pause"))
        })
    };
    let seen = std::cell::Cell::new(None);
    let (code, out, _) = terminated(child, |pid| {
        seen.set(read_ahead_of(pid).map(|x| x.0).or(seen.get()));
        asleep(pid) && catches_term(pid)
    });
    assert_eq!(code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("[prefetch] read 192 MiB of 3 files ahead of the engine"), "{}", out.stderr);
    let r = out.standin();
    assert_eq!(r["loaded"], 3 * 64 * MIB);
    assert_eq!(r["pid"], engine, "the engine is the launcher's process");
    let kids = r["children"].as_array().unwrap();
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert_eq!(kids[0]["argv"][1], "__prefetch");
    assert_ne!(kids[0]["state"], "Z");
    // The engine is gone: the kernel killed the read-ahead (its parent died) and this test,
    // their subreaper, reaps it.
    let pid = seen.get().unwrap();
    assert_eq!(
        reap(pid),
        nix::sys::wait::WaitStatus::Signaled(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::SIGKILL, false)
    );
}

/// An engine that exits at once (a bad argument after the load started) takes the
/// read-ahead with it: nothing is left running.
#[test]
fn an_engine_that_exits_early_leaves_nothing() {
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let (py, m) = (real_python("3.12"), model(64));
    let (img, ov) = (vllm_image(Some(&py)), shipped_overlay());
    let out = worker(&img, &ov, &m, &[]).env_remove("INFERA_STANDIN_LOAD").env("INFERA_STANDIN_EXIT", "3").run();
    assert_eq!(out.code, 3, "{}", out.stderr);
    let kids = out.standin()["children"].as_array().unwrap().clone();
    let pid = kids[0]["pid"].as_u64().unwrap() as u32;
    assert_eq!(
        reap(pid),
        nix::sys::wait::WaitStatus::Signaled(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::SIGKILL, false)
    );
}

/// Under `--init` an engine that exits at once: the launcher ends the read-ahead with the
/// engine's other leftovers and reaps it before it exits.
#[test]
fn under_init_an_engine_that_exits_early_leaves_nothing() {
    let (py, m) = (real_python("3.12"), model(64));
    let (img, ov) = (vllm_image(Some(&py)), shipped_overlay());
    let out = worker(&img, &ov, &m, &["--init"])
        .env_remove("INFERA_STANDIN_LOAD")
        .env("INFERA_STANDIN_EXIT", "3")
        .env("INFERA_LOG", "debug")
        .run();
    assert_eq!(out.code, 3, "{}", out.stderr);
    let started = out.stderr.lines().find_map(|l| l.split("read-ahead started (pid ").nth(1)).expect(&out.stderr);
    let pid: u32 = started.trim_end_matches(')').parse().unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "the read-ahead {pid} outlived the launcher");
}

/// Under `--init` the launcher is its parent and reaps it when it is done; a stop ends the
/// engine and the launcher leaves nothing behind.
#[test]
fn under_init_the_launcher_reaps_it() {
    // Files large enough that the loader is still at them when the read-ahead first looks.
    let (py, m) = (real_python("3.12"), model(64));
    let (img, ov) = (vllm_image(Some(&py)), shipped_overlay());
    let child = worker(&img, &ov, &m, &["--init"]).env("INFERA_STANDIN_WAIT", "60").spawn();
    let launcher = child.id();
    let engine_up = |pid: u32| children_of(pid).iter().any(|(c, _)| catches_term(*c));
    let (code, out, _) = terminated(child, |pid| engine_up(pid) && read_ahead_of(pid).is_none());
    assert_eq!(code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("[prefetch] read 192 MiB of 3 files ahead of the engine"), "{}", out.stderr);
    assert!(out.stdout.contains("INFERA-STANDIN-SIGNAL 15"), "the engine got the stop: {}", out.stdout);
    assert_eq!(out.standin()["ppid"], launcher);
    assert!(children_of(launcher).is_empty());
}

/// The read-ahead reads at most its lead past where the engine's loader is, and follows the
/// loader as it maps and reads the files (here the loader is this test process).
#[test]
fn it_stays_within_its_lead_of_the_loader() {
    let m = model(32);
    let files: Vec<_> = (1..=3).map(|i| m.p(&format!("m/model-0000{i}-of-00003.safetensors"))).collect();
    let mut ra = read_ahead_for_me(&files, &["--lead", &(16 * MIB).to_string(), "--ranges", "2"]);
    let total = || files.iter().map(|f| cached(f)).sum::<u64>();
    // It reads the lead (and the kernel's read-ahead past it), then waits for the loader.
    assert!(wait_until(Duration::from_secs(20), || total() >= 16 * MIB as u64));
    std::thread::sleep(Duration::from_millis(300)); // what it would read if it did not wait
    let before = total();
    assert!(before <= 48 * MIB as u64, "{before} bytes read ahead of a loader that has not started");
    assert_eq!(cached(&files[2]), 0);
    // The loader maps the first file and reads it through: the lead moves with it.
    let f = std::fs::File::open(&files[0]).unwrap();
    // SAFETY: a read-only map of a file this test wrote and no one changes.
    let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    let sum: u64 = map.iter().step_by(4096).map(|b| *b as u64).sum();
    assert_eq!(sum, 32 * MIB as u64 / 4096);
    assert!(wait_until(Duration::from_secs(20), || cached(&files[1]) >= 16 * MIB as u64), "{}", cached(&files[1]));
    ra.kill().unwrap();
    ra.wait().unwrap();
}

/// With `--with-loader` (the model beside the image's root, or storage that keeps up) it
/// reads nothing while the engine starts (its imports have the device), then, once the
/// loader has opened a weight file, the whole checkpoint within its lead.
#[test]
fn with_the_loader_it_waits_for_the_first_open() {
    let m = model(16);
    let files: Vec<_> = (1..=3).map(|i| m.p(&format!("m/model-0000{i}-of-00003.safetensors"))).collect();
    let mut ra = read_ahead_for_me(&files, &["--lead", &(1u64 << 30).to_string(), "--with-loader"]);
    let total = || files.iter().map(|f| cached(f)).sum::<u64>();
    // Started: it has opened the files (its own descriptors), and read none of them.
    let opened = || std::fs::read_dir(format!("/proc/{}/fd", ra.id())).map_or(0, |d| d.count());
    assert!(wait_until(Duration::from_secs(20), || opened() >= 6), "the read-ahead did not start");
    std::thread::sleep(Duration::from_millis(300)); // what it would read if it did not wait
    assert_eq!(total(), 0, "read before the loader opened a file");
    // The loader opens the first file (and reads nothing yet): everything is read ahead.
    let _f = std::fs::File::open(&files[0]).unwrap();
    assert!(wait_until(Duration::from_secs(20), || total() >= 48 * MIB as u64), "{} bytes read", total());
    ra.kill().unwrap();
    ra.wait().unwrap();
}

/// A FUSE mount (fuse-overlayfs) of `lower` at `at`, unmounted when dropped.
struct Fuse(std::path::PathBuf);

impl Fuse {
    fn mount(lower: &Path, at: &Path) -> Fuse {
        std::fs::create_dir_all(at).unwrap();
        let lowerdir = format!("lowerdir={}", lower.display());
        let ok = std::process::Command::new("fuse-overlayfs").args(["-o", &lowerdir]).arg(at).status().unwrap();
        assert!(ok.success(), "fuse-overlayfs did not mount");
        Fuse(at.to_path_buf())
    }
}

impl Drop for Fuse {
    fn drop(&mut self) {
        let _ = std::process::Command::new("fusermount3").args(["-u", "-z"]).arg(&self.0).status();
    }
}

/// On FUSE (`--after-open`: FUSE drops a file's cache when it is opened) nothing is read
/// before the loader opens a file, and a file the loader has opened lands in the page cache
/// whole: its chunks' reads are queued with the kernel (`POSIX_FADV_WILLNEED`), each waited
/// for by its last page, and none is left out; a file not yet opened is not read.
#[test]
fn on_fuse_each_file_is_read_whole_once_the_loader_opens_it() {
    let m = model(16);
    let fx = Fx::new();
    let _mount = Fuse::mount(&m.p("m"), &fx.p("fuse"));
    let files: Vec<_> = (1..=3).map(|i| fx.p(&format!("fuse/model-0000{i}-of-00003.safetensors"))).collect();
    let mut ra = read_ahead_for_me(&files, &["--lead", &(1u64 << 30).to_string(), "--after-open"]);
    let opened = || std::fs::read_dir(format!("/proc/{}/fd", ra.id())).map_or(0, |d| d.count());
    assert!(wait_until(Duration::from_secs(20), || opened() >= 6), "the read-ahead did not start");
    std::thread::sleep(Duration::from_millis(300)); // what it would read if it did not wait
    let total = || files.iter().map(|f| cached(f)).sum::<u64>();
    assert_eq!(total(), 0, "read before the loader opened a file");
    let _first = std::fs::File::open(&files[0]).unwrap();
    let whole = (16 * MIB) as u64;
    assert!(
        wait_until(Duration::from_secs(20), || cached(&files[0]) == whole),
        "{} bytes of the first file",
        cached(&files[0])
    );
    assert_eq!((cached(&files[1]), cached(&files[2])), (0, 0), "files the loader has not opened");
    let _second = std::fs::File::open(&files[1]).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || cached(&files[1]) == whole),
        "{} bytes of the second file",
        cached(&files[1])
    );
    ra.kill().unwrap();
    ra.wait().unwrap();
}

/// The read-ahead ends with the engine: its signal mask is reset (the launcher blocks SIGTERM
/// and SIGINT in init mode, and a child inherits that), so when the engine is SIGKILLed
/// mid-load under `--init` — the pod's memory limit below the checkpoint, the read-ahead
/// waiting on its short lead — the launcher ends it at once and exits with the engine's code
/// within a second, nothing left.
#[test]
fn under_init_an_engine_killed_mid_load_takes_the_read_ahead_with_it() {
    let (py, m) = (real_python("3.12"), model(128));
    let (img, ov) = (vllm_image(Some(&py)), shipped_overlay());
    // The pod's memory cgroup (v1): a limit below the checkpoint (384 MiB) keeps the lead short.
    let cg = format!("/sys/fs/cgroup/memory/infera-test-prefetch-{}", std::process::id());
    std::fs::create_dir(&cg).unwrap();
    std::fs::write(format!("{cg}/memory.limit_in_bytes"), (256u64 << 20).to_string()).unwrap();
    let join = format!("echo $$ > {cg}/cgroup.procs; exec \"$@\"");
    let child = worker(&img, &ov, &m, &["--init"])
        .env("INFERA_STANDIN_WAIT", "60")
        .under("sh", &["-c".as_ref(), join.as_ref(), "sh".as_ref()])
        .spawn();
    let launcher = child.id();
    let engine = || children_of(launcher).into_iter().map(|(c, _)| c).find(|c| catches_term(*c));
    assert!(wait_until(Duration::from_secs(30), || engine().is_some() && read_ahead_of(launcher).is_some()));
    let (ra, _) = read_ahead_of(launcher).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{ra}/status")).unwrap();
    let blocked = status.lines().find_map(|l| l.strip_prefix("SigBlk:")).map(str::trim).unwrap();
    assert_eq!(u64::from_str_radix(blocked, 16).unwrap(), 0, "the read-ahead's mask: {status}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(engine().unwrap() as i32), nix::sys::signal::SIGKILL).unwrap();
    let killed = std::time::Instant::now();
    let mut child = child;
    let exited = wait_until(Duration::from_secs(5), || child.try_wait().unwrap().is_some());
    let took = killed.elapsed();
    let out = child.wait_with_output().unwrap();
    // The cgroup goes once its last process is gone (an exiting one keeps it busy a moment).
    let removed = wait_until(Duration::from_secs(5), || std::fs::remove_dir(&cg).is_ok() || !Path::new(&cg).exists());
    assert!(exited && took < Duration::from_secs(1), "the launcher exited {took:?} after the engine was killed");
    assert!(removed, "{cg} still holds processes: {:?}", std::fs::read_to_string(format!("{cg}/cgroup.procs")));
    assert_eq!(out.status.code(), Some(137), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("init-leftovers"));
    assert!(!Path::new(&format!("/proc/{ra}")).exists(), "the read-ahead {ra} outlived the launcher");
}

/// Without `--init` the read-ahead is the engine's child: killed mid-load, the engine takes it
/// with it within a second (the kernel's parent-death signal).
#[test]
fn without_init_the_read_ahead_dies_within_a_second_of_the_engine() {
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let (py, m) = (real_python("3.12"), model(8));
    let (img, ov) = (vllm_image(Some(&py)), shipped_overlay());
    let mut child = worker(&img, &ov, &m, &[]).env("INFERA_STANDIN_WAIT", "60").spawn();
    let engine = child.id();
    assert!(wait_until(Duration::from_secs(30), || catches_term(engine) && read_ahead_of(engine).is_some()));
    let (ra, _) = read_ahead_of(engine).unwrap();
    child.kill().unwrap();
    let killed = std::time::Instant::now();
    child.wait().unwrap();
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let gone = wait_until(Duration::from_secs(5), || {
        waitpid(nix::unistd::Pid::from_raw(ra as i32), Some(WaitPidFlag::WNOHANG)).unwrap() != WaitStatus::StillAlive
    });
    assert!(
        gone && killed.elapsed() < Duration::from_secs(1),
        "the read-ahead lived {:?} past the engine",
        killed.elapsed()
    );
}
