//! Test support: fixture image roots and overlays built in code, and a command builder
//! that runs the real binary with a hermetic environment.

#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_infera-exec");

pub fn repo() -> PathBuf {
    // The workspace's root: this crate is crates/infera-exec.
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().nth(2).map(Path::to_path_buf).unwrap_or(here)
}

/// A real CPython of the given minor on this machine (pyenv builds, then /usr/bin).
pub fn real_python(minor: &str) -> PathBuf {
    let mut cands: Vec<PathBuf> = fs::read_dir("/root/.pyenv/versions")
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    cands.sort();
    for d in cands {
        let n = d.file_name().unwrap().to_string_lossy().into_owned();
        if n.starts_with(&format!("{minor}.")) {
            let p = d.join("bin").join(format!("python{minor}"));
            if p.exists() {
                return p;
            }
        }
    }
    for p in [format!("/usr/bin/python{minor}"), format!("/usr/local/bin/python{minor}")] {
        if Path::new(&p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!("this machine has no CPython {minor}; the tests need one (see README)");
}

/// A fixture tree on disk (image root or overlay).
pub struct Fx {
    pub dir: tempfile::TempDir,
    /// The image's PATH (its Dockerfile's `ENV PATH`), given to the launcher by `root()`.
    pub env_path: Option<String>,
    /// The rest of the image's ENV (ROCM_PATH, …), given to the launcher by `root()`.
    pub image_env: Vec<(String, String)>,
}

impl Fx {
    pub fn new() -> Fx {
        Fx { dir: tempfile::tempdir().unwrap(), env_path: None, image_env: Vec::new() }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel.trim_start_matches('/'))
    }
    pub fn file(&self, rel: &str, content: impl AsRef<[u8]>) -> &Self {
        let p = self.p(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, content).unwrap();
        self
    }
    pub fn exe(&self, rel: &str, content: &str) -> &Self {
        self.file(rel, content);
        fs::set_permissions(self.p(rel), fs::Permissions::from_mode(0o755)).unwrap();
        self
    }
    pub fn dir(&self, rel: &str) -> &Self {
        fs::create_dir_all(self.p(rel)).unwrap();
        self
    }
    pub fn link(&self, rel: &str, target: &str) -> &Self {
        let p = self.p(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&p);
        symlink(target, &p).unwrap();
        self
    }
    pub fn rm(&self, rel: &str) -> &Self {
        let p = self.p(rel);
        if p.is_dir() && !p.is_symlink() {
            fs::remove_dir_all(p).unwrap();
        } else {
            fs::remove_file(p).unwrap();
        }
        self
    }
    pub fn chmod(&self, rel: &str, mode: u32) -> &Self {
        fs::set_permissions(self.p(rel), fs::Permissions::from_mode(mode)).unwrap();
        self
    }

    /// An ELF program whose dynamic loader does not exist: the file is fine to look at, and
    /// execve fails with ENOENT (what no plan can see without running the loader).
    pub fn elf_without_its_loader(&self, rel: &str) -> &Self {
        let c = self.p("no-loader.c");
        fs::write(&c, "int main(void) { return 0; }\n").unwrap();
        let st = std::process::Command::new("gcc")
            .args(["-o"])
            .arg(self.p(rel))
            .arg(&c)
            .arg("-Wl,--dynamic-linker=/nonexistent/ld-linux.so")
            .status()
            .unwrap();
        assert!(st.success());
        self
    }

    /// An interpreter file: a wrapper that execs a real CPython (`real`), or a plain
    /// file that must never run (`None`).
    pub fn interpreter(&self, rel: &str, real: Option<&Path>) -> &Self {
        // Its `#!` shell, as every engine image has one: in a chroot of the image (a pod's
        // view) the launcher looks for it there (with --root, on this host).
        let sh = self.p("/bin/sh");
        if std::fs::symlink_metadata(&sh).is_err() {
            fs::create_dir_all(sh.parent().unwrap()).unwrap();
            fs::copy("/bin/sh", &sh).unwrap();
        }
        match real {
            Some(py) => self.exe(rel, &format!("#!/bin/sh\nexec {} \"$@\"\n", py.display())),
            None => self.exe(rel, "#!/bin/sh\necho 'fixture interpreter must not run' >&2\nexit 99\n"),
        }
    }

    /// The machine's real CPython binary itself at `rel` (not a wrapper script, so nothing
    /// between the launcher and the interpreter touches the environment), with its standard
    /// library linked at `<prefix>/lib/pythonX.Y` next to it.
    pub fn real_interpreter(&self, rel: &str, minor: &str) -> &Self {
        let py = real_python(minor);
        let p = self.p(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&p);
        fs::copy(&py, &p).unwrap();
        let stdlib = py.parent().unwrap().parent().unwrap().join("lib").join(format!("python{minor}"));
        let prefix = p.parent().unwrap().parent().unwrap().join("lib");
        fs::create_dir_all(&prefix).unwrap();
        let _ = fs::remove_file(prefix.join(format!("python{minor}")));
        symlink(stdlib, prefix.join(format!("python{minor}"))).unwrap();
        self
    }

    pub fn torch(&self, site: &str, version: &str, hip: Option<&str>, cuda: Option<&str>, annotated: bool) -> &Self {
        let q = |v: Option<&str>| v.map(|s| format!("'{s}'")).unwrap_or_else(|| "None".into());
        let text = if annotated {
            format!("from typing import Optional\n__version__ = '{version}'\ncuda: Optional[str] = {}\nhip: Optional[str] = {}\n", q(cuda), q(hip))
        } else {
            format!("__version__ = '{version}'\ndebug = False\ncuda = {}\nhip = {}\n", q(cuda), q(hip))
        };
        self.file(&format!("{site}/torch/version.py"), text)
    }

    pub fn dist(&self, site: &str, name: &str, version: &str) -> &Self {
        self.file(&format!("{site}/{name}-{version}.dist-info/METADATA"), format!("Name: {name}\nVersion: {version}\n"))
    }
}

pub const VLLM_SITE: &str = "/usr/local/lib/python3.12/dist-packages";

/// An image root as `examples/make-image-root KIND` lays it out (the one description of each
/// layout of FACTS.md, shared with the quickstart, the benchmark and the container images),
/// with the image's ENV for the launcher.
pub fn image(kind: &str) -> Fx {
    let mut fx = Fx::new();
    let script = repo().join("examples/make-image-root");
    let st = Command::new(&script).arg(kind).arg(fx.path()).stdout(Stdio::null()).status().unwrap();
    assert!(st.success(), "make-image-root {kind} failed");
    let env = Command::new(&script).args(["--env", kind]).output().unwrap();
    assert!(env.status.success(), "make-image-root --env {kind}");
    for line in String::from_utf8(env.stdout).unwrap().lines() {
        let (k, v) = line.split_once('=').unwrap();
        if k == "PATH" {
            fx.env_path = Some(v.to_string());
        } else {
            fx.image_env.push((k.to_string(), v.to_string()));
        }
    }
    fx
}

/// vLLM ROCm 7.0 layout (`make-image-root vllm`): deadsnakes 3.12 through update-alternatives,
/// dist-packages, /opt/rocm -> /etc/alternatives/rocm -> /opt/rocm-7.0.0; no model (a volume
/// in a pod). `real`: the interpreter runs that CPython; None: a file that must never run.
pub fn vllm_image(real: Option<&Path>) -> Fx {
    let fx = image("vllm");
    fx.rm("/models").rm("/usr/bin/python3.12").interpreter("/usr/bin/python3.12", real);
    fx
}

/// sglang ROCm layout: /opt/venv/bin/python on CPython 3.X, packages in the venv, sglang
/// 0.5.23 editable from /sgl-workspace (`make-image-root sglang-rocm720`, or
/// `sglang-rocm724` for 3.12).
pub fn sglang_image(minor: &str, real: Option<&Path>) -> Fx {
    let fx = image(if minor == "3.10" { "sglang-rocm720" } else { "sglang-rocm724" });
    let py = format!("/usr/bin/python{minor}");
    fx.rm("/models").rm(&py).interpreter(&py, real);
    fx
}

/// The shipped overlay: repo manifests + the stand-in payload, staged by the real
/// staging tool.
pub fn shipped_overlay() -> Fx {
    let fx = Fx::new();
    let out = fx.p("overlay");
    let r = repo();
    let st = Command::new(r.join("examples/stage-standin-overlay"))
        .arg(&out)
        .arg(BIN)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "stage failed");
    fx
}

