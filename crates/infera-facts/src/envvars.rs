//! Every environment variable the launcher reads or sets, in one place, and the `Env`
//! type: the environment as a value (never read from globals after `main`).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

pub type Env = BTreeMap<OsString, OsString>;

/// The value of `name`, if set.
pub fn get<'a>(env: &'a Env, name: &str) -> Option<&'a OsString> {
    env.get(OsStr::new(name))
}

/// The value of `name` if it is set and not empty.
pub fn get_nonempty<'a>(env: &'a Env, name: &str) -> Option<&'a OsString> {
    get(env, name).filter(|v| !v.is_empty())
}

/// `1`, `true`, `yes`, `on` (any case).
pub fn truthy(env: &Env, name: &str) -> bool {
    get(env, name)
        .and_then(|v| v.to_str())
        .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// Each `INFERA_*` variable the launcher reads or sets: a constant named as the variable,
/// and all of them in `OURS` (a test checks that every option's variable is there).
macro_rules! ours {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        $($(#[$doc])* pub const $name: &str = stringify!($name);)*
        pub const OURS: &[&str] = &[$($name,)* "INFERA_EXEC_TEST_PANIC", "INFERA_COMMIT"];
    };
}

ours! {
    INFERA_OVERLAY, INFERA_ROOT, INFERA_ENGINE, INFERA_REQUIRE, INFERA_FAMILY, INFERA_DRY_RUN, INFERA_OUTPUT,
    INFERA_INIT, INFERA_INIT_GROUP, INFERA_INIT_GRACE, INFERA_DROP_CAPS, INFERA_NO_NEW_PRIVS, INFERA_ALLOW,
    INFERA_GPUS, INFERA_LOG, INFERA_LOG_FORMAT, INFERA_IMAGE_ENV, INFERA_VOLUME, INFERA_DEFAULT_KV_FP8, INFERA_VERIFY,
    /// Where a refusal is also written (default `/dev/termination-log`; empty: nowhere).
    INFERA_TERMINATION_LOG,
    // The Infera stack's knobs (its `infera/engine/*` readers).
    INFERA_PYTHON, INFERA_REQUIRE_NATIVE, INFERA_EXEC_CHDIR, INFERA_SKIP_ENGINE_PATCHES, INFERA_ENGINE_PATCH_TIMEOUT,
    /// Set in the child so the payload knows which tree it runs from.
    INFERA_TREE,
    /// Not INFERA_FAMILY: that one is read to *force* a tree, and an infera-exec started by
    /// the engine must not inherit a forced family.
    INFERA_TREE_FAMILY,
    INFERA_NNODES, INFERA_NODE_RANK, INFERA_LEADER_ADDRESS, INFERA_LEADER_WAIT, INFERA_WAIT_MODEL,
    INFERA_PREFETCH,
    /// Codes to accept, one a line (`--allow-file`).
    INFERA_ALLOW_FILE,
    /// The node's name, for `infera-exec node` (a DaemonSet's downward API: `spec.nodeName`).
    INFERA_NODE_NAME,
    /// The digest of the engine args every rank of a group must share (set for the child).
    INFERA_ARGS_DIGEST,
}

/// The Infera stack's own `INFERA_*` variables (its router, kvd, engine wrappers and tests)
/// and the prefixes of its families of them: not misspellings of the launcher's.
const STACK: [&str; 9] = [
    "INFERA_ENGINE_READY_TIMEOUT",
    "INFERA_DRAIN_TIMEOUT",
    "INFERA_REQUEST_MAX_RETRIES",
    "INFERA_REQUESTS",
    "INFERA_MIGRATION_LIMIT",
    "INFERA_KV_EVENTS",
    "INFERA_K8S_LABEL_SELECTOR",
    "INFERA_NODEPORT_RANGE",
    "INFERA_E2E_MODEL_DIR",
];
const STACK_PREFIXES: [&str; 10] = [
    "INFERA_ROUTER_",
    "INFERA_KVD_",
    "INFERA_L4_",
    "INFERA_NATS_REQ_",
    "INFERA_EPP_",
    "INFERA_BREAKER_",
    "INFERA_PREFLIGHT_",
    "INFERA_ATOM_",
    "INFERA_VLLM_",
    "INFERA_ENABLE_",
];

/// `INFERA_*` variables of the environment that are neither the launcher's nor the stack's
/// but within two edits of one of the launcher's: `INFERA_DRYRUN` for `INFERA_DRY_RUN`. Each
/// with the name it is close to. (Other `INFERA_*` names are the stack's business.)
pub fn misspelt(env: &Env) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    for name in env.keys().filter_map(|k| k.to_str()).filter(|k| k.starts_with("INFERA_")) {
        if OURS.contains(&name) || STACK.contains(&name) || STACK_PREFIXES.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let near = OURS
            .iter()
            .map(|o| (strsim::damerau_levenshtein(name, o), *o))
            .filter(|(d, _)| *d <= 2)
            .min_by_key(|(d, _)| *d);
        if let Some((_, ours)) = near {
            out.push((name.to_string(), ours));
        }
    }
    out
}

pub const PATH: &str = "PATH";
/// The terminal's width, where the shell exports it (`check`'s table is fitted to it).
pub const COLUMNS: &str = "COLUMNS";
pub const PYTHONPATH: &str = "PYTHONPATH";
pub const LD_LIBRARY_PATH: &str = "LD_LIBRARY_PATH";
pub const PYTHONDONTWRITEBYTECODE: &str = "PYTHONDONTWRITEBYTECODE";
pub const PYTHONPYCACHEPREFIX: &str = "PYTHONPYCACHEPREFIX";

/// What LeaderWorkerSet injects into every pod of a group.
pub const LWS_GROUP_SIZE: &str = "LWS_GROUP_SIZE";
pub const LWS_WORKER_INDEX: &str = "LWS_WORKER_INDEX";
pub const LWS_LEADER_ADDRESS: &str = "LWS_LEADER_ADDRESS";
pub const GLOO_SOCKET_IFNAME: &str = "GLOO_SOCKET_IFNAME";
pub const NCCL_SOCKET_IFNAME: &str = "NCCL_SOCKET_IFNAME";
pub const VLLM_PORT: &str = "VLLM_PORT";
pub const VLLM_HOST_IP: &str = "VLLM_HOST_IP";
pub const VLLM_MOONCAKE_BOOTSTRAP_PORT: &str = "VLLM_MOONCAKE_BOOTSTRAP_PORT";
pub const MC_GID_INDEX: &str = "MC_GID_INDEX";
pub const POD_IP: &str = "POD_IP";
/// infera's wrappers' NATS server when `--nats-server` is not given.
pub const NATS_SERVER: &str = "NATS_SERVER";

pub const ROCM_PATH: &str = "ROCM_PATH";
pub const ROCM_HOME: &str = "ROCM_HOME";
pub const HIP_PATH: &str = "HIP_PATH";
pub const ROCR_VISIBLE_DEVICES: &str = "ROCR_VISIBLE_DEVICES";
pub const HIP_VISIBLE_DEVICES: &str = "HIP_VISIBLE_DEVICES";
pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
/// The GPU version HIP's runtime reports instead of the real one (`9.4.2`).
pub const HSA_OVERRIDE_GFX_VERSION: &str = "HSA_OVERRIDE_GFX_VERSION";
/// aiter's kernels forced on (vLLM's switch; sglang's images set theirs in ENV).
pub const VLLM_ROCM_USE_AITER: &str = "VLLM_ROCM_USE_AITER";
pub const SGLANG_USE_AITER: &str = "SGLANG_USE_AITER";

/// libibverbs: providers to load first, by name or path prefix (`:`/`;` separated);
/// `IBV_DRIVERS` is read only when `RDMAV_DRIVERS` is unset.
pub const RDMAV_DRIVERS: &str = "RDMAV_DRIVERS";
pub const IBV_DRIVERS: &str = "IBV_DRIVERS";

/// Mooncake's switch to its TCP transport (no RDMA needed).
pub const MC_FORCE_TCP: &str = "MC_FORCE_TCP";

pub const HF_HUB_CACHE: &str = "HF_HUB_CACHE";
pub const HF_HOME: &str = "HF_HOME";
pub const HOME: &str = "HOME";

/// PATH used when the environment has none (what most base images set).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelt_names_are_ours_within_two_edits_and_not_the_stacks() {
        let names =
            ["INFERA_DRYRUN", "INFERA_OVERLAYS", "INFERA_GPUS", "INFERA_KVD_SOCKET", "INFERA_REQUESTS", "INFERA_XYZ"];
        let env: Env = names.into_iter().map(|k| (k.into(), "1".into())).collect();
        assert_eq!(
            misspelt(&env),
            [("INFERA_DRYRUN".to_string(), INFERA_DRY_RUN), ("INFERA_OVERLAYS".to_string(), INFERA_OVERLAY)]
        );
    }
}
