//! The dry run is the whole truth: for every launcher option, the plan printed by
//! `--dry-run --output json` and what the real run did (read back by the stand-in engine
//! on a real CPython: argv, complete environment, working directory, process tree,
//! capabilities, no_new_privs) are the same, and so is the exit code.

use std::process::Command;

use crate::support::*;

const KIMI: &str = include_str!("../../../../examples/models/kimi-k3/config.json");
const SEED: [&str; 6] = ["--model", "/models/kimi-k3", "--served-model-name", "kimi-k3", "--max-num-seqs", "128"];

struct Case {
    name: &'static str,
    args: Vec<&'static str>,
    env: Vec<(&'static str, &'static str)>,
    exit: i32,
}

fn case(name: &'static str, args: &[&'static str], env: &[(&'static str, &'static str)], exit: i32) -> Case {
    Case { name, args: args.to_vec(), env: env.to_vec(), exit }
}

fn with_seed(head: &[&'static str]) -> Vec<&'static str> {
    head.iter().copied().chain(["--"]).chain(SEED).collect()
}

fn launcher(img: &Fx, ov: &Fx, c: &Case, dry: bool, cwd: &std::path::Path) -> Out {
    let mut args = c.args.clone();
    if dry {
        // The options go before `--` (engine args after it stay untouched), or, in the command
        // form, before PROGRAM.
        let sub = ["worker", "server", "check"].contains(&args[0]);
        let at = if sub { args.iter().position(|a| *a == "--").unwrap_or(args.len()) } else { 0 };
        args.splice(at..at, ["--dry-run", "--output", "json"]);
    }
    // The image's packages on the path of this host's interpreter, so the engine patches find
    // the image's vLLM as they would in the container.
    let site = img.p(VLLM_SITE);
    let mut r =
        infera(&args).root(img).overlay(&ov.overlay()).cwd(cwd).env("LC_ALL", "C.UTF-8").env("PYTHONPATH", &site);
    for (k, v) in &c.env {
        r = r.env(k, *v);
    }
    r.run()
}

fn caps_mask(names: &serde_json::Value) -> u64 {
    names.as_array().unwrap().iter().fold(0, |m, n| {
        let cap: caps::Capability = n.as_str().unwrap().parse().unwrap();
        m | (1u64 << cap.index())
    })
}

fn compare(c: &Case, plan: &serde_json::Value, real: &Out, cwd: &std::path::Path) {
    let r = real.standin();
    let x = &plan["exec"];
    let name = c.name;
    // argv after `python -m <module>`, exactly.
    let argv: Vec<serde_json::Value> = x["argv"].as_array().unwrap()[3..].to_vec();
    assert_eq!(serde_json::Value::Array(argv), r["argv"], "{name}: argv");
    assert_eq!(x["argv"][2], r["standin"], "{name}: module");
    // The complete environment, variable for variable.
    assert_eq!(x["env"], r["environ"], "{name}: environment");
    // Working directory: the plan's (with --root, where it is on this host), or the
    // launcher's own when the plan keeps it.
    let want_cwd = x["host_cwd"].as_str().or(x["cwd"].as_str()).map_or_else(|| cwd.display().to_string(), String::from);
    assert_eq!(r["cwd"], want_cwd, "{name}: cwd");
    // Init: the engine is the launcher's child (in its own process group with --init-group);
    // without it the engine is the launcher's own process, exec'd.
    match x["init"].as_object() {
        Some(init) => {
            assert_ne!(r["ppid"], 1, "{name}");
            assert_eq!(r["pgid"] == r["pid"], init["group"] == true, "{name}: process group");
        }
        None => assert_ne!(r["pgid"], r["pid"], "{name}: exec'd, not started in a group of its own"),
    }
    // Privileges, as /proc/self/status of the engine shows them.
    let status = &r["status"];
    assert_eq!(status["NoNewPrivs"] == "1", x["privileges"]["no_new_privs"] == true, "{name}: no_new_privs");
    if let Some(keep) = x["privileges"]["keep_caps"].as_array() {
        let mask = caps_mask(&serde_json::Value::Array(keep.clone()));
        for set in ["CapBnd", "CapEff", "CapPrm"] {
            let v = u64::from_str_radix(status[set].as_str().unwrap(), 16).unwrap();
            assert_eq!(v, mask, "{name}: {set}");
        }
        assert_eq!(status["CapAmb"], "0000000000000000", "{name}: ambient");
    }
    // Every engine patch the plan lists ran, in `/`, in order; none other did.
    let patches: Vec<String> = x["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "patch")
        .map(|s| {
            let file = s["file"].as_str().unwrap();
            format!("{} cwd=/", file.rsplit('/').next().unwrap())
        })
        .collect();
    let ran: Vec<String> =
        r["patched"]["vllm"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect();
    assert_eq!(ran, patches, "{name}: engine patches");
    match name {
        "worker" | "command-form" | "command-form-kvd" => assert_eq!(patches.len(), 1, "{name}: vLLM's one patch"),
        "skip-patches" | "server" | "init" => assert!(patches.is_empty(), "{name}: no patches"),
        _ => {}
    }
}

#[test]
fn every_option_dry_run_equals_real_run() {
    let img = vllm_image(None);
    img.real_interpreter("/usr/bin/python3.12", "3.12").file("/models/kimi-k3/config.json", KIMI);
    let ov = shipped_overlay();
    let cwd = tempfile::tempdir().unwrap();
    let root = nix::unistd::geteuid().is_root();
    let gpus = ("HIP_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7");
    let mut cases = vec![
        case("worker", &with_seed(&["worker"]), &[gpus], 0),
        case("engine", &with_seed(&["worker", "--engine", "vllm"]), &[gpus], 0),
        case("require", &with_seed(&["worker", "--require", "mooncake,kvd"]), &[gpus, ("MC_FORCE_TCP", "1")], 0),
        case("family", &with_seed(&["worker", "--family", "rocm7-py312"]), &[], 0),
        case(
            "allow",
            &["worker", "--allow", "kv-fp8-mla", "--", "--model", "/models/kimi-k3", "--kv-cache-dtype", "fp8"],
            &[gpus],
            0,
        ),
        case(
            "env-options",
            &with_seed(&["worker"]),
            &[("INFERA_ENGINE", "vllm"), ("INFERA_REQUIRE", "kvd"), ("INFERA_GPUS", "4")],
            0,
        ),
        case("verify", &with_seed(&["worker"]), &[("INFERA_VERIFY", "digest")], 0),
        case("server", &["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B", "--port", "8000"], &[], 0),
        case("skip-patches", &with_seed(&["worker"]), &[gpus, ("INFERA_SKIP_ENGINE_PATCHES", "1")], 0),
        case(
            "chdir",
            &["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
            &[("INFERA_EXEC_CHDIR", "/opt")],
            0,
        ),
        case("keep-cwd", &["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"], &[("INFERA_EXEC_CHDIR", "")], 0),
        case("command-form", &["python3", "-m", "infera.engine.vllm", "--model", "/models/kimi-k3"], &[gpus], 0),
        case("command-form-kvd", &["python3", "-m", "infera.kvd", "--socket", "/kvd/kvd.sock"], &[], 0),
        case("init", &["server", "--init", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B", "--port", "8000"], &[], 0),
        case(
            "init-group",
            &[
                "server",
                "--init",
                "--init-group",
                "--init-grace",
                "2",
                "--",
                "--router-tokenizer-path=Qwen/Qwen3-0.6B",
                "--port",
                "8000",
            ],
            &[],
            0,
        ),
        case("no-new-privs", &["server", "--no-new-privs", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"], &[], 0),
        // Refused the same way by both.
        case("refuse-capability", &with_seed(&["worker", "--require", "nixl"]), &[gpus], 2),
        case("refuse-rule", &["worker", "--", "--model", "/models/kimi-k3", "-tp", "16"], &[gpus], 78),
        case(
            "refuse-family",
            &["server", "--family", "rocm9-py399", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
            &[],
            2,
        ),
        case(
            "refuse-verify",
            &["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
            &[("INFERA_VERIFY", "sometimes")],
            2,
        ),
        case(
            "refuse-init-grace",
            &["server", "--init", "--init-grace", "-3", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
            &[],
            2,
        ),
        case(
            "refuse-drop-caps",
            &["server", "--drop-caps", "cap_flying", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
            &[],
            2,
        ),
    ];
    if root {
        cases.push(case(
            "drop-caps",
            &["server", "--drop-caps", "kill,net_bind_service", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
            &[],
            0,
        ));
        cases.push(case(
            "drop-caps-none",
            &[
                "server",
                "--drop-caps",
                "none",
                "--no-new-privs",
                "--init",
                "--",
                "--router-tokenizer-path=Qwen/Qwen3-0.6B",
            ],
            &[],
            0,
        ));
    }
    let marker = img.p(&format!("{VLLM_SITE}/vllm/.infera-standin-patched"));
    for c in &cases {
        let dry = launcher(&img, &ov, c, true, cwd.path());
        let _ = std::fs::remove_file(&marker);
        let real = launcher(&img, &ov, c, false, cwd.path());
        assert_eq!(dry.code, c.exit, "{}: dry run exit\n{}\n{}", c.name, dry.stdout, dry.stderr);
        assert_eq!(real.code, c.exit, "{}: real run exit\n{}\n{}", c.name, real.stdout, real.stderr);
        if c.exit == 0 {
            compare(c, &dry.json(), &real, cwd.path());
        } else {
            // The same refusal, word for word, on stderr of both.
            let first = |o: &Out| o.stderr.lines().find(|l| l.starts_with("error")).map(String::from);
            assert_eq!(first(&dry), first(&real), "{}", c.name);
            assert!(real.stdout.is_empty(), "{}: nothing ran: {}", c.name, real.stdout);
        }
    }
}

/// An image root on a `noexec` mount: execve would fail with EACCES, so the dry run says
/// 126 too (it used to plan a run that could not happen).
#[test]
fn noexec_image_root_is_126_in_both() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: mounting a noexec tmpfs needs root");
        return;
    }
    let img = vllm_image(None);
    img.real_interpreter("/usr/bin/python3.12", "3.12");
    let ov = shipped_overlay();
    let mnt = tempfile::tempdir().unwrap();
    let script = format!(
        "mount -t tmpfs -o noexec,mode=0755 tmpfs {m} && cp -a {r}/. {m}/ && \
         INFERA_ROOT={m} {b} server --dry-run -- --router-tokenizer-path=/m; echo \"dry=$?\"; INFERA_ROOT={m} {b} server -- --router-tokenizer-path=/m; echo \"real=$?\"; \
         {m}/usr/bin/python3.12 -c pass; echo \"direct=$?\"",
        m = mnt.path().display(),
        r = img.path().display(),
        b = BIN
    );
    let o = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("INFERA_OVERLAY", ov.overlay())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    // What the kernel says when the file is exec'd anyway: the refusal is the truth.
    assert!(out.contains("direct=126"), "{out}\n{err}");
    assert!(out.contains("dry=126") && out.contains("real=126"), "{out}\n{err}");
    let refusal = "error[exec-noexec]: the interpreter `/usr/bin/python3.12` is on a filesystem mounted noexec";
    assert_eq!(err.matches(refusal).count(), 2, "{err}");
}
