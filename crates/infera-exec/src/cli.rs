//! The command line, low level: it mirrors argv and only
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

use clap::builder::BoolishValueParser;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use infera_facts::engines::Engine;

use crate::choices::{Prefetch, Role};
use infera_facts::envvars as ev;

const ABOUT: &str = "Container command for infera pods: detect the image, pick the overlay tree, plan, exec.";

/// The variables every role reads that are not an option's (the options show theirs as
/// `[env: ...]`), as one literal so that `concat!` can build each role's help from it.
macro_rules! common_environment {
    () => {
        "  INFERA_VERIFY=size|digest   check the selected tree against its integrity record before exec (default off)\n  \
    INFERA_LOG=DIRECTIVES       log filter in tracing's syntax: a level (error, warn, info, debug, trace, off) or\n                              \
    target=level pairs, comma-separated, e.g. `debug` or `info,infera_exec::exec=debug` (default info)\n  \
    INFERA_LOG_FORMAT=json      one JSON object per log line on stderr, for log collectors (default text)\n  \
    INFERA_TERMINATION_LOG=FILE where a refusal is also written for `kubectl describe pod`\n                              \
    (default /dev/termination-log, only when it exists and is writable; empty: never)\n"
    };
}

/// The variables of the roles that run an engine (`worker`, `check`).
pub(crate) const ENVIRONMENT: &str = concat!(
    "Environment (besides each option's [env: ...]):\n  \
    INFERA_GPUS=N               GPUs this container may use (default: HIP/CUDA/ROCR_VISIBLE_DEVICES, then /dev/dri)\n  \
    INFERA_DEFAULT_KV_FP8=0     do not add --kv-cache-dtype fp8_e4m3 to non-MLA models\n",
    common_environment!(),
    "  LWS_GROUP_SIZE, LWS_WORKER_INDEX, LWS_LEADER_ADDRESS  a LeaderWorkerSet pod's group (see --nnodes)\n\
    Set for the program: INFERA_TREE, INFERA_TREE_FAMILY (the tree it runs from), INFERA_ARGS_DIGEST (multi-node ranks).\n\n"
);

/// The router's: no GPUs, no KV dtype, no group.
const SERVER_ENVIRONMENT: &str = concat!(
    "Environment (besides each option's [env: ...]):\n",
    common_environment!(),
    "Set for the program: INFERA_TREE, INFERA_TREE_FAMILY (the tree it runs from).\n\n"
);

const PROGRAM_FORM: &str = "PROGRAM [ARGS]: the command form of the pod specs, e.g. `infera-exec python3 -m \
    infera.engine.vllm --model /models/m`: `-m infera.engine.<engine>` runs as `worker --engine <engine>`, `-m \
    infera.server` as `server`, anything else with the selected tree's environment. The OPTIONS of `worker` go \
    before PROGRAM, or in INFERA_* variables (`infera-exec worker --help` lists them).";

/// The subcommands' parser, each help ending with its environment and its own exit codes
/// (`crate::exits`).
pub(crate) fn cli_command() -> clap::Command {
    use crate::exits::{help, Cmd};
    let each = "Each command's exit codes: `infera-exec COMMAND --help`. The command form's:";
    let mut cli = Cli::command().after_help(format!("{PROGRAM_FORM}\n\n{each} {}", help(Cmd::Run)));
    // In place, so that the subcommands keep their order in the help.
    for sub in cli.get_subcommands_mut() {
        let (env, codes) = match sub.get_name() {
            "server" => (SERVER_ENVIRONMENT, Cmd::Run),
            "worker" => (ENVIRONMENT, Cmd::Run),
            "check" => (ENVIRONMENT, Cmd::Check),
            "install" => ("", Cmd::Install),
            "manifest" => ("", Cmd::Manifest),
            _ => ("", Cmd::Print),
        };
        let mut s = std::mem::replace(sub, clap::Command::new("")).after_help(format!("{env}{}", help(codes)));
        if codes == Cmd::Run {
            s = s.mut_arg("output", one_plan_output);
        }
        if codes == Cmd::Check {
            // Taken (a pod's INFERA_* variables may set them) but not shown: check execs nothing.
            for id in RUN_ONLY {
                s = s.mut_arg(id, |a| a.hide(true));
            }
        }
        *sub = s;
    }
    cli
}

/// The options `check` takes with the rest of a role's but that act only when a run execs.
const RUN_ONLY: [&str; 5] = ["chdir", "drop_caps", "no_new_privs", "skip_engine_patches", "engine_patch_timeout"];

