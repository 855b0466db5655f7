//! The engine's share of a GPU's memory, for the weights and the KV cache: what a rule on the
//! memory and a hint to more GPUs both hold the weights to.

use infera_facts::dialect::Parsed;
use infera_facts::engines::{Engine, Opt};

/// The engine's share of a GPU's memory for the weights and the KV cache.
pub(super) enum Share {
    /// `option` names it in messages, `said` its value as said, `raise` the option to raise.
    Known { option: &'static str, fraction: f64, said: String, raise: &'static str },
    /// Why it is not known.
    Unknown(String),
}

/// The sglang releases whose default `--mem-fraction-static` rule is read
/// (server_args.py, `arg_groups/memory_hook.py` from 0.5.2x): 0.4.6.post5 up to 0.5.23.
const SGLANG_RULE: &str = ">=0.4.6.post5, <=0.5.23";

/// The engine's share: vLLM's `--gpu-memory-utilization` (0.9 by default); sglang's
/// `--mem-fraction-static`, or its default rule's largest share for this GPU and TP × PP.
/// Every release of the rule reserves at least 1.5 GiB + TP×PP/8 GiB of a GPU (0.5.23's
/// post-capture sizing reserves exactly that, the others more: 0.4.6's 18 GiB on a GPU over
/// 96 GiB, 0.5.10's 10 GiB over 60 GiB): what is refused is refused under every release.
pub(super) fn share_of(engine: Engine, version: Option<&str>, parsed: &Parsed, vram: u64, ranks: u64) -> Share {
    let given = parsed.value(Opt::MemFraction).map(|v| (v, v.parse::<f64>()));
    match (engine, given) {
        (Engine::Vllm, Some((v, Ok(f)))) => Share::Known {
            option: "--gpu-memory-utilization",
            fraction: f,
            said: v.to_string(),
            raise: "--gpu-memory-utilization",
        },
        (Engine::Vllm, None) => Share::Known {
            option: "--gpu-memory-utilization",
            fraction: 0.9,
            said: "0.9 (vLLM's default)".into(),
            raise: "--gpu-memory-utilization",
        },
        (Engine::Sglang, Some((v, Ok(f)))) => Share::Known {
            option: "--mem-fraction-static",
            fraction: f,
            said: v.to_string(),
            raise: "--mem-fraction-static",
        },
        (_, Some((v, Err(_)))) => Share::Unknown(format!("`{v}` is not a fraction")),
        (Engine::Sglang, None) => sglang_default(version, vram, ranks),
    }
}

/// What of a GPU's `vram` the engine gives the weights and the KV cache: its share where
/// known, else all of it.
pub(super) fn room(engine: Engine, version: Option<&str>, parsed: &Parsed, vram: u64, ranks: u64) -> u64 {
    match share_of(engine, version, parsed, vram, ranks) {
        Share::Known { fraction, .. } => (vram as f64 * fraction.clamp(0.0, 1.0)) as u64,
        Share::Unknown(_) => vram,
    }
}

/// sglang's default share, where its release's rule is known.
fn sglang_default(version: Option<&str>, vram: u64, ranks: u64) -> Share {
    let known = version
        .and_then(infera_core::version::parse)
        .is_some_and(|v| infera_core::version::Spec::parse(SGLANG_RULE).is_ok_and(|s| s.contains(&v)));
    if !known {
        let v = version.unwrap_or("of an unknown version");
        return Share::Unknown(format!(
            "sglang {v} sizes its share of a GPU by a rule of its release's when --mem-fraction-static is not given, \
             and this launcher knows the rule of {SGLANG_RULE} only; give --mem-fraction-static"
        ));
    }
    let reserve = (3u64 << 29).saturating_add(ranks.saturating_mul(1 << 27));
    let fraction = vram.saturating_sub(reserve) as f64 / vram.max(1) as f64;
    Share::Known {
        option: "sglang's default --mem-fraction-static",
        fraction,
        said: format!(
            "(at most {:.3} on this GPU at TP×PP {ranks}: its rule reserves at least 1.5 GiB + TP×PP/8 GiB)",
            fraction
        ),
        raise: "--mem-fraction-static",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn sglangs_default_share_where_its_rule_is_read_else_unjudged() {
        let none = Parsed::default();
        let Share::Known { fraction, said, .. } = share_of(Engine::Sglang, Some("0.5.23"), &none, 192 * GIB, 8) else {
            panic!("0.5.23's rule is read");
        };
        // 1.5 GiB + 8/8 GiB of a 192 GiB GPU reserved.
        assert!((fraction - (192.0 - 2.5) / 192.0).abs() < 1e-9, "{fraction}");
        assert!(said.starts_with("(at most 0.987 on this GPU at TP×PP 8"), "{said}");
        assert!(matches!(share_of(Engine::Sglang, Some("0.4.6.post5"), &none, 64 * GIB, 1), Share::Known { .. }));
        for v in [Some("0.6.0"), Some("0.4.5"), None, Some("0.1.dev5+gabc")] {
            assert!(matches!(share_of(Engine::Sglang, v, &none, 192 * GIB, 8), Share::Unknown(_)), "{v:?}");
        }
        let Share::Known { fraction, .. } = share_of(Engine::Vllm, None, &none, 192 * GIB, 8) else { panic!() };
        assert_eq!(fraction, 0.9);
        assert_eq!(room(Engine::Vllm, None, &none, 100, 1), 90);
        assert_eq!(room(Engine::Sglang, None, &none, 100, 1), 100, "unknown: the whole GPU");
    }
}
