//! The router's args (`python -m infera.server ROUTER_ARGS`) as its parser reads them: a
//! plain argparse parser (infera/server/args.py) that takes an unambiguous prefix of an
//! option, requires `--router-tokenizer-path`, and exits 2 on an option it does not have —
//! before anything else starts. Read once, before the plan; the option list is recorded from
//! the real parser (`scripts/infera-option-names.py infera.server`, kept so by a test).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use thiserror::Error;

use infera_exec_derive::Refuse;

/// The router's long options, sorted.
const OPTIONS: &str = include_str!("engines/options/infera.server.txt");
/// What the router cannot start without (`required=True`).
const TOKENIZER: &str = "--router-tokenizer-path";
/// The router's options that take no value (`store_true`); every other takes one
/// (`scripts/infera-option-names.py --flags infera.server` reads them from the parser, and a
/// test keeps this list its answer).
pub const FLAGS: &[&str] = &["--enable-profiling", "--enable-scaling-api"];

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub enum RouterArgsError {
    #[error("`{written}` (arg {index}) is not an option of infera.server: its parser exits 2 with `unrecognized arguments` as the pod starts")]
    #[refuse(code = "router-arg-unknown", exit = Usage, hint = "{fix}")]
    Unknown { written: String, index: usize, fix: String },
    #[error("`{written}` (arg {index}) is ambiguous for infera.server's parser: it could be {}; it exits 2 with `ambiguous option`", candidates.join(", "))]
    #[refuse(code = "router-arg-ambiguous", exit = Usage, hint = format!("write {} in full", candidates.join(" or ")))]
    Ambiguous { written: String, index: usize, candidates: Vec<&'static str> },
    #[error("`{written}` (arg {index}) is not the value of an option, and infera.server takes no positional argument: its parser exits 2 with `unrecognized arguments`")]
    #[refuse(
        code = "router-arg-positional",
        exit = Usage,
        hint = "remove it, or give it as the value of the option it belongs to (`--router-policy VALUE`); a flag (--enable-profiling) takes none"
    )]
    Positional { written: String, index: usize },
    #[error("infera.server requires --router-tokenizer-path (the tokenizer the workers use: a local path or a Hugging Face id); its parser exits 2 without it")]
    #[refuse(code = "router-arg-missing", exit = Usage, hint = "add --router-tokenizer-path /models/<model> (the model directory the workers load)")]
    TokenizerMissing,
}

/// Whether the router's parser has this long option (exactly, or as an unambiguous prefix).
pub fn is_option(name: &str) -> bool {
    let names: Vec<&str> = OPTIONS.lines().collect();
    names.iter().filter(|n| n.starts_with(name)).count() == 1 || names.contains(&name)
}

/// What the launcher needs from the router's args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterArgs {
    /// `--router-tokenizer-path`'s value (the last one, as argparse keeps it).
    pub tokenizer: OsString,
}

impl RouterArgs {
    /// The tokenizer as a path in this container, when it is one (absolute): what the model
    /// wait waits for. A Hugging Face id is the router's to download.
    pub fn tokenizer_path(&self) -> Option<&OsString> {
        self.tokenizer.as_bytes().starts_with(b"/").then_some(&self.tokenizer)
    }

    /// Read the args as the router's parser does.
    pub fn read(args: &[OsString]) -> Result<RouterArgs, RouterArgsError> {
        let names: Vec<&'static str> = OPTIONS.lines().map(str::trim).filter(|l| l.starts_with("--")).collect();
        let mut tokenizer = None;
        let mut i = 0;
        while i < args.len() {
            let raw = args[i].as_bytes();
            // After `--` every arg is a positional one; a bare word is one unless an option
            // took it as its value (below).
            let at = if raw == b"--" { i + 1 } else { i };
            if raw == b"--" || !raw.starts_with(b"--") || raw.len() < 3 {
                let Some(written) = args.get(at) else { break };
                return Err(RouterArgsError::Positional {
                    written: written.to_string_lossy().into_owned(),
                    index: at + 1,
                });
            }
            let (name, inline) = match raw.iter().position(|b| *b == b'=') {
                Some(p) => (&raw[..p], Some(&raw[p + 1..])),
                None => (raw, None),
            };
            let written = String::from_utf8_lossy(name).into_owned();
            let full = resolve(&names, &written, i)?;
            let value = match inline {
                Some(v) => Some(OsString::from(std::ffi::OsStr::from_bytes(v))),
                None if FLAGS.contains(&full) => None,
                None => {
                    i += 1;
                    args.get(i).cloned()
                }
            };
            if full == TOKENIZER {
                tokenizer = value;
            }
            i += 1;
        }
        tokenizer.map(|tokenizer| RouterArgs { tokenizer }).ok_or(RouterArgsError::TokenizerMissing)
    }
}