/// A completion script of the subcommands and their options for `shell`.
pub(crate) fn completion(shell: clap_complete::Shell) -> String {
    let full = cli_command();
    // Without the hidden subcommands (`__prefetch`, the launcher's own helper).
    let shown: Vec<clap::Command> = full.get_subcommands().filter(|s| !s.is_hide_set()).cloned().collect();
    let mut cmd = clap::Command::new("infera-exec").args(full.get_arguments().cloned()).subcommands(shown);
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "infera-exec", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The command form's parser.
fn form_command() -> clap::Command {
    CommandForm::command().after_help(crate::exits::help(crate::exits::Cmd::Run)).mut_arg("output", one_plan_output)
}

/// `--output` of a run, whose answer is one plan: `junit` (the matrix's) still parses, to be
/// refused as `check`'s alone, but is not offered.
fn one_plan_output(a: clap::Arg) -> clap::Arg {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    let values = Output::value_variants().iter().filter_map(ValueEnum::to_possible_value);
    let values = values.map(|v| if matches!(v.get_name(), "junit" | "affinity") { v.hide(true) } else { v });
    a.value_parser(PossibleValuesParser::new(values).map(|v| Output::from_str(&v, true).unwrap_or(Output::Text)))
}

#[derive(Debug, Parser)]
#[command(
    name = "infera-exec",
    about = ABOUT,
    disable_version_flag = true,
    arg_required_else_help = true,
    override_usage = "infera-exec [OPTIONS] PROGRAM [ARGS]...\n       infera-exec <COMMAND> [OPTIONS] [-- ARGS...]",
)]
pub(crate) struct Cli {
    /// Print the version, the commit it was built from and the support matrix: the overlay's trees and what each runs, and the images this release was judged on.
    #[arg(short = 'V', long)]
    pub version: bool,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Exec the engine worker (`python -m <engine module> ENGINE_ARGS...`).
    Worker(WorkerArgs),
    /// Exec the router (`python -m infera.server ROUTER_ARGS...`).
    Server(ServerArgs),
    /// Capability dry run: print the facts and the capability table, exec nothing.
    Check(CheckArgs),
    /// Print this node's profile (root `/`: in a pod, a DaemonSet, `kubectl debug node/…`)
    /// and what in it would fail an engine; `-o json` writes the profile `--node FILE` reads.
    Node {
        /// text: the node and its findings; json: the profile (versioned: `schema_version`); yaml: the same as YAML.
        #[arg(short = 'o', long, value_enum, ignore_case = true, default_value = "text")]
        output: NodeOutput,
        /// The node's name, written into the profile (a DaemonSet gives it `spec.nodeName`
        /// through the downward API); reports name the node by it.
        #[arg(long, env = ev::INFERA_NODE_NAME, value_name = "NAME")]
        name: Option<String>,
    },
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
    /// The read-ahead of the weights a real run starts beside the engine (`--prefetch`).
    #[command(name = "__prefetch", hide = true)]
    Prefetch(crate::prefetch::Args),
    /// Print the version and the support matrix (as --version).
    Version,
    /// Print a completion script for SHELL, e.g. `source <(infera-exec completion bash)`.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
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

impl From<ManifestCommand> for infera_overlay::manifest_cmd::Command {
    fn from(c: ManifestCommand) -> Self {
        match c {
            ManifestCommand::Schema => Self::Schema,
            ManifestCommand::Generate { tree, check } => Self::Generate { tree, check },
            ManifestCommand::Verify { overlay, digest } => Self::Verify { overlay, digest },
        }
    }
}

/// `--engine`: a name of the engine table (`infera_facts::engines::TABLE`), or `auto`: the
/// one the image has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EngineChoice(Option<Engine>);

impl EngineChoice {
    /// The engine named; None for `auto`.
    pub(crate) fn engine(self) -> Option<Engine> {
        self.0
    }
}

/// `--engine`'s values: `auto`, then the table's names.
fn engine_choice() -> impl clap::builder::TypedValueParser<Value = EngineChoice> {
    use clap::builder::TypedValueParser;
    let names: Vec<&'static str> = std::iter::once("auto").chain(Engine::names()).collect();
    clap::builder::PossibleValuesParser::new(names).map(|s: String| EngineChoice(Engine::from_name(&s)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    Text,
    Json,
    /// The JSON answer as YAML (the same fields).
    Yaml,
    /// JUnit XML (`check` only): a suite per image, a case per family, for CI reports.
    Junit,
    /// The node affinity that admits the node types every check passed on (`check` of one
    /// image with `--node`), as a kustomize Component of patches.
    Affinity,
}

/// `node`'s output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum NodeOutput {
    Text,
    Json,
    Yaml,
}

/// `check --family all`: every tree of the overlay, a column each.
pub(crate) const ALL_FAMILIES: &str = "all";

/// The options every role takes.
#[derive(Debug, Clone, Args)]
pub(crate) struct CommonArgs {
    /// The overlay directory (default: the overlay this binary is in, else /opt/infera).
    #[arg(long, env = ev::INFERA_OVERLAY, value_name = "DIR")]
    pub overlay: Option<PathBuf>,
    /// Read every container path under DIR (an unpacked image); the plan still names container paths.
    #[arg(long, env = ev::INFERA_ROOT, default_value = "/", value_name = "DIR")]
    pub root: PathBuf,
    /// With --root: the image's environment (its PATH, ROCM_PATH, ...), repeatable: a file
    /// (`podman image inspect` JSON, an OCI image config, or KEY=VALUE lines) or one KEY=VALUE.
    #[arg(long, env = ev::INFERA_IMAGE_ENV, value_name = "FILE|KEY=VALUE")]
    pub image_env: Vec<OsString>,
    /// With --root or --image: a variable the pod sets (its spec's `env`), repeatable; with
    /// it (or --env-file) this shell's variables are not the pod's and are left out.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub pod_env: Vec<OsString>,
    /// With --root or --image: the pod's variables from a file of KEY=VALUE lines (docker's
    /// --env-file format), repeatable; --env is applied after it.
    #[arg(long, value_name = "FILE")]
    pub env_file: Vec<OsString>,
    /// With --root or --image: read the container path PATH from the local directory DIR (a
    /// pod's volume, the model's files copied here), repeatable, e.g. /models=/data/models.
    #[arg(long, env = ev::INFERA_VOLUME, value_delimiter = ',', value_name = "PATH=DIR", value_parser = clap::value_parser!(OsString))]
    pub volume: Vec<OsString>,
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
    /// Force an overlay tree (with a warning) instead of matching the image's ABI; with
    /// `check`, `all` judges the image against every tree of the overlay (a matrix).
    #[arg(long, env = ev::INFERA_FAMILY, value_name = "NAME")]
    pub family: Option<String>,
    /// Accept a refusal or a warning knowingly (comma-separated codes; repeatable): it stays
    /// in the report as accepted, and fails neither the run nor `--fail-on warn`.
    #[arg(long, env = ev::INFERA_ALLOW, value_delimiter = ',', value_name = "CODE[,CODE]")]
    pub allow: Vec<String>,
    /// Codes to accept, from a file: one a line, with an optional reason after it (`CODE
    /// reason…`, or `CODE  # reason`); `#` starts a comment line (as trivy's .trivyignore).
    #[arg(long, env = ev::INFERA_ALLOW_FILE, value_name = "FILE")]
    pub allow_file: Option<PathBuf>,
    /// The working directory of the program (default `/`, so the image's WORKDIR cannot
    /// shadow the engine or the overlay; empty: keep the launcher's).
    #[arg(long, env = ev::INFERA_EXEC_CHDIR, value_name = "DIR", value_parser = clap::value_parser!(OsString))]
    pub chdir: Option<OsString>,
    /// Output format of the plan (dry run, check, refusals).
    #[arg(short = 'o', long, env = ev::INFERA_OUTPUT, value_enum, ignore_case = true, default_value = "text")]
    pub output: Output,
    /// Drop every Linux capability but these before exec (comma-separated; `none` keeps nothing).
    #[arg(long, env = ev::INFERA_DROP_CAPS, value_delimiter = ',', value_name = "CAP[,CAP]")]
    pub drop_caps: Option<Vec<String>>,
    /// Judge the plan against a node (with `check` or `--dry-run`): a profile file that
    /// `infera-exec node -o json` wrote, or an AMD Instinct part (mi100, mi210, mi250x,
    /// mi300x, mi300a, mi325x, mi350x, mi355x) with its GPU count or `:N`. Repeatable with
    /// `check`: a column per tree × node.
    #[arg(long, value_name = "FILE|PART[:N]")]
    pub node: Vec<String>,
    /// With --node: the worker pod's /dev/shm (its memory-backed emptyDir's sizeLimit, or
    /// docker's --shm-size): `16Gi`, `16g`, bytes. Not given, /dev/shm is not judged (a
    /// profile's is the pod's that read the node, never the worker's).
    #[arg(long, value_name = "SIZE", requires = "node", value_parser = Size::parse)]
    pub shm_size: Option<Size>,
    /// With --node: the worker pod's memory limit (resources.limits.memory, docker's
    /// --memory), for the read-ahead's bound: `64Gi`, `64g`, bytes.
    #[arg(long, value_name = "SIZE", requires = "node", value_parser = Size::parse)]
    pub memory: Option<Size>,
    /// Set no_new_privs before exec.
    #[arg(long, env = ev::INFERA_NO_NEW_PRIVS, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub no_new_privs: bool,
}

/// The options of a role that runs an engine (`worker`, `check`, the command form).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Engine options")]
pub(crate) struct EngineArgs {
    /// The engine to run; `auto` picks the one installed in the image.
    #[arg(long, env = ev::INFERA_ENGINE, value_parser = engine_choice(), default_value = "auto")]
    pub engine: EngineChoice,
    /// Do not run the overlay's engine patches (`patches/<engine>/*.py`).
    #[arg(long, env = ev::INFERA_SKIP_ENGINE_PATCHES, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub skip_engine_patches: bool,
    /// Kill an engine patch that runs longer than this (1 to 3600 seconds).
    #[arg(long, env = ev::INFERA_ENGINE_PATCH_TIMEOUT, default_value = "60", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub engine_patch_timeout: u64,
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
    /// Read the weights ahead of the engine's loader into the page cache: `auto` where the
    /// storage is shared and the engine would not read ahead well itself, `on` always, `off` never.
    #[arg(long, env = ev::INFERA_PREFETCH, value_enum, default_value = "auto")]
    pub prefetch: PrefetchChoice,
}

/// `--wait-model`: seconds, or None: until the path appears or a stop signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitFor(pub Option<u64>);

impl Default for WaitFor {
    /// No wait (a role without the option).
    fn default() -> Self {
        WaitFor(Some(0))
    }
}

impl WaitFor {
    /// The longest bounded wait: a week.
    const MAX: u64 = 604_800;

    fn parse(s: &str) -> Result<WaitFor, String> {
        if s.eq_ignore_ascii_case("inf") {
            return Ok(WaitFor(None));
        }
        match s.parse::<u64>() {
            Ok(n) if n <= Self::MAX => Ok(WaitFor(Some(n))),
            Ok(_) => {
                Err(format!("at most {} seconds (a week); `inf` waits until the path appears or a SIGTERM", Self::MAX))
            }
            Err(_) => Err("expected seconds (0: do not wait) or `inf` (until the path appears or a SIGTERM)".into()),
        }
    }
}

/// `--prefetch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PrefetchChoice {
    Auto,
    On,
    Off,
}

impl From<PrefetchChoice> for Prefetch {
    fn from(c: PrefetchChoice) -> Prefetch {
        match c {
            PrefetchChoice::Auto => Prefetch::Auto,
            PrefetchChoice::On => Prefetch::On,
            PrefetchChoice::Off => Prefetch::Off,
        }
    }
}

impl Default for EngineArgs {
    /// What clap gives when nothing is said (a role without these options).
    fn default() -> Self {
        EngineArgs {
            engine: EngineChoice(None),
            skip_engine_patches: false,
            engine_patch_timeout: 60,
            nnodes: None,
            node_rank: None,
            leader_address: None,
            leader_wait: 300,
            prefetch: PrefetchChoice::Auto,
        }
    }
}

/// The options of a role that execs (`worker`, `server`, the command form; `check` never does).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Run options")]
pub(crate) struct ExecArgs {
    /// Print the plan the real run would exec, and exit with the code it would refuse with.
    #[arg(long, env = ev::INFERA_DRY_RUN, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub dry_run: bool,
    /// How long to wait for an absent model path (the worker's `--model`, the router's
    /// `--router-tokenizer-path`) to appear, a download still running, before refusing:
    /// seconds (at most a week; 0: do not wait), or `inf`: until it appears or a SIGTERM.
    #[arg(long, env = ev::INFERA_WAIT_MODEL, default_value = "0", value_name = "SECONDS|inf", value_parser = WaitFor::parse)]
    pub wait_model: WaitFor,
    /// Stay as a tiny init (reap, forward signals) instead of exec'ing.
    #[arg(long, env = ev::INFERA_INIT, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub init: bool,
    /// In --init mode, forward signals to the child's process group.
    #[arg(long, env = ev::INFERA_INIT_GROUP, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub init_group: bool,
    /// In --init mode, SIGKILL what is left this many seconds after a forwarded SIGTERM.
    /// (Kept as written: a refused value is echoed as given.)
    #[arg(long, env = ev::INFERA_INIT_GRACE, value_name = "SECONDS")]
    pub init_grace: Option<String>,
}

/// Everything a role may set, with the defaults of the options it does not take, and which
/// values came from the environment (so that an error names the variable, not the flag).
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub common: CommonArgs,
    /// `check --image` (empty for the other roles).
    pub image: ImageArgs,
    pub engine: EngineArgs,
    pub exec: ExecArgs,
    /// `(long option, variable)` for each value read from an `INFERA_*` variable.
    pub from_env: Vec<(String, String)>,
}

