//! A rank of a multi-node group (LeaderWorkerSet, or `--nnodes`/`--node-rank`): the flags
//! each engine needs on every rank, the parallel sizes across the group, and the
//! configurations that cannot work, refused before anything loads. Every rank gets the
//! same engine args but for the rank flags (what the args digest shows).
//!
//! vLLM 0.33 (multi-node without Ray): `--nnodes N --node-rank R --master-addr A
//! --master-port P` on every rank, `--headless` (no API server) on ranks > 0; DP·PP·TP must
//! divide by N; `--data-parallel-start-rank` on the leader silently switches it to hybrid
//! load balancing; `--nnodes > 1` needs `--data-parallel-backend mp`; Ray
//! (`--distributed-executor-backend ray`) places ranks itself and cannot be combined with
//! `--nnodes`. sglang 0.5: `--nnodes N --node-rank R --dist-init-addr A:PORT`; (TP·PP) % N
//! == 0; no `--dp-size > 1` across nodes; only rank 0 serves HTTP (its `--host` is
//! pd::advertise's).

use std::ffi::OsString;

use thiserror::Error;

use crate::request::Group;
use infera_exec_derive::Refuse;
use infera_facts::dialect::{Parsed, Setting};
use infera_facts::engines::{Engine, Opt, Rendezvous};
use infera_facts::finding::Finding;
use infera_facts::net::unreachable_host;

/// The flags whose values differ per rank: left out of the args digest.
pub(crate) const RANK_OPTS: [Opt; 5] =
    [Opt::NodeRank, Opt::Headless, Opt::Host, Opt::DataParallelStartRank, Opt::AdvertiseHost];

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum RankError {
    #[error("{flag} {given} in the engine args, but this pod is {want} of the group ({source_})")]
    #[refuse(
        code = "rank-flag-contradicts",
        exit = Refused,
        hint = "drop the rank flags from the args: the launcher writes them for each rank from the group"
    )]
    Contradicts { flag: String, given: String, want: String, source_: String },
    #[error("{flag} `{value}` is not a whole number, but a group of {size} nodes needs it")]
    #[refuse(code = "arg-not-an-int", exit = Usage)]
    NotAnInt { flag: String, value: String, size: u32 },
    #[error("--distributed-executor-backend ray with --nnodes {nnodes}: vLLM cannot combine Ray with its own multi-node launch")]
    #[refuse(code = "ray-with-nnodes", exit = Refused, hint = "drop --nnodes (Ray places the ranks), or drop the Ray backend")]
    RayWithNnodes { nnodes: String },
    #[error("--data-parallel-start-rank on the leader (rank 0): vLLM then silently switches to hybrid load balancing")]
    #[refuse(code = "dp-start-rank-on-leader", exit = Refused, hint = "leave --data-parallel-start-rank out; vLLM infers each rank's from --node-rank")]
    StartRankOnLeader,
    #[error("--data-parallel-backend {value} with {size} nodes: vLLM's multi-node launch needs the mp backend")]
    #[refuse(code = "dp-backend-not-mp", exit = Refused, hint = "drop --data-parallel-backend (mp is the default)")]
    DpBackend { value: String, size: u32 },
    #[error("{sizes} = {world} processes do not divide over {nodes} nodes")]
    #[refuse(code = "world-not-divisible", exit = Refused, hint = "choose sizes whose product is a multiple of the group size (LWS size)")]
    NotDivisible { sizes: String, world: u64, nodes: u32 },
    #[error("{sizes} = {world} processes over {nodes} nodes is {share} per node, but a node has {gpus} GPUs")]
    #[refuse(code = "node-share-exceeds-gpus", exit = Refused, hint = "lower the sizes, or use a larger group or nodes with more GPUs")]
    ShareExceeds { sizes: String, world: u64, nodes: u32, share: u64, gpus: u32 },
    #[error("--dp-size {dp} across {nodes} nodes: sglang refuses data parallelism across nodes (only attention DP)")]
    #[refuse(code = "sglang-dp-across-nodes", exit = Refused, hint = "drop --dp-size, or run one group per data-parallel replica")]
    SglangDp { dp: u64, nodes: u32 },
    #[error(
        "{what} `{host}` is not an address other nodes can reach (a wildcard or loopback), in a group of {nodes} nodes"
    )]
    #[refuse(
        code = "rendezvous-unreachable",
        exit = Refused,
        hint = "use the leader's name (LWS_LEADER_ADDRESS) or the pod's IP; only the bind address may be 0.0.0.0"
    )]
    Unreachable { what: String, host: String, nodes: u32 },
}

/// The parallel sizes the engine will run with, for the rules.
pub(crate) struct Sizes {
    pub tp: Option<u64>,
    pub pp: Option<u64>,
    pub nnodes: u64,
}

