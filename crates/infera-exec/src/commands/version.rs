//! `infera-exec --version`.

use crate::support;
use infera_core::error::Refusal;
use infera_facts::envvars::Env;

/// `--version`: the launcher, the commit it was built from, and the overlay it would use
/// with the families (ABI trees) that overlay carries.
pub(crate) fn version_text(env: &Env) -> String {
    let dir = infera_facts::envvars::get_nonempty(env, infera_facts::envvars::INFERA_OVERLAY)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| infera_overlay::overlay::discover(std::env::current_exe().ok().as_deref()));
    let head = format!("infera-exec {} (commit {})\n", env!("CARGO_PKG_VERSION"), env!("INFERA_COMMIT"));
    match infera_overlay::overlay::load(&dir, &infera_overlay::overlay::LoadOptions::default()) {
        Ok(ov) => {
            let trees: Vec<_> = ov.trees.iter().map(|t| &t.manifest).collect();
            let none = if trees.is_empty() { " no trees" } else { "" };
            format!("{head}overlay {}:{none}\n{}", dir.display(), support::text(&trees))
        }
        Err(e) => {
            format!("{head}overlay {}: none ({})\n{}", dir.display(), Refusal::from(e).message, support::text(&[]))
        }
    }
}
