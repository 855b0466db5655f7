//! vLLM: its row of the engine table, its spellings, its recorded option lists.

use super::{ConfigFalse, Engine, Info, Normalise, Opt, PdReading, PdRole, Rendezvous, Spelling, Value, Var};

pub const INFO: Info = Info {
    engine: Engine::Vllm,
    name: "vllm",
    dist: "vllm",
    // setuptools-scm writes the literal into vllm/_version.py.
    // `vllm/__init__.py` held the version literal up to 0.5 (the egg installs of ROCm's
    // older Dockerfiles); later ones import it from `_version.py`, which is no literal there.
    version_files: &["vllm/_version.py", "vllm/__init__.py"],
    module: "infera.engine.vllm",
    normalise: Normalise::UnderscoresToDashes,
    wrapper_abbrev: false,
    wrapper_options: include_str!("options/infera.engine.vllm.txt"),
    // make_arg_parser (cli_args.py) and EngineArgs.add_cli_args (arg_utils.py): up to 0.16.0
    // they pass `deprecated=True` (`--disable-log-requests`), which infera.engine.vllm's plain
    // ArgumentParser raises TypeError on before CPython 3.13 (the recorded lists' headers).
    parser_sources: &["vllm/engine/arg_utils.py", "vllm/entrypoints/openai/cli_args.py"],
    defaults: &[
        (Opt::DiscoveryBackend, "kubernetes"),
        (Opt::RequestTransport, "nats"),
        (Opt::KvEventTransport, "nats"),
    ],
    host_default:
        "with vLLM's default (None) infera.engine.vllm waits for http://None:PORT/health and never becomes ready",
    config_false: ConfigFalse::NoFlag,
    pd_role: PdRole {
        opt: Opt::KvTransferConfig,
        json_key: Some("kv_role"),
        prefill: "kv_producer",
        decode: "kv_consumer",
    },
    // ParallelConfig.master_port's default.
    pd: PdReading { bootstrap_port, transfer, own_addresses },
    rendezvous: Rendezvous::MasterAddr { port: 29501 },
    dp_across_nodes: true,
    port_var: Some(crate::envvars::VLLM_PORT),
    follower: Some(FOLLOWER),
    // infera/engine/vllm/args.py looks at its argv only.
    wrapper_reads_only_its_command_line: &[
        (Opt::Model, "without it there it exits 2, `vLLM --model is required`"),
        (Opt::KvCacheDtype, "without it there it appends --kv-cache-dtype fp8_e4m3, overriding the file"),
    ],
    // infera/engine/vllm/args.py:357 (vLLM 0.21's --model has a default: the wrapper checks).
    requires: &[(Opt::Model, "parser.error(\"vLLM --model is required.\")")],
    spell,
    options: || super::lists::VLLM,
};

/// What a vLLM rank > 0 runs instead of `-m infera.engine.vllm` (as `python -c`): the real
/// wrapper's argument split, fp8 default and ROCm environment defaults, then vLLM's own CLI
/// in this process. infera.engine.vllm would start `vllm serve … --headless` and wait for a
/// /health a headless rank never serves (infera/engine/vllm/worker.py `_wait_ready`), and
/// its follower gate only comes after that wait.
const FOLLOWER: &str = "import runpy, sys; \
from infera.engine import rocm_rdma_env as env; \
from infera.engine.vllm.args import parse_vllm_args; \
a = parse_vllm_args(sys.argv[1:]); \
[f() for f in (env.apply_rocm_rdma_env_defaults, env.apply_vllm_aiter_default, env.apply_kv_host_ip_default, env.apply_mooncake_topology_default)]; \
sys.argv = ['vllm', 'serve', *a.vllm_argv]; \
runpy.run_module('vllm.entrypoints.cli.main', run_name='__main__')";

// MooncakeConnector's bootstrap server (vllm/distributed/kv_transfer): its port variable.
fn bootstrap_port(var: Var, _: Value) -> Option<u16> {
    var(crate::envvars::VLLM_MOONCAKE_BOOTSTRAP_PORT)?.trim().parse().ok()
}

