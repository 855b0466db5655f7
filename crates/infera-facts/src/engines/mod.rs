//! The one engine table: everything the launcher knows about an engine (its name, its
//! distribution, where its package records its version, the infera module that wraps it,
//! how its argument parser normalises names, and how it spells each canonical option).
//!
//! Each engine's own file (`vllm.rs`, `sglang.rs`) holds its row: its [`Info`], its spelling
//! of every [`Opt`] (matched without a wildcard, so a new canonical option that an engine
//! does not spell yet is a compile error, not a silent `None`) and its recorded option lists.

use serde::Serialize;

mod sglang;
mod vllm;

macro_rules! canonical_options {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        /// An option the launcher reasons about, independent of any engine's spelling.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(rename_all = "kebab-case")]
        pub enum Opt { $($(#[$m])* $name),* }

        impl Opt {
            /// Every canonical option, in declaration order.
            pub const ALL: &'static [Opt] = &[$(Opt::$name),*];
        }
    };
}

canonical_options! {
    Model,
    TensorParallelSize,
    KvCacheDtype,
    /// Concurrent sequences (vLLM `--max-num-seqs`, sglang `--max-running-requests`).
    MaxSeqs,
    LoadFormat,
    PrefixCaching,
    ChunkedPrefill,
    MmEncoderTpMode,
    KvTransferConfig,
    DisaggregationMode,
    DisaggregationBackend,
    HicacheStorageBackend,
    DataParallelSize,
    PipelineParallelSize,
    Nnodes,
    DistributedExecutorBackend,
    /// This node's rank in a multi-node group.
    NodeRank,
    /// vLLM's rendezvous address and port for multi-node without Ray.
    MasterAddr,
    MasterPort,
    /// vLLM's ranks > 0: no API server.
    Headless,
    /// sglang's rendezvous `host:port`.
    DistInitAddr,
    /// The HTTP server's bind address (sglang's default is 127.0.0.1).
    Host,
    DataParallelStartRank,
    DataParallelBackend,
    /// sglang's RDMA devices for the PD transfer.
    DisaggregationIbDevice,
    /// sglang's bootstrap server port on the prefill (default 8998).
    DisaggregationBootstrapPort,
    /// infera's wrapper: the address it publishes for this worker.
    AdvertiseHost,
    /// infera's wrapper: `kubernetes` (its default) or `etcd`.
    DiscoveryBackend,
    /// infera's wrapper: where it registers with `--discovery-backend etcd`.
    EtcdEndpoint,
    /// infera's wrapper: how the router reaches it, `http` or `nats` (its default).
    RequestTransport,
    /// infera's wrapper: how it hands KV events to the router, `zmq` or `nats` (its default).
    KvEventTransport,
    /// infera's wrapper: whether it publishes KV events at all (on by default).
    WrapperKvEvents,
    /// infera's wrapper: the NATS server of its transports (else `$NATS_SERVER`).
    NatsServer,
    /// The fraction of a GPU's memory the engine takes for weights and KV cache (vLLM
    /// `--gpu-memory-utilization`, sglang `--mem-fraction-static`).
    MemFraction,
    /// On-the-fly quantization of the weights as they load (`--quantization`).
    Quantization,
    /// The dtype the weights are cast to as they load (`--dtype`).
    Dtype,
    /// vLLM's weight-load strategy (`lazy`, `eager`, `prefetch`).
    SafetensorsLoadStrategy,
    /// sglang's background read of the checkpoint ahead of its loader.
    PrefetchCheckpoints,
}

/// How an option is spelled in one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// Takes a value. The first name is the one the launcher writes.
    Value(&'static [&'static str]),
    /// `--enable-x` / `--no-enable-x` (argparse BooleanOptionalAction).
    Bool { on: &'static str, off: &'static str },
    /// A flag that turns the feature *off* (`--disable-radix-cache`).
    OffFlag(&'static str),
    /// A value where `value_off` means "off" (`--chunked-prefill-size -1`).
    ValueOff { names: &'static [&'static str], value_off: &'static str },
    /// A flag that turns the feature *on* (`--headless`, argparse `store_true`).
    OnFlag(&'static str),
}

impl Spelling {
    /// The name the launcher writes and names in messages.
    pub fn primary(self) -> &'static str {
        match self {
            Spelling::Value(n) | Spelling::ValueOff { names: n, .. } => n[0],
            Spelling::Bool { on, .. } => on,
            Spelling::OffFlag(f) | Spelling::OnFlag(f) => f,
        }
    }

    /// Every option string of this spelling (a slice and up to two more; no allocation).
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        let (list, a, b): (&'static [&'static str], _, _) = match self {
            Spelling::Value(n) | Spelling::ValueOff { names: n, .. } => (n, None, None),
            Spelling::Bool { on, off } => (&[], Some(on), Some(off)),
            Spelling::OffFlag(f) | Spelling::OnFlag(f) => (&[], Some(f), None),
        };
        list.iter().copied().chain(a).chain(b)
    }
}

