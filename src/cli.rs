//! The command line, low level (DESIGN.md "Command line"): it mirrors argv and only
//! validates what clap can. Two forms:
//!
//! - `infera-exec [OPTIONS] PROGRAM [ARGS...]` — the command form the real pod specs use
//!   (`/overlay/bin/infera-exec python3 -m infera.engine.vllm --model …`): the first word that
//!   is not an option and not a subcommand starts the command, which is kept byte for byte;
//! - `infera-exec worker|server|check [OPTIONS] [-- ARGS...]`, `manifest …`, `install …`.
//!
//! `request.rs` resolves either into a `Request`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use clap::builder::{BoolishValueParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::engines::Engine;
use crate::envvars as ev;

const ABOUT: &str = "Container command for infera pods: detect the image, pick the overlay tree, plan, exec.";
const EXIT_CODES: &str = "Exit codes: 0 ok, 2 usage, 65 invalid overlay/manifest, 66 missing, 69 unsupported, \
                          78 engine configuration refused, 126 cannot execute, 127 not found.";

#[derive(Debug, Parser)]
#[command(
    name = "infera-exec",
    version,
    about = ABOUT,
    override_usage = "infera-exec [OPTIONS] PROGRAM [ARGS]...\n       infera-exec <COMMAND> [OPTIONS] [-- ARGS...]",
    after_help = "PROGRAM [ARGS]: the command form of the pod specs, e.g. `infera-exec python3 -m infera.engine.vllm \
                  --model /models/m`: `-m infera.engine.<engine>` runs as `worker --engine <engine>`, `-m infera.server` \
                  as `server`, anything else with the selected tree's environment. The OPTIONS of `worker` go before \
                  PROGRAM, or in INFERA_* variables.\n\n\
                  Exit codes: 0 ok, 2 usage, 65 invalid overlay/manifest, 66 missing, 69 unsupported, \
                  78 engine configuration refused, 126 cannot execute, 127 not found."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Exec the engine worker (`python -m <engine module> ENGINE_ARGS...`).
    Worker(RunArgs),
    /// Exec the router (`python -m infera.server ROUTER_ARGS...`).
    Server(RunArgs),
    /// Capability dry run: print the facts and the capability table, exec nothing.
    Check(RunArgs),
    /// Copy this overlay into DEST (the initContainer fallback for clusters without image volumes).
    Install {
        /// Where to put the overlay (an emptyDir mount).
        dest: PathBuf,
        /// The overlay to copy (default: the one this binary is in).
        #[arg(long)]
        from: Option<PathBuf>,
    },
    /// Build-side tools for the overlay's manifests and integrity records.
    #[command(subcommand)]
    Manifest(ManifestCommand),
}

#[derive(Debug, Subcommand)]
pub enum ManifestCommand {
    /// Print the JSON Schema of manifest.toml.
    Schema,
    /// Derive a staged tree's facts from its files and write its integrity record (payload.json).
    Generate {
        /// The tree directory (`<overlay>/trees/<family>`).
        tree: PathBuf,
        /// Compare against the existing payload.json instead of writing it.
        #[arg(long)]
        check: bool,
    },
    /// Validate every manifest of an overlay and check each tree against its record.
    Verify {
        /// The overlay directory (default: the one this binary is in, else /opt/infera).
        #[arg(env = ev::INFERA_OVERLAY)]
        overlay: Option<PathBuf>,
        /// Also compare every file's BLAKE3 digest (default: presence and sizes).
        #[arg(long)]
        digest: bool,
    },
}

/// `--engine`: one of the engine table's names, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineChoice {
    Auto,
    One(Engine),
}

/// `auto` and the table's engine names. Works on the raw value so that a non-UTF-8 value
/// is reported as an invalid `--engine` value (lossily shown), not as a generic error.
#[derive(Clone)]
struct EngineChoiceParser;

