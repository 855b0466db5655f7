//! Engine planning through `worker --dry-run --output json`: defaults, rules, models.

use crate::support::*;

const KIMI: &str = include_str!("../../../../examples/models/kimi-k3/config.json");
const SEED_ARGS: [&str; 6] = ["--model", "/models/kimi-k3", "--served-model-name", "kimi-k3", "--max-num-seqs", "128"];

fn vllm8() -> (Fx, Fx) {
    let img = vllm_image(None);
    img.file("/models/kimi-k3/config.json", KIMI);
    (img, shipped_overlay())
}

fn plan(img: &Fx, ov: &Fx, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut r = infera(&["worker", "--dry-run", "--output", "json", "--"]).args(args).root(img).overlay(&ov.overlay());
    r = r.env("HIP_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7");
    for (k, v) in env {
        r = r.env(k, *v);
    }
    r.run()
}

fn argv(j: &serde_json::Value) -> Vec<String> {
    j["exec"]["argv"].as_array().unwrap().iter().skip(3).map(|a| a.as_str().unwrap().to_string()).collect()
}

fn codes(j: &serde_json::Value) -> Vec<String> {
    j["findings"].as_array().unwrap().iter().map(|f| f["code"].as_str().unwrap().to_string()).collect()
}

#[test]
fn kimi_k3_seed_recipe_on_vllm() {
    let (img, ov) = vllm8();
    let out = plan(&img, &ov, &SEED_ARGS, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    let mut want: Vec<String> = SEED_ARGS.iter().map(|s| s.to_string()).collect();
    want.extend(KIMI_TP8_ADDED.map(String::from));
    assert_eq!(argv(&j), want);
    assert_eq!(j["exec"]["added_args"], serde_json::json!(KIMI_TP8_ADDED));
    let c = codes(&j);
    for code in ["tp-default", "mm-encoder-tp-mode", "kv-cache-dtype-mla"] {
        assert!(c.contains(&code.to_string()), "{code} in {c:?}");
    }
    let mla = j["findings"].as_array().unwrap().iter().find(|f| f["code"] == "kv-cache-dtype-mla").unwrap();
    assert_eq!(mla["level"], "info", "a fix applied is information");
    assert!(mla["message"].as_str().unwrap().contains("MLA: model_type kimi_k3 with kv_lora_rank 512"));

    // The same request with fp8 KV is refused with the rule's code, evidence and fix.
    let mut args = SEED_ARGS.to_vec();
    args.extend(["--kv-cache-dtype", "fp8_e4m3"]);
    let out = plan(&img, &ov, &args, &[]);
    out.assert(78, "fp8 KV cache (fp8_e4m3) on the MLA model /models/kimi-k3 with 128 concurrent sequences");
    let j = out.json();
    assert_eq!(j["error"]["code"], "kv-fp8-mla");
    let msg = j["error"]["message"].as_str().unwrap();
    assert!(msg.contains("--kv-cache-dtype fp8_e4m3 (set in the args)") && msg.contains("--max-num-seqs 128"), "{msg}");
    assert!(j["error"]["hint"].as_str().unwrap().contains("use --kv-cache-dtype auto"));
    assert!(j["error"]["hint"].as_str().unwrap().contains("INFERA_ALLOW=kv-fp8-mla"));

    // ... and with fastsafetensors.
    let mut args = SEED_ARGS.to_vec();
    args.extend(["--load-format", "fastsafetensors"]);
    let out = plan(&img, &ov, &args, &[]);
    out.assert(78, "fastsafetensors has no GPU-direct path");
    assert_eq!(out.json()["error"]["code"], "fastsafetensors-rocm");
}

#[test]
fn kimi_k3_on_sglang_uses_sglang_spellings() {
    let img = sglang_image("3.10", None);
    img.file("/models/kimi-k3/config.json", KIMI);
    let ov = shipped_overlay();
    let args = ["--model-path", "/models/kimi-k3", "--served-model-name", "kimi-k3", "--max-running-requests", "128"];
    let out = plan(&img, &ov, &args, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    assert_eq!(j["exec"]["argv"][2], "infera.engine.sglang");
    // sglang has no --mm-encoder-tp-mode; TP is --tp-size.
    assert_eq!(
        j["exec"]["added_args"],
        serde_json::json!(["--tp-size", "8", "--kv-cache-dtype", "auto", "--host", "0.0.0.0"])
    );
    // sglang rejects plain fp8.
    let mut a = args.to_vec();
    a.extend(["--kv-cache-dtype", "fp8"]);
    plan(&img, &ov, &a, &[]).assert(78, "sglang does not accept --kv-cache-dtype fp8");
    // The MLA fp8 crash rule is vLLM's.
    let mut a = args.to_vec();
    a.extend(["--kv-cache-dtype", "fp8_e4m3"]);
    let j = plan(&img, &ov, &a, &[]).json();
    assert!(j.get("error").is_none(), "{j}");
    assert_eq!(
        j["exec"]["added_args"],
        serde_json::json!(["--tp-size", "8", "--host", "0.0.0.0"]),
        "the user's kv dtype is kept"
    );
}

#[test]
fn defaults_not_added_when_the_user_set_them() {
    let (img, ov) = vllm8();
    let args = [
        "--model",
        "/models/kimi-k3",
        "-tp",
        "4",
        "--mm-encoder-tp-mode=weights",
        "--kv-cache-dtype=auto",
        "--max-num-seqs",
        "1",
        "--host",
        "0.0.0.0",
    ];
    let j = plan(&img, &ov, &args, &[]).json();
    assert_eq!(argv(&j), args.map(String::from).to_vec());
    assert_eq!(j["exec"]["added_args"], serde_json::json!([]));
    // Data-parallel layout: no TP default.
    let j = plan(&img, &ov, &["--model", "/models/kimi-k3", "-dp", "8"], &[]).json();
    assert_eq!(j["exec"]["added_args"], serde_json::json!(["--kv-cache-dtype", "auto", "--host", "0.0.0.0"]));
    assert!(codes(&j).contains(&"tp-default-skipped".to_string()));
}

#[test]
fn kv_fp8_default_for_non_mla_models() {
    let (img, ov) = vllm8();
    img.file("/models/llama/config.json", r#"{"model_type":"llama","num_attention_heads":64}"#);
    let j = plan(&img, &ov, &["--model", "/models/llama"], &[]).json();
    assert_eq!(
        j["exec"]["added_args"],
        serde_json::json!(["--tensor-parallel-size", "8", "--kv-cache-dtype", "fp8_e4m3", "--host", "0.0.0.0"])
    );
    let j = plan(&img, &ov, &["--model", "/models/llama"], &[("INFERA_DEFAULT_KV_FP8", "0")]).json();
    assert_eq!(j["exec"]["added_args"], serde_json::json!(["--tensor-parallel-size", "8", "--host", "0.0.0.0"]));
    // TP 1 on a multimodal model: no encoder mode.
    img.file(
        "/models/vl/config.json",
        r#"{"model_type":"qwen2_5_vl","vision_config":{},"text_config":{"num_attention_heads":28}}"#,
    );
    let j = plan(&img, &ov, &["--model", "/models/vl", "-tp", "1"], &[]).json();
    assert_eq!(j["exec"]["added_args"], serde_json::json!(["--kv-cache-dtype", "fp8_e4m3", "--host", "0.0.0.0"]));
}

#[test]
fn rules_fire_do_not_fire_and_can_be_allowed() {
    let (img, ov) = vllm8();
    let base = ["--model", "/models/kimi-k3"];
    let with = |extra: &[&str]| -> Vec<String> { base.iter().chain(extra).map(|s| s.to_string()).collect() };
    let run = |extra: &[&str], env: &[(&str, &str)]| {
        let a = with(extra);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        plan(&img, &ov, &a, env)
    };
    // TP larger than the GPUs: 78; dividing the heads matters too.
    run(&["-tp", "16"], &[]).assert(78, "tensor parallel size 16 is larger than the 8 GPUs visible");
    run(&["-tp", "3"], &[("HIP_VISIBLE_DEVICES", "0,1,2")])
        .assert(78, "tensor parallel size 3 does not divide the 64 attention heads");
    // fp8 with one sequence: the MLA rule does not fire.
    let j = run(&["--kv-cache-dtype", "fp8", "--max-num-seqs", "1"], &[]).json();
    assert!(j.get("error").is_none() && !j["findings"].to_string().contains("kv-fp8-mla"), "{j}");
    // fp8 with the engine's default concurrency: fires.
    run(&["--kv-cache-dtype", "fp8"], &[]).assert(78, "--max-num-seqs unset (the engine's default is more than 1)");
    // Overridden knowingly: runs, recorded as a finding.
    let out = run(&["--kv-cache-dtype", "fp8"], &[("INFERA_ALLOW", "kv-fp8-mla")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let f = out.json()["findings"].to_string();
    assert!(f.contains("allowed by INFERA_ALLOW/--allow"), "{f}");
    let out = infera(&[
        "worker",
        "--dry-run",
        "--allow",
        "kv-fp8-mla",
        "--",
        "--model",
        "/models/kimi-k3",
        "--kv-cache-dtype",
        "fp8",
    ])
    .root(&img)
    .overlay(&ov.overlay())
    .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let typo = run(&[], &[("INFERA_ALLOW", "kv-fp8-typo")]);
    typo.assert(2, "`kv-fp8-typo`, which is neither a refusal that may be accepted nor a warning");
    // Hybrid + prefix caching + chunked prefill off: fires; either one alone does not.
    run(&["--enable-prefix-caching", "--no-enable-chunked-prefill"], &[])
        .assert(78, "experimental Mamba \"align\" mode");
    let j = run(&["--enable-prefix-caching"], &[]).json();
    assert!(j.get("error").is_none(), "{j}");
    assert_eq!(j["exec"]["argv"][5], "--enable-prefix-caching");
    assert_eq!(
        run(&["--enable-prefix-caching", "--no-enable-chunked-prefill", "--enable-chunked-prefill"], &[]).code,
        0
    );
    // Bad INFERA_GPUS is a usage error.
    run(&[], &[("INFERA_GPUS", "eight")]).assert(2, "INFERA_GPUS=`eight` is not a whole number of GPUs");
}

#[test]
fn hf_cache_resolution() {
    let (img, ov) = vllm8();
    let hub = "/data/hub/models--moonshotai--Kimi-K3";
    img.file(&format!("{hub}/refs/main"), "abc123\n")
        .file(&format!("{hub}/blobs/f00d"), KIMI)
        .link(&format!("{hub}/snapshots/abc123/config.json"), "../../blobs/f00d");
    for env in [vec![("HF_HUB_CACHE", "/data/hub")], vec![("HF_HOME", "/data")]] {
        let out = plan(&img, &ov, &["--model", "moonshotai/Kimi-K3"], &env);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let j = out.json();
        assert!(
            argv(&j).ends_with(&["--kv-cache-dtype", "auto", "--host", "0.0.0.0"].map(String::from)),
            "{:?}",
            argv(&j)
        );
        assert_eq!(j["facts"]["models"][0]["config"], format!("{hub}/snapshots/abc123/config.json"));
    }
    // ~/.cache/huggingface/hub from HOME.
    img.file("/home/u/.cache/huggingface/hub/models--org--llama/refs/main", "r1").file(
        "/home/u/.cache/huggingface/hub/models--org--llama/snapshots/r1/config.json",
        r#"{"model_type":"llama"}"#,
    );
    let j = plan(&img, &ov, &["--model", "org/llama"], &[("HOME", "/home/u")]).json();
    assert_eq!(
        j["exec"]["added_args"],
        serde_json::json!(["--tensor-parallel-size", "8", "--kv-cache-dtype", "fp8_e4m3", "--host", "0.0.0.0"])
    );
    // Not in the cache: a warning, nothing refused, no fp8 guess.
    let out = plan(&img, &ov, &["--model", "org/absent"], &[]);
    assert_eq!(out.code, 0);
    let j = out.json();
    assert!(j["findings"].to_string().contains("`org/absent` is not in the Hugging Face cache"));
    assert_eq!(j["exec"]["added_args"], serde_json::json!(["--tensor-parallel-size", "8", "--host", "0.0.0.0"]));
}

#[test]
fn unreadable_config_is_a_warning_not_a_refusal() {
    let (img, ov) = vllm8();
    img.file("/models/kimi-k3/config.json", "{ not json");
    let out = plan(&img, &ov, &["--model", "/models/kimi-k3", "--kv-cache-dtype", "fp8"], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    let f = j["findings"].as_array().unwrap().iter().find(|f| f["code"] == "model-unreadable").unwrap().clone();
    assert_eq!(f["level"], "warn");
    assert!(f["message"].as_str().unwrap().contains("/models/kimi-k3/config.json` is not JSON"));
    assert!(f["message"].as_str().unwrap().contains("model rules skipped"));
}

#[test]
fn server_needs_no_gpu_and_passes_args_through() {
    let (img, ov) = vllm8();
    let router = |args: &[&str]| {
        let mut all = vec!["server", "--dry-run", "--output", "json", "--"];
        all.extend(args);
        infera(&all).root(&img).overlay(&ov.overlay()).env("INFERA_GPUS", "not-a-number").run()
    };
    let out = router(&["--router-tokenizer-path=/models/kimi-k3", "--port", "8000", "--router-pol", "kv-aware"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    assert_eq!(argv(&j), ["--router-tokenizer-path=/models/kimi-k3", "--port", "8000", "--router-pol", "kv-aware"]);
    assert_eq!(j["exec"]["argv"][2], "infera.server");
    assert_eq!(j["exec"]["added_args"], serde_json::json!([]));
    // An engine's option is not the router's: its parser would exit 2 as the pod starts.
    router(&["--router-tokenizer-path=/m", "--tensor-parallel-size", "8"])
        .assert(2, "error[router-arg-unknown]: `--tensor-parallel-size` (arg 2) is not an option of infera.server");
}

#[test]
fn sglang_short_flags_and_multi_node_layouts() {
    let img = sglang_image("3.10", None);
    img.file("/models/kimi-k3/config.json", KIMI);
    let ov = shipped_overlay();
    // argparse accepts `--tp` for `--tp-size` (sglang's docs use it): the user chose TP.
    let j = plan(&img, &ov, &["--model-path", "/models/kimi-k3", "--tp", "4"], &[]).json();
    assert_eq!(j["exec"]["added_args"], serde_json::json!(["--kv-cache-dtype", "auto", "--host", "0.0.0.0"]));
    plan(&img, &ov, &["--model-path", "/models/kimi-k3", "--tp", "16"], &[])
        .assert(78, "--tp-size 16 (set in the args), 8 GPUs visible");
    // TP 16 over two 8-GPU nodes (the LeaderWorkerSet recipe) is fine; over one it is not.
    let multi = [
        "--model-path",
        "/models/kimi-k3",
        "--tp-size",
        "16",
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--dist-init-addr",
        "leader:20000",
    ];
    let out = plan(&img, &ov, &multi, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json()["exec"]["added_args"], serde_json::json!(["--kv-cache-dtype", "auto", "--host", "0.0.0.0"]));
    plan(&img, &ov, &["--model-path", "/models/kimi-k3", "--tp-size", "32", "--nnodes", "2"], &[])
        .assert(78, "8 GPUs visible on each of 2 nodes");
}

#[test]
fn post_releases_are_inside_the_trees_range() {
    let img = sglang_image("3.10", None);
    img.rm("/opt/venv/lib/python3.10/site-packages/sglang-0.5.23.dist-info").dist(
        "/opt/venv/lib/python3.10/site-packages",
        "sglang",
        "0.5.4.post2",
    );
    let ov = shipped_overlay();
    let j = plan(&img, &ov, &["--model-path", "/m"], &[]).json();
    assert_eq!(j["engine"]["version"], "0.5.4.post2");
    assert!(j.get("error").is_none(), "{j}");
    // An unreadable version is a warning, not a refusal on a guess.
    img.rm("/opt/venv/lib/python3.10/site-packages/sglang-0.5.4.post2.dist-info").dist(
        "/opt/venv/lib/python3.10/site-packages",
        "sglang",
        "main",
    );
    let out = plan(&img, &ov, &["--model-path", "/m"], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.json()["findings"].to_string().contains("cannot read the version `main` of sglang"));
}

/// A config.json is read as a stream, whatever its size: the MLA rule and its default fire
/// on a 10 MiB config (a padding field before the ones the rules read).
#[test]
fn the_mla_rule_fires_on_a_10_mib_config() {
    let img = vllm_image(None);
    let kimi: serde_json::Value = serde_json::from_str(KIMI).unwrap();
    let mut big = String::from(r#"{"quantization_config":{"ignored_layers":["#);
    while big.len() < 10 << 20 {
        big.push_str(r#""language_model.model.layers.0.self_attn.kv_a_proj_with_mqa","#);
    }
    big.push_str(r#""x"]},"#);
    let rest = kimi.to_string();
    big.push_str(&rest[1..]);
    assert!(big.len() > 10 << 20);
    img.file("/models/kimi-k3/config.json", &big);
    let ov = shipped_overlay();
    let run = |extra: &[&str]| {
        infera(&["worker", "--dry-run", "--output", "json", "--", "--model", "/models/kimi-k3"])
            .args(extra)
            .root(&img)
            .overlay(&ov.overlay())
            .env("HIP_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
            .run()
    };
    let out = run(&["--kv-cache-dtype", "fp8"]);
    assert_eq!(out.code, 78, "{}", out.stderr);
    assert!(out.stderr.contains("error[kv-fp8-mla]: "), "{}", out.stderr);
    let out = run(&[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json()["exec"]["added_args"], serde_json::json!(KIMI_TP8_ADDED));
}

/// A config.json rewritten (truncated) while the launcher reads it is a parse finding or
/// the old facts, never a death by SIGBUS (the file is read, not mapped).
#[test]
fn a_config_truncated_while_read_is_never_a_signal() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let mut big = String::from(r#"{"pad":["#);
    while big.len() < 32 << 20 {
        big.push_str(r#""language_model.model.layers.0.self_attn.kv_a_proj_with_mqa","#);
    }
    big.push_str(r#""x"],"model_type":"llama"}"#);
    img.file("/models/kimi-k3/config.json", "{}");
    let path = img.p("/models/kimi-k3/config.json");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, path, big) = (stop.clone(), path.clone(), big.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::write(&path, &big).unwrap();
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.set_len(100).unwrap();
            }
        })
    };
    for _ in 0..20 {
        // `run` panics on a death by signal; any exit code is an answer.
        let out = infera(&["worker", "--dry-run", "--", "--model", "/models/kimi-k3"])
            .root(&img)
            .overlay(&ov.overlay())
            .env("INFERA_GPUS", "8")
            .env("INFERA_ALLOW", "engine-version")
            .run();
        // The whole config (a llama: nothing to refuse) or one cut short (a finding that
        // names it): a plan either way.
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.starts_with("infera-exec worker plan"), "{}", out.stdout);
        let cut = out.stdout.contains("`/models/kimi-k3/config.json` is not JSON");
        assert!(cut || !out.stdout.contains("model-unreadable"), "{}", out.stdout);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
}

/// `check --fail-on warn`: a plan that warns (its model unreadable: rules skipped) fails the
/// gate, said on stderr, and passes without it. `--env`/`--env-file` with `--root` are the
/// pod's variables in place of this shell's, whose variables an engine reads are named; alone
/// (no image) they are refused.
#[test]
fn fail_on_warn_and_the_pods_own_environment() {
    let (img, ov) = vllm8();
    img.file("/models/kimi-k3/config.json", "{ not json");
    let check = |extra: &[&str]| {
        let mut a = vec!["check"];
        a.extend(extra);
        a.extend(["--", "--model", "/models/kimi-k3"]);
        infera(&a).root(&img).overlay(&ov.overlay()).env("PYTHONPATH", "/ci/site").env("INFERA_GPUS", "8").run()
    };
    let plain = check(&[]);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert!(plain.stdout.contains("[model-unreadable]"), "{}", plain.stdout);
    let warn = check(&["--fail-on", "warn"]);
    assert_eq!(warn.code, 1, "{}{}", warn.stdout, warn.stderr);
    assert!(warn.stderr.contains("warning(s) and --fail-on warn (exit 1)"), "{}", warn.stderr);

    let env_file = img.p("pod.env");
    std::fs::write(&env_file, "# the pod spec's env\nHF_HUB_OFFLINE=1\nNATS_SERVER=nats://nats:4222\n").unwrap();
    let env_file = env_file.to_str().unwrap();
    let pod = check(&["--env", "PYTHONPATH=/pod/site", "--env-file", env_file, "--output", "json"]);
    assert_eq!(pod.code, 0, "{}", pod.stderr);
    let j = pod.json();
    let env = j["exec"]["env"].to_string();
    assert!(env.contains("/pod/site") && !env.contains("/ci/site"), "{env}");
    assert_eq!(j["exec"]["env"]["HF_HUB_OFFLINE"], "1", "{env}");
    let said: Vec<String> = j["findings"].as_array().unwrap().iter().map(|f| f["message"].to_string()).collect();
    assert!(
        said.iter().any(|m| m.contains("this shell's") && m.contains("PYTHONPATH") && m.contains("left out")),
        "{said:?}"
    );
    assert!(!said.iter().any(|m| m.contains("--root without --image-env")), "{said:?}");
    let added = j["exec"]["added_args"].to_string();
    assert!(added.contains(r#""--tensor-parallel-size","8""#), "INFERA_GPUS is the launcher's own: {added}");

    let alone = infera(&["check", "--env", "A=1", "--", "--model", "/m"]).overlay(&ov.overlay()).run();
    alone.assert(2, "error[env-without-image]");
}

/// As infera's parsers read the args: a vLLM worker without --model (the wrapper's
/// `parser.error("vLLM --model is required.")`) and the router with a positional argument
/// (`unrecognized arguments`) are refused, 2; a dry run of a model the run would wait for
/// says the wait.
#[test]
fn what_infera_s_parsers_exit_2_on_and_the_wait_a_dry_run_shows() {
    let (img, ov) = vllm8();
    let no_model = plan(&img, &ov, &["--max-num-seqs", "8"], &[]);
    no_model.assert(2, "error[arg-required]: vllm's parser requires --model");
    assert!(no_model.stderr.contains("`parser.error(\"vLLM --model is required.\")`"), "{}", no_model.stderr);
    let router = |args: &[&str]| {
        let mut all = vec!["server", "--dry-run", "--"];
        all.extend(args);
        infera(&all).root(&img).overlay(&ov.overlay()).run()
    };
    router(&["a0", "junk", "--router-tokenizer-path", "/models/kimi-k3"])
        .assert(2, "error[router-arg-positional]: `a0` (arg 1) is not the value of an option");
    let ok = router(&["--enable-profiling", "--router-tokenizer-path", "/models/kimi-k3", "--port", "8000"]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let waits = plan(&img, &ov, &["--model", "/models/absent"], &[("INFERA_WAIT_MODEL", "600")]);
    assert_eq!(waits.code, 0, "{}", waits.stderr);
    let j = waits.json();
    let f = j["findings"].as_array().unwrap().iter().find(|f| f["code"] == "model-unreadable").unwrap().clone();
    assert!(
        f["message"].as_str().unwrap().contains("(a real run in the pod waits up to 600 s for it: INFERA_WAIT_MODEL)"),
        "{f}"
    );
}