/// How an engine's parser rewrites a long option name before matching it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalise {
    /// argparse as is.
    Verbatim,
    /// vLLM's FlexibleArgumentParser: `_` → `-` in `--long_names` (before any `=`).
    UnderscoresToDashes,
}

/// What the engine's `--config` reader makes of a `KEY: false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFalse {
    /// `--no-KEY`, when the parser has that option; else nothing (vLLM).
    NoFlag,
    /// Nothing: the keys the launcher reads are `store_true` flags (sglang).
    Omitted,
}

/// Where a prefill/decode role is written in the engine's args: the option, the key inside
/// its JSON value (if it is JSON), and the values meaning prefill and decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PdRole {
    pub opt: Opt,
    pub json_key: Option<&'static str>,
    pub prefill: &'static str,
    pub decode: &'static str,
}

/// A variable's value, by name.
pub type Var<'a> = &'a dyn Fn(&str) -> Option<String>;
/// An option's value in the engine args, by canonical option.
pub type Value<'a, 'b> = &'a dyn Fn(Opt) -> Option<&'b str>;

/// A `--kv-transfer-config` JSON value, where the engine has one.
pub type KvJson<'a> = Option<&'a serde_json::Value>;

/// How an engine's PD settings are read (functions of its args' values and the pod's
/// variables; `kv`: its `--kv-transfer-config` JSON, where it has one).
#[derive(Clone, Copy)]
pub struct PdReading {
    /// The prefill's bootstrap port as set (None: the engines' default, 8998).
    pub bootstrap_port: fn(Var, Value) -> Option<u16>,
    /// What carries the KV cache: `mooncake`, `nixl`, ...
    pub transfer: fn(KvJson, Value) -> &'static str,
    /// Hosts the engine itself publishes for its peers, `(where set, host)`,
    /// which must be routable when the group spans nodes (`prefill`: this pod serves the
    /// bootstrap).
    pub own_addresses: fn(KvJson, Var, bool) -> Vec<(String, String)>,
}

/// How an engine's ranks meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rendezvous {
    /// `--master-addr`/`--master-port` (its default written out) on every rank and
    /// `--headless` on ranks > 0, unless Ray places the ranks (vLLM).
    MasterAddr { port: u16 },
    /// `--dist-init-addr LEADER:PORT` on every rank (sglang).
    DistInitAddr { port: u16 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Vllm,
    Sglang,
}

/// One row of the engine table.
pub struct Info {
    pub engine: Engine,
    /// The name in `--engine`, manifests (`[engines.<name>]`) and messages.
    pub name: &'static str,
    /// The distribution name of its `<dist>-<version>.dist-info`.
    pub dist: &'static str,
    /// Files inside site-packages that hold the version as a literal, in order of trust.
    pub version_files: &'static [&'static str],
    /// The infera module that wraps the engine (`python -m <module>`).
    pub module: &'static str,
    pub normalise: Normalise,
    /// Whether the wrapper module's parser takes a prefix of an option for the option.
    /// infera.engine.vllm parses vLLM's options too with `allow_abbrev=False` and no
    /// FlexibleArgumentParser (infera/engine/vllm/args.py): on its command line an
    /// abbreviation, `--an_underscore` or a dotted `--json-option.key` is "unrecognized".
    pub wrapper_abbrev: bool,
    /// The wrapper module's own options (infera/engine/<engine>/args.py), which the
    /// engine's parser never sees.
    pub wrapper_options: &'static str,
    /// The engine's files (in its package's site directory) whose code builds the parser
    /// the wrapper builds: read for what a plain argparse parser cannot take.
    pub parser_sources: &'static [&'static str],
    /// Option values the engine, or infera's wrapper of it, assumes when an option is absent
    /// and the launcher must know (sglang's transfer backend defaults to mooncake; the
    /// wrappers' transports to NATS: infera/engine/<engine>/args.py, checked against the
    /// real parsers by the `stack` tests).
    pub defaults: &'static [(Opt, &'static str)],
    /// Why `--host 0.0.0.0` is added when the args set no bind address.
    pub host_default: &'static str,
    /// What a `--config` file's `KEY: false` becomes on the command line.
    pub config_false: ConfigFalse,
    /// Where the args say a prefill or decode role.
    pub pd_role: PdRole,
    /// What a prefill/decode pod's args and variables say beyond its role.
    pub pd: PdReading,
    /// How the ranks of a multi-node group find each other.
    pub rendezvous: Rendezvous,
    /// What a rank > 0 of a group runs instead of the wrapper module (`python -c`), when
    /// the wrapper cannot run one (`vllm.rs` says why).
    pub follower: Option<&'static str>,
    /// Options the wrapper reads from its command line only, not from a `--config` file,
    /// and what it does without them there: the file's values are written out.
    pub wrapper_reads_only_its_command_line: &'static [(Opt, &'static str)],
    /// What the engine's parser under infera's wrapper exits 2 without (its args or its
    /// `--config` file must give it), and what it says then.
    pub requires: &'static [(Opt, &'static str)],
    /// A variable the engine reads as its port and refuses when it is not a number (a
    /// Service of the engine's name makes Kubernetes inject `tcp://…` there).
    pub port_var: Option<&'static str>,
    /// Whether data parallelism counts in the world the nodes share (vLLM: DP × PP × TP),
    /// or is refused across nodes (sglang's multi-node DP is not the launcher's to plan).
    pub dp_across_nodes: bool,
    pub spell: fn(Opt) -> Option<Spelling>,
    /// Its recorded option lists (a later release of the same minor may add options: an
    /// abbreviation the list calls unique may then be ambiguous to the engine, which exits 2
    /// at once; it never removes the meaning of an unambiguous one without a deprecation
    /// cycle).
    pub options: fn() -> &'static [OptionList],
}

