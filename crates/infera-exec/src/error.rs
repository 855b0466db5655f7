//! The usage errors of the request: values the argument parser accepted but that mean
//! nothing. (The refusal types every crate shares are `infera_core::error`'s.)

use std::path::PathBuf;

/// A day: longer grace periods are a typo, and would overflow time arithmetic.
pub(crate) const MAX_GRACE_SECONDS: f64 = 86_400.0;

/// Values the argument parser accepted but that do not mean anything.
#[derive(Debug, Clone, PartialEq, thiserror::Error, infera_exec_derive::Refuse)]
pub(crate) enum UsageError {
    #[error("{said} {value}: expected a number of seconds from 0 to {MAX_GRACE_SECONDS}")]
    #[refuse(code = "init-grace-invalid", exit = Usage)]
    InitGrace { said: String, value: String },
    #[error("{said}: `{name}` is not a Linux capability")]
    #[refuse(
        code = "drop-caps-invalid",
        exit = Usage,
        hint = cap_hint(name)
    )]
    DropCaps { said: String, name: String },
    #[error("{said} names `{name}`, which is neither a refusal that may be accepted nor a warning; refusals: {}; warnings: every `warn` row of docs/findings.md", rules.join(", "))]
    #[refuse(code = "allow-unknown", exit = Usage, hint_opt = infera_facts::suggest::did_you_mean(name, rules.iter().map(String::as_str).chain(warnings.iter().copied())))]
    AllowUnknown { said: String, name: String, rules: Vec<String>, warnings: Vec<&'static str> },
    #[error("{said} `{}`: {reason}", path.display())]
    #[refuse(code = "allow-file-unreadable", exit = Missing, hint = "give a file of codes, one a line (`CODE reason…`), or leave the option out")]
    AllowFile { said: String, path: PathBuf, reason: String },
    #[error("{}=`{value}`: expected size, digest or off", infera_facts::envvars::INFERA_VERIFY)]
    #[refuse(code = "verify-invalid", exit = Usage, hint = infera_facts::suggest::did_you_mean(value, ["size", "digest", "off"]).unwrap_or_else(|| "set size or digest, or unset it".to_string()))]
    Verify { value: String },
    #[error("{said} `{value}`: expected PATH=DIR, an absolute container path (not `/`) and a local directory")]
    #[refuse(code = "volume-invalid", exit = Usage, hint = "e.g. --volume /models=/data/models (the model's files, read where the pod mounts them)")]
    Volume { said: String, value: String },
    #[error("argument {index} after `--` contains a NUL byte")]
    #[refuse(code = "arg-nul", exit = Usage, hint = "an execve argument cannot hold NUL; fix the pod spec's args")]
    ArgNul { index: usize },
    #[error("the command runs `-m {module}` (the {module_engine} engine) but --engine / INFERA_ENGINE says {engine}")]
    #[refuse(code = "engine-conflict", exit = Usage, hint = "drop INFERA_ENGINE, or run the module of that engine")]
    EngineConflict { module: String, module_engine: &'static str, engine: &'static str },
    #[error("{said} `{}` is not an absolute path", dir.display())]
    #[refuse(code = "chdir-invalid", exit = Usage, hint = "give an absolute directory of the image, e.g. /")]
    ChdirRelative { said: String, dir: PathBuf },
    #[error("{var}=`{value}` {why}")]
    #[refuse(
        code = "group-invalid",
        exit = Usage,
        hint = "LeaderWorkerSet sets LWS_GROUP_SIZE and LWS_WORKER_INDEX itself; without it give --nnodes and --node-rank (INFERA_NNODES, INFERA_NODE_RANK) as numbers"
    )]
    GroupValue { var: String, value: String, why: &'static str },
    #[error("a multi-node group needs its size and this node's rank: {have} is set but {missing} is not")]
    #[refuse(
        code = "group-partial",
        exit = Usage,
        hint = "a pod of a LeaderWorkerSet gets LWS_GROUP_SIZE, LWS_WORKER_INDEX and LWS_LEADER_ADDRESS together; set all of them (or --nnodes, --node-rank, --leader-address) or none"
    )]
    GroupPartial { have: String, missing: &'static str },
    #[error("node rank {rank} ({source_}) is outside the group of {size} nodes (0 to {})", size.saturating_sub(1))]
    #[refuse(code = "group-rank-out-of-range", exit = Usage, hint = "the rank is the pod's 0-based index in its group (LWS_WORKER_INDEX)")]
    RankOutOfRange { rank: u32, size: u32, source_: String },
    #[error("{said} describes an image read with --root, but the root is `/`: inside the container the environment already is the image's")]
    #[refuse(code = "image-env-without-root", exit = Usage, hint = "give --root DIR (the unpacked image) with it, or drop it")]
    ImageEnvWithoutRoot { said: String },
    #[error(
        "--env/--env-file describe the pod for a dry run against an image, but there is none: no --root or --image"
    )]
    #[refuse(code = "env-without-image", exit = Usage, hint = "give --image REF or --root DIR with them; in the pod, its spec's env is the environment")]
    PodEnvWithoutImage,
    #[error("--env `{key}` has no value: docker's `--env KEY` passes this shell's {key} through, but here --env gives the pod's variables, which this shell does not hold")]
    #[refuse(code = "env-pass-through", exit = Usage, hint = "give the value the pod's spec sets: --env {key}=VALUE (or a line of --env-file)")]
    PodEnvPassThrough { key: String },
    #[error("{said} {value} is for `check`: a run uses one tree and prints one plan")]
    #[refuse(
        code = "check-only",
        exit = Usage,
        hint = "judge images against trees with `infera-exec check --image REF --family all --output junit`; a run takes one --family or none"
    )]
    CheckOnly { said: String, value: String },
    #[error("--node {value} judges a plan against a node's profile; a run is judged against the node it runs on")]
    #[refuse(
        code = "node-dry-run-only",
        exit = Usage,
        hint = "use --node with `check` or `--dry-run` (CI: `infera-exec check --image REF --node mi300x`); drop it from a run"
    )]
    NodeRunOnly { value: String },
    #[error("--node `{spec}`: {why}")]
    #[refuse(
        code = "node-unknown",
        exit = Usage,
        hint = "give a part (mi100, mi210, mi250x, mi300x, mi300a, mi308x, mi325x, mi350x, mi355x, optionally :N GPUs of one node) or a file `infera-exec node -o json` wrote"
    )]
    NodeUnknown { spec: String, why: String },
    #[error("--node `{spec}`: {why}")]
    #[refuse(
        code = "node-profile-missing",
        exit = Missing,
        hint = "write the profile there first (`infera-exec node -o json` on the node, or the DaemonSet of examples/k8s/node-profile), or name a part (mi300x, mi355x, …)"
    )]
    NodeProfileMissing { spec: String, why: String },
    #[error("--node `{spec}`: {why}")]
    #[refuse(
        code = "node-profile-invalid",
        exit = Invalid,
        hint = "write the profile again on the node with this launcher (`infera-exec node -o json`); a node whose profile says so has no GPU an engine can use"
    )]
    NodeProfile { spec: String, why: String },
    #[error("--name (INFERA_NODE_NAME) `{name}` is not a node's name: a DNS subdomain of at most 253 characters, lower-case letters, digits, `-` and `.`")]
    #[refuse(code = "node-name-invalid", exit = Usage, hint = "give the node's Kubernetes name (the downward API's spec.nodeName), or leave it out")]
    NodeName { name: String },
    #[error("more than one --node makes a matrix, which is `check`'s: a dry run prints one plan")]
    #[refuse(code = "node-many-dry-run", exit = Usage, hint = "give one --node to --dry-run, or judge several with `infera-exec check`")]
    NodeMany,
    #[error("{said} `{}` does not exist", path.display())]
    #[refuse(
        code = "image-env-missing",
        exit = Missing,
        hint = missing_hint(said)
    )]
    ImageEnvMissing { said: String, path: PathBuf },
    #[error("{said} `{}`: {reason}", path.display())]
    #[refuse(
        code = "image-env-invalid",
        exit = Usage,
        hint = invalid_hint(said)
    )]
    ImageEnvInvalid { said: String, path: PathBuf, reason: String },
    #[error("a group of {size} nodes ({source_}) needs the leader's address")]
    #[refuse(code = "group-no-leader", exit = Usage, hint = "set LWS_LEADER_ADDRESS (LeaderWorkerSet does) or --leader-address / INFERA_LEADER_ADDRESS")]
    NoLeader { size: u32, source_: String },
    #[error("{said} contradicts LeaderWorkerSet's {lws}: this rank would plan for a group that does not exist")]
    #[refuse(code = "group-contradiction", exit = Usage, hint = "leave the group to LeaderWorkerSet's variables (unset the launcher's), or make them agree")]
    GroupContradiction { said: String, lws: String },
    #[error("{var}=`{value}` {why}")]
    #[refuse(code = "leader-address-invalid", exit = Usage, hint = "give the leader's DNS name (`leader-0.group.namespace`) or its IP address")]
    LeaderInvalid { var: String, value: String, why: String },
}