impl Options {
    /// How the user set `long`: `INFERA_X` when the value came from the environment, else `--long`.
    pub(crate) fn said(&self, long: &str) -> String {
        match self.from_env.iter().find(|(l, _)| l == long) {
            Some((_, var)) => var.clone(),
            None => format!("--{long}"),
        }
    }
}

/// `worker`: every option.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub exec: ExecArgs,
    /// Arguments for the engine, passed byte for byte and in order.
    #[arg(last = true, value_name = "ARGS", value_parser = clap::value_parser!(OsString))]
    pub args: Vec<OsString>,
}

/// `server`: no engine options (the router runs no engine).
#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub exec: ExecArgs,
    /// Arguments for the router, passed byte for byte and in order.
    #[arg(last = true, value_name = "ARGS", value_parser = clap::value_parser!(OsString))]
    pub args: Vec<OsString>,
}

/// `check`: plans the worker and execs nothing, so no run options.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub image: ImageArgs,
    /// The engine arguments the worker would get (for the rules and the defaults).
    #[arg(last = true, value_name = "ARGS", value_parser = clap::value_parser!(OsString))]
    pub args: Vec<OsString>,
}

/// `check --image`: an image read from its archive instead of a directory.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Image options")]
pub(crate) struct ImageArgs {
    /// Read the image from its archive, nothing unpacked: an OCI image layout directory, an
    /// oci-archive or a docker-archive, as `PATH`, `PATH:TAG` or `PATH@sha256:…`, also as
    /// skopeo writes them (`oci:DIR:TAG`, `oci-archive:FILE`, `docker-archive:FILE`). For CI:
    /// `skopeo copy docker://IMAGE oci:DIR:TAG`, then `--image oci:DIR:TAG` (a registry is
    /// never read). Repeatable: each image is a row of the matrix.
    #[arg(long, value_name = "REF", conflicts_with_all = ["root", "image_env"])]
    pub image: Vec<OsString>,
    /// With --image: do not hash the layers (the manifest and the config are always checked).
    #[arg(long, requires = "image")]
    pub no_verify: bool,
    /// With --image: the platform a multi-arch image is read for, OS/ARCHITECTURE.
    #[arg(long, requires = "image", value_name = "OS/ARCH", default_value = "linux/amd64", value_parser = platform)]
    pub platform: infera_core::image::Platform,
    /// What fails the check (exit 1): a refusal, or a warning too (`warn`). Every cell's
    /// warnings are in the report either way.
    #[arg(long, value_name = "LEVEL", value_enum, default_value = "refusal")]
    pub fail_on: FailOnChoice,
}

