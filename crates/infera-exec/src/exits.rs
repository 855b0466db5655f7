//! The exit codes, once: what each means, what typically causes it and which commands give
//! it. Every `--help`, README.md's table and docs/command-line.md's are rendered from this
//! table (a test keeps the documents in step: `INFERA_UPDATE_DOCS=1 cargo test -p
//! infera-exec exits` rewrites them).

/// The commands, as far as their exit codes differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmd {
    /// `worker`, `server` and the command form: plan, then exec (or wait, or init).
    Run,
    Check,
    /// `node`, `version`, `completion`: they read and print.
    Print,
    Install,
    Manifest,
}

pub(crate) struct Code {
    pub code: &'static str,
    /// As `--help` lists it.
    pub short: &'static str,
    /// As the documents' tables say it (README.md, docs/command-line.md: rendered by the tests).
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests that render the documents' tables"))]
    pub meaning: &'static str,
    /// Typical cause → fix (README.md).
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests that render the documents' tables"))]
    pub fix: &'static str,
    pub by: &'static [Cmd],
}

use Cmd::*;

const ALL: &[Cmd] = &[Run, Check, Print, Install, Manifest];

pub(crate) const CODES: &[Code] = &[
    Code {
        code: "0",
        short: "ok",
        meaning: "exec'd (the engine's own code follows), or the dry run / `check` found the plan runnable, or the answer was printed",
        fix: "after an exec, a failure is the engine's: `kubectl logs`",
        by: ALL,
    },
    Code {
        code: "1",
        short: "a gate failed",
        meaning: "`check` over several images or trees (`--image` repeated, `--family all`, `--output junit`): an applicable cell was refused, or an image has no applicable tree; under `--fail-on warn`, a warning too (a single `check` as well)",
        fix: "the matrix on stdout names each refusal; a tree built for another CPython or HIP ABI is skipped (`n/a`)",
        by: &[Check],
    },
    Code {
        code: "2",
        short: "usage",
        meaning: "usage: an option, a value or a variable that does not parse or means nothing (an option of another role, an engine arg its parser refuses, a capability no tree knows)",
        fix: "a misspelt or other engine's option, an option before `--`: the hint names the one meant; paste it",
        by: ALL,
    },
    Code {
        code: "65",
        short: "invalid overlay/manifest",
        meaning: "the overlay or a manifest is invalid or unsafe (bad TOML, a path escaping the tree, writable by others, code-loading `[env]`, shadowing the image's packages); an image archive that is not one",
        fix: "an overlay not built by this release, or altered: rebuild it (`scripts/build-overlay-image`), `infera-exec manifest verify DIR`",
        by: &[Run, Check, Install, Manifest],
    },
    Code {
        code: "66",
        short: "missing",
        meaning: "something required is missing (overlay, image root or archive, interpreter, engine, model path, the leader's name in time)",
        fix: "the overlay volume not mounted (image volume gate off: use the initcontainer overlay), the model not downloaded (`INFERA_WAIT_MODEL`), the leader pod not up",
        by: &[Run, Check, Install, Manifest],
    },
    Code {
        code: "69",
        short: "unsupported",
        meaning: "unsupported: no tree for this image's ABI, an engine version outside the tree's range, a capability that cannot be supplied here, no GPU code for the node's GPUs",
        fix: "an engine image outside the support matrix (`infera-exec --version`); an image without GPU code for the node's GPUs (`gpu-code-missing`: an image for that GPU, or another node); `/dev/shm` too small for the ranks (`shm-too-small`: a memory-backed emptyDir); `--require mooncake` without RDMA devices or memlock (`MC_FORCE_TCP=1`, the RDMA device plugin, `IPC_LOCK`)",
        by: &[Run, Check],
    },
    Code {
        code: "70",
        short: "internal error (a bug)",
        meaning: "a bug in infera-exec (said as a refusal is, `error[internal]`, never a death by signal)",
        fix: "report it with the message",
        by: ALL,
    },
    Code {
        code: "74",
        short: "output not written",
        meaning: "the answer could not be written to stdout (a closed pipe, a full disk): said on stderr",
        fix: "a closed pipe or a full disk under `--output`",
        by: ALL,
    },
    Code {
        code: "78",
        short: "engine configuration refused",
        meaning: "engine configuration refused (a known-bad combination, TP larger than the GPUs, weights that do not fit); a rule can be allowed with `--allow CODE`",
        fix: "the hint's change (e.g. leave `--kv-cache-dtype` out for MLA, more GPUs for the weights), or `--allow CODE` knowingly",
        by: &[Run, Check],
    },
    Code {
        code: "126",
        short: "cannot execute",
        meaning: "the interpreter or program exists but cannot be executed (no execute bit, noexec, not an ELF binary or `#!` script, a `#!` interpreter that cannot be run)",
        fix: "a `noexec` mount, the wrong `python3` for the image (`--image-env`), a script whose `#!` names a file that is not a program",
        by: &[Run, Check],
    },
    Code {
        code: "127",
        short: "not found",
        meaning: "the interpreter or program was not found (nor a `#!` script's interpreter)",
        fix: "a typo in the command form, a program the image lacks: name one it has, or its absolute path",
        by: &[Run, Check],
    },
    Code {
        code: "130/143",
        short: "stopped by SIGINT/SIGTERM while waiting",
        meaning: "stopped by SIGINT / SIGTERM while waiting (model, leader, patch lock, a patch): nothing started",
        fix: "the pod was deleted or rescheduled during a wait",
        by: &[Run],
    },
    Code {
        code: "the program's, or 128+n",
        short: "with --init: the program's code, or 128+n when signal n ended it",
        meaning: "with `--init`: the program's exit code, or 128+n when signal n ended it",
        fix: "137: killed (SIGKILL: OOM or the grace period), 139: a segfault in the engine",
        by: &[Run],
    },
];