/// What to do about a file of variables that does not exist, by the option that named it.
fn missing_hint(said: &str) -> String {
    match said {
        "--env-file" => "write the pod's variables there first, KEY=VALUE a line (its spec's `env`)".into(),
        "--env" => "give the pod's variable as --env KEY=VALUE".into(),
        _ => "write the image's environment there first: `podman image inspect IMAGE > FILE`, or give KEY=VALUE".into(),
    }
}

/// What a file of variables must hold, by the option that named it.
fn invalid_hint(said: &str) -> String {
    match said {
        "--env-file" | "--env" => {
            "give KEY=VALUE lines, `#` comments and blank lines (docker's --env-file format)".into()
        }
        _ => "give `podman image inspect IMAGE` output, an OCI image config, KEY=VALUE lines, or one KEY=VALUE".into(),
    }
}

/// The capability meant by a name that is none, in capabilities(7)'s lower-case spelling.
fn cap_hint(name: &str) -> String {
    let bare = |s: &str| s.to_ascii_lowercase().trim_start_matches("cap_").to_string();
    let names: Vec<String> = caps::all().iter().map(|c| bare(&c.to_string())).collect();
    infera_facts::suggest::did_you_mean(&bare(name), names.iter().map(String::as_str))
        .unwrap_or_else(|| "name capabilities as in capabilities(7), e.g. net_bind_service or CAP_IPC_LOCK".to_string())
}
