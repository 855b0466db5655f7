//! sglang: its row of the engine table, its spellings, its recorded option lists.

use super::{ConfigFalse, Engine, Info, Normalise, Opt, PdReading, PdRole, Rendezvous, Spelling, Value, Var};

pub const INFO: Info = Info {
    engine: Engine::Sglang,
    name: "sglang",
    dist: "sglang",
    // setuptools-scm writes the literal into sglang/_version.py; sglang/version.py imports
    // it (or asks importlib.metadata), older releases had the literal there.
    version_files: &["sglang/_version.py", "sglang/version.py"],
    module: "infera.engine.sglang",
    normalise: Normalise::Verbatim,
    wrapper_abbrev: true,
    wrapper_options: include_str!("options/infera.engine.sglang.txt"),
    // No recorded release passes argparse anything its plain parser cannot take.
    parser_sources: &[],
    defaults: &[
        (Opt::DisaggregationBackend, "mooncake"),
        (Opt::DiscoveryBackend, "kubernetes"),
        (Opt::RequestTransport, "nats"),
        (Opt::KvEventTransport, "nats"),
    ],
    host_default: "sglang binds 127.0.0.1 by default",
    config_false: ConfigFalse::Omitted,
    pd_role: PdRole { opt: Opt::DisaggregationMode, json_key: None, prefill: "prefill", decode: "decode" },
    // The port LeaderWorkerSet's sglang example uses.
    pd: PdReading { bootstrap_port, transfer, own_addresses: |_, _, _| Vec::new() },
    rendezvous: Rendezvous::DistInitAddr { port: 20000 },
    dp_across_nodes: false,
    port_var: None,
    follower: None,
    wrapper_reads_only_its_command_line: &[],
    // ServerArgs.add_cli_args: `--model-path`/`--model`, required=True.
    requires: &[(Opt::Model, "the following arguments are required: --model-path/--model")],
    spell,
    options: || super::lists::SGLANG,
};

fn bootstrap_port(_: Var, value: Value) -> Option<u16> {
    value(Opt::DisaggregationBootstrapPort)?.trim().parse().ok()
}

fn transfer(_: Option<&serde_json::Value>, value: Value) -> &'static str {
    match value(Opt::DisaggregationBackend) {
        Some("nixl") => "nixl",
        Some("mooncake_tcp") => "mooncake_tcp",
        _ => "mooncake",
    }
}

// [python/sglang/srt/server_args.py]
fn spell(o: Opt) -> Option<Spelling> {
    use Spelling::*;
    match o {
        Opt::Model => Some(Value(&["--model-path", "--model"])),
        Opt::TensorParallelSize => Some(Value(&["--tp-size", "--tensor-parallel-size"])),
        Opt::KvCacheDtype => Some(Value(&["--kv-cache-dtype"])),
        Opt::MaxSeqs => Some(Value(&["--max-running-requests"])),
        Opt::LoadFormat => Some(Value(&["--load-format"])),
        Opt::PrefixCaching => Some(OffFlag("--disable-radix-cache")),
        Opt::ChunkedPrefill => Some(ValueOff { names: &["--chunked-prefill-size"], value_off: "-1" }),
        Opt::MmEncoderTpMode | Opt::KvTransferConfig | Opt::DistributedExecutorBackend => None,
        Opt::DisaggregationMode => Some(Value(&["--disaggregation-mode"])),
        Opt::DisaggregationBackend => Some(Value(&["--disaggregation-transfer-backend"])),
        Opt::HicacheStorageBackend => Some(Value(&["--hicache-storage-backend"])),
        Opt::DataParallelSize => Some(Value(&["--dp-size", "--data-parallel-size"])),
        Opt::PipelineParallelSize => Some(Value(&["--pp-size", "--pipeline-parallel-size"])),
        Opt::Nnodes => Some(Value(&["--nnodes"])),
        Opt::NodeRank => Some(Value(&["--node-rank"])),
        Opt::DistInitAddr => Some(Value(&["--dist-init-addr", "--nccl-init-addr"])),
        Opt::Host => Some(Value(&["--host"])),
        Opt::DisaggregationIbDevice => Some(Value(&["--disaggregation-ib-device"])),
        Opt::DisaggregationBootstrapPort => Some(Value(&["--disaggregation-bootstrap-port"])),
        Opt::MasterAddr | Opt::MasterPort | Opt::Headless | Opt::DataParallelStartRank | Opt::DataParallelBackend => {
            None
        }
        Opt::AdvertiseHost => Some(Value(&["--advertise-host"])),
        Opt::DiscoveryBackend => Some(Value(&["--discovery-backend"])),
        Opt::EtcdEndpoint => Some(Value(&["--etcd-endpoint"])),
        Opt::RequestTransport => Some(Value(&["--request-transport"])),
        Opt::KvEventTransport => Some(Value(&["--kv-event-transport"])),
        Opt::WrapperKvEvents => Some(Bool { on: "--enable-kv-events", off: "--no-enable-kv-events" }),
        Opt::NatsServer => Some(Value(&["--nats-server"])),
        Opt::MemFraction => Some(Value(&["--mem-fraction-static"])),
        Opt::Quantization => Some(Value(&["--quantization"])),
        Opt::Dtype => Some(Value(&["--dtype"])),
        Opt::SafetensorsLoadStrategy => None,
        Opt::PrefetchCheckpoints => Some(OnFlag("--weight-loader-prefetch-checkpoints")),
    }
}
