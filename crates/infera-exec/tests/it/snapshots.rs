//! Snapshots of the dry run, text and JSON, over image kinds × roles × common args: every
//! message and every planned argument is pinned, so a change to any of them shows up as a
//! reviewed snapshot diff (`INSTA_UPDATE=always cargo nextest run snapshots` rewrites them;
//! `git diff crates/infera-exec/tests/it/snapshots` is the review).

use crate::support::*;

/// (name, launcher args, extra environment). `{model}`, `{tp}` and `{seqs}` are the engine's
/// spellings of the model, the tensor parallel size and the concurrent sequences.
type Case = (&'static str, &'static [&'static str], &'static [(&'static str, &'static str)]);
const CASES: &[Case] = &[
    ("worker", &["worker", "--dry-run", "--", "{model}", "/models/kimi-k3", "{seqs}", "128"], &[]),
    (
        "worker-kv-fp8",
        &["worker", "--dry-run", "--", "{model}", "/models/kimi-k3", "--kv-cache-dtype", "fp8_e4m3"],
        &[],
    ),
    (
        "worker-explicit-tp",
        &["worker", "--dry-run", "--", "{model}", "/models/kimi-k3", "{tp}", "4"],
        &[("INFERA_GPUS", "8")],
    ),
    (
        "worker-rank1",
        &["worker", "--dry-run", "--", "{model}", "/models/kimi-k3"],
        &[("INFERA_GPUS", "8"), ("LWS_LEADER_ADDRESS", "10.1.2.3"), ("LWS_GROUP_SIZE", "2"), ("LWS_WORKER_INDEX", "1")],
    ),
    ("worker-missing-model", &["worker", "--dry-run", "--", "{model}", "/models/absent"], &[]),
    (
        "server",
        &[
            "server",
            "--dry-run",
            "--",
            "--router-tokenizer-path=Qwen/Qwen3-0.6B",
            "--port",
            "8000",
            "--router-policy",
            "cache_aware",
        ],
        &[],
    ),
    ("check-hipfile", &["check", "--require", "hipfile"], &[]),
];

fn snapshot(kind: &str, engine: &str) {
    let img = image(kind);
    let ov = shipped_overlay();
    // vLLM 0.33's images (ROCm 7.2.3, ROCm 10) are outside this release's range (its wrapper
    // cannot import 0.33's parser): their plans are those of an overlay release built for it.
    if matches!(kind, "vllm-rocm72" | "vllm-rocm10") {
        built_for(&ov.overlay(), "vllm", ">=0.9, <0.34");
    }
    let (model, tp, seqs) = if engine == "sglang" {
        ("--model-path", "--tp-size", "--max-running-requests")
    } else {
        ("--model", "--tensor-parallel-size", "--max-num-seqs")
    };
    for (name, args, env) in CASES {
        let args: Vec<&str> = args
            .iter()
            .map(|a| {
                if *a == "{model}" {
                    model
                } else if *a == "{tp}" {
                    tp
                } else if *a == "{seqs}" {
                    seqs
                } else {
                    a
                }
            })
            .collect();
        for json in [false, true] {
            let mut a = args.clone();
            if json {
                a.insert(1, "--output");
                a.insert(2, "json");
            }
            if args[0] == "worker" {
                a.insert(1, "--engine");
                a.insert(2, engine);
            }
            let mut r = infera(&a).root(&img).overlay(&ov.overlay());
            for (k, v) in *env {
                r = r.env(k, *v);
            }
            let out = r.run();
            let shown = format!("exit {}\n--- stdout\n{}--- stderr\n{}", out.code, out.stdout, out.stderr)
                .replace(&ov.overlay().display().to_string(), "[OVERLAY]")
                .replace(&img.path().display().to_string(), "[ROOT]");
            let suffix = if json { "json" } else { "text" };
            insta::assert_snapshot!(format!("{kind}-{engine}-{name}-{suffix}"), shown, &a.join(" "));
        }
    }
}

#[test]
fn vllm() {
    snapshot("vllm", "vllm");
}

#[test]
fn vllm_rocm72() {
    snapshot("vllm-rocm72", "vllm");
}

#[test]
fn vllm_0_28() {
    snapshot("vllm-0.28", "vllm");
}

#[test]
fn vllm_rocm10() {
    snapshot("vllm-rocm10", "vllm");
}

#[test]
fn sglang_rocm700() {
    snapshot("sglang-rocm700", "sglang");
}

#[test]
fn sglang_rocm700_vllm() {
    snapshot("sglang-rocm700", "vllm");
}

#[test]
fn sglang_rocm720() {
    snapshot("sglang-rocm720", "sglang");
}

#[test]
fn sglang_rocm724() {
    snapshot("sglang-rocm724", "sglang");
}

#[test]
fn sglang_rocm1000() {
    snapshot("sglang-rocm1000", "sglang");
}

#[test]
fn sglang_pip() {
    snapshot("sglang-pip", "sglang");
}