/// The option `written` names, as argparse resolves it (exact, else an unambiguous prefix).
fn resolve(names: &[&'static str], written: &str, i: usize) -> Result<&'static str, RouterArgsError> {
    if let Some(n) = names.iter().find(|n| **n == written) {
        return Ok(n);
    }
    let hits: Vec<&'static str> = names.iter().copied().filter(|n| n.starts_with(written)).collect();
    match hits.as_slice() {
        [one] => Ok(one),
        [] => {
            let engines: Vec<&str> = crate::engines::Engine::all()
                .filter(|e| crate::engines::OptionList::all().any(|l| l.engine == *e && l.names().contains(&written)))
                .map(|e| e.name())
                .collect();
            let fix = if !engines.is_empty() {
                format!(
                    "it is an option of {}, not of the router: give it to the workers (`worker -- ... {written} ...`)",
                    engines.join(" and ")
                )
            } else {
                crate::suggest::closest(written, names.iter().copied()).map_or_else(
                    || "remove it (`python -m infera.server --help` lists the options)".to_string(),
                    |n| format!("did you mean {n}?"),
                )
            };
            Err(RouterArgsError::Unknown { written: written.to_string(), index: i + 1, fix })
        }
        _ => Err(RouterArgsError::Ambiguous { written: written.to_string(), index: i + 1, candidates: hits }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(args: &[&str]) -> Result<RouterArgs, RouterArgsError> {
        RouterArgs::read(&args.iter().map(OsString::from).collect::<Vec<_>>())
    }

    #[test]
    fn the_router_reads_as_argparse_does() {
        let ok = read(&["--router-tokenizer-path", "/models/k", "--port", "8000"]).unwrap();
        assert_eq!(ok.tokenizer_path(), Some(&OsString::from("/models/k")));
        // A prefix, the `=` form, the last one wins; an id is no path.
        let ok = read(&["--router-tok=/a", "--router-tokenizer-path", "Qwen/Qwen3-0.6B"]).unwrap();
        assert_eq!(ok.tokenizer, OsString::from("Qwen/Qwen3-0.6B"));
        assert_eq!(ok.tokenizer_path(), None);
        let e = read(&["--router-tokenizer-pth", "/m"]).unwrap_err();
        assert_eq!(
            e,
            RouterArgsError::Unknown {
                written: "--router-tokenizer-pth".into(),
                index: 1,
                fix: "did you mean --router-tokenizer-path?".into()
            }
        );
        assert_eq!(read(&["--port", "1"]).unwrap_err(), RouterArgsError::TokenizerMissing);
        // Positional args: the parser has none (a flag takes no value; `--` ends the options).
        let t = ["--router-tokenizer-path", "/m"];
        let positional = |w: &str, i| RouterArgsError::Positional { written: w.into(), index: i };
        assert_eq!(read(&[&["a0"], &t[..]].concat()).unwrap_err(), positional("a0", 1));
        assert_eq!(read(&[&t[..], &["--enable-profiling", "junk"]].concat()).unwrap_err(), positional("junk", 4));
        assert_eq!(read(&[&t[..], &["--", "x"]].concat()).unwrap_err(), positional("x", 4));
        assert!(read(&[&t[..], &["--enable-profiling", "--port", "-1", "--"]].concat()).is_ok());
        let RouterArgsError::Ambiguous { candidates, .. } = read(&["--router-", "x"]).unwrap_err() else { panic!() };
        assert_eq!(candidates, ["--router-backend", "--router-mode", "--router-policy", "--router-tokenizer-path"]);
        // `--` ends the options: what follows is positional, which the parser refuses.
        assert_eq!(read(&["--router-tokenizer-path", "/m", "--", "--what"]).unwrap_err(), positional("--what", 4));
    }

    #[test]
    fn the_list_is_sorted_long_options() {
        let names: Vec<&str> = OPTIONS.lines().collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert!(names.iter().all(|n| n.starts_with("--")) && names.contains(&TOKENIZER));
    }
}
