//! What the engine's parser would refuse in the args, judged before anything starts: an
//! option the engine's release does not have (or has only abbreviated, or spelt as the other
//! engine spells it), the wrapper's own dialect, what the parser requires, and the sizes a
//! deployment can have.

use thiserror::Error;

use infera_exec_derive::Refuse;
use infera_facts::dialect::{self, Parsed, Setting};
use infera_facts::engine_args::Flag;
use infera_facts::engines::{Engine, Opt};
use infera_facts::finding::Finding;

/// What the engine's parser would refuse in the args, or a size no deployment has.
#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum ArgvError {
    #[error("{engine}'s parser requires {option} and it is in neither the args nor a --config file: it exits 2 with `{says}` as the pod starts")]
    #[refuse(code = "arg-required", exit = Usage, hint = "give it: {option} VALUE (for the model, the directory the pod mounts, e.g. {option} /models/<model>)")]
    Required { engine: &'static str, option: &'static str, says: &'static str },
    #[error(
        "{flag} `{value}`: invalid int value; the {engine} parser exits with `argument {flag}: invalid int value`"
    )]
    #[refuse(code = "arg-not-an-int", exit = Usage, hint = "give a whole number (Python's int(): `8`, ` 8`, `1_6`)")]
    NotAnInt { flag: String, value: String, engine: &'static str },
    #[error(
        "`{written}` (arg {index}) is ambiguous for {engine} {version}'s parser: it could be {}; the engine exits 2 with `ambiguous option`",
        candidates.join(", ")
    )]
    #[refuse(code = "arg-ambiguous", exit = Usage, hint = format!("write the option you mean in full: {}", candidates.join(" or ")))]
    Ambiguous { written: String, index: usize, engine: &'static str, version: String, candidates: Vec<&'static str> },
    #[error(
        "`{written}` (arg {index}) is not an option of {module}: its parser takes no abbreviations (allow_abbrev=False) and exits 2 with `unrecognized arguments`; you meant {full}"
    )]
    #[refuse(code = "arg-abbreviation-refused", exit = Usage, hint = format!("write {full}"))]
    WrapperAbbrev { written: String, index: usize, module: &'static str, full: String },
    #[error(
        "`{written}` (arg {index}) is not an option of {module}: it parses vLLM's options with a plain argparse parser, which reads no `{form}` form (only `vllm serve` does), and exits 2 with `unrecognized arguments`"
    )]
    #[refuse(code = "arg-form-refused", exit = Usage, hint = "{fix}")]
    WrapperForm { written: String, index: usize, module: &'static str, form: &'static str, fix: String },
    #[error(
        "`{written}` (arg {index}) is not an option of {engine} {version}{whose}: its parser exits 2 with `unrecognized arguments` as the pod starts"
    )]
    #[refuse(code = "arg-unknown", exit = Usage, hint = "{fix}")]
    Unknown { written: String, index: usize, engine: &'static str, version: String, whose: String, fix: String },
    #[error("{flag} {value}: a {what} must be at least 1; the engine would fail only after it starts")]
    #[refuse(code = "parallel-size-invalid", exit = Refused, hint = "give a positive size, or leave it out for the launcher's default")]
    NotPositive { flag: String, value: String, what: &'static str },
    #[error("{flag} {value}: a {what} that large is no count of GPUs or sequences; the engine would fail only after it starts")]
    #[refuse(code = "arg-out-of-range", exit = Refused, hint = "give the size you mean, or leave it out for the launcher's default")]
    TooLarge { flag: String, value: String, what: &'static str },
    #[error("{layout}: more GPUs than a deployment has (at most {MAX_WORLD}: {} a node × {MAX_NODES} nodes); the engine would fail only after it starts", infera_facts::node::MAX_GPUS)]
    #[refuse(code = "arg-out-of-range", exit = Refused, hint = "give the sizes you mean (TP × PP is the GPUs of one replica), or leave them out for the launcher's default")]
    LayoutTooLarge { layout: String },
}

/// The most nodes a group of one model spans (a LeaderWorkerSet group, a Ray cluster): sizes
/// past it, or past [`MAX_WORLD`] GPUs, are no deployment's, and are refused before any
/// arithmetic on them.
pub(crate) const MAX_NODES: u64 = 1024;

/// The most GPUs a layout names: a node's most ([`infera_facts::node::MAX_GPUS`]) on each of
/// [`MAX_NODES`] nodes.
pub(crate) const MAX_WORLD: u64 = infera_facts::node::MAX_GPUS as u64 * MAX_NODES;

/// What an unknown option was meant to be: whose spelling it is, the fix, and the launcher's
/// option it names when it names one.
type Meant = (String, String, Option<Opt>);

/// What the engine's parser exits 2 without, given neither in the args nor their `--config`.
pub(crate) fn required(e: Engine, parsed: &Parsed) -> Result<(), ArgvError> {
    for (opt, says) in e.info().requires {
        if parsed.get(*opt).is_none() {
            let option = (e.info().spell)(*opt).and_then(|s| s.names().next()).unwrap_or_default();
            return Err(ArgvError::Required { engine: e.name(), option, says });
        }
    }
    Ok(())
}

/// Abbreviated options: ambiguous ones refused as the engine's parser refuses them; the
/// others said, with whether the engine's full option list confirmed them.
pub(crate) fn abbreviations(
    e: Engine,
    version: Option<&str>,
    list: Option<&infera_facts::engines::OptionList>,
    parsed: &Parsed,
    findings: &mut Vec<Finding>,
) -> Result<(), ArgvError> {
    if let Some((i, written, c)) = parsed.ambiguous.first() {
        return Err(ArgvError::Ambiguous {
            written: written.clone(),
            index: i + 1,
            engine: e.name(),
            version: version.unwrap_or("?").to_string(),
            candidates: c.clone(),
        });
    }
    for (i, written, full, checked) in &parsed.abbreviations {
        if *checked {
            let l = list.map_or_else(|| "?".to_string(), |l| l.label());
            findings.push(Finding::info(
                "arg-abbreviation",
                format!("`{written}` (arg {}) read as {full}, as {} {l}'s parser reads it", i + 1, e.name()),
            ));
        } else {
            findings.push(Finding::warn(
                "arg-abbreviation-unchecked",
                format!(
                    "`{written}` (arg {}) read as {full} from the launcher's own options: {} {}'s full option list is not recorded (recorded: {}), so whether its parser finds it ambiguous is not checked; write options in full",
                    i + 1,
                    e.name(),
                    version.unwrap_or("?"),
                    recorded_releases(e)
                ),
            ));
        }
    }
    Ok(())
}

/// Long options the engine's parser does not have (argparse exits 2 on them before anything
/// loads), judged with the option list recorded for the image's release: refused, with the
/// option meant (a close name, or this engine's spelling of the other engine's option).
/// Where no list is proven for the release, an option that no recorded release has is
/// refused too when the release lies between recorded ones, or when it is a typo of a
/// recorded option or the other engine's spelling (wrong on every release); any other is a
/// warning judged with the nearest list: a newer release may have added it.
pub(crate) fn unknown_options(
    e: Engine,
    version: Option<&str>,
    exact: Option<&infera_facts::engines::OptionList>,
    flags: &[Flag],
    findings: &mut Vec<Finding>,
) -> Result<Vec<Opt>, ArgvError> {
    let Some(list) = exact.or_else(|| infera_facts::engines::nearest_option_list(e, version)) else {
        return Ok(Vec::new());
    };
    let span = infera_facts::engines::span(e, version);
    let mut unreadable = Vec::new();
    // Past a few unknown options the args are not this list's engine version: the rest are
    // named once, without a guess each (a guess is a similarity search over every option).
    const ONE_BY_ONE: usize = 8;
    let (mut shown, mut more) = (0usize, Vec::new());
    for f in flags {
        let (i, raw) = (f.index, f.written.as_bytes());
        if help(e, raw, i, findings) || !raw.starts_with(b"--") {
            continue;
        }
        let name = dialect::normalise(e, raw);
        // vLLM's `--json-option.key` forms are judged by their head (the wrapper refuses them
        // on its own grounds). An option the launcher has a spelling of is held to the list
        // too: the release's parser is what refuses it.
        let head = name.split('.').next().unwrap_or_default();
        if is_prefix_of_one(list.names(), head) {
            continue; // the option, or a prefix the abbreviation checks judge
        }
        let other = other_engines(e, head);
        // With the release's own list the parser's answer is known; else: no release has it,
        // and it is another engine's, or a typo of one some release has.
        let refused = exact.is_some() || {
            let every = infera_facts::engines::every_release_names(e);
            !is_prefix_of_one(every, head)
                && (span == infera_facts::engines::Span::Within || other.is_some() || typo(every, head))
        };
        if !refused && shown == ONE_BY_ONE {
            more.push(head.to_string());
            continue;
        }
        // Only an option said one by one gets a guess (a similarity search over the list).
        let (whose, fix, opt) = other.unwrap_or_else(|| closest(e, head, list.names()));
        if refused {
            let proof = match exact {
                Some(l) => format!(" (its parser's options, recorded from {} {})", e.name(), l.label()),
                None => format!(" (no recorded release of {} has it: {})", e.name(), recorded_releases(e)),
            };
            return Err(ArgvError::Unknown {
                written: head.to_string(),
                index: i + 1,
                engine: e.name(),
                version: version.unwrap_or("?").to_string(),
                whose: format!("{whose}{proof}"),
                fix,
            });
        }
        shown += 1;
        findings.push(unchecked(e, version, list, head, i, &whose, &fix, opt));
        unreadable.extend(opt);
    }
    if !more.is_empty() {
        findings.push(Finding::warn(
            "arg-unknown-unchecked",
            format!(
                "{} more options that {} {} does not have: {}{}; with this many the args are read as another \
                 version's, and none of the engine defaults (TP, KV cache dtype, …) is added",
                more.len(),
                e.name(),
                list.label(),
                more.iter().take(ONE_BY_ONE).cloned().collect::<Vec<_>>().join(" "),
                if more.len() > ONE_BY_ONE { format!(" and {} more", more.len() - ONE_BY_ONE) } else { String::new() }
            ),
        ));
        unreadable.extend(Opt::ALL);
    }
    Ok(unreadable)
}

/// `--help`/`-h`, argparse's own: said (the wrapper prints its help and exits 0), not judged.
fn help(e: Engine, raw: &[u8], i: usize, findings: &mut Vec<Finding>) -> bool {
    if raw != b"--help" && raw != b"-h" {
        return false;
    }
    findings.push(Finding::warn(
        "engine-help",
        format!(
            "`{}` (arg {}): {}'s parser prints its help and exits 0: the engine does not start",
            String::from_utf8_lossy(raw),
            i + 1,
            e.info().module
        ),
    ));
    true
}

/// `head` is an option of the sorted list, or a prefix of one (an abbreviation).
fn is_prefix_of_one(names: &[&str], head: &str) -> bool {
    let from = names.partition_point(|n| *n < head);
    names.get(from).is_some_and(|n| n.starts_with(head))
}

/// A misspelling of an option some recorded release has (`every`): at most two edits from it.
fn typo(every: &[&str], head: &str) -> bool {
    head.len() > 8 && every.iter().any(|n| strsim::damerau_levenshtein(head, n) <= 2)
}

/// The recorded releases of an engine, said as runs: `0.9.0 to 0.9.2, 0.10.0, …`.
fn recorded_releases(e: Engine) -> String {
    let lists = (e.info().options)();
    match (lists.first(), lists.last()) {
        (Some(f), Some(l)) => format!(
            "{} lists from {} to {}",
            lists.len(),
            f.releases.first().unwrap_or(&"?"),
            l.releases.last().unwrap_or(&"?")
        ),
        _ => "none recorded".to_string(),
    }
}

/// The warning for an option the nearest recorded list lacks, on a release no list proves.
#[allow(clippy::too_many_arguments)]
fn unchecked(
    e: Engine,
    version: Option<&str>,
    list: &infera_facts::engines::OptionList,
    head: &str,
    i: usize,
    whose: &str,
    fix: &str,
    opt: Option<Opt>,
) -> Finding {
    let version = version.unwrap_or("?");
    Finding::warn(
        "arg-unknown-unchecked",
        format!(
            "`{head}` (arg {}) is not an option of {} {} (the recorded list nearest to the image's {version}){whose}; \
             if {version} does not have it either, its parser exits 2 as the pod starts ({fix}; lists are recorded \
             with `scripts/check-engine-parsers --options`){}",
            i + 1,
            e.name(),
            list.label(),
            opt.map(|o| format!("; no default is added for {}", e.flag(o))).unwrap_or_default()
        ),
    )
}

/// The unknown option as another engine's: its spelling of one of ours, or an option some
/// release of it has.
fn other_engines(e: Engine, name: &str) -> Option<Meant> {
    for other in Engine::all().filter(|o| *o != e) {
        let opt = other.spelling_of(name).map(|(o, _)| o);
        if let Some(ours) = opt.and_then(|o| e.spelling(o)).and_then(|sp| sp.names().find(|n| n.starts_with("--"))) {
            return Some((
                format!(" (it is {}'s spelling)", other.name()),
                format!("write {ours}, {}'s spelling of {}'s {name}", e.name(), other.name()),
                opt,
            ));
        }
        if infera_facts::engines::any_release_has(other, name) {
            // A similar name of this engine would be a guess at a different option.
            let fix = format!("remove it, or find {}'s option for it in its own `--help` in the image", e.name());
            return Some((format!(" (it is an option of {})", other.name()), fix, None));
        }
    }
    None
}

/// The unknown option as a misspelling of one of `names` (a similarity search over them).
fn closest(e: Engine, name: &str, names: &[&str]) -> Meant {
    match infera_facts::suggest::closest(name, names.iter().copied()) {
        Some(n) => (String::new(), format!("did you mean {n}?"), e.spelling_of(n).map(|(o, _)| o)),
        None => {
            (String::new(), format!("remove it, or check the option in {}'s own `--help` in the image", e.name()), None)
        }
    }
}

/// What the wrapper module's parser refuses on the command line where the bare engine's would
/// not: an abbreviation (infera.engine.vllm: allow_abbrev=False), and for vLLM
/// `--under_scores` and dotted `--json-option.key` (FlexibleArgumentParser forms). A
/// `--config` file is read by the engine itself, so its keys keep the engine's dialect.
pub(crate) fn wrapper_dialect(
    e: Engine,
    module: &'static str,
    flags: &[Flag],
    list: Option<&infera_facts::engines::OptionList>,
    parsed: &Parsed,
) -> Result<(), ArgvError> {
    if e.info().wrapper_abbrev {
        return Ok(());
    }
    let is_config = |i: usize| flags.iter().any(|f| f.index == i && f.written == "--config");
    if let Some((i, written, full, _)) = parsed.abbreviations.iter().find(|a| !is_config(a.0)) {
        return Err(ArgvError::WrapperAbbrev { written: written.clone(), index: i + 1, module, full: full.clone() });
    }
    let known = |name: &str| {
        list.is_some_and(|l| l.names().binary_search(&name).is_ok())
            || infera_facts::engines::Opt::ALL
                .iter()
                .any(|o| e.spelling(*o).is_some_and(|sp| sp.names().any(|n| n == name)))
    };
    for f in flags {
        let (i, name) = (f.index, f.written.as_str());
        if !name.starts_with("--") {
            continue;
        }
        // What vLLM's FlexibleArgumentParser would have read it as.
        let dashed = |s: &str| format!("--{}", s[2..].replace('_', "-"));
        let (meant, dotted) = match name.split_once('.') {
            Some((head, _)) => (dashed(head), true),
            None if name.contains('_') => (dashed(name), false),
            None => continue,
        };
        if known(&meant) {
            return Err(ArgvError::WrapperForm {
                written: name.to_string(),
                index: i + 1,
                module,
                form: if dotted { "--option.key" } else { "--under_score" },
                fix: if dotted {
                    format!(
                        "give {meant} one JSON object with every key, e.g. {meant} '{{\"kv_role\": \"kv_producer\"}}'"
                    )
                } else {
                    format!("write {meant}")
                },
            });
        }
    }
    Ok(())
}

/// The integer options the rules reason about, read as the engine's parser reads them.
pub(crate) struct Ints {
    pub(crate) tp: Option<u64>,
    pub(crate) pp: Option<u64>,
    pub(crate) dp: Option<u64>,
    pub(crate) nnodes: Option<u64>,
    pub(crate) max_seqs: Option<u64>,
}

impl Ints {
    pub(crate) fn read(e: Engine, p: &Parsed, findings: &mut Vec<Finding>) -> Result<Ints, ArgvError> {
        let mut get = |o: Opt, what: &'static str| -> Result<Option<u64>, ArgvError> {
            let Some(Setting::Value(v)) = p.get(o) else { return Ok(None) };
            let flag = e.flag(o);
            let text = v.to_string_lossy();
            let n = match v.to_str().ok_or(dialect::NotAnInt).and_then(dialect::py_int) {
                Ok(Some(n)) => n,
                Ok(None) => {
                    findings.push(Finding::warn(
                        "arg-unread",
                        format!("{flag} `{text}`: not read as a number here (non-ASCII digits); the rules that need it are not checked"),
                    ));
                    return Ok(None);
                }
                Err(dialect::NotAnInt) => {
                    return Err(ArgvError::NotAnInt { flag, value: text.into_owned(), engine: e.name() });
                }
            };
            // Echoed as written: py_int saturates what does not fit 64 bits.
            let value = text.trim().to_string();
            match u64::try_from(n) {
                Ok(_) if n == i64::MAX => Err(ArgvError::TooLarge { flag, value, what }),
                Ok(v) if v > 0 => Ok(Some(v)),
                _ => Err(ArgvError::NotPositive { flag, value, what }),
            }
        };
        let tp = get(Opt::TensorParallelSize, "tensor parallel size")?;
        let dp = get(Opt::DataParallelSize, "data parallel size")?;
        let pp = get(Opt::PipelineParallelSize, "pipeline parallel size")?;
        let nnodes = get(Opt::Nnodes, "node count")?;
        let max_seqs = get(Opt::MaxSeqs, "number of concurrent sequences")?;
        // Sizes a deployment can have: products of them are taken below, and by the rules.
        let sizes = [(Opt::TensorParallelSize, tp), (Opt::PipelineParallelSize, pp), (Opt::DataParallelSize, dp)];
        let world = sizes.iter().filter_map(|(_, v)| *v).try_fold(1u64, u64::checked_mul);
        if world.is_none_or(|w| w > MAX_WORLD) || nnodes.is_some_and(|n| n > MAX_NODES) {
            let said: Vec<String> = sizes
                .iter()
                .chain([(Opt::Nnodes, nnodes)].iter())
                .filter_map(|(o, v)| v.map(|v| format!("{} {v}", e.flag(*o))))
                .collect();
            return Err(ArgvError::LayoutTooLarge { layout: said.join(" × ") });
        }
        Ok(Ints { tp, pp, dp, nnodes, max_seqs })
    }
}