impl TypedValueParser for EngineChoiceParser {
    type Value = EngineChoice;
    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<EngineChoice, clap::Error> {
        let text = value.to_string_lossy();
        if text == "auto" {
            return Ok(EngineChoice::Auto);
        }
        if let Some(e) = Engine::from_name(&text) {
            return Ok(EngineChoice::One(e));
        }
        use clap::error::{ContextKind, ContextValue, ErrorKind};
        let mut err = clap::Error::new(ErrorKind::InvalidValue).with_cmd(cmd);
        let arg = arg.map_or_else(|| "--engine".to_string(), ToString::to_string);
        err.insert(ContextKind::InvalidArg, ContextValue::String(arg));
        err.insert(ContextKind::InvalidValue, ContextValue::String(text.into_owned()));
        let valid = std::iter::once("auto").chain(Engine::names()).map(String::from).collect();
        err.insert(ContextKind::ValidValue, ContextValue::Strings(valid));
        Err(err)
    }
    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let names = std::iter::once("auto").chain(Engine::names());
        Some(Box::new(names.map(clap::builder::PossibleValue::new)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// The launcher's options, shared by both forms.
#[derive(Debug, Clone, Args)]
pub struct Options {
    /// The overlay directory (default: the overlay this binary is in, else /opt/infera).
    #[arg(long, env = ev::INFERA_OVERLAY, value_name = "DIR")]
    pub overlay: Option<PathBuf>,
    /// Read every container path under DIR (an unpacked image); the plan still names container paths.
    #[arg(long, env = ev::INFERA_ROOT, default_value = "/", value_name = "DIR")]
    pub root: PathBuf,
    /// The engine to run; `auto` picks the one installed in the image.
    #[arg(long, env = ev::INFERA_ENGINE, value_parser = EngineChoiceParser, default_value = "auto")]
    pub engine: EngineChoice,
    /// The image's interpreter to run (default: the one the command names, else python3 on PATH).
    #[arg(long, env = ev::INFERA_PYTHON, value_name = "PYTHON")]
    pub python: Option<OsString>,
    /// Capabilities the pod needs (comma-separated, repeatable): mooncake, hipfile, ...
    #[arg(long, env = ev::INFERA_REQUIRE, value_delimiter = ',', value_name = "CAP[,CAP]")]
    pub require: Vec<String>,
    /// Native capabilities the pod needs, as the Infera stack writes them: names (comma or
    /// space separated), `1`/`true`/`all` for everything the native tree carries, `0` or empty for none.
    #[arg(long, env = ev::INFERA_REQUIRE_NATIVE, value_name = "CAPS")]
    pub require_native: Option<String>,
    /// Force an overlay tree (with a warning) instead of matching the image's ABI.
    #[arg(long, env = ev::INFERA_FAMILY, value_name = "NAME")]
    pub family: Option<String>,
    /// Override a refusal rule knowingly (comma-separated rule codes, repeatable).
    #[arg(long, env = ev::INFERA_ALLOW, value_delimiter = ',', value_name = "CODE[,CODE]")]
    pub allow: Vec<String>,
    /// The working directory of the program (default `/`, so the image's WORKDIR cannot
    /// shadow the engine or the overlay; empty: keep the launcher's).
    #[arg(long, env = ev::INFERA_EXEC_CHDIR, value_name = "DIR", value_parser = clap::value_parser!(OsString))]
    pub chdir: Option<OsString>,
    /// Do not run the overlay's engine patches (`patches/<engine>/*.py`).
    #[arg(long, env = ev::INFERA_SKIP_ENGINE_PATCHES, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub skip_engine_patches: bool,
    /// Kill an engine patch that runs longer than this (1 to 3600 seconds).
    #[arg(long, env = ev::INFERA_ENGINE_PATCH_TIMEOUT, default_value = "60", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub engine_patch_timeout: u64,
    /// Print the plan the real run would exec, and exit with the code it would refuse with.
    #[arg(long, env = ev::INFERA_DRY_RUN, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub dry_run: bool,
    /// Output format of the plan (dry run, check, refusals).
    #[arg(long, env = ev::INFERA_OUTPUT, value_enum, default_value = "text")]
    pub output: Output,
    /// Stay as a tiny init (reap, forward signals) instead of exec'ing.
    #[arg(long, env = ev::INFERA_INIT, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub init: bool,
    /// In --init mode, forward signals to the child's process group.
    #[arg(long, env = ev::INFERA_INIT_GROUP, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub init_group: bool,
    /// In --init mode, SIGKILL what is left this many seconds after a forwarded SIGTERM.
    #[arg(long, env = ev::INFERA_INIT_GRACE, value_name = "SECONDS")]
    pub init_grace: Option<f64>,
    /// Drop every Linux capability but these before exec (comma-separated; `none` keeps nothing).
    #[arg(long, env = ev::INFERA_DROP_CAPS, value_delimiter = ',', value_name = "CAP[,CAP]")]
    pub drop_caps: Option<Vec<String>>,
    /// Set no_new_privs before exec.
    #[arg(long, env = ev::INFERA_NO_NEW_PRIVS, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub no_new_privs: bool,
    /// Nodes in this multi-node group (default: LWS_GROUP_SIZE, which LeaderWorkerSet injects).
    #[arg(long, env = ev::INFERA_NNODES, value_name = "N")]
    pub nnodes: Option<String>,
    /// This node's rank in the group, 0 = leader (default: LWS_WORKER_INDEX).
    #[arg(long, env = ev::INFERA_NODE_RANK, value_name = "R")]
    pub node_rank: Option<String>,
    /// The leader's address (default: LWS_LEADER_ADDRESS).
    #[arg(long, env = ev::INFERA_LEADER_ADDRESS, value_name = "HOST")]
    pub leader_address: Option<String>,
    /// How long ranks > 0 wait for the leader's name to resolve before refusing (0: do not wait).
    #[arg(long, env = ev::INFERA_LEADER_WAIT, default_value = "300", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(0..=86400))]
    pub leader_wait: u64,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub options: Options,
    /// Arguments for the engine or router, passed byte for byte and in order.
    #[arg(last = true, value_name = "ARGS", value_parser = clap::value_parser!(OsString))]
    pub args: Vec<OsString>,
}

/// The options alone, for the command form (`infera-exec [OPTIONS] PROGRAM ...`).
#[derive(Debug, Parser)]
#[command(name = "infera-exec", version, about = ABOUT, after_help = EXIT_CODES)]
struct CommandForm {
    #[command(flatten)]
    options: Options,
}

/// What argv asked for.
#[derive(Debug)]
pub enum Invocation {
    Subcommand(Command),
    /// The command form: the options, and the command (PROGRAM ARGS...), byte for byte.
    Program {
        options: Options,
        command: Vec<OsString>,
    },
}

/// Find which form argv is and parse it.
pub fn parse(argv: Vec<OsString>) -> Result<Invocation, clap::Error> {
    match command_start(&argv) {
        Some(at) => {
            // `infera-exec [OPTIONS] [--] PROGRAM ...`: clap reads the options only.
            let end = if argv[at - 1] == "--" { at - 1 } else { at };
            let form = CommandForm::try_parse_from(&argv[..end])?;
            Ok(Invocation::Program { options: form.options, command: argv[at..].to_vec() })
        }
        None => Ok(Invocation::Subcommand(Cli::try_parse_from(argv)?.command)),
    }
}

/// The subcommands (`help` is clap's).
const SUBCOMMANDS: [&str; 6] = ["worker", "server", "check", "install", "manifest", "help"];

/// The long options of [`Options`] that take a separate value (`--overlay DIR`); the others
/// are flags (`--dry-run`) or clap's own (`--help`, `--version`). Kept as data so finding
/// the command costs no clap parser; a test checks it against the parser.
const VALUE_OPTIONS: [&str; 17] = [
    "overlay",
    "root",
    "engine",
    "python",
    "require",
    "require-native",
    "family",
    "allow",
    "chdir",
    "engine-patch-timeout",
    "output",
    "init-grace",
    "drop-caps",
    "nnodes",
    "node-rank",
    "leader-address",
    "leader-wait",
];

/// Where the command of the command form starts: the first word after the launcher's own
/// options that is not a subcommand (`--` ends the options explicitly).
fn command_start(argv: &[OsString]) -> Option<usize> {
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].as_bytes();
        if a == b"--" {
            return (i + 1 < argv.len()).then_some(i + 1);
        }
        if let Some(long) = a.strip_prefix(b"--") {
            let (name, inline) = match long.iter().position(|b| *b == b'=') {
                Some(p) => (&long[..p], true),
                None => (long, false),
            };
            let value = VALUE_OPTIONS.iter().any(|o| o.as_bytes() == name);
            let flag = FLAG_OPTIONS.iter().any(|o| o.as_bytes() == name);
            match (value, flag) {
                (true, _) if !inline => i += 2,
                (true, _) | (_, true) => i += 1,
                // Not ours (or --help/--version): clap says what it is.
                _ => return None,
            }
            continue;
        }
        if a.starts_with(b"-") || SUBCOMMANDS.iter().any(|s| s.as_bytes() == a) {
            return None;
        }
        return Some(i);
    }
    None
}

/// Did the command line (or `INFERA_OUTPUT`) ask for JSON? Read from the raw argv, so that
/// an error found while parsing it can still be printed as JSON: the launcher's options
/// only (before `--` or the command form's program), the last `--output` wins.
pub fn wants_json(argv: &[OsString], env: &crate::envvars::Env) -> bool {
    let mut out: Option<&[u8]> = None;
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].as_bytes();
        if a == b"--" {
            break;
        }
        if let Some(v) = a.strip_prefix(b"--output=") {
            out = Some(v);
        } else if a == b"--output" {
            out = argv.get(i + 1).map(|v| v.as_bytes());
            i += 1;
        } else if let Some(name) = a.strip_prefix(b"--") {
            i += usize::from(VALUE_OPTIONS.iter().any(|o| o.as_bytes() == name));
        } else if !a.starts_with(b"-") && !SUBCOMMANDS.iter().any(|s| s.as_bytes() == a) {
            break; // the command form's program: what follows is its own
        }
        i += 1;
    }
    match out {
        Some(v) => v == b"json",
        None => crate::envvars::get(env, crate::envvars::INFERA_OUTPUT).is_some_and(|v| v == "json"),
    }
}