/// The `--help` line of `cmd`'s exit codes.
pub(crate) fn help(cmd: Cmd) -> String {
    let said = |c: &Code| match c.code.starts_with(|d: char| d.is_ascii_digit()) {
        true => format!("{} {}", c.code, c.short),
        false => c.short.to_string(),
    };
    let codes: Vec<String> = CODES.iter().filter(|c| c.by.contains(&cmd)).map(said).collect();
    format!("Exit codes: {}.", codes.join(", "))
}

#[cfg(test)]
fn by(c: &Code) -> String {
    if c.by == ALL {
        return "all".into();
    }
    let names = |cmd: &Cmd| match cmd {
        Run => "worker, server, PROGRAM",
        Check => "check",
        Print => "node, version, completion",
        Install => "install",
        Manifest => "manifest",
    };
    c.by.iter().map(names).collect::<Vec<_>>().join("; ")
}

/// The Markdown table of README.md (with what to do) or docs/command-line.md (without).
#[cfg(test)]
pub fn markdown(with_fix: bool) -> String {
    let mut o = String::from(if with_fix {
        "| code | meaning | given by | typical cause → fix |\n|---|---|---|---|\n"
    } else {
        "| code | meaning | given by |\n|---|---|---|\n"
    });
    for c in CODES {
        let fix = if with_fix { format!(" {} |", c.fix) } else { String::new() };
        o += &format!("| {} | {} | {} |{fix}\n", c.code, c.meaning, by(c));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN: &str = "<!-- exit codes: generated from src/exits.rs -->\n";
    const END: &str = "<!-- end of exit codes -->";

    /// The documents' tables are this table's: rewritten with INFERA_UPDATE_DOCS=1.
    #[test]
    fn the_documents_tables_are_the_codes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for (doc, with_fix) in [("README.md", true), ("docs/command-line.md", false)] {
            let path = root.join(doc);
            let have = std::fs::read_to_string(&path).unwrap();
            let (head, rest) = have.split_once(BEGIN).unwrap_or_else(|| panic!("{doc}: no {BEGIN:?}"));
            let (_, tail) = rest.split_once(END).unwrap_or_else(|| panic!("{doc}: no {END:?}"));
            let want = format!("{head}{BEGIN}{}{END}{tail}", markdown(with_fix));
            if std::env::var_os("INFERA_UPDATE_DOCS").is_some() && have != want {
                std::fs::write(&path, &want).unwrap();
                continue;
            }
            assert!(
                have == want,
                "{doc}'s exit codes are stale: run `INFERA_UPDATE_DOCS=1 cargo test -p infera-exec exits`"
            );
        }
    }

    #[test]
    fn each_command_lists_its_own_codes() {
        assert_eq!(
            help(Check),
            "Exit codes: 0 ok, 1 a gate failed, 2 usage, 65 invalid overlay/manifest, 66 missing, 69 unsupported, \
             70 internal error (a bug), 74 output not written, 78 engine configuration refused, 126 cannot execute, \
             127 not found."
        );
        assert_eq!(help(Install), "Exit codes: 0 ok, 2 usage, 65 invalid overlay/manifest, 66 missing, 70 internal error (a bug), 74 output not written.");
        assert!(help(Run).ends_with(
            "130/143 stopped by SIGINT/SIGTERM while waiting, with --init: the program's code, or 128+n when signal n \
             ended it."
        ));
        assert!(!help(Run).contains(" 1 a gate"));
        assert_eq!(help(Print), "Exit codes: 0 ok, 2 usage, 70 internal error (a bug), 74 output not written.");
    }
}
