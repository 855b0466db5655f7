//! Logs go to stderr through `tracing`; stdout carries only the plan.

use std::ffi::OsStr;

use tracing::Level;

use crate::envvars::INFERA_LOG;
use crate::Env;

/// `INFERA_LOG=error|warn|info|debug|trace` (default `warn`).
pub fn init(env: &Env) {
    let level = match env.get(OsStr::new(INFERA_LOG)).and_then(|v| v.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("error") => Level::ERROR,
        Some("info") => Level::INFO,
        Some("debug") => Level::DEBUG,
        Some("trace") => Level::TRACE,
        _ => Level::WARN,
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .without_time()
        .with_target(false)
        .with_ansi(false)
        .try_init();
}