/// Make the staged overlay at `overlay` a release built for `engine` `versions`: each tree's
/// manifest says that range, and no versions its module fails on. For the tests of what an
/// image outside this release's range (vLLM 0.33's ROCm 10 image) does besides its version:
/// its capabilities, its Mooncake, its facts.
pub fn built_for(overlay: &Path, engine: &str, versions: &str) {
    for tree in std::fs::read_dir(overlay.join("trees")).unwrap().flatten() {
        let path = tree.path().join("manifest.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let (own, fails) = (format!("[engines.{engine}]"), format!("[[engines.{engine}.fails]]"));
        let mut section = String::new();
        let mut out = String::new();
        for line in text.lines() {
            if line.starts_with('[') {
                section = line.trim().to_string();
            }
            if section == fails {
                continue;
            }
            if section == own && line.starts_with("versions =") {
                out.push_str(&format!("versions = \"{versions}\"\n"));
                continue;
            }
            out.push_str(line);
            out.push('\n');
        }
        std::fs::write(&path, out).unwrap();
    }
}

/// The Infera payload layout as the real stack ships it (FACTS.md, "The real Infera
/// deployment"), written here file by file: a pure-Python tree per CPython minor, a native
/// tree per (HIP ABI, CPython minor) with its CAPABILITIES line, the payload's bin/ and
/// patches/. The Python modules are the stand-ins of examples/standin (so a real CPython can
/// run them); the layout is the stack's. At `overlay/`, like the other overlays.
pub fn infera_payload() -> Fx {
    let fx = Fx::new();
    let standin = repo().join("examples/standin");
    let copy = |from: &Path, to: &str| {
        let st = Command::new("cp").arg("-rL").arg(from).arg(fx.p(to)).status().unwrap();
        assert!(st.success(), "cp {} {to}", from.display());
    };
    for py in ["py312", "py310"] {
        fx.dir(&format!("overlay/{py}"));
        copy(&standin.join("common/infera"), &format!("overlay/{py}/infera"));
        copy(&standin.join("common/kvd"), &format!("overlay/{py}/kvd"));
    }
    for (key, caps) in [("rocm7-py312", "mooncake hipfile\n"), ("rocm7-py310", "mooncake\n")] {
        let n = format!("overlay/native/{key}");
        fx.dir(&format!("{n}/lib")).exe(&format!("{n}/bin/ais-check"), "#!/bin/sh\necho ais-check\n");
        copy(&standin.join("capabilities/mooncake/mooncake"), &format!("{n}/mooncake"));
        fx.file(&format!("{n}/CAPABILITIES"), caps);
    }
    copy(&standin.join("capabilities/hipfile/hipfile"), "overlay/native/rocm7-py312/hipfile");
    fx.dir("overlay/bin").dir("overlay/patches");
    fs::copy(BIN, fx.p("overlay/bin/infera-exec")).unwrap();
    copy(&standin.join("payload-bin/infera-router"), "overlay/bin/infera-router");
    copy(&standin.join("patches/vllm"), "overlay/patches/vllm");
    copy(&standin.join("patches/sglang_rocm"), "overlay/patches/sglang_rocm");
    fx.link("overlay/rdma/libionic-rdmav34.so", "/host-libionic/libionic.so");
    let st = Command::new("chmod").args(["-R", "go-w"]).arg(fx.p("overlay")).status().unwrap();
    assert!(st.success());
    fx
}

impl Fx {
    pub fn overlay(&self) -> PathBuf {
        self.p("overlay")
    }
}

/// An overlay with trees written in code: (family, manifest text, modules to create).
pub fn custom_overlay(trees: &[(&str, &str, &[&str])]) -> Fx {
    let fx = Fx::new();
    for (fam, manifest, modules) in trees {
        fx.file(&format!("overlay/trees/{fam}/manifest.toml"), manifest);
        fx.dir(&format!("overlay/trees/{fam}/lib"));
        for m in *modules {
            let path = m.replace('.', "/");
            fx.file(&format!("overlay/trees/{fam}/site-packages/{path}/__init__.py"), "");
        }
    }
    fx
}

/// What the launcher adds for the Kimi-K3 seed on an 8-GPU node under infera's wrapper: TP
/// from the GPUs, the multimodal encoder data-parallel, auto KV (MLA), the bind address.
pub const KIMI_TP8_ADDED: [&str; 8] =
    ["--tensor-parallel-size", "8", "--mm-encoder-tp-mode", "data", "--kv-cache-dtype", "auto", "--host", "0.0.0.0"];

pub const PY312_MANIFEST: &str = infera_overlay::manifest::MINIMAL;

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr))
    }
    /// The stand-in's report line.
    pub fn standin(&self) -> serde_json::Value {
        let line = self
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("INFERA-STANDIN "))
            .unwrap_or_else(|| panic!("no stand-in report in stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr));
        serde_json::from_str(line).unwrap()
    }
    pub fn assert(&self, code: i32, fragment: &str) -> &Self {
        assert_eq!(self.code, code, "exit code\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        assert!(
            self.stderr.contains(fragment) || self.stdout.contains(fragment),
            "{fragment:?} not in output\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }
}

pub struct Run {
    cmd: Command,
}

/// The launcher with an empty environment but for a container-like PATH and the NATS
/// server the pod's spec would give infera's wrappers (their transports' default; without
/// it a worker is refused `nats-server-missing`, which the tests of that refusal remove).
pub fn infera(args: &[&str]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NATS_SERVER", POD_NATS)
        .args(args);
    Run { cmd }
}

/// The NATS server of the tests' pods.
pub const POD_NATS: &str = "nats://nats.infera.svc:4222";

impl Run {
    pub fn root(mut self, fx: &Fx) -> Self {
        self.cmd.env("INFERA_ROOT", fx.path());
        if let Some(p) = &fx.env_path {
            self.cmd.env("PATH", p);
        }
        for (k, v) in &fx.image_env {
            self.cmd.env(k, v);
        }
        self
    }
    pub fn overlay(mut self, p: &Path) -> Self {
        self.cmd.env("INFERA_OVERLAY", p);
        self
    }
    pub fn env(mut self, k: &str, v: impl Into<OsString>) -> Self {
        self.cmd.env(k, v.into());
        self
    }
    pub fn env_remove(mut self, k: &str) -> Self {
        self.cmd.env_remove(k);
        self
    }
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, a: I) -> Self {
        self.cmd.args(a.into_iter().map(Into::into));
        self
    }
    pub fn cwd(mut self, dir: &Path) -> Self {
        self.cmd.current_dir(dir);
        self
    }
    /// Run under `strace ARGS` (its fault injection: `-e inject=…`), with the same
    /// arguments and environment.
    pub fn under_strace(self, args: &[&OsStr]) -> Self {
        let mut prefix: Vec<&OsStr> = ["-qq", "-o", "/dev/null"].iter().map(OsStr::new).collect();
        prefix.extend_from_slice(args);
        self.under("strace", &prefix)
    }
    /// Run as the last argument of `program ARGS` (a wrapper that execs it: strace,
    /// unshare, `sh -c '…; exec "$@"'`), with the same arguments and environment.
    pub fn under(self, program: &str, args: &[&OsStr]) -> Self {
        let mut cmd = Command::new(program);
        cmd.args(args).arg(self.cmd.get_program()).args(self.cmd.get_args());
        cmd.env_clear();
        for (k, v) in self.cmd.get_envs() {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        if let Some(d) = self.cmd.get_current_dir() {
            cmd.current_dir(d);
        }
        Run { cmd }
    }
    /// Started, for a test that signals it; stdout and stderr piped.
    pub fn spawn(mut self) -> std::process::Child {
        self.cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    }
    pub fn run(mut self) -> Out {
        // Bounded: a launcher that blocks (a FIFO where it reads a file) fails the test
        // instead of hanging the suite.
        let mut child = self.cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let out_t = std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = std::io::Read::read_to_end(&mut so, &mut b);
            b
        });
        let err_t = std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = std::io::Read::read_to_end(&mut se, &mut b);
            b
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the launcher did not finish within 60 s (blocked?)");
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let (stdout, stderr) = (out_t.join().unwrap(), err_t.join().unwrap());
        if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&status) {
            panic!("the launcher died by signal {sig}\nstderr:\n{}", String::from_utf8_lossy(&stderr));
        }
        Out {
            code: status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }
}

