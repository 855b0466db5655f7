//! The known-bad engine configurations (`crate::rule_table`, from `manifests/rules.toml`)
//! applied to what the engine will run with: the first rule that fires and is not allowed
//! refuses the run with exit 78.

use std::collections::BTreeMap;

use thiserror::Error;

use super::defaults::{Ctx, Effective};
use crate::rule_table::{OnOff, Trait, When};
use infera_exec_derive::Refuse;
use infera_facts::dialect::{Parsed, Setting};
use infera_facts::engines::{Engine, Opt};
use infera_facts::finding::Finding;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum RuleError {
    /// A rule of `manifests/rules.toml` fired.
    #[error("{message}")]
    #[refuse(code = code, exit = Refused, hint = hint)]
    Rule { code: String, message: String, hint: String },
}

/// The first rule that fires and is not allowed refuses the run.
pub(crate) fn check_rules(
    ctx: &Ctx,
    rules: &[crate::rule_table::Rule],
    eff: &Effective,
    findings: &mut Vec<Finding>,
) -> Result<(), RuleError> {
    let (e, p) = (ctx.engine, ctx.parsed);
    for rule in rules {
        if !rule.engines.is_empty() && !rule.engines.iter().any(|x| *x == e.name()) {
            continue;
        }
        let Some(evidence) = fires(&rule.when, eff, e, p) else { continue };
        let vars = vars(eff, e);
        let msg = format!("{} [{}]", fill(rule.message, &vars), evidence.join("; "));
        if ctx.req.allow.iter().any(|a| a == rule.code) {
            findings.push(Finding::warn(rule.code, format!("allowed by INFERA_ALLOW/--allow: {msg}")));
            continue;
        }
        let fix = weights_fix(ctx, eff, &rule.when).unwrap_or_else(|| fill(rule.fix, &vars));
        let hint = format!("{fix}; or set INFERA_ALLOW={} to run it anyway", rule.code);
        return Err(RuleError::Rule { code: rule.code.to_string(), message: msg, hint });
    }
    Ok(())
}

/// Evidence for each condition when all hold; None when any does not (or cannot be known).
fn fires(w: &When, eff: &Effective, e: Engine, p: &Parsed) -> Option<Vec<String>> {
    let src = |o: Opt| match p.opts.get(&o) {
        Some(occ) if occ.from_config => "set in the --config file",
        Some(_) => "set in the args",
        None => "infera's default",
    };
    let mut ev = Vec::new();
    if let Some(traits) = &w.model {
        let m = eff.model?;
        let has = |t: &Trait| match t {
            Trait::Mla => m.mla,
            Trait::Hybrid => m.hybrid,
            Trait::Multimodal => m.multimodal,
        };
        if !traits.iter().all(has) {
            return None;
        }
        ev.push(format!("{}: {}", m.config.display(), m.evidence.join(", ")));
    }
    if let Some(list) = &w.kv_cache_dtype {
        let kv = eff.kv.as_ref().filter(|kv| list.contains(&kv.as_str()))?;
        ev.push(format!("--kv-cache-dtype {kv} ({})", src(Opt::KvCacheDtype)));
    }
    if let Some(list) = &w.load_format {
        let lf = eff.load_format.as_ref().filter(|lf| list.contains(&lf.as_str()))?;
        ev.push(format!("--load-format {lf}"));
    }
    if let Some(n) = w.max_seqs_over {
        let flag = e.flag(Opt::MaxSeqs);
        match eff.max_seqs {
            Some(s) if s > n => ev.push(format!("{flag} {s}")),
            Some(_) => return None,
            None => ev.push(format!("{flag} unset (the engine's default is more than {n})")),
        }
    }
    for (cond, opt) in [(w.prefix_caching, Opt::PrefixCaching), (w.chunked_prefill, Opt::ChunkedPrefill)] {
        if let Some(want) = cond {
            ev.push(switch(p, opt, want)?);
        }
    }
    if let Some(want) = w.tp_over_gpus {
        ev.push(tp_over_gpus(eff, e, want, src(Opt::TensorParallelSize))?);
    }
    if let Some(want) = w.tp_divides_heads {
        let (tp, heads) = (eff.tp?, eff.model?.attention_heads?);
        if tp == 0 || (heads % tp == 0) != want {
            return None;
        }
        ev.push(format!("num_attention_heads {heads}, tensor parallel size {tp}"));
    }
    Some(ev)
}