pub const TABLE: [Info; 2] = [vllm::INFO, sglang::INFO];

impl Engine {
    pub fn info(self) -> &'static Info {
        match self {
            Engine::Vllm => &TABLE[0],
            Engine::Sglang => &TABLE[1],
        }
    }
    pub fn name(self) -> &'static str {
        self.info().name
    }
    pub fn from_name(s: &str) -> Option<Engine> {
        TABLE.iter().find(|i| i.name == s).map(|i| i.engine)
    }
    /// Every engine, in table order.
    pub fn all() -> impl Iterator<Item = Engine> {
        TABLE.iter().map(|i| i.engine)
    }
    pub fn names() -> Vec<&'static str> {
        TABLE.iter().map(|i| i.name).collect()
    }
    /// How this engine spells `o` (None: it has no such option).
    pub fn spelling(self, o: Opt) -> Option<Spelling> {
        (self.info().spell)(o)
    }
    /// The launcher's option this engine spells `name` (any of its names), if any.
    pub fn spelling_of(self, name: &str) -> Option<(Opt, Spelling)> {
        Opt::ALL.iter().find_map(|o| self.spelling(*o).filter(|sp| sp.names().any(|n| n == name)).map(|sp| (*o, sp)))
    }
    /// Does the engine have this option at all?
    pub fn has(self, o: Opt) -> bool {
        self.spelling(o).is_some()
    }
    /// The name to use in messages for `o`.
    pub fn flag(self, o: Opt) -> String {
        self.spelling(o).map_or_else(|| format!("({o:?})"), |s| s.primary().to_string())
    }
    /// The wrapper module's own option names.
    pub fn wrapper_options(self) -> impl Iterator<Item = &'static str> {
        self.info().wrapper_options.lines().map(str::trim).filter(|l| l.starts_with("--"))
    }
    /// The value the engine assumes for an absent option, when the table records one.
    pub fn default_of(self, o: Opt) -> Option<&'static str> {
        self.info().defaults.iter().find(|(x, _)| *x == o).map(|(_, v)| *v)
    }
}

/// An engine's complete list of long options, recorded from its own argument parser as
/// infera's wrapper builds it (`scripts/check-engine-parsers --options`), for the releases
/// whose parsers gave exactly this set: argparse resolves an abbreviation (`--max-num`)
/// against every option it has and exits 2 on one it does not have, so the launcher can
/// only judge either with the release's own list.
pub struct OptionList {
    pub engine: Engine,
    /// The releases whose parsers gave this set, oldest first (the file's header).
    pub releases: &'static [&'static str],
    /// The range of releases this list was recorded with, every release of it on PyPI
    /// recorded: between its oldest and newest recorded release no other release is.
    range: &'static str,
    /// Why infera's wrapper cannot build this parser, when it cannot (the file's header).
    pub wrapper_fails: Option<&'static str>,
    /// Every option of every recorded release of the engine, sorted, and which are this set's.
    universe: &'static [&'static str],
    bits: &'static [u8],
    /// The names with the wrapper module's own, sorted (the wrapper parses before the engine).
    names: std::sync::OnceLock<Vec<&'static str>>,
}