/// The long options of [`Options`] that take no separate value.
const FLAG_OPTIONS: [&str; 6] = ["skip-engine-patches", "dry-run", "init", "init-group", "no-new-privs", "help"];

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(v: &[&str]) -> Vec<OsString> {
        std::iter::once("infera-exec").chain(v.iter().copied()).map(OsString::from).collect()
    }

    /// The option tables `command_start` uses are the parser's.
    #[test]
    fn option_tables_match_the_parser() {
        use clap::CommandFactory;
        let mut cmd = CommandForm::command();
        cmd.build();
        let mut values = Vec::new();
        let mut flags = vec!["help".to_string()];
        for a in cmd.get_arguments() {
            let Some(long) = a.get_long() else { continue };
            if long == "version" || long == "help" {
                continue;
            }
            if a.get_num_args().map_or(a.get_action().takes_values(), |n| n.max_values() > 0) {
                values.push(long.to_string());
            } else {
                flags.push(long.to_string());
            }
        }
        values.sort();
        flags.sort();
        let mut want_values: Vec<String> = VALUE_OPTIONS.iter().map(|s| s.to_string()).collect();
        let mut want_flags: Vec<String> = FLAG_OPTIONS.iter().map(|s| s.to_string()).collect();
        want_values.sort();
        want_flags.sort();
        assert_eq!(values, want_values);
        assert_eq!(flags, want_flags);
        let subs: Vec<String> = Cli::command().get_subcommands().map(|s| s.get_name().to_string()).collect();
        assert_eq!(subs.iter().chain(["help".to_string()].iter()).cloned().collect::<Vec<_>>(), SUBCOMMANDS);
    }

    #[test]
    fn the_two_forms() {
        match parse(argv(&["python3", "-m", "infera.engine.vllm", "--dry-run"])).unwrap() {
            Invocation::Program { options, command } => {
                assert!(!options.dry_run, "options after PROGRAM belong to the command");
                assert_eq!(command, argv(&["python3", "-m", "infera.engine.vllm", "--dry-run"])[1..]);
            }
            other => panic!("{other:?}"),
        }
        match parse(argv(&["--dry-run", "--output", "json", "--family=x", "--", "bash", "-c", "true"])).unwrap() {
            Invocation::Program { options, command } => {
                assert!(options.dry_run);
                assert_eq!(options.output, Output::Json);
                assert_eq!(options.family.as_deref(), Some("x"));
                assert_eq!(command, argv(&["bash", "-c", "true"])[1..]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse(argv(&["worker", "--dry-run"])).unwrap(), Invocation::Subcommand(Command::Worker(_))));
        assert!(parse(argv(&["--frobnicate", "python3"])).is_err());
        assert!(parse(argv(&[])).is_err());
    }
}