/// A size as Kubernetes (`16Gi`, `16G`) or docker (`16g`, `64m`) writes it, or bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Size {
    pub bytes: u64,
    /// As given.
    pub said: String,
}

impl Size {
    /// `Ki`/`Mi`/`Gi`/`Ti` (Kubernetes) and docker's `k`/`m`/`g`/`t` (with or without `b`) are
    /// powers of 1024; Kubernetes' `k`/`M`/`G`/`T` powers of 1000.
    pub(crate) fn parse(s: &str) -> Result<Size, String> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(split);
        let unit_of = |u: &str| -> Option<u64> {
            Some(match u {
                "" | "b" | "B" => 1,
                "Ki" | "k" | "kb" | "K" | "KB" => 1 << 10,
                "Mi" | "m" | "mb" => 1 << 20,
                "Gi" | "g" | "gb" => 1 << 30,
                "Ti" | "t" | "tb" => 1 << 40,
                "M" => 1_000_000,
                "G" => 1_000_000_000,
                "T" => 1_000_000_000_000,
                _ => return None,
            })
        };
        let bad =
            || format!("`{s}` is not a size: a whole number with Ki, Mi, Gi, Ti (Kubernetes) or k, m, g, t (docker)");
        let n: u64 = digits.parse().map_err(|_| bad())?;
        let bytes = unit_of(unit).and_then(|u| n.checked_mul(u)).ok_or_else(bad)?;
        if bytes == 0 {
            return Err(format!("`{s}` is no memory at all: give the pod's size"));
        }
        Ok(Size { bytes, said: t.to_string() })
    }
}

/// `--fail-on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum FailOnChoice {
    #[default]
    Refusal,
    Warn,
}

/// `--platform linux/amd64`: an OS and an architecture as an OCI index names them.
fn platform(s: &str) -> Result<infera_core::image::Platform, String> {
    match s.split('/').collect::<Vec<_>>()[..] {
        [os, arch] if !os.is_empty() && !arch.is_empty() => {
            Ok(infera_core::image::Platform { os: os.to_string(), architecture: arch.to_string() })
        }
        _ => Err(format!("`{s}` is not OS/ARCHITECTURE (linux/amd64, linux/arm64)")),
    }
}

/// The options alone, for the command form (`infera-exec [OPTIONS] PROGRAM ...`).
#[derive(Debug, Parser)]
#[command(
    name = "infera-exec",
    about = ABOUT,
    disable_version_flag = true,
    override_usage = "infera-exec [OPTIONS] PROGRAM [ARGS]..."
)]
struct CommandForm {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    exec: ExecArgs,
}

/// What argv asked for.
#[derive(Debug)]
pub(crate) enum Invocation {
    /// `--version`.
    Version,
    /// `worker`, `server`, `check`: the options, and the args after `--`.
    Role {
        role: Role,
        options: Options,
        args: Vec<OsString>,
    },
    /// The command form: the options, and the command (PROGRAM ARGS...), byte for byte.
    Program {
        options: Options,
        command: Vec<OsString>,
    },
    Install {
        dest: PathBuf,
        from: Option<PathBuf>,
    },
    Node {
        output: NodeOutput,
        name: Option<String>,
    },
    Manifest(ManifestCommand),
    Prefetch(crate::prefetch::Args),
    Completion(clap_complete::Shell),
}

