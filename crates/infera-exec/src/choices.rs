//! The request's choices the plan and the report decide by, as plain values: what the run is,
//! whether the read-ahead runs, what fails a check. Below the command line (which converts its
//! own types to them once) and the plan alike; clap's types stay in `cli`.

/// What the run is (each subcommand's; the command form's from its program).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Worker,
    Server,
    Check,
    /// Any other program or module of the command form (`python3 -m infera.kvd`, `ray start`,
    /// a debug shell): the tree's environment and capability checks, no engine flags.
    Run,
}

impl Role {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Server => "server",
            Role::Check => "check",
            Role::Run => "run",
        }
    }
    /// `check` plans the worker.
    pub(crate) fn runs_engine(self) -> bool {
        matches!(self, Role::Worker | Role::Check)
    }
}

/// `--prefetch`: the launcher's read-ahead of the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prefetch {
    /// Decided by the storage under the model (plan/load.rs).
    Auto,
    On,
    Off,
}

/// `check --fail-on`: what fails the gate, a refusal only or a warning too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum FailOn {
    #[default]
    Refusal,
    Warn,
}