/// The recorded lists, per engine, oldest first (generated by build.rs).
pub mod lists {
    use super::{Engine, OptionList};
    include!(concat!(env!("OUT_DIR"), "/options.rs"));
}

impl OptionList {
    pub const fn new(
        engine: Engine,
        releases: &'static [&'static str],
        range: &'static str,
        wrapper_fails: Option<&'static str>,
        universe: &'static [&'static str],
        bits: &'static [u8],
    ) -> Self {
        OptionList { engine, releases, range, wrapper_fails, universe, bits, names: std::sync::OnceLock::new() }
    }

    /// Every recorded list, of every engine.
    pub fn all() -> impl Iterator<Item = &'static OptionList> {
        Engine::all().flat_map(|e| (e.info().options)())
    }

    /// The engine's and its wrapper's option names, sorted, without duplicates.
    pub fn names(&self) -> &[&'static str] {
        self.names.get_or_init(|| {
            let mine = |i: &usize| self.bits.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0);
            // The universe is sorted: its members in order, the wrapper's few put in place.
            let mut v: Vec<&'static str> =
                self.universe.iter().enumerate().filter(|(i, _)| mine(i)).map(|(_, n)| *n).collect();
            insert_sorted(&mut v, self.engine.wrapper_options());
            v
        })
    }

    /// Whether this engine's (or its wrapper's) parser has the option.
    pub fn has(&self, name: &str) -> bool {
        self.names().binary_search(&name).is_ok()
    }

    fn first(&self) -> Option<infera_core::version::Version> {
        infera_core::version::parse(self.releases.first()?)
    }

    fn last(&self) -> Option<infera_core::version::Version> {
        infera_core::version::parse(self.releases.last()?)
    }

    /// The releases said in a message: `0.16.0`, or `0.17.0 to 0.17.1` for a run of them.
    pub fn label(&self) -> String {
        match self.releases {
            [] => "?".to_string(),
            [one] => (*one).to_string(),
            [first, .., last] => format!("{first} to {last}"),
        }
    }

    /// Proven for `v`: a release it was recorded from, or a build between two of them (the
    /// run of equal sets is the range the recording proves; a local tag is not a release).
    fn proves(&self, v: &infera_core::version::Version) -> bool {
        let v = v.clone().without_local();
        self.first().is_some_and(|f| f <= v) && self.last().is_some_and(|l| v <= l)
    }
}

/// The recorded option list proven for this engine version, if one is.
pub fn option_list(engine: Engine, version: Option<&str>) -> Option<&'static OptionList> {
    let v = infera_core::version::parse(version?)?;
    (engine.info().options)().iter().find(|l| l.proves(&v))
}

/// The recorded list nearest to a version no list proves: the latest recorded before it,
/// else the earliest (an unknown version: the latest).
pub fn nearest_option_list(engine: Engine, version: Option<&str>) -> Option<&'static OptionList> {
    let lists = (engine.info().options)();
    let Some(v) = version.and_then(infera_core::version::parse) else { return lists.last() };
    lists.iter().rev().find(|l| l.first().is_some_and(|f| f <= v)).or_else(|| lists.first())
}

/// Where a version stands against the releases recorded for its engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// Between the oldest and the newest release of a range recorded whole (a build between
    /// two recorded releases, with no release between them that was not recorded).
    Within,
    /// Older or newer than every recorded range, between ranges, or not known.
    Outside,
}

/// Whether `version` lies inside a range recorded whole: an option that no recorded release
/// has is then in no release around it either.
pub fn span(engine: Engine, version: Option<&str>) -> Span {
    let lists = (engine.info().options)();
    let Some(v) = version.and_then(infera_core::version::parse).map(|v| v.without_local()) else {
        return Span::Outside;
    };
    let within = lists.iter().any(|l| {
        let same: Vec<&OptionList> = lists.iter().filter(|o| o.range == l.range).collect();
        let first = same.iter().filter_map(|o| o.first()).min();
        let last = same.iter().filter_map(|o| o.last()).max();
        first.is_some_and(|f| f <= v) && last.is_some_and(|l| v <= l)
    });
    if within {
        Span::Within
    } else {
        Span::Outside
    }
}