/// Find which form argv is and parse it. Errors are clap's, with a value that came from a
/// variable named as that variable.
pub(crate) fn parse(argv: Vec<OsString>) -> Result<Invocation, clap::Error> {
    let first = argv.get(1).map(|a| a.as_bytes());
    let subcommand_form = first.is_none_or(|a| {
        SUBCOMMANDS.iter().any(|s| s.as_bytes() == a) || [&b"-h"[..], b"--help", b"-V", b"--version"].contains(&a)
    });
    if subcommand_form {
        parse_subcommand(&argv)
    } else {
        parse_command_form(&argv)
    }
}

/// `infera-exec SUBCOMMAND …`: each role's options in the one shape every role has.
fn parse_subcommand(argv: &[OsString]) -> Result<Invocation, clap::Error> {
    let mut cmd = cli_command();
    let m = cmd.try_get_matches_from_mut(argv).map_err(|e| explain(e, argv, &cmd))?;
    let cli = Cli::from_arg_matches(&m)?;
    let from_env = |name: &str| {
        let sub = cmd.find_subcommand(name);
        let sm = m.subcommand_matches(name);
        sub.zip(sm).map(|(c, sm)| env_sourced(c, sm)).unwrap_or_default()
    };
    let role = |role: Role, common, image, engine, exec, args| Invocation::Role {
        role,
        options: Options { common, image, engine, exec, from_env: from_env(role.name()) },
        args,
    };
    Ok(match cli.command {
        None => Invocation::Version,
        Some(Command::Worker(a)) => role(Role::Worker, a.common, ImageArgs::default(), a.engine, a.exec, a.args),
        Some(Command::Server(a)) => {
            role(Role::Server, a.common, ImageArgs::default(), EngineArgs::default(), a.exec, a.args)
        }
        Some(Command::Check(a)) => role(Role::Check, a.common, a.image, a.engine, ExecArgs::default(), a.args),
        Some(Command::Install { dest, from }) => Invocation::Install { dest, from },
        Some(Command::Node { output, name }) => Invocation::Node { output, name },
        Some(Command::Manifest(m)) => Invocation::Manifest(m),
        Some(Command::Prefetch(a)) => Invocation::Prefetch(a),
        Some(Command::Version) => Invocation::Version,
        Some(Command::Completion { shell }) => Invocation::Completion(shell),
    })
}

/// `infera-exec [OPTIONS] [--] PROGRAM ...`: clap reads the options only.
fn parse_command_form(argv: &[OsString]) -> Result<Invocation, clap::Error> {
    let mut cmd = form_command();
    if let Some(e) = mistyped_subcommand(argv, &mut cmd) {
        return Err(e);
    }
    let (options_end, command) = match command_start(argv, &cmd) {
        Some(at) => (if argv[at - 1] == "--" { at - 1 } else { at }, Some(argv[at..].to_vec())),
        // An option that is not ours, or no PROGRAM: the parser says which.
        None => (argv.len(), None),
    };
    let m = cmd.try_get_matches_from_mut(&argv[..options_end]).map_err(|e| explain(e, argv, &cmd))?;
    let form = CommandForm::from_arg_matches(&m)?;
    let Some(command) = command else {
        return Err(cmd.error(
            clap::error::ErrorKind::MissingRequiredArgument,
            "no PROGRAM after the options: give the command to run (`infera-exec [OPTIONS] python3 -m \
             infera.engine.vllm ARGS...`) or a subcommand (`infera-exec worker [OPTIONS] -- ARGS...`)",
        ));
    };
    let from_env = env_sourced(&cmd, &m);
    Ok(Invocation::Program {
        options: Options {
            common: form.common,
            image: ImageArgs::default(),
            engine: form.engine,
            exec: form.exec,
            from_env,
        },
        command,
    })
}

/// `infera-exec wroker`: a bare word one or two edits from a subcommand is a typo, not a
/// program (none of the launcher's programs is spelled like its subcommands).
fn mistyped_subcommand(argv: &[OsString], cmd: &mut clap::Command) -> Option<clap::Error> {
    let (word, near) = near_subcommand(argv)?;
    Some(cmd.error(
        clap::error::ErrorKind::InvalidSubcommand,
        format!(
            "`{word}` is not a subcommand, and a PROGRAM this close to `{near}` is taken for a typo\n\n  \
             tip: did you mean `infera-exec {near}`? A program of that name runs as `infera-exec -- {word} ...`"
        ),
    ))
}

/// The first word and the subcommand it is one or two edits from, if it is.
fn near_subcommand(argv: &[OsString]) -> Option<(&str, &'static str)> {
    let word = argv.get(1)?.to_str()?;
    if word.starts_with('-') || word.contains('/') || word.len() < 4 {
        return None;
    }
    let near = SUBCOMMANDS.iter().find(|s| strsim::damerau_levenshtein(word, s) <= 2 && **s != "help")?;
    Some((word, near))
}

/// `(long option, variable)` of each value clap took from the environment.
fn env_sourced(cmd: &clap::Command, m: &clap::ArgMatches) -> Vec<(String, String)> {
    cmd.get_arguments()
        .filter(|a| m.try_contains_id(a.get_id().as_str()).unwrap_or(false))
        .filter(|a| m.value_source(a.get_id().as_str()) == Some(clap::parser::ValueSource::EnvVariable))
        .filter_map(|a| Some((a.get_long()?.to_string(), a.get_env()?.to_string_lossy().into_owned())))
        .collect()
}