/// What the user's args say about the integer options of a group.
pub(crate) struct UserSizes {
    pub tp: Option<u64>,
    pub pp: Option<u64>,
    pub dp: Option<u64>,
}

fn int_of(e: Engine, p: &Parsed, o: Opt, size: u32) -> Result<Option<(i64, String)>, RankError> {
    let Some(Setting::Value(v)) = p.get(o) else { return Ok(None) };
    let text = v.to_string_lossy().into_owned();
    match v.to_str().ok_or(infera_facts::dialect::NotAnInt).and_then(infera_facts::dialect::py_int) {
        Ok(Some(n)) => Ok(Some((n, text))),
        _ => Err(RankError::NotAnInt { flag: e.flag(o), value: text, size }),
    }
}

/// The flags a rank's planning adds, in the engine's spelling, and how they are said.
struct Added<'a> {
    e: Engine,
    args: &'a mut Vec<OsString>,
    said: Vec<String>,
}

impl Added<'_> {
    fn add(&mut self, o: Opt, v: &str) {
        if let Some(a) = infera_facts::dialect::render(self.e, o, v) {
            self.said.push(a.iter().map(|x| x.to_string_lossy()).collect::<Vec<_>>().join(" "));
            self.args.extend(a);
        }
    }
}

/// The rank flags and parallel sizes for rank `g.rank` of `g.size` nodes with `gpus` GPUs
/// each, appended to `added`; refusals for what cannot work.
pub(crate) fn plan(
    e: Engine,
    p: &Parsed,
    g: &Group,
    gpus: Option<u32>,
    user: &UserSizes,
    added: &mut Vec<OsString>,
    findings: &mut Vec<Finding>,
) -> Result<Sizes, RankError> {
    let n = g.size;
    let mut out = Added { e, args: added, said: Vec::new() };
    let ray = p.value(Opt::DistributedExecutorBackend) == Some("ray");
    // The rank flags: what the user wrote must agree with the group, the rest is added.
    for (o, want, name) in [(Opt::Nnodes, n, "a group of"), (Opt::NodeRank, g.rank, "rank")] {
        if !e.has(o) {
            continue;
        }
        match int_of(e, p, o, n)? {
            Some((given, text)) if given != i64::from(want) && !(ray && o == Opt::Nnodes) => {
                let want = if o == Opt::Nnodes { format!("{name} {n} nodes") } else { format!("{name} {want}") };
                return Err(RankError::Contradicts { flag: e.flag(o), given: text, want, source_: g.source.clone() });
            }
            Some(_) => {}
            None if ray => {}
            None => out.add(o, &want.to_string()),
        }
    }
    match e.info().rendezvous {
        Rendezvous::MasterAddr { .. } if ray => {
            let nnodes =
                p.value(Opt::Nnodes).filter(|v| infera_facts::dialect::py_int(v).ok().flatten().unwrap_or(1) > 1);
            if let Some(nn) = nnodes {
                return Err(RankError::RayWithNnodes { nnodes: nn.to_string() });
            }
            findings.push(Finding::info(
                "ranks-ray",
                format!("rank {} of {n} ({}): Ray places the ranks (--distributed-executor-backend ray); no rank flags added", g.rank, g.source),
            ));
            return Ok(Sizes { tp: user.tp, pp: user.pp, nnodes: 1 });
        }
        Rendezvous::MasterAddr { port } => master_addr(p, g, port, &mut out)?,
        Rendezvous::DistInitAddr { port } => dist_init_addr(p, g, port, &mut out)?,
    }
    let sizes = sizes(n, gpus, user, &mut out)?;
    layout_added(e, n, gpus, user, &sizes, findings);
    if !out.said.is_empty() {
        findings.push(Finding::info(
            "ranks",
            format!("added {}: rank {} of {n} nodes ({})", out.said.join(" "), g.rank, g.source),
        ));
    }
    Ok(sizes)
}

/// vLLM's native multi-node: every rank meets at `--master-addr` (the leader), ranks > 0
/// headless; no start rank on the leader, the mp DP backend only.
fn master_addr(p: &Parsed, g: &Group, port: u16, out: &mut Added) -> Result<(), RankError> {
    if g.rank == 0 && p.is_set(Opt::DataParallelStartRank) {
        return Err(RankError::StartRankOnLeader);
    }
    if let Some(b) = p.value(Opt::DataParallelBackend).filter(|b| *b != "mp") {
        return Err(RankError::DpBackend { value: b.to_string(), size: g.size });
    }
    match p.value(Opt::MasterAddr) {
        Some(a) if unreachable_host(a) => {
            return Err(RankError::Unreachable { what: "--master-addr".into(), host: a.into(), nodes: g.size });
        }
        Some(_) => {}
        None => out.add(Opt::MasterAddr, g.leader.as_deref().unwrap_or_default()),
    }
    if !p.is_set(Opt::MasterPort) {
        out.add(Opt::MasterPort, &port.to_string());
    }
    if g.rank > 0 && !p.is_set(Opt::Headless) {
        out.add(Opt::Headless, "on");
    }
    Ok(())
}