/// Every option any recorded release of the engine has, and its wrapper's, sorted: the
/// union the lists are bitsets over (no list's own names are built to answer about all).
pub fn every_release_names(engine: Engine) -> &'static [&'static str] {
    static UNIONS: std::sync::OnceLock<Vec<(Engine, Vec<&'static str>)>> = std::sync::OnceLock::new();
    let unions = UNIONS.get_or_init(|| {
        Engine::all()
            .map(|e| {
                let mut v: Vec<&'static str> =
                    (e.info().options)().first().map(|l| l.universe.to_vec()).unwrap_or_default();
                insert_sorted(&mut v, e.wrapper_options());
                (e, v)
            })
            .collect()
    });
    unions.iter().find(|(e, _)| *e == engine).map_or(&[], |(_, v)| v.as_slice())
}

/// Put `names` into the sorted `v` where they belong, once each.
fn insert_sorted(v: &mut Vec<&'static str>, names: impl Iterator<Item = &'static str>) {
    for n in names {
        if let Err(i) = v.binary_search(&n) {
            v.insert(i, n);
        }
    }
}

/// Whether any recorded release of the engine (or its wrapper) has the option.
pub fn any_release_has(engine: Engine, name: &str) -> bool {
    every_release_names(engine).binary_search(&name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A release picks the list recorded from it, a build between two releases of one run the
    /// run's list (the run proves the range), anything else none; the span is a range
    /// recorded whole.
    #[test]
    fn a_release_picks_its_own_list() {
        let releases = |e, v| option_list(e, Some(v)).map(|l| l.releases.to_vec());
        assert_eq!(releases(Engine::Vllm, "0.16.0"), Some(vec!["0.16.0"]));
        assert_eq!(releases(Engine::Vllm, "0.16.0+rocm712"), Some(vec!["0.16.0"]));
        assert_eq!(releases(Engine::Vllm, "0.17.1"), Some(vec!["0.17.0", "0.17.1"]));
        assert_eq!(releases(Engine::Vllm, "0.20.2rc1"), Some(vec!["0.20.0", "0.20.1", "0.20.2"]));
        assert_eq!(releases(Engine::Vllm, "0.16.1.dev3+g1234"), None);
        assert_eq!(releases(Engine::Vllm, "0.30.0"), None);
        assert_eq!(releases(Engine::Sglang, "0.5.3"), Some(vec!["0.5.3rc2", "0.5.3"]));
        assert_eq!(option_list(Engine::Vllm, Some("0.1.dev19253+g5f76ae224")).map(|l| l.label()), None);
        assert_eq!(span(Engine::Vllm, Some("0.16.1.dev3")), Span::Within);
        assert_eq!(span(Engine::Vllm, Some("0.28.1")), Span::Outside, "0.29 to 0.32 are not recorded");
        assert_eq!(span(Engine::Vllm, Some("0.8.5")), Span::Outside);
        assert_eq!(span(Engine::Sglang, Some("0.5.24")), Span::Outside);
        assert_eq!(span(Engine::Sglang, Some("0.5.3.post9")), Span::Within);
        assert_eq!(nearest_option_list(Engine::Vllm, Some("0.28.1")).map(|l| l.label()).as_deref(), Some("0.28.0"));
        assert_eq!(nearest_option_list(Engine::Vllm, None).map(|l| l.label()).as_deref(), Some("0.33.0"));
        // vLLM 0.16.0's own options that 0.28.0's parser does not have.
        let (v16, v28) =
            (option_list(Engine::Vllm, Some("0.16.0")).unwrap(), option_list(Engine::Vllm, Some("0.28.0")).unwrap());
        assert!(v16.has("--disable-log-requests") && !v28.has("--disable-log-requests"));
        assert!(v16.wrapper_fails.is_some() && v28.wrapper_fails.is_none());
    }

    #[test]
    fn table_is_consistent() {
        for (i, info) in TABLE.iter().enumerate() {
            assert_eq!(info.engine.info().name, info.name, "row {i} is the row of its engine");
            assert_eq!(Engine::from_name(info.name), Some(info.engine));
            assert!(info.module.split('.').all(|p| !p.is_empty()));
            // Every spelling is an option string; no two options share one.
            let mut seen = std::collections::BTreeMap::new();
            for &o in Opt::ALL {
                for n in info.engine.spelling(o).into_iter().flat_map(Spelling::names) {
                    assert!(n.starts_with('-'), "{n}");
                    assert_eq!(seen.insert(n, o), None, "{} spells {n} twice", info.name);
                }
            }
            for (o, _) in info.defaults {
                assert!(info.engine.has(*o), "{}: a default for an option it does not spell", info.name);
            }
        }
    }
}