/// clap's errors, said for this launcher: a value from a variable names the variable; an
/// option of another role says whose it is; a typo gets its suggestion without the advice to
/// pass it to the engine.
fn explain(e: clap::Error, argv: &[OsString], cmd: &clap::Command) -> clap::Error {
    match e.kind() {
        clap::error::ErrorKind::UnknownArgument => other_roles(e, argv, cmd),
        clap::error::ErrorKind::InvalidUtf8 => not_utf8_variable(argv, cmd).unwrap_or(e),
        _ => name_the_variable(e, argv, cmd),
    }
}

/// clap says only "invalid UTF-8 was detected" when an option's variable is not UTF-8:
/// name the variable (argv is checked by the options that take bytes).
fn not_utf8_variable(argv: &[OsString], cmd: &clap::Command) -> Option<clap::Error> {
    let sub = argv.get(1).and_then(|a| a.to_str()).and_then(|n| cmd.find_subcommand(n)).unwrap_or(cmd);
    let arg =
        sub.get_arguments().find(|a| a.get_env().and_then(std::env::var_os).is_some_and(|v| v.to_str().is_none()))?;
    let var = arg.get_env()?.to_string_lossy();
    let value = std::env::var_os(arg.get_env()?)?.to_string_lossy().into_owned();
    let long = arg.get_long().unwrap_or_default();
    Some(clap::Error::raw(
        clap::error::ErrorKind::InvalidUtf8,
        format!("{var}=`{value}` (the variable of '--{long}') is not valid UTF-8; set it to text, or unset it\n"),
    ))
}

fn other_roles(e: clap::Error, argv: &[OsString], cmd: &clap::Command) -> clap::Error {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(shown)) = e.get(ContextKind::InvalidArg) else { return e };
    let long = shown.strip_prefix("--").map(|l| l.split('=').next().unwrap_or(l));
    let role = argv.get(1).and_then(|a| a.to_str()).and_then(|n| cmd.find_subcommand(n).map(|c| (n, c)));
    if let Some(n) = output_as_a_flag(e.kind(), long, role.map(|(_, c)| c)) {
        return n;
    }
    let owners: Vec<&str> = match (long, role) {
        (Some(long), Some((_, _))) => ["worker", "server", "check"]
            .into_iter()
            .filter(|r| cmd.find_subcommand(r).is_some_and(|c| c.get_arguments().any(|a| a.get_long() == Some(long))))
            .collect(),
        _ => Vec::new(),
    };
    let similar = e.get(ContextKind::SuggestedArg).is_some();
    // An engine's option before `--` (the most common slip): say where it goes, with the
    // command line as it should be, rather than a similar launcher option. (clap shows a
    // short cluster's first letter: `-t` of `-tp`.)
    let at = argv.iter().skip(2).position(|a| {
        a.to_str().is_some_and(|a| a == shown || (!shown.starts_with("--") && a.starts_with(shown.as_str())))
    });
    let word = at.and_then(|i| argv[i + 2].to_str()).map(|w| w.split('=').next().unwrap_or(w));
    let engine_option =
        word.is_some_and(|w| infera_facts::engines::OptionList::all().any(|list| list.names().contains(&w)));
    let slip = match (role, at, owners.is_empty() && (engine_option || !similar)) {
        (Some(("server", _)), Some(_), true)
            if word.is_some_and(|w| engine_option && !infera_facts::router_args::is_option(w)) =>
        {
            let w = word.unwrap_or_default();
            Some(format!("`{w}` is an engine's option, not the router's: give it to the workers (`infera-exec worker -- {w} ...`)"))
        }
        (Some((name, sub)), Some(i), true) => {
            let whose = if name == "server" { "the router's" } else { "the engine's" };
            Some(format!("{whose} args go after `--`: {}", moved_after_dashes(argv, i + 2, sub)))
        }
        _ => None,
    };
    if owners.is_empty() && !similar && slip.is_none() {
        return e; // not ours at all: clap's advice (`-- ARG` passes it to the engine) stands
    }
    let mut n = clap::Error::new(e.kind()).with_cmd(role.map_or(cmd, |(_, c)| c));
    for (k, v) in e.context() {
        // (clap's usage line would show the similar option it suggested: for a slip, or an
        // option of another role, the tip below is the advice)
        let dropped =
            (slip.is_some() || !owners.is_empty()) && matches!(k, ContextKind::SuggestedArg | ContextKind::Usage);
        if k != ContextKind::Suggested && !dropped {
            n.insert(k, v.clone());
        }
    }
    if let (true, Some((_, c))) = (slip.is_some() || !owners.is_empty(), role) {
        n.insert(ContextKind::Usage, ContextValue::StyledStr(c.clone().render_usage()));
    }
    if let Some(tip) = slip {
        n.insert(ContextKind::Suggested, ContextValue::StyledStrs(vec![tip.into()]));
    } else if let (false, Some((name, _))) = (owners.is_empty(), role) {
        let why = match name {
            "server" => "; the router runs no engine",
            "check" => "; check execs nothing",
            _ => "",
        };
        let tip = format!("`{shown}` is an option of {}, not of `{name}`{why}", owners.join(" and "));
        n.insert(ContextKind::Suggested, ContextValue::StyledStrs(vec![tip.into()]));
    }
    n
}

/// `--json` for `-o json`: a format of the role's `--output` written as a flag of its own.
fn output_as_a_flag(
    kind: clap::error::ErrorKind,
    long: Option<&str>,
    role: Option<&clap::Command>,
) -> Option<clap::Error> {
    let (long, role) = (long?, role?);
    let output = role.get_arguments().find(|a| a.get_long() == Some("output"))?;
    let format = output.get_possible_values().into_iter().find(|v| !v.is_hide_set() && v.matches(long, true))?;
    let name = format.get_name();
    let tip = format!("`--{long}` is a format of --output: write `-o {name}` (`--output {name}`)");
    let mut n = clap::Error::new(kind).with_cmd(role);
    n.insert(clap::error::ContextKind::InvalidArg, clap::error::ContextValue::String(format!("--{long}")));
    n.insert(clap::error::ContextKind::Usage, clap::error::ContextValue::StyledStr(role.clone().render_usage()));
    n.insert(clap::error::ContextKind::Suggested, clap::error::ContextValue::StyledStrs(vec![tip.into()]));
    Some(n)
}

