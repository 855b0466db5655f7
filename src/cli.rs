//! The command line (DESIGN.md "Command line"): the low level mirrors argv and only
//! validates; `Request` is the resolved form the planner reads.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::envvars as ev;

#[derive(Debug, Parser)]
#[command(
    name = "infera-exec",
    version,
    about = "Container command for infera pods: detect the image, pick the overlay tree, plan, exec.",
    after_help = "Exit codes: 0 ok, 2 usage, 65 invalid overlay/manifest, 66 missing, 69 unsupported, \
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
        /// The overlay directory.
        #[arg(env = ev::INFERA_OVERLAY, default_value = "/opt/infera")]
        overlay: PathBuf,
        /// Also compare every file's BLAKE3 digest (default: presence and sizes).
        #[arg(long)]
        digest: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    Auto,
    Vllm,
    Sglang,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The overlay directory.
    #[arg(long, env = ev::INFERA_OVERLAY, default_value = "/opt/infera", value_name = "DIR")]
    pub overlay: PathBuf,
    /// Read every container path under DIR (an unpacked image); the plan still names container paths.
    #[arg(long, env = ev::INFERA_ROOT, default_value = "/", value_name = "DIR")]
    pub root: PathBuf,
    /// The engine to run; `auto` picks the one installed in the image.
    #[arg(long, env = ev::INFERA_ENGINE, value_enum, default_value = "auto")]
    pub engine: EngineArg,
    /// Capabilities the pod needs (comma-separated, repeatable): mooncake, hipfile, ...
    #[arg(long, env = ev::INFERA_REQUIRE, value_delimiter = ',', value_name = "CAP[,CAP]")]
    pub require: Vec<String>,
    /// Force an overlay tree (with a warning) instead of matching the image's ABI.
    #[arg(long, env = ev::INFERA_FAMILY, value_name = "NAME")]
    pub family: Option<String>,
    /// Override a refusal rule knowingly (comma-separated rule codes, repeatable).
    #[arg(long, env = ev::INFERA_ALLOW, value_delimiter = ',', value_name = "CODE[,CODE]")]
    pub allow: Vec<String>,
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
    /// Arguments for the engine or router, passed byte for byte and in order.
    #[arg(last = true, value_name = "ARGS", value_parser = clap::value_parser!(OsString))]
    pub args: Vec<OsString>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Worker,
    Server,
    Check,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Server => "server",
            Role::Check => "check",
        }
    }
    /// `check` plans the worker.
    pub fn runs_engine(self) -> bool {
        self != Role::Server
    }
}

/// What the pod asked for, resolved from argv and environment.
#[derive(Debug, Clone)]
pub struct Request {
    pub role: Role,
    pub engine: EngineArg,
    pub require: Vec<String>,
    pub family: Option<String>,
    pub allow: Vec<String>,
    pub args: Vec<OsString>,
    pub root: PathBuf,
    pub overlay: PathBuf,
    pub dry_run: bool,
    pub output: Output,
    pub init: bool,
    pub init_group: bool,
    pub init_grace: Option<f64>,
    pub drop_caps: Option<Vec<String>>,
    pub no_new_privs: bool,
}

impl Request {
    pub fn from_cli(role: Role, a: RunArgs) -> Request {
        let clean = |v: Vec<String>| -> Vec<String> {
            let mut out: Vec<String> = Vec::new();
            for s in v.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()) {
                if !out.contains(&s) {
                    out.push(s);
                }
            }
            out
        };
        Request {
            role,
            engine: a.engine,
            require: clean(a.require),
            family: a.family.filter(|f| !f.is_empty()),
            allow: clean(a.allow),
            args: a.args,
            root: a.root,
            overlay: a.overlay,
            dry_run: a.dry_run || role == Role::Check,
            output: a.output,
            init: a.init,
            init_group: a.init_group,
            init_grace: a.init_grace,
            drop_caps: a.drop_caps,
            no_new_privs: a.no_new_privs,
        }
    }
}
