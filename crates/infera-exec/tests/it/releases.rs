//! Every supported engine release as its own parser reads it: the option list recorded from a
//! release's parser (`src/engines/options/`, held to the parsers by
//! `scripts/check-engine-parsers --options-check`), pasted whole through `check` on an image of
//! that release, has no option refused as unknown; a misspelt option and the other engine's
//! spelling exit 2 with the spelling meant, on recorded releases and between them.

use crate::support::*;
use infera_facts::engines::{Engine, OptionList};

/// Releases of each engine, old and new, across the trees' ranges.
const VLLM: &[&str] = &["0.9.2", "0.11.0", "0.16.0", "0.20.1", "0.28.0"];
const SGLANG: &[&str] = &["0.4.6.post5", "0.5.3", "0.5.23"];

fn list(engine: Engine, release: &str) -> &'static OptionList {
    OptionList::all()
        .find(|l| l.engine == engine && l.releases.contains(&release))
        .unwrap_or_else(|| panic!("no recorded list names {} {release}", engine.name()))
}

fn kind(engine: Engine, release: &str) -> String {
    format!("{}-at-{release}", engine.name())
}

/// The release's options a command line can carry bare (a flag, no value): every one but
/// those the launcher reads values of (its own spellings, tested with values elsewhere) and
/// `--config`, which names a file.
fn pasteable(engine: Engine, l: &OptionList) -> Vec<&'static str> {
    let wrapper: Vec<&str> = engine.wrapper_options().collect();
    l.names()
        .iter()
        .copied()
        .filter(|n| *n != "--config" && engine.spelling_of(n).is_none() && !wrapper.contains(n))
        .collect()
}

fn check(img: &Fx, ov: &Fx, args: &[&str]) -> Out {
    let mut a = vec!["check", "--"];
    a.extend_from_slice(args);
    infera(&a).root(img).overlay(&ov.overlay()).env("INFERA_GPUS", "8").run()
}

#[test]
fn every_option_of_each_releases_parser_plans_on_its_image() {
    let ov = shipped_overlay();
    for (engine, releases, model) in [(Engine::Vllm, VLLM, "--model"), (Engine::Sglang, SGLANG, "--model-path")] {
        for release in releases {
            let l = list(engine, release);
            let img = image(&kind(engine, release));
            let opts = pasteable(engine, l);
            assert!(opts.len() > 100, "{release}: {} options", opts.len());
            let mut args = vec![model, "/models/kimi-k3"];
            args.extend(&opts);
            let out = check(&img, &ov, &args);
            assert!(
                !out.stderr.contains("arg-unknown") && !out.stdout.contains("arg-unknown"),
                "{release}: {}",
                out.stderr
            );
            match l.wrapper_fails {
                // The wrapper cannot build this release's parser on the image's CPython 3.12: said
                // after the args are judged, never as an unknown option.
                Some(_) => out.assert(69, "wrapper-parser-fails"),
                None => out.assert(0, ""),
            };
        }
    }
}

#[test]
fn a_typo_and_the_other_engines_spelling_exit_2_on_every_release() {
    let ov = shipped_overlay();
    // (engine, releases, its model option, [(written, the spelling meant)])
    type Case<'a> = (Engine, &'a [&'a str], &'a str, [(&'a str, &'a str); 2]);
    let cases: &[Case] = &[
        (
            Engine::Vllm,
            VLLM,
            "--model",
            [("--tensor-paralel-size", "--tensor-parallel-size"), ("--tp-size", "--tensor-parallel-size")],
        ),
        (
            Engine::Sglang,
            SGLANG,
            "--model-path",
            [("--max-runing-requests", "--max-running-requests"), ("--max-num-seqs", "--max-running-requests")],
        ),
    ];
    for (engine, releases, model, wrong) in cases {
        // The recorded releases, a build between two of them, and one newer than all.
        let between = if *engine == Engine::Vllm { "0.16.1.dev3+g1234abc" } else { "0.5.3.post9" };
        let newer = if *engine == Engine::Vllm { "0.28.1" } else { "0.5.24" };
        for release in releases.iter().copied().chain([between, newer]) {
            let img = image(&kind(*engine, release));
            for (written, meant) in wrong {
                let out = check(&img, &ov, &[model, "/models/kimi-k3", written, "8"]);
                out.assert(2, "arg-unknown").assert(2, meant);
                assert!(out.stderr.contains(written), "{release} {written}: {}", out.stderr);
            }
        }
    }
}

/// Where no list is proven, an option no recorded release has and that resembles none is a
/// warning on a release newer than every recorded one (a new release may add options), and
/// refused between recorded releases (no release around it has it).
#[test]
fn an_unknown_option_is_refused_between_recorded_releases_and_warned_after_them() {
    let ov = shipped_overlay();
    let args = ["--model-path", "/models/kimi-k3", "--brand-new-option-of-a-later-release"];
    check(&image("sglang-at-0.5.24"), &ov, &args).assert(0, "arg-unknown-unchecked");
    let out = check(&image("sglang-at-0.5.3.post9"), &ov, &args);
    out.assert(2, "arg-unknown").assert(2, "no recorded release of sglang has it");
}

/// vLLM 0.16.0's own options that 0.28.0's parser lacks (the options a 0.28.0 list refused):
/// an image of 0.16.0 plans them up to the wrapper's own failure, which is said for what it is.
#[test]
fn vllm_016s_own_options_are_not_unknown_on_its_image() {
    let ov = shipped_overlay();
    let img = image("vllm-at-0.16.0");
    for opt in ["--disable-log-requests", "--swap-space", "--calculate-kv-scales", "--max-num-partial-prefills"] {
        let out = check(&img, &ov, &["--model", "/models/kimi-k3", opt]);
        out.assert(69, "wrapper-parser-fails").assert(69, "vllm/engine/arg_utils.py");
        assert!(!out.stderr.contains("arg-unknown"), "{opt}: {}", out.stderr);
    }
    // On 0.28.0's image the same option is unknown (its parser exits 2 on it).
    check(&image("vllm-0.28"), &ov, &["--model", "/models/kimi-k3", "--disable-log-requests"]).assert(2, "arg-unknown");
}