/// The command line with the launcher's options before one `--` and everything else after it:
/// `worker --dry-run --tensor-parallel-size 8 -- --model m` becomes `worker --dry-run --
/// --tensor-parallel-size 8 --model m`. `at`: the first arg that is not the launcher's.
fn moved_after_dashes(argv: &[OsString], at: usize, sub: &clap::Command) -> String {
    let end = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    let (mut ours, mut theirs): (Vec<&OsString>, Vec<&OsString>) = (argv[1..at].iter().collect(), Vec::new());
    let mut i = at;
    while i < end {
        let a = argv[i].to_string_lossy();
        let name = a.split('=').next().unwrap_or_default();
        let arg = sub.get_arguments().find(|x| {
            x.get_long().is_some_and(|l| name.strip_prefix("--") == Some(l))
                || x.get_short().is_some_and(|s| name.strip_prefix('-') == Some(s.encode_utf8(&mut [0; 4])))
        });
        match arg {
            Some(x) => {
                ours.push(&argv[i]);
                if x.get_action().takes_values() && !a.contains('=') && i + 1 < end {
                    i += 1;
                    ours.push(&argv[i]);
                }
            }
            None => theirs.push(&argv[i]),
        }
        i += 1;
    }
    theirs.extend(argv.get(end + 1..).unwrap_or_default());
    let text = |a: &[&OsString]| a.iter().map(|a| crate::term::shell_quote(a)).collect::<Vec<_>>().join(" ");
    format!("infera-exec {} -- {}", text(&ours), text(&theirs))
}

/// clap names the option whose value it rejects (`invalid value 'x' for '--engine <ENGINE>'`);
/// when the value came from its variable, say the variable: that is what the pod spec sets.
fn name_the_variable(e: clap::Error, argv: &[OsString], cmd: &clap::Command) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    // The option whose value is wrong; of two in conflict, the one named second.
    let context = match e.kind() {
        ErrorKind::InvalidValue | ErrorKind::ValueValidation | ErrorKind::InvalidUtf8 => ContextKind::InvalidArg,
        ErrorKind::ArgumentConflict => ContextKind::PriorArg,
        _ => return e,
    };
    let shown = match e.get(context) {
        Some(ContextValue::String(s)) => s.clone(),
        Some(ContextValue::Strings(v)) if v.len() == 1 => v[0].clone(),
        _ => return e,
    };
    let long = shown.trim_start_matches('-').split([' ', '=']).next().unwrap_or_default();
    // The options region of argv: up to `--`.
    let end = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    let on_command_line = argv[..end].iter().any(|a| {
        let a = a.as_bytes();
        a.strip_prefix(b"--").is_some_and(|r| r == long.as_bytes() || r.starts_with(format!("{long}=").as_bytes()))
    });
    let sub = argv.get(1).and_then(|a| a.to_str()).and_then(|n| cmd.find_subcommand(n));
    let arg = sub.unwrap_or(cmd).get_arguments().find(|a| a.get_long() == Some(long));
    // Its short form (`-o xml`, `-oxml`) is the command line's too.
    let short = arg.and_then(|a| a.get_short()).map(|c| format!("-{c}"));
    let on_command_line = on_command_line
        || short.is_some_and(|s| {
            argv.get(1..end).unwrap_or_default().iter().any(|a| a.as_bytes().starts_with(s.as_bytes()))
        });
    // A value from a variable: one that is set.
    let Some(var) = arg.and_then(|a| a.get_env()).filter(|v| !on_command_line && std::env::var_os(v).is_some()) else {
        return e;
    };
    let text = crate::term::clap_error(&e);
    let text =
        text.replacen(&format!("'{shown}'"), &format!("{} (the variable of '{shown}')", var.to_string_lossy()), 1);
    clap::Error::raw(e.kind(), text.strip_prefix("error: ").unwrap_or(&text).to_string())
}

/// The subcommands (`help` is clap's).
const SUBCOMMANDS: [&str; 10] =
    ["worker", "server", "check", "node", "install", "manifest", "__prefetch", "version", "completion", "help"];

/// Where the command of the command form starts: the first word after the launcher's own
/// options that is not a subcommand (`--` ends the options explicitly). None when an option
/// is not the launcher's (the parser then says so) or there is no command.
fn command_start(argv: &[OsString], cmd: &clap::Command) -> Option<usize> {
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
            match takes_value(cmd, name) {
                Some(true) if !inline => i += 2,
                Some(_) if name != b"help" => i += 1,
                // Not ours (or --help): clap says what it is.
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
pub(crate) fn wants_output(argv: &[OsString], env: &infera_facts::envvars::Env) -> Output {
    let cmd = form_command();
    let mut out: Option<&[u8]> = None;
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].as_bytes();
        if a == b"--" {
            break;
        }
        if let Some(v) = a.strip_prefix(b"--output=").or_else(|| a.strip_prefix(b"-o=")) {
            out = Some(v);
        } else if let Some(v) = a.strip_prefix(b"-o").filter(|v| !v.is_empty() && !v.starts_with(b"=")) {
            out = Some(v); // `-ojson`
        } else if a == b"--output" || a == b"-o" {
            out = argv.get(i + 1).map(|v| v.as_bytes());
            i += 1;
        } else if let Some(name) = a.strip_prefix(b"--") {
            i += usize::from(takes_value(&cmd, name) == Some(true));
        } else if !a.starts_with(b"-") && !SUBCOMMANDS.iter().any(|s| s.as_bytes() == a) {
            break; // the command form's program: what follows is its own
        }
        i += 1;
    }
    let of = |v: &[u8]| match v.to_ascii_lowercase().as_slice() {
        b"json" => Output::Json,
        b"yaml" => Output::Yaml,
        b"junit" => Output::Junit,
        b"affinity" => Output::Affinity,
        _ => Output::Text,
    };
    match out {
        Some(v) => of(v),
        None => infera_facts::envvars::get(env, infera_facts::envvars::INFERA_OUTPUT)
            .map_or(Output::Text, |v| of(v.as_bytes())),
    }
}