/// A boolean option set as the rule wants it, with where it was set.
fn switch(p: &Parsed, opt: Opt, want: OnOff) -> Option<String> {
    let occ = p.opts.get(&opt)?;
    let is = if occ.setting == Setting::Off { OnOff::Off } else { OnOff::On };
    if is != want {
        return None;
    }
    Some(if occ.from_config {
        format!("{} (in the --config file, arg {})", occ.spelled, occ.index + 1)
    } else {
        format!("{} (arg {})", occ.spelled, occ.index + 1)
    })
}

/// TP against the GPUs of the nodes it spans (a Ray cluster places ranks itself: no bound).
fn tp_over_gpus(eff: &Effective, e: Engine, want: bool, src: &str) -> Option<String> {
    let (tp, g) = (eff.tp?, eff.gpus?);
    if eff.ray {
        return None;
    }
    let capacity = u64::from(g).saturating_mul(eff.nnodes);
    if (tp > capacity) != want {
        return None;
    }
    let nodes = if eff.nnodes > 1 { format!(" on each of {} nodes", eff.nnodes) } else { String::new() };
    Some(format!("{} {tp} ({src}), {g} GPUs visible{nodes}", e.flag(Opt::TensorParallelSize)))
}

fn vars(eff: &Effective, e: Engine) -> BTreeMap<&'static str, String> {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "?".into());
    BTreeMap::from([
        ("tp", opt(eff.tp.map(|x| x.to_string()))),
        ("gpus", opt(eff.gpus.map(|x| x.to_string()))),
        ("heads", opt(eff.model.and_then(|m| m.attention_heads).map(|x| x.to_string()))),
        ("kv_cache_dtype", opt(eff.kv.clone())),
        ("load_format", opt(eff.load_format.clone())),
        ("max_seqs", eff.max_seqs.map(|x| x.to_string()).unwrap_or_else(|| "the engine's default number of".into())),
        ("model", opt(eff.model.map(|m| m.reference.clone()))),
        ("engine", e.name().to_string()),
    ])
}

/// A rule on a tensor parallel size over the visible GPUs, where the weights do not fit those
/// GPUs either: lowering the size to them would only be refused as `weights-exceed-vram`, so
/// the fix names the GPUs the weights need, as a size the model's heads allow.
fn weights_fix(ctx: &Ctx, eff: &Effective, when: &crate::rule_table::When) -> Option<String> {
    let (vram, gpus, m) = (ctx.vram?, eff.gpus?, eff.model?);
    let bytes = m.weights.as_ref()?.bytes;
    if when.tp_over_gpus != Some(true) || bytes / u64::from(gpus.max(1)) <= vram {
        return None;
    }
    let version = ctx.facts.engine(ctx.engine).map(|i| i.version.as_str());
    let room = super::share::room(ctx.engine, version, ctx.parsed, vram, eff.tp.unwrap_or(1));
    let (need, layout) = super::layout::need(bytes, room, m.attention_heads);
    Some(format!(
        "its weights do not fit {gpus} GPUs of {:.1} GiB either: give the pod at least {need}{layout} (resources.limits \
         amd.com/gpu), or spread it over nodes (--pipeline-parallel-size with --nnodes)",
        vram as f64 / (1u64 << 30) as f64
    ))
}

fn fill(template: &str, vars: &BTreeMap<&'static str, String>) -> String {
    let mut s = template.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    s
}
