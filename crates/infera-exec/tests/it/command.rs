//! The command form of the real pod specs (`/overlay/bin/infera-exec python3 -m …`): the
//! same plans and refusals as the subcommands, the generic role, options only from INFERA_*
//! variables, the overlay found from the launcher's own location.

use crate::support::*;

const KIMI: &str = include_str!("../../../../examples/models/kimi-k3/config.json");
const SEED: [&str; 6] = ["--model", "/models/kimi-k3", "--served-model-name", "kimi-k3", "--max-num-seqs", "128"];

fn vllm_with_kimi() -> Fx {
    let img = vllm_image(None);
    img.file("/models/kimi-k3/config.json", KIMI);
    img
}

fn dry(img: &Fx, ov: &Fx, args: &[&str]) -> Out {
    infera(args)
        .root(img)
        .overlay(&ov.overlay())
        .env("INFERA_DRY_RUN", "1")
        .env("INFERA_OUTPUT", "json")
        .env("HIP_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
        .run()
}

/// What must be the same whichever form asked for it.
fn same_plan(a: &serde_json::Value, b: &serde_json::Value) {
    for k in ["family", "tree", "engine", "capabilities", "findings", "error"] {
        assert_eq!(a[k], b[k], "{k}");
    }
    for k in ["program", "argv", "env", "added_args", "cwd", "init", "privileges", "steps"] {
        assert_eq!(a["exec"][k], b["exec"][k], "exec.{k}");
    }
}

#[test]
fn engine_modules_plan_exactly_like_worker() {
    let img = vllm_with_kimi();
    let ov = shipped_overlay();
    let mut cmd = vec!["python3", "-m", "infera.engine.vllm"];
    cmd.extend(SEED);
    let c = dry(&img, &ov, &cmd);
    assert_eq!(c.code, 0, "{}", c.stderr);
    let mut sub = vec!["worker", "--engine", "vllm", "--"];
    sub.extend(SEED);
    let w = dry(&img, &ov, &sub);
    assert_eq!(w.code, 0, "{}", w.stderr);
    let (c, w) = (c.json(), w.json());
    assert_eq!(c["role"], "worker");
    same_plan(&c, &w);
    assert_eq!(c["exec"]["added_args"], serde_json::json!(KIMI_TP8_ADDED));
    assert_eq!(c["exec"]["cwd"], "/", "the image's WORKDIR cannot shadow: the run is in /");

    // The router, and sglang on its image.
    let r = dry(
        &img,
        &ov,
        &["python3", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B", "--port", "8000"],
    )
    .json();
    let s = dry(&img, &ov, &["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B", "--port", "8000"]).json();
    assert_eq!(r["role"], "server");
    same_plan(&r, &s);
    let sg = sglang_image("3.10", None);
    sg.file("/models/kimi-k3/config.json", KIMI);
    let a = dry(&sg, &ov, &["python3", "-m", "infera.engine.sglang", "--model-path", "/models/kimi-k3"]).json();
    let b = dry(&sg, &ov, &["worker", "--", "--model-path", "/models/kimi-k3"]).json();
    same_plan(&a, &b);
    assert_eq!(a["exec"]["program"], "/opt/venv/bin/python3");
    assert_eq!(
        a["exec"]["added_args"],
        serde_json::json!(["--tp-size", "8", "--kv-cache-dtype", "auto", "--host", "0.0.0.0"])
    );
}

#[test]
fn refusals_carry_the_same_codes_and_messages() {
    let img = vllm_with_kimi();
    let ov = shipped_overlay();
    // (command form, subcommand form, environment, exit code)
    type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a [(&'a str, &'a str)], i32);
    let cases: [Case; 3] = [
        (
            &["python3", "-m", "infera.engine.vllm", "--model", "/models/kimi-k3", "--kv-cache-dtype", "fp8"],
            &["worker", "--", "--model", "/models/kimi-k3", "--kv-cache-dtype", "fp8"],
            &[],
            78,
        ),
        (
            &["python3", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
            &["server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
            &[("INFERA_REQUIRE", "nixl")],
            2,
        ),
        (&["python3", "-m", "infera.engine.vllm"], &["worker"], &[("INFERA_FAMILY", "nope")], 2),
    ];
    for (command, sub, env, code) in cases {
        let run = |args: &[&str]| {
            let mut r = infera(args).root(&img).overlay(&ov.overlay()).env("HIP_VISIBLE_DEVICES", "0,1");
            for (k, v) in env {
                r = r.env(k, *v);
            }
            r.run()
        };
        let (a, b) = (run(command), run(sub));
        assert_eq!((a.code, b.code), (code, code), "{command:?}\n{}\n{}", a.stderr, b.stderr);
        assert_eq!(a.stderr, b.stderr, "{command:?}");
        assert!(a.stderr.starts_with("error["), "{}", a.stderr);
    }
    // The command's engine and INFERA_ENGINE disagreeing is a usage error.
    infera(&["python3", "-m", "infera.engine.vllm"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_ENGINE", "sglang")
        .run()
        .assert(
            2,
            "the command runs `-m infera.engine.vllm` (the vllm engine) but --engine / INFERA_ENGINE says sglang",
        );
}

#[test]
fn other_modules_and_programs_run_with_the_trees_environment() {
    let img = vllm_with_kimi();
    img.exe("/usr/local/bin/ray", "#!/bin/sh\necho \"RAY $*\"\n");
    let ov = shipped_overlay();
    // infera.kvd: the tree's environment, its module checked, no engine flags.
    let j = dry(&img, &ov, &["python3", "-m", "infera.kvd", "--socket", "/kvd/kvd.sock"]).json();
    assert_eq!(j["role"], "run");
    assert_eq!(j["family"], "rocm7-py312");
    assert!(j["engine"].is_null());
    let argv: Vec<&str> = j["exec"]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(argv, ["/usr/bin/python3.12", "-m", "infera.kvd", "--socket", "/kvd/kvd.sock"]);
    assert_eq!(j["exec"]["added_args"], serde_json::json!([]));
    let pp = j["exec"]["env"]["PYTHONPATH"].as_str().unwrap();
    assert!(pp.split(':').next().unwrap().ends_with("trees/rocm7-py312/site-packages"), "{pp}");
    // The stack's kvd sidecar requires hipFile (its L3 tier): the tree keeps it for vLLM, and
    // this is a vLLM image, so it is offered to kvd (which this image's ROCm 7.0 cannot run)...
    let kvd_needing_hipfile = |root: &Fx, args: &[&str]| {
        let argv: Vec<&str> = ["python3", "-m", "infera.kvd"].iter().chain(args).copied().collect();
        infera(&argv)
            .root(root)
            .overlay(&ov.overlay())
            .env("INFERA_DRY_RUN", "1")
            .env("INFERA_REQUIRE_NATIVE", "hipfile")
    };
    kvd_needing_hipfile(&img, &[])
        .run()
        .assert(69, "capability `hipfile` is provided by the tree but cannot work on this node: ROCm 7.0.0");
    // ...and on ROCm 7.2 kvd gets it on its path.
    let v28 = image("vllm-0.28");
    let j = kvd_needing_hipfile(&v28, &["--socket", "/kvd/kvd.sock"]).env("INFERA_OUTPUT", "json").run().json();
    assert!(j["error"].is_null(), "{}", j["error"]);
    let row = j["capabilities"].as_array().unwrap().iter().find(|r| r["name"] == "hipfile").unwrap().clone();
    assert_eq!((row["requested"].as_bool(), row["provided"].as_bool()), (Some(true), Some(true)), "{row}");
    let pp = j["exec"]["env"]["PYTHONPATH"].as_str().unwrap();
    assert!(pp.contains("trees/rocm7-py312/capabilities/hipfile"), "{pp}");
    // In an sglang image it is not offered: refused, naming the engine.
    let sg = sglang_image("3.12", None);
    kvd_needing_hipfile(&sg, &[])
        .env("INFERA_PYTHON", "/opt/venv/bin/python3")
        .run()
        .assert(69, "tree rocm7-py312 offers it to vllm only, not to sglang");
    // A module of infera that the tree does not have: refused like a missing engine module.
    dry(&img, &ov, &["python3", "-m", "infera.tools.missing"])
        .assert(65, "tree rocm7-py312: module `infera.tools.missing` (the module to run) is not in");
    // A module of the image (not the tree's): its business, not checked.
    assert_eq!(dry(&img, &ov, &["python3", "-m", "json.tool"]).code, 0);
    // Interpreter options before -m are kept in place.
    let j = dry(&img, &ov, &["python3", "-u", "-X", "dev", "-m", "infera.kvd"]).json();
    assert_eq!(j["exec"]["argv"], serde_json::json!(["/usr/bin/python3.12", "-u", "-X", "dev", "-m", "infera.kvd"]));
    // A program on the image's PATH, and one in the tree's bin/ (not in the image).
    let j = dry(&img, &ov, &["ray", "start", "--head"]).json();
    assert_eq!(j["exec"]["argv"], serde_json::json!(["/usr/local/bin/ray", "start", "--head"]));
    assert_eq!(j["exec"]["host_program"], img.p("/usr/local/bin/ray").display().to_string());
    let out = infera(&["ray", "start", "--head"]).root(&img).overlay(&ov.overlay()).run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "RAY start --head\n");
    infera(&["raylet"]).root(&img).overlay(&ov.overlay()).run().assert(
        127,
        "error[exec-not-found]: `raylet` is not on the container's PATH (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin) nor in the tree's",
    );
    // `python3 -c …` is a program run, not a module run.
    let j = dry(&img, &ov, &["python3", "-c", "print(1)"]).json();
    assert_eq!(j["role"], "run");
    assert_eq!(j["exec"]["argv"], serde_json::json!(["/usr/bin/python3", "-c", "print(1)"]));
}

#[test]
fn options_from_variables_only_and_interpreter_override() {
    let img = vllm_with_kimi();
    img.interpreter("/opt/py/bin/python3.12", None);
    let ov = shipped_overlay();
    // Pod specs put nothing between the launcher and the program: INFERA_* carry the options.
    let out = infera(&["python3", "-m", "infera.engine.vllm", "--model", "/models/kimi-k3"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_DRY_RUN", "1")
        .env("INFERA_REQUIRE", "mooncake")
        .env("MC_FORCE_TCP", "1")
        .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.starts_with("infera-exec worker plan\n"), "{}", out.stdout);
    assert!(out.stdout.contains("mooncake     yes        yes"), "{}", out.stdout);
    // INFERA_PYTHON names the interpreter, whatever the command says.
    let j = infera(&["python3", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_PYTHON", "/opt/py/bin/python3.12")
        .env("INFERA_DRY_RUN", "1")
        .env("INFERA_OUTPUT", "json")
        .run()
        .json();
    assert_eq!(j["exec"]["program"], "/opt/py/bin/python3.12");
    // The command's own interpreter, when it names one.
    let j =
        dry(&img, &ov, &["/opt/py/bin/python3.12", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
            .json();
    assert_eq!(j["exec"]["program"], "/opt/py/bin/python3.12");
    dry(&img, &ov, &["python3.9", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
        .assert(66, "no `python3.9` on the container's PATH");
}

#[test]
fn the_overlay_is_found_from_the_launchers_own_location() {
    let img = vllm_with_kimi();
    let ov = shipped_overlay(); // holds bin/infera-exec, a copy of this launcher
    let own = ov.overlay().join("bin/infera-exec");
    let out = std::process::Command::new(&own)
        .args(["python3", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
        .env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", "/usr/bin:/bin")
        .env("INFERA_ROOT", img.path())
        .env("INFERA_DRY_RUN", "1")
        .env("INFERA_OUTPUT", "json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["tree"], ov.overlay().join("trees/rocm7-py312").display().to_string());
    // A launcher outside any overlay looks at /opt/infera.
    let out = infera(&["python3", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
        .root(&img)
        .env_remove("INFERA_OVERLAY")
        .run();
    if !std::path::Path::new("/opt/infera").exists() {
        out.assert(66, "the overlay directory `/opt/infera` does not exist");
    }
}

#[test]
fn a_relative_model_path_is_refused_while_the_directory_changes() {
    let img = vllm_with_kimi();
    let ov = shipped_overlay();
    dry(&img, &ov, &["python3", "-m", "infera.engine.vllm", "--model", "./models/kimi-k3"]).assert(
        2,
        "error[model-path-relative]: the model `./models/kimi-k3` is a relative path, but the engine runs in `/` (INFERA_EXEC_CHDIR): it would read another directory",
    );
    let out = infera(&["python3", "-m", "infera.engine.vllm", "--model", "./models/kimi-k3"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_DRY_RUN", "1")
        .env("INFERA_EXEC_CHDIR", "")
        .run();
    out.assert(0, "[model-unreadable] `./models/kimi-k3` is relative to the launcher's working directory");
    assert!(out.stdout.contains("  cwd       unchanged"), "{}", out.stdout);
}