/// Whether the command form's long option `name` takes a separate value (`--overlay DIR`),
/// or None when it is not one of its options (its options are the worker's: one list, the
/// parser's).
fn takes_value(cmd: &clap::Command, name: &[u8]) -> Option<bool> {
    let arg = cmd.get_arguments().find(|a| a.get_long().is_some_and(|l| l.as_bytes() == name))?;
    // The boolean options are `num_args = 0` with a default-missing value; the others take one.
    Some(arg.get_num_args().map_or(arg.get_action().takes_values(), |n| n.max_values() > 0))
}

#[cfg(test)]
mod tests {

    /// `--engine`'s values are `auto` and the engine table's names, in its order.
    use super::*;

    fn argv(v: &[&str]) -> Vec<OsString> {
        std::iter::once("infera-exec").chain(v.iter().copied()).map(OsString::from).collect()
    }

    /// Every option's variable is one `envvars::misspelt` knows as the launcher's, so a new
    /// option's variable is never warned about as a misspelling of another.
    #[test]
    fn every_options_variable_is_known_as_ours() {
        fn envs(cmd: &clap::Command, out: &mut Vec<String>) {
            out.extend(cmd.get_arguments().filter_map(|a| a.get_env()).map(|e| e.to_string_lossy().into_owned()));
            cmd.get_subcommands().for_each(|c| envs(c, out));
        }
        let mut all = Vec::new();
        envs(&cli_command(), &mut all);
        envs(&form_command(), &mut all);
        assert!(all.len() > 20, "{all:?}");
        for e in all.iter().filter(|e| e.starts_with("INFERA_")) {
            assert!(infera_facts::envvars::OURS.contains(&e.as_str()), "{e} is missing from envvars::OURS");
        }
    }

    /// The command form finds its PROGRAM with the parser's own option list.
    #[test]
    fn option_kinds_come_from_the_parser() {
        let cmd = form_command();
        for v in ["overlay", "root", "engine", "leader-wait", "output", "drop-caps"] {
            assert_eq!(takes_value(&cmd, v.as_bytes()), Some(true), "{v}");
        }
        for f in ["dry-run", "init", "no-new-privs", "skip-engine-patches"] {
            assert_eq!(takes_value(&cmd, f.as_bytes()), Some(false), "{f}");
        }
        assert_eq!(takes_value(&cmd, b"gpus"), None);
        let subs: Vec<String> = cli_command().get_subcommands().map(|s| s.get_name().to_string()).collect();
        assert_eq!(subs.iter().chain(["help".to_string()].iter()).cloned().collect::<Vec<_>>(), SUBCOMMANDS);
    }

    #[test]
    fn the_two_forms() {
        match parse(argv(&["python3", "-m", "infera.engine.vllm", "--dry-run"])).unwrap() {
            Invocation::Program { options, command } => {
                assert!(!options.exec.dry_run, "options after PROGRAM belong to the command");
                assert_eq!(command, argv(&["python3", "-m", "infera.engine.vllm", "--dry-run"])[1..]);
            }
            other => panic!("{other:?}"),
        }
        match parse(argv(&["--dry-run", "--output", "json", "--family=x", "--", "bash", "-c", "true"])).unwrap() {
            Invocation::Program { options, command } => {
                assert!(options.exec.dry_run);
                assert_eq!(options.common.output, Output::Json);
                assert_eq!(options.common.family.as_deref(), Some("x"));
                assert_eq!(command, argv(&["bash", "-c", "true"])[1..]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse(argv(&["worker", "--dry-run"])).unwrap(), Invocation::Role { role: Role::Worker, .. }));
        assert!(matches!(parse(argv(&["--version"])).unwrap(), Invocation::Version));
        assert!(parse(argv(&["--frobnicate", "python3"])).is_err());
        assert!(parse(argv(&["--dry-run"])).is_err(), "no PROGRAM");
        assert!(parse(argv(&[])).is_err());
    }

    /// Each role takes its own options only.
    #[test]
    fn options_per_role() {
        use clap::error::ErrorKind;
        for (args, ok) in [
            (&["check", "--init"][..], false),
            (&["check", "--dry-run"], false),
            (&["server", "--engine", "vllm"], false),
            (&["server", "--nnodes", "2"], false),
            (&["server", "--init", "--dry-run", "--drop-caps", "none"], true),
            (&["check", "--engine", "sglang", "--nnodes", "2"], true),
            (&["worker", "--engine", "vllm", "--init", "--dry-run"], true),
        ] {
            match parse(argv(args)) {
                Ok(_) => assert!(ok, "{args:?} parsed"),
                Err(e) => {
                    assert!(!ok, "{args:?}: {e}");
                    assert_eq!(e.kind(), ErrorKind::UnknownArgument, "{args:?}");
                }
            }
        }
    }

    /// A role without the engine or run options gets clap's defaults for them.
    #[test]
    fn defaults_of_missing_options_are_clap_defaults() {
        let Invocation::Role { options: w, .. } = parse(argv(&["worker"])).unwrap() else { panic!() };
        let Invocation::Role { options: s, .. } = parse(argv(&["server"])).unwrap() else { panic!() };
        let Invocation::Role { options: c, .. } = parse(argv(&["check"])).unwrap() else { panic!() };
        // Unless the test's own environment sets them.
        if std::env::vars().any(|(k, _)| k.starts_with("INFERA_")) {
            return;
        }
        assert_eq!(format!("{:?}", w.engine), format!("{:?}", s.engine));
        assert_eq!(format!("{:?}", w.exec), format!("{:?}", c.exec));
    }

    #[test]
    fn typos_get_suggestions() {
        let e = parse(argv(&["worker", "--dryrun"])).unwrap_err().render().to_string();
        assert!(e.contains("a similar argument exists: '--dry-run'"), "{e}");
        let e = parse(argv(&["--dryrun", "python3", "-m", "infera.engine.vllm"])).unwrap_err().render().to_string();
        assert!(e.contains("a similar argument exists: '--dry-run'"), "{e}");
    }
}
