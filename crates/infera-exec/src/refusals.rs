//! The catalogue of refusals: every code the launcher refuses with, its exit code, what it
//! says and the hint it gives, from the error enums themselves (`#[derive(Refuse)]` gives
//! each its `REFUSALS`), the shipped rules (manifests/rules.toml) and the few refusals made
//! in place. `docs/refusals.md` is generated from it, and a test keeps the two the same and
//! every code in the source in it.

use infera_core::error::{Doc, Exit};

/// Refusals made without an error enum: the command line's, and the launcher's own.
const IN_PLACE: &[Doc] = &[
    Doc {
        code: "usage",
        exit: Exit::Usage,
        message: "the command line or a variable does not parse (clap's message: an unknown option, a value that is not one of the choices)",
        hint: Some("the option or value to write instead, when there is one"),
    },
    Doc {
        code: "output-failed",
        exit: Exit::Output,
        message: "cannot write the answer to stdout: {cause}",
        hint: None,
    },
    Doc {
        code: "internal",
        exit: Exit::Internal,
        message: "a bug: a panic, or a plan that cannot be written",
        hint: Some("this is a bug in infera-exec: please report it with the command line and the image"),
    },
];

/// Every refusal, in the order the docs list them: by exit code, then code.
pub fn all() -> Vec<Doc> {
    let kinds: &[&[Doc]] = &[
        IN_PLACE,
        crate::error::UsageError::REFUSALS,
        crate::logging::LogError::REFUSALS,
        infera_core::rootfs::RootError::REFUSALS,
        infera_overlay::overlay::OverlayError::REFUSALS,
        infera_facts::python::PythonError::REFUSALS,
        infera_facts::rocm::RocmError::REFUSALS,
        infera_facts::gpus::GpuError::REFUSALS,
        infera_facts::engine_args::ConfigError::REFUSALS,
        infera_facts::router_args::RouterArgsError::REFUSALS,
        crate::plan::select::SelectError::REFUSALS,
        crate::commands::check::MatrixError::REFUSALS,
        crate::commands::check::affinity::AffinityError::REFUSALS,
        crate::plan::safety::SafetyError::REFUSALS,
        crate::plan::caps::CapError::REFUSALS,
        crate::plan::node::NodeError::REFUSALS,
        crate::plan::gpu::GpuError::REFUSALS,
        crate::plan::memory::MemoryError::REFUSALS,
        crate::plan::argv::ArgvError::REFUSALS,
        crate::plan::model::ModelError::REFUSALS,
        crate::plan::rules::RuleError::REFUSALS,
        crate::plan::ranks::RankError::REFUSALS,
        crate::plan::pd::PdError::REFUSALS,
        crate::plan::transport::TransportError::REFUSALS,
        crate::plan::program::ProgramError::REFUSALS,
        crate::privs::PrivError::REFUSALS,
        crate::execve::ExecError::REFUSALS,
        infera_overlay::payload::PayloadError::REFUSALS,
        infera_overlay::manifest_cmd::ManifestCmdError::REFUSALS,
        infera_overlay::install::InstallError::REFUSALS,
        infera_core::image::ImageError::REFUSALS,
    ];
    let mut all: Vec<Doc> = kinds.iter().flat_map(|k| k.iter().copied()).collect();
    for r in crate::rule_table::shipped() {
        all.push(Doc { code: r.code, exit: Exit::Refused, message: r.message, hint: Some(r.fix) });
    }
    all.sort_by_key(|d| (d.exit.code(), d.code));
    all
}

/// docs/refusals.md: a row per code (codes that several cases share list each message).
pub fn markdown() -> String {
    let mut out = String::from(
        "# Refusals\n\n<!-- Generated from the code (src/refusals.rs); `INFERA_UPDATE_DOCS=1 cargo test refusals` rewrites it. -->\n\n\
         Every refusal the launcher makes: its code (the JSON `error.code`, the `error[code]` of the text, the\n\
         termination message's `[code]`), the exit code, what it says (`{name}` stands for what was found) and the\n\
         hint it gives. A rule of `manifests/rules.toml` (exit 78) can be allowed with `--allow CODE`.\n\n\
         | code | exit | what it says | hint |\n|---|---|---|---|\n",
    );
    let all = all();
    let mut i = 0;
    while i < all.len() {
        let same: Vec<&Doc> = all[i..].iter().take_while(|d| d.code == all[i].code).collect();
        let messages: Vec<String> = same.iter().map(|d| cell(d.message)).collect();
        let mut hints: Vec<String> = same.iter().filter_map(|d| d.hint.map(cell)).collect();
        hints.dedup();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            all[i].code,
            all[i].exit.code(),
            messages.join("<br>"),
            if hints.is_empty() { "-".to_string() } else { hints.join("<br>") }
        ));
        i += same.len();
    }
    out
}

