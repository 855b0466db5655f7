//! The real Infera stack end to end (tests/stack/e2e.py): real etcd and NATS, the real router
//! and the real vLLM/sglang wrappers from the Infera sources, each started by this launcher
//! as the container command in an engine image root, in front of the stand-in engines.

use std::process::Command;

use crate::support::{repo, BIN};

#[test]
fn completions_through_the_real_router_groups_refusal_and_drain() {
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(repo().join("tests/stack/e2e.py")).arg(BIN).arg(work.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "e2e failed:\n{stdout}\n{stderr}");
    for check in [
        "ok: the router discovered all four workers through etcd",
        "ok: tiny-vllm: /v1/chat/completions through the router answered by the stand-in vllm 0.28.0",
        "ok: tiny-sglang: /v1/chat/completions through the router answered by the stand-in sglang 0.5.23",
        "ok: tiny-vllm-group: served by the 2-node group",
        "ok: tiny-sglang-group: served by the 2-node group",
        "ok: tiny-vllm: a streamed chat completion",
        "ok: vLLM rank 1 joined the leader's rendezvous address",
        "ok: the refused worker exits 69 and says why, in its log and its termination message",
        "ok: the router still serves the other workers",
        "ok: the vLLM worker deregistered on SIGTERM",
        "ok: every container exited within 60 s of SIGTERM",
        "ok: no process is left behind",
        "e2e: all checks passed",
    ] {
        assert!(stdout.contains(check), "missing `{check}` in:\n{stdout}");
    }
}