/// The transfer of the connector `--kv-transfer-config` names (a MultiConnector's first
/// known child); MooncakeConnector by default.
fn transfer(kv: Option<&serde_json::Value>, _: Value) -> &'static str {
    let of = |c: Option<&str>| match c {
        Some("MoRIIOConnector") => Some("moriio"),
        Some("NixlConnector") => Some("nixl"),
        Some("MooncakeConnector" | "MooncakeStoreConnector") => Some("mooncake"),
        _ => None,
    };
    let Some(kv) = kv else { return "mooncake" };
    let connector = kv.get("kv_connector").and_then(|c| c.as_str());
    of(connector)
        .or_else(|| {
            let children = kv.get("kv_connector_extra_config")?.get("connectors")?.as_array()?;
            children.iter().find_map(|c| of(c.get("kv_connector").and_then(|x| x.as_str())))
        })
        .unwrap_or("mooncake")
}

/// The host of the connector's bootstrap address (a prefill's) and VLLM_HOST_IP, which vLLM
/// publishes.
fn own_addresses(kv: Option<&serde_json::Value>, var: Var, prefill: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let extra = kv.and_then(|j| j.get("kv_connector_extra_config")?.get("bootstrap_server_address")?.as_str());
    if let Some(addr) = extra.filter(|_| prefill) {
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        out.push(("kv_connector_extra_config.bootstrap_server_address".to_string(), host.to_string()));
    }
    if let Some(ip) = var(crate::envvars::VLLM_HOST_IP) {
        out.push((crate::envvars::VLLM_HOST_IP.to_string(), ip));
    }
    out
}

// [vllm/engine/arg_utils.py, vllm/entrypoints/openai/cli_args.py]
fn spell(o: Opt) -> Option<Spelling> {
    use Spelling::*;
    match o {
        Opt::Model => Some(Value(&["--model"])),
        Opt::TensorParallelSize => Some(Value(&["--tensor-parallel-size", "-tp"])),
        Opt::KvCacheDtype => Some(Value(&["--kv-cache-dtype"])),
        Opt::MaxSeqs => Some(Value(&["--max-num-seqs"])),
        Opt::LoadFormat => Some(Value(&["--load-format"])),
        Opt::PrefixCaching => Some(Bool { on: "--enable-prefix-caching", off: "--no-enable-prefix-caching" }),
        Opt::ChunkedPrefill => Some(Bool { on: "--enable-chunked-prefill", off: "--no-enable-chunked-prefill" }),
        Opt::MmEncoderTpMode => Some(Value(&["--mm-encoder-tp-mode"])),
        Opt::KvTransferConfig => Some(Value(&["--kv-transfer-config"])),
        Opt::DisaggregationMode | Opt::DisaggregationBackend | Opt::HicacheStorageBackend => None,
        Opt::DataParallelSize => Some(Value(&["--data-parallel-size", "-dp"])),
        Opt::PipelineParallelSize => Some(Value(&["--pipeline-parallel-size", "-pp"])),
        Opt::Nnodes => Some(Value(&["--nnodes", "-n"])),
        Opt::DistributedExecutorBackend => Some(Value(&["--distributed-executor-backend"])),
        Opt::NodeRank => Some(Value(&["--node-rank", "-r"])),
        Opt::MasterAddr => Some(Value(&["--master-addr"])),
        Opt::MasterPort => Some(Value(&["--master-port"])),
        Opt::Headless => Some(OnFlag("--headless")),
        Opt::DistInitAddr => None,
        Opt::Host => Some(Value(&["--host"])),
        Opt::DataParallelStartRank => Some(Value(&["--data-parallel-start-rank", "-dpr"])),
        Opt::DataParallelBackend => Some(Value(&["--data-parallel-backend", "-dpb"])),
        Opt::DisaggregationIbDevice | Opt::DisaggregationBootstrapPort => None,
        Opt::AdvertiseHost => Some(Value(&["--advertise-host"])),
        Opt::DiscoveryBackend => Some(Value(&["--discovery-backend"])),
        Opt::EtcdEndpoint => Some(Value(&["--etcd-endpoint"])),
        Opt::RequestTransport => Some(Value(&["--request-transport"])),
        Opt::KvEventTransport => Some(Value(&["--kv-event-transport"])),
        Opt::WrapperKvEvents => Some(Bool { on: "--enable-kv-events", off: "--no-enable-kv-events" }),
        Opt::NatsServer => Some(Value(&["--nats-server"])),
        Opt::MemFraction => Some(Value(&["--gpu-memory-utilization"])),
        Opt::Quantization => Some(Value(&["--quantization"])),
        Opt::Dtype => Some(Value(&["--dtype"])),
        Opt::SafetensorsLoadStrategy => Some(Value(&["--safetensors-load-strategy"])),
        Opt::PrefetchCheckpoints => None,
    }
}
