//! How infera's wrapper reaches its router and registers (infera/engine/<engine>/args.py and
//! `__main__.py`): requests and KV events over NATS unless told otherwise (both default to
//! `nats`), registration through its Pod (`kubernetes`, the default) or etcd. The wrapper uses
//! each address only after the engine has loaded: one not given is refused here, in
//! milliseconds, instead of found after the load.

use thiserror::Error;

use infera_exec_derive::Refuse;
use infera_facts::dialect::{Parsed, Setting};
use infera_facts::engines::{Engine, Opt};
use infera_facts::envvars::{self as ev, Env};
use infera_facts::finding::Finding;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum TransportError {
    #[error(
        "{uses} a NATS server, and none is given (no --nats-server, no NATS_SERVER): once the engine has \
         loaded, infera's wrapper connects to nats://127.0.0.1:4222 and retries for ever"
    )]
    #[refuse(
        code = "nats-server-missing",
        exit = Refused,
        hint = "give --nats-server URL or NATS_SERVER (with check: --env NATS_SERVER=URL); or serve without NATS, as the Kubernetes base does: --request-transport http --kv-event-transport zmq (and the router's the same); a NATS in the pod itself, on 127.0.0.1: --allow nats-server-missing"
    )]
    NatsMissing { uses: String },
    #[error(
        "--discovery-backend etcd without --etcd-endpoint: once the engine has loaded, infera's wrapper exits \
         (\"--discovery-backend=etcd requires --etcd-endpoint\")"
    )]
    #[refuse(code = "etcd-endpoint-missing", exit = Refused, hint = "give --etcd-endpoint HOST:PORT, the etcd the router watches")]
    EtcdMissing,
}

/// For the rank that serves and registers (one node, or a group's rank 0: the wrapper's
/// ranks > 0 do neither): the addresses its transports and its registration need.
/// `pod_env`: whether `env` holds the pod's own variables (in the pod, or given with --env or
/// --env-file); an image's alone says nothing of the pod's NATS_SERVER, which is then said
/// unjudged (a warning), not refused.
pub(crate) fn check(
    e: Engine,
    p: &Parsed,
    (env, pod_env): (&Env, bool),
    allow: &[String],
    findings: &mut Vec<Finding>,
) -> Result<(), infera_core::error::Refusal> {
    let value = |o: Opt| p.value_or_default(e, o);
    if value(Opt::DiscoveryBackend) == Some("etcd") && !p.is_set(Opt::EtcdEndpoint) {
        return Err(TransportError::EtcdMissing.into());
    }
    let kv_events = p.get(Opt::WrapperKvEvents) != Some(&Setting::Off);
    let mut uses = Vec::new();
    for (o, on) in [(Opt::RequestTransport, true), (Opt::KvEventTransport, kv_events)] {
        if on && value(o) == Some("nats") {
            let name = e.spelling(o).map(|s| s.primary()).unwrap_or_default();
            let how = if p.is_set(o) { "" } else { " (the wrapper's default)" };
            uses.push(format!("{name} nats{how}"));
        }
    }
    let given = p.is_set(Opt::NatsServer) || ev::get(env, ev::NATS_SERVER).is_some_and(|v| !v.is_empty());
    if uses.is_empty() || given {
        return Ok(());
    }
    let uses = format!("{} {}", uses.join(" and "), if uses.len() == 1 { "needs" } else { "need" });
    if !pod_env {
        findings.push(Finding::warn(
            "nats-server-unjudged",
            format!(
                "{uses} a NATS server: the args give none (--nats-server), and whether the pod sets NATS_SERVER \
                 is not known from the image alone; give the pod's variables with --env NATS_SERVER=URL (or \
                 --env-file), or serve without NATS: --request-transport http --kv-event-transport zmq"
            ),
        ));
        return Ok(());
    }
    let e = TransportError::NatsMissing { uses };
    infera_facts::finding::unless_allowed(allow, "nats-server-missing", e, findings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn judged(e: Engine, args: &[&str], env: &[(&str, &str)], allow: &[&str]) -> Result<Vec<String>, String> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let p = infera_facts::dialect::read(e, &args);
        let env: Env = env.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect();
        let allow: Vec<String> = allow.iter().map(|a| a.to_string()).collect();
        let mut f = Vec::new();
        check(e, &p, (&env, true), &allow, &mut f).map_err(|r| format!("{}: {}", r.code, r))?;
        Ok(f.into_iter().map(|f| f.code).collect())
    }

    #[test]
    fn a_transport_without_its_address_is_refused() {
        for e in [Engine::Vllm, Engine::Sglang] {
            let r = judged(e, &["--model", "/m"], &[], &[]).unwrap_err();
            assert!(r.starts_with("nats-server-missing: --request-transport nats (the wrapper's default) and --kv-event-transport nats (the wrapper's default) need a NATS server"), "{r}");
            let r = judged(e, &["--request-transport", "http"], &[], &[]).unwrap_err();
            assert!(
                r.starts_with(
                    "nats-server-missing: --kv-event-transport nats (the wrapper's default) needs a NATS server"
                ),
                "{r}"
            );
            // What the Kubernetes base passes; KV events off; an address by flag or variable.
            assert_eq!(
                judged(e, &["--request-transport", "http", "--kv-event-transport", "zmq"], &[], &[]),
                Ok(vec![])
            );
            assert_eq!(judged(e, &["--request-transport", "http", "--no-enable-kv-events"], &[], &[]), Ok(vec![]));
            assert_eq!(judged(e, &["--nats-server", "nats://nats:4222"], &[], &[]), Ok(vec![]));
            assert_eq!(judged(e, &[], &[("NATS_SERVER", "nats://nats:4222")], &[]), Ok(vec![]));
            assert!(judged(e, &[], &[("NATS_SERVER", "")], &[]).is_err());
            // Accepted knowingly: said, not refused.
            assert_eq!(judged(e, &[], &[], &["nats-server-missing"]), Ok(vec!["nats-server-missing".to_string()]));
            let r = judged(e, &["--discovery-backend", "etcd", "--nats-server", "n:4222"], &[], &[]).unwrap_err();
            assert!(r.starts_with("etcd-endpoint-missing: "), "{r}");
            let etcd = ["--discovery-backend", "etcd", "--etcd-endpoint", "etcd:2379", "--nats-server", "n:4222"];
            assert_eq!(judged(e, &etcd, &[], &[]), Ok(vec![]));
        }
    }

    /// From an image's variables alone, the pod's NATS_SERVER is unknown: said, not refused.
    #[test]
    fn without_the_pods_variables_it_is_unjudged() {
        let p = infera_facts::dialect::read(Engine::Vllm, &[OsString::from("--model"), OsString::from("/m")]);
        let mut f = Vec::new();
        assert!(check(Engine::Vllm, &p, (&Env::new(), false), &[], &mut f).is_ok());
        assert_eq!(f.iter().map(|f| f.code.as_str()).collect::<Vec<_>>(), ["nats-server-unjudged"]);
        assert!(f[0].message.contains("--env NATS_SERVER=URL"), "{}", f[0].message);
    }
}