/// sglang's multi-node: every rank meets at `--dist-init-addr HOST:PORT` (the leader).
fn dist_init_addr(p: &Parsed, g: &Group, port: u16, out: &mut Added) -> Result<(), RankError> {
    match p.value(Opt::DistInitAddr) {
        Some(a) => {
            let host = a.rsplit_once(':').map_or(a, |(h, _)| h);
            if unreachable_host(host) {
                return Err(RankError::Unreachable {
                    what: "--dist-init-addr".into(),
                    host: host.into(),
                    nodes: g.size,
                });
            }
        }
        None => {
            let leader = g.leader.as_deref().unwrap_or_default();
            out.add(Opt::DistInitAddr, &format!("{leader}:{port}"));
        }
    }
    Ok(())
}

/// A layout filled in around the one size the user gave that is not one TP group a node
/// (`-tp 2` on 2 × 8 GPUs gets PP 8): a warning with the arithmetic.
fn layout_added(e: Engine, n: u32, gpus: Option<u32>, user: &UserSizes, sizes: &Sizes, findings: &mut Vec<Finding>) {
    let one_given = user.tp.is_some() != user.pp.is_some();
    let (true, Some(g), Some(t), Some(q)) = (one_given, gpus.filter(|g| *g > 0), sizes.tp, sizes.pp) else { return };
    if q > 1 && t != u64::from(g) {
        let o = if user.tp.is_some() { Opt::PipelineParallelSize } else { Opt::TensorParallelSize };
        let v = if user.tp.is_some() { q } else { t };
        let dp = user.dp.filter(|d| *d > 1).map_or_else(String::new, |d| format!(" × DP {d}"));
        let total = u64::from(n) * u64::from(g);
        findings.push(Finding::warn(
            "layout-added",
            format!(
                "added {flag} {v}: {n} nodes × {g} GPUs = {total} GPUs = TP {t} × PP {q}{dp}; set {flag} yourself for another layout",
                flag = e.flag(o)
            ),
        ));
    }
}

/// TP = a node's GPUs and PP = the nodes unless the user chose; the world must divide over
/// the nodes and a node's share must fit its GPUs.
fn sizes(n: u32, gpus: Option<u32>, user: &UserSizes, out: &mut Added) -> Result<Sizes, RankError> {
    let e = out.e;
    let nodes = u64::from(n);
    let dp = user.dp.unwrap_or(1);
    if !e.info().dp_across_nodes && dp > 1 {
        return Err(RankError::SglangDp { dp, nodes: n });
    }
    let (mut tp, mut pp) = (user.tp, user.pp);
    if let Some(g) = gpus.map(u64::from).filter(|g| *g > 0) {
        let total = nodes * g;
        match (tp, pp) {
            (None, None) => {
                tp = Some(g);
                pp = (total % (g * dp) == 0).then(|| total / (g * dp));
            }
            (Some(t), None) if total % (t * dp) == 0 => pp = Some(total / (t * dp)),
            (None, Some(q)) if total % (q * dp) == 0 => tp = Some(total / (q * dp)),
            _ => {}
        }
        if user.tp.is_none() {
            if let Some(t) = tp {
                out.add(Opt::TensorParallelSize, &t.to_string());
            }
        }
        // PP 1 is the engine's default: written only when it is more.
        if user.pp.is_none() && pp.is_some_and(|q| q > 1) {
            out.add(Opt::PipelineParallelSize, &pp.unwrap_or(1).to_string());
        }
    }
    let (t, q) = (tp.unwrap_or(1), pp.unwrap_or(1));
    let pp_tp = format!("{} {q} × {} {t}", e.flag(Opt::PipelineParallelSize), e.flag(Opt::TensorParallelSize));
    let (world, sizes) = if e.info().dp_across_nodes {
        (dp * q * t, format!("{} {dp} × {pp_tp}", e.flag(Opt::DataParallelSize)))
    } else {
        (q * t, pp_tp)
    };
    if world % nodes != 0 {
        return Err(RankError::NotDivisible { sizes, world, nodes: n });
    }
    if let Some(g) = gpus.filter(|g| *g > 0) {
        let share = world / nodes;
        if share > u64::from(g) {
            return Err(RankError::ShareExceeds { sizes, world, nodes: n, share, gpus: g });
        }
    }
    Ok(Sizes { tp, pp, nnodes: nodes })
}
