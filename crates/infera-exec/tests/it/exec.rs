//! Real execs: the launcher replaces itself by a real CPython running the stand-in.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use proptest::prelude::*;

use crate::support::*;

#[test]
fn real_cpython_runs_the_standin_engine() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    let tree = ov.overlay().join("trees/rocm7-py312");
    let args = ["--model", "/models/m", "--served-model-name", "m", "--max-num-seqs", "128"];
    let out = infera(&["worker", "--require", "mooncake", "--"])
        .args(args)
        .root(&img)
        .overlay(&ov.overlay())
        .env("PYTHONPATH", "/image/own/path")
        .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let r = out.standin();
    assert_eq!(r["standin"], "infera.engine.vllm");
    assert_eq!(r["python"], "3.12");
    // The wrapper publishes and probes its --host: the launcher makes it explicit.
    let mut planned = args.to_vec();
    planned.extend(["--host", "0.0.0.0"]);
    assert_eq!(r["argv"], serde_json::json!(planned));
    let site = tree.join("site-packages");
    let caps = |c: &str| tree.join("capabilities").join(c).display().to_string();
    assert_eq!(
        r["env"]["PYTHONPATH"],
        format!("{}:{}:{}:/image/own/path", site.display(), caps("hipfile"), caps("mooncake"))
    );
    assert_eq!(r["env"]["LD_LIBRARY_PATH"], tree.join("lib").display().to_string());
    assert_eq!(r["env"]["PYTHONDONTWRITEBYTECODE"], "1");
    assert_eq!(r["env"]["INFERA_TREE_FAMILY"], "rocm7-py312");
    for m in ["mooncake", "hipfile"] {
        assert_eq!(r["imports"][m]["ok"], true, "{m}: {}", r["imports"][m]);
        assert!(r["imports"][m]["file"].as_str().unwrap().starts_with(&caps(m)), "{m} from the tree");
    }
    // The dry run prints the exec the real run did.
    let dry = infera(&["worker", "--require", "mooncake", "--dry-run", "--output", "json", "--"])
        .args(args)
        .root(&img)
        .overlay(&ov.overlay())
        .env("PYTHONPATH", "/image/own/path")
        .run()
        .json();
    let argv: Vec<String> =
        dry["exec"]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
    assert_eq!(&argv[3..], &planned);
    assert_eq!(dry["exec"]["env"]["PYTHONPATH"], r["env"]["PYTHONPATH"]);
    // Nothing was written into the payload.
    let pyc = walk(&tree).into_iter().filter(|p| p.to_string_lossy().contains("__pycache__")).count();
    assert_eq!(pyc, 0);
}

#[test]
fn server_role_runs_the_router_without_gpus() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    let out = infera(&[
        "server",
        "--",
        "--router-tokenizer-path=Qwen/Qwen3-0.6B",
        "--port",
        "8000",
        "--router-policy",
        "cache_aware",
    ])
    .root(&img)
    .overlay(&ov.overlay())
    .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let r = out.standin();
    assert_eq!(r["standin"], "infera.server");
    assert_eq!(
        r["argv"],
        serde_json::json!([
            "--router-tokenizer-path=Qwen/Qwen3-0.6B",
            "--port",
            "8000",
            "--router-policy",
            "cache_aware"
        ])
    );
}