/// SIGTERM to a started launcher once `ready(pid)` holds (polled, 30 s deadline: a launcher
/// that never gets there fails the test); its exit code (None: it died by a signal), output,
/// and how long it took from the signal to exit (bounded at 30 s).
pub fn terminated(
    mut child: std::process::Child,
    ready: impl Fn(u32) -> bool,
) -> (Option<i32>, Out, std::time::Duration) {
    let pid = child.id();
    if !wait_until(std::time::Duration::from_secs(30), || ready(pid) || child.try_wait().unwrap().is_some()) {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "the launcher never reached the state the test signals it in\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(child.try_wait().unwrap().is_none(), "the launcher exited before it was signalled");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let t = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let took = t.elapsed();
    let out = child.wait_with_output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    let code = out.status.code();
    (code, Out { code: code.unwrap_or(-1), stdout: text(out.stdout), stderr: text(out.stderr) }, took)
}

/// Poll `cond` every 10 ms until it holds (true) or `limit` passes (false).
pub fn wait_until(limit: std::time::Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether `pid` holds an open socket (a launcher in its leader wait has asked a nameserver).
pub fn has_socket(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")))
}

/// Whether a process runs with exactly this command line (as `pgrep -fx` matches).
pub fn running(cmdline: &str) -> bool {
    std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
            c.split(|b| *b == 0).filter(|a| !a.is_empty()).map(String::from_utf8_lossy).collect::<Vec<_>>().join(" ")
                == cmdline
        })
    })
}