/// A table cell: no line breaks, no column separators.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/refusals.md is the catalogue as generated.
    #[test]
    fn refusals_doc_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/refusals.md");
        let want = markdown();
        if std::env::var_os("INFERA_UPDATE_DOCS").is_some() {
            std::fs::write(path, &want).unwrap();
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(have == want, "docs/refusals.md is stale: run `INFERA_UPDATE_DOCS=1 cargo test refusals`");
    }

    /// No code without a row, no row without a code: every `#[refuse(code = "…")]` of the
    /// source is in the catalogue, and every code of the catalogue is in the source (or in
    /// the rules), so an enum left out of `all()` fails here.
    #[test]
    fn every_code_of_the_source_is_catalogued() {
        let mut in_source = std::collections::BTreeSet::new();
        // Every crate's sources (the overlay's and the foundations' refuse too).
        for text in sources() {
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
            for (i, l) in lines.iter().enumerate() {
                let Some((_, after)) = l.split_once("#[refuse(") else { continue };
                // `#[refuse(code = "…"` on the line, or on the next (a long attribute).
                let attr = if after.trim().is_empty() { lines.get(i + 1).copied().unwrap_or("") } else { after };
                if let Some(rest) = attr.trim_start().strip_prefix("code = \"") {
                    in_source.insert(rest.split('"').next().unwrap().to_string());
                }
            }
        }
        let listed: std::collections::BTreeSet<String> = all().iter().map(|d| d.code.to_string()).collect();
        let rules: std::collections::BTreeSet<String> =
            crate::rule_table::codes().iter().map(|c| c.to_string()).collect();
        let own: std::collections::BTreeSet<String> = IN_PLACE.iter().map(|d| d.code.to_string()).collect();
        let missing: Vec<&String> = in_source.difference(&listed).collect();
        assert!(missing.is_empty(), "codes in the source but not in refusals::all(): {missing:?}");
        let extra: Vec<&String> =
            listed.iter().filter(|c| !in_source.contains(*c) && !rules.contains(*c) && !own.contains(*c)).collect();
        assert!(extra.is_empty(), "codes catalogued but in no source: {extra:?}");
    }

    /// The text of every crate's Rust sources.
    fn sources() -> Vec<String> {
        let mut dirs = vec![std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))];
        let mut out = Vec::new();
        while let Some(d) = dirs.pop() {
            for p in std::fs::read_dir(&d).unwrap().flatten().map(|e| e.path()) {
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(std::fs::read_to_string(&p).unwrap());
                }
            }
        }
        out
    }

    /// The code (a string literal of `a-z0-9-`) at the start of `text` (after blanks), if one is.
    fn literal(text: &str) -> Option<&str> {
        let s = text.trim_start().strip_prefix('"')?.split('"').next()?;
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')).then_some(s)
    }

    /// Every finding code (`Finding::info("…"`, `Finding::warn("…"`) and every log line's
    /// (`tracing::…!(code = "…"`) of the sources has its row in docs/findings.md, and every
    /// row there a code of the sources.
    #[test]
    fn every_finding_and_log_code_is_documented() {
        let mut codes = std::collections::BTreeSet::new();
        for text in sources() {
            for call in ["Finding::info(", "Finding::warn("] {
                codes.extend(text.split(call).skip(1).filter_map(literal).map(str::to_string));
            }
            for level in ["info", "warn", "debug", "error"] {
                for after in text.split(&format!("tracing::{level}!(")).skip(1) {
                    let code = after.trim_start().strip_prefix("code = ").and_then(literal);
                    codes.extend(code.map(str::to_string));
                }
            }
        }
        assert!(codes.len() > 80, "{codes:?}");
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/findings.md")).unwrap();
        let rows: std::collections::BTreeSet<String> =
            doc.lines().filter_map(|l| l.strip_prefix("| `")?.split('`').next()).map(str::to_string).collect();
        let missing: Vec<&String> = codes.difference(&rows).collect();
        assert!(missing.is_empty(), "codes said in the source but not in docs/findings.md: {missing:?}");
        let extra: Vec<&String> = rows.difference(&codes).collect();
        assert!(extra.is_empty(), "docs/findings.md rows of no code the source says: {extra:?}");
    }
}