#[test]
fn exit_codes_126_and_127() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    img.chmod("/usr/bin/python3.12", 0o644);
    infera(&["worker", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(126, "is not an executable file (mode 644)");
    infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(126, "exec-not-executable");
    // The interpreter's `#!` names a program that does not exist: refused before the exec,
    // naming it (execve would say ENOENT of the script).
    img.chmod("/usr/bin/python3.12", 0o755).exe("/usr/bin/python3.12", "#!/nonexistent/interpreter\n");
    infera(&["worker", "--", "--model", "/models/m"]).root(&img).overlay(&ov.overlay()).run().assert(
        127,
        "error[exec-interpreter-missing]: the interpreter `/usr/bin/python3.12` is a `#!` script whose interpreter \
         `/nonexistent/interpreter` cannot be found",
    );
    // An ELF whose loader is missing: execve itself says ENOENT.
    img.elf_without_its_loader("/usr/bin/python3.12");
    infera(&["worker", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run()
        .assert(127, "error[exec-not-found]: execve");
}

/// The normal path spawns no Python: a fixture interpreter that leaves a marker when run.
#[test]
fn normal_path_spawns_no_python() {
    let img = vllm_image(None);
    let marker = img.p("ran");
    img.exe("/usr/bin/python3.12", &format!("#!/bin/sh\ntouch {}\nexit 3\n", marker.display()));
    let ov = shipped_overlay();
    for args in [
        vec!["check"],
        vec!["worker", "--dry-run", "--", "--model", "/models/m"],
        vec!["worker", "--dry-run", "--output", "json", "--", "--model", "/models/m"],
        vec!["server", "--dry-run", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
    ] {
        let out = infera(&args).root(&img).overlay(&ov.overlay()).run();
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        assert!(!marker.exists(), "{args:?} ran the interpreter");
    }
    // Even conflicting evidence does not run it when the root is not `/`.
    img.file(&format!("{VLLM_SITE}/torch/_C.cpython-311-x86_64-linux-gnu.so"), "")
        .rm(&format!("{VLLM_SITE}/torch/_C.cpython-312-x86_64-linux-gnu.so"));
    infera(&["check"]).root(&img).overlay(&ov.overlay()).run().assert(0, "python-evidence-conflict");
    assert!(!marker.exists());
    // The real run execs it exactly once, with the stand-in's exit code.
    let out = infera(&["worker", "--", "--model", "/models/m"]).root(&img).overlay(&ov.overlay()).run();
    assert_eq!(out.code, 3);
    assert!(marker.exists());
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

fn arg_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"--".to_vec()),
        Just(b"".to_vec()),
        Just(b"=".to_vec()),
        Just(b"--model=/m".to_vec()),
        Just(b"-tp".to_vec()),
        proptest::collection::vec(1u8..=255, 0..12),
    ]
}

fn hex_of(v: &serde_json::Value) -> Vec<u8> {
    match v {
        serde_json::Value::String(s) => s.as_bytes().to_vec(),
        other => {
            let h = other["hex"].as_str().unwrap();
            (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect()
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    /// The plan carries a program's args unchanged and in order (JSON keeps non-UTF-8 as
    /// hex): the stack's kvd sidecar, whose args the launcher does not read.
    #[test]
    fn plan_keeps_args_byte_for_byte(args in proptest::collection::vec(arg_bytes(), 0..8)) {
        let img = vllm_image(None);
        let ov = custom_overlay(&[("rocm7-py312", PY312_MANIFEST, &["infera.engine.vllm", "infera.server", "infera.kvd"])]);
        let os: Vec<OsString> = args.iter().cloned().map(OsString::from_vec).collect();
        let out = infera(&["--dry-run", "--output", "json", "python3", "-m", "infera.kvd"]).args(os).root(&img).overlay(&ov.overlay()).run();
        prop_assert_eq!(out.code, 0, "{}", out.stderr);
        let j = out.json();
        let argv: Vec<Vec<u8>> = j["exec"]["argv"].as_array().unwrap().iter().skip(3).map(hex_of).collect();
        prop_assert_eq!(argv, args);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// The worker path reads the args in the engine's dialect and appends flags: the user's
    /// args stay an unchanged prefix of the argv, in order.
    #[test]
    fn worker_plan_keeps_user_args_as_a_prefix(args in proptest::collection::vec(arg_bytes(), 0..8)) {
        let img = vllm_image(None);
        img.file("/models/kimi-k3/config.json", include_str!("../../../../examples/models/kimi-k3/config.json"));
        let ov = custom_overlay(&[("rocm7-py312", PY312_MANIFEST, &["infera.engine.vllm", "infera.server"])]);
        let mut all: Vec<Vec<u8>> = vec![b"--model".to_vec(), b"/models/kimi-k3".to_vec()];
        all.extend(args);
        let os: Vec<OsString> = all.iter().cloned().map(OsString::from_vec).collect();
        let out = infera(&["worker", "--dry-run", "--output", "json", "--"]).args(os).root(&img).overlay(&ov.overlay())
            .env("INFERA_GPUS", "8").env("INFERA_ALLOW", "kv-fp8-mla,fastsafetensors-rocm,tp-exceeds-gpus,tp-does-not-divide-heads,hybrid-prefix-caching-needs-chunked-prefill").run();
        // Arbitrary bytes may form an invalid --kv-transfer-config or a size below 1 (78), or
        // a number the engine's parser rejects (2); otherwise runnable.
        prop_assert!(out.code == 0 || out.code == 78 || out.code == 2, "{}", out.stderr);
        if out.code == 2 {
            prop_assert!(out.stderr.starts_with("error[arg-not-an-int]"), "{}", out.stderr);
        }
        let j = out.json();
        let argv: Vec<Vec<u8>> = j["exec"]["argv"].as_array().map(|a| a.iter().skip(3).map(hex_of).collect()).unwrap_or_default();
        if out.code == 0 {
            prop_assert_eq!(&argv[..all.len()], &all[..]);
            let added: Vec<Vec<u8>> = j["exec"]["added_args"].as_array().unwrap().iter().map(hex_of).collect();
            prop_assert_eq!(&argv[all.len()..], &added[..]);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, .. ProptestConfig::default() })]

    /// A real CPython receives exactly the bytes the pod gave.
    #[test]
    fn real_exec_keeps_args_byte_for_byte(args in proptest::collection::vec(arg_bytes(), 0..8)) {
        let py = real_python("3.12");
        let img = vllm_image(Some(&py));
        let ov = shipped_overlay();
        let os: Vec<OsString> = args.iter().cloned().map(OsString::from_vec).collect();
        let out = infera(&["python3", "-m", "infera.kvd"]).args(os.clone()).root(&img).overlay(&ov.overlay()).run();
        prop_assert_eq!(out.code, 0, "{}", out.stderr);
        let got: Vec<String> = out.standin()["argv_hex"].as_array().unwrap().iter().map(|h| h.as_str().unwrap().to_string()).collect();
        let want: Vec<String> = os.iter().map(|a| a.as_bytes().iter().map(|b| format!("{b:02x}")).collect()).collect();
        prop_assert_eq!(got, want);
    }
}

/// Started with SIGPIPE and SIGINT ignored and SIGUSR1 blocked, the launcher still hands
/// the engine default dispositions and an empty signal mask.
#[test]
fn child_starts_with_default_sigpipe_and_empty_mask() {
    use std::os::unix::process::CommandExt;
    let img = vllm_image(None);
    img.exe("/usr/bin/python3.12", "#!/bin/sh\nexec grep -E '^Sig(Blk|Ign)' /proc/self/status\n");
    let ov = shipped_overlay();
    let mut cmd = std::process::Command::new(BIN);
    cmd.env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", "/usr/bin:/bin")
        .env("INFERA_ROOT", img.path())
        .env("INFERA_OVERLAY", ov.overlay())
        .args(["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"]);
    unsafe {
        cmd.pre_exec(|| {
            use nix::sys::signal::{signal, sigprocmask, SigHandler, SigSet, SigmaskHow, Signal};
            signal(Signal::SIGPIPE, SigHandler::SigIgn).map_err(std::io::Error::from)?;
            signal(Signal::SIGINT, SigHandler::SigIgn).map_err(std::io::Error::from)?;
            let mut set = SigSet::empty();
            set.add(Signal::SIGUSR1);
            sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let field = |name: &str| -> u64 {
        let l = text.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_else(|| panic!("{name} in {text}"));
        u64::from_str_radix(l.trim(), 16).unwrap()
    };
    assert_eq!(field("SigBlk:"), 0, "{text}");
    assert_eq!(field("SigIgn:") & (1 << (13 - 1)), 0, "SIGPIPE still ignored: {text}");
    assert_eq!(field("SigIgn:") & (1 << (2 - 1)), 0, "SIGINT still ignored: {text}");
}

/// The launcher's own start-up (its C `main`, not std's) keeps what std's gave: started
/// with stdin and stdout closed, the engine gets them open on /dev/null (no file the
/// launcher opened can have taken their numbers); writing the plan into a pipe nobody
/// reads is not a death by SIGPIPE; and every argument arrives byte for byte.
#[test]
fn started_with_fds_closed_or_a_broken_pipe_the_launcher_behaves() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let cmd = || {
        let mut c = std::process::Command::new(BIN);
        c.env_clear()
            .env("NATS_SERVER", crate::support::POD_NATS)
            .env("PATH", "/usr/bin:/bin")
            .env("HIP_VISIBLE_DEVICES", "0")
            .env("INFERA_ROOT", img.path())
            .env("INFERA_OVERLAY", ov.overlay())
            .args(["worker", "--dry-run", "--output", "json", "--", "--model", "/models/m"]);
        c
    };
    // stdin and stdout closed: the engine (here a script that says what its fds 0 and 1
    // are) starts with them open on /dev/null, as std's start-up left them.
    let probe = vllm_image(None);
    probe.exe(
        "/usr/bin/python3.12",
        "#!/bin/sh\nzero=$(readlink /proc/$$/fd/0)\none=$(readlink /proc/$$/fd/1)\necho \"$zero $one\" >&2\n",
    );
    let mut c = std::process::Command::new(BIN);
    c.env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", "/usr/bin:/bin")
        .env("INFERA_ROOT", probe.path())
        .env("INFERA_OVERLAY", ov.overlay())
        .env("INFERA_LOG", "off")
        .args(["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"]);
    unsafe {
        c.pre_exec(|| {
            nix::unistd::close(0).map_err(std::io::Error::from)?;
            nix::unistd::close(1).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let out = c.stderr(std::process::Stdio::piped()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "/dev/null /dev/null\n");
    // A pipe whose reading end is closed: no death by SIGPIPE, and no success either (the
    // answer did not arrive): exit 74, said on stderr.
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    let out = cmd().stdout(std::process::Stdio::from(w)).stderr(std::process::Stdio::piped()).output().unwrap();
    assert_eq!(out.status.signal(), None, "killed by a signal: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(74), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("error[output-failed]: cannot write the answer to stdout: Broken pipe"));
    // The same run with stdout read: the plan, with the engine's args as given.
    let out = cmd().arg(OsString::from_vec(b"caf\xe9".to_vec())).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let argv = plan["exec"]["argv"].as_array().unwrap();
    let given: Vec<Vec<u8>> = argv[3..6].iter().map(hex_of).collect();
    assert_eq!(given, [b"--model".to_vec(), b"/models/m".to_vec(), b"caf\xe9".to_vec()], "{plan}");
}

/// In place (`--root`), a venv's python is exec'd as its resolved base file but named by its
/// own path (argv[0]): CPython then finds the venv's pyvenv.cfg and puts the venv's
/// site-packages (sglang's) on sys.path, as in the container.
#[test]
fn in_place_a_venv_python_sees_its_venv() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("sglang");
    let st = std::process::Command::new(repo().join("examples/make-image-root"))
        .args(["--standalone", "sglang"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let ov = shipped_overlay();
    let out = infera(&["python3", "-m", "infera.engine.sglang", "--model-path", "/m"])
        .overlay(&ov.overlay())
        .env("INFERA_ROOT", dir.as_os_str())
        .env("PATH", "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .env("HIP_VISIBLE_DEVICES", "0")
        .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let r = out.standin();
    assert_eq!(r["executable"], format!("{}/opt/venv/bin/python3", dir.display()));
    let venv_site = format!("{}/opt/venv/lib/python3.10/site-packages", dir.display());
    assert!(r["sys_path"].as_array().unwrap().iter().any(|p| p == &venv_site), "{}", r["sys_path"]);
}

/// `--wait-model`: a pod stopped while its worker waits for the model exits at once with
/// 128+15 (the launcher is PID 1 there: a signal has no default action), and says so.
#[test]
fn a_stop_while_waiting_for_the_model_ends_the_wait() {
    for (how, said) in [("60", "up to 60 s"), ("inf", "until it appears or a SIGTERM")] {
        stopped_while_waiting(how, said);
    }
}

/// `--wait-model HOW` (as INFERA_WAIT_MODEL, as the examples set it), stopped by SIGTERM.
fn stopped_while_waiting(how: &str, said: &str) {
    // As in a pod: the image's root is `/` (a vLLM image), the model volume not filled yet.
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let model = std::path::Path::new("/models/not-yet");
    let started = std::time::Instant::now();
    let run = infera(&["worker", "--", "--model"]).args([model]).env("INFERA_WAIT_MODEL", how);
    let mut child = in_image_root(run, &img, &ov.overlay()).spawn();
    // The wait has begun once it is logged.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    use std::io::BufRead;
    stderr.read_line(&mut line).unwrap();
    assert!(
        line.contains(&format!(
            "[model-wait] `{}` does not exist yet: waiting {said} for it (INFERA_WAIT_MODEL)",
            model.display()
        )),
        "{line}"
    );
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGTERM).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(143), "{rest}");
    assert!(
        rest.contains("[stopped] signal 15 while waiting for the model: exiting with 143, the program was not started"),
        "{rest}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "the wait did not end");
}

/// The router waits for its tokenizer path as a worker waits for its model (the download Job
/// fills the volume both read), and says what it waited for when it gives up. A Hugging Face
/// id is the router's to download: nothing waits for it.
#[test]
fn the_router_waits_for_its_tokenizer_path() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let run = infera(&["server", "--wait-model", "1", "--", "--router-tokenizer-path", "/models/not-yet"]);
    let out = in_image_root(run, &img, &ov.overlay()).run();
    out.assert(66, "error[model-missing]: the model path `/models/not-yet` does not exist in this container after waiting 1 s for it (--wait-model)");
    assert!(
        out.stderr
            .contains("[model-wait] `/models/not-yet` does not exist yet: waiting up to 1 s for it (--wait-model)"),
        "{}",
        out.stderr
    );
    // An id: planned at once (the probe-free image's interpreter must never run, so a dry run).
    let run =
        infera(&["server", "--wait-model", "60", "--dry-run", "--", "--router-tokenizer-path", "Qwen/Qwen3-0.6B"]);
    let out = in_image_root(run, &img, &ov.overlay()).run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stderr.contains("model-wait"), "{}", out.stderr);
}