/// Whether `pid` sleeps in `sigtimedwait` (the launcher's waits look for SIGTERM there).
pub fn in_sigtimedwait(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w.starts_with("do_sigtimedwait"))
}

/// The children of `pid`, each with its state (`R`, `S`, `Z`, …).
pub fn children_of(pid: u32) -> Vec<(u32, char)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        // pid (comm) state ppid ...
        let Some(rest) = stat.rsplit_once(')').map(|x| x.1) else { continue };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.get(1).and_then(|x| x.parse::<u32>().ok()) == Some(pid) {
            out.push((p, f[0].chars().next().unwrap_or('?')));
        }
    }
    out
}

/// A helper process the test started, killed and reaped when the test ends (or fails).
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `flock DIR sleep`: another start holding the patch lock, until dropped.
pub fn hold_lock(dir: &Path) -> Reaped {
    let child = Command::new("flock").arg("--no-fork").arg(dir).args(["sleep", "3600"]).spawn().unwrap();
    let locked = || !Command::new("flock").arg("-n").arg(dir).arg("true").status().unwrap().success();
    assert!(wait_until(std::time::Duration::from_secs(20), locked), "the holder never took the lock");
    Reaped(child)
}

/// Run the launcher as a pod runs it: in a private mount namespace, chrooted into the image
/// root `img`, the overlay at /opt/infera and the launcher at /.infera-exec (bind mounts:
/// nothing of the host changes), /proc mounted. Root `/` for the launcher: the facts of a
/// real run, and its waits.
pub fn in_image_root(run: Run, img: &Fx, overlay: &Path) -> Run {
    let script = "set -e\nroot=$1 ov=$2 bin=$3\nshift 3\n: > \"$root/.infera-exec\"\n\
                  mkdir -p \"$root/opt/infera\" \"$root/proc\"\nmount --bind \"$bin\" \"$root/.infera-exec\"\n\
                  mount --bind \"$ov\" \"$root/opt/infera\"\nmount -t proc proc \"$root/proc\"\n\
                  exec chroot \"$root\" /.infera-exec \"$@\"\n";
    let args: Vec<OsString> =
        vec!["--mount".into(), "sh".into(), "-c".into(), script.into(), "sh".into(), img.path().into(), overlay.into()];
    let args: Vec<&OsStr> = args.iter().map(OsString::as_os_str).collect();
    run.under("unshare", &args)
}

/// A JUnit report as CI tools take it: valid against Jenkins' schema (xmllint), and its counts as
/// junitparser reads them.
pub fn as_ci_tools_read(xml: &str) -> String {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), xml).unwrap();
    let xsd = repo().join("tests/junit/junit-10.xsd");
    let valid = std::process::Command::new("xmllint")
        .args(["--noout", "--schema", xsd.to_str().unwrap(), file.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(valid.status.success(), "not valid JUnit:\n{}\n{xml}", String::from_utf8_lossy(&valid.stderr));
    let read = "import sys, junitparser\n\
        cases = [c for s in junitparser.JUnitXml.fromfile(sys.argv[1]) for c in s]\n\
        n = lambda k: sum(1 for c in cases if any(isinstance(r, k) for r in c.result))\n\
        print(f'cases {len(cases)}, failures {n(junitparser.Failure)}, errors {n(junitparser.Error)}, '\n\
              f'skipped {n(junitparser.Skipped)}')";
    let parsed = std::process::Command::new("python3").args(["-c", read]).arg(file.path()).output().unwrap();
    assert!(parsed.status.success(), "junitparser: {}", String::from_utf8_lossy(&parsed.stderr));
    String::from_utf8(parsed.stdout).unwrap().trim().to_string()
}

/// The names of a JUnit report's cases as junitparser (PyPI) reads them: `SUITE / CASE`.
pub fn junit_case_names(xml: &str) -> Vec<String> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), xml).unwrap();
    let read = "import sys, junitparser\n\
        [print(f'{s.name} / {c.name}') for s in junitparser.JUnitXml.fromfile(sys.argv[1]) for c in s]";
    let parsed = std::process::Command::new("python3").args(["-c", read]).arg(file.path()).output().unwrap();
    assert!(parsed.status.success(), "junitparser: {}", String::from_utf8_lossy(&parsed.stderr));
    String::from_utf8(parsed.stdout).unwrap().lines().map(String::from).collect()
}
