//! Whether the selected tree can be run from as it is: it matches its integrity record
//! (when asked), its shared objects can be mapped, it does not shadow the image's packages.

use std::path::PathBuf;

use thiserror::Error;

use crate::facts::Facts;
use crate::overlay::Tree;
use crate::payload::Problem;
use infera_exec_derive::Refuse;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub enum SafetyError {
    #[error("tree {family} does not match its integrity record:{}", problems.iter().map(|p| format!("\n  {p}")).collect::<String>())]
    #[refuse(code = "integrity", exit = Invalid, hint = "the overlay image is corrupted or was modified; pull or rebuild it")]
    Integrity { family: String, problems: Vec<Problem> },
    #[error("the tree `{}` holds shared objects but is mounted noexec: they cannot be loaded", dir.display())]
    #[refuse(
        code = "overlay-noexec",
        exit = Invalid,
        hint = "mount the overlay without noexec (image volumes on containerd 2.1+ / CRI-O are exec; check the mount options of an initContainer copy)"
    )]
    Noexec { dir: PathBuf },
    #[error("tree {family} would shadow the image's own packages: {}; the tree's site-packages comes first on PYTHONPATH", clashes.join(", "))]
    #[refuse(
        code = "shadows-base",
        exit = Invalid,
        hint = "remove the package from the tree, or list it in the manifest's `allow_shadow` if the tree's copy must win"
    )]
    Shadows { family: String, clashes: Vec<String> },
}

/// The integrity check gathered for the tree (INFERA_VERIFY), if it was asked for.
pub fn integrity(tree: &Tree) -> Result<(), SafetyError> {
    match tree.facts.integrity.as_ref().map(|i| &i.result) {
        Some(Err(problems)) => Err(SafetyError::Integrity { family: tree.family.clone(), problems: problems.clone() }),
        _ => Ok(()),
    }
}

/// A tree with shared objects on a `noexec` mount cannot load them.
pub fn noexec(tree: &Tree) -> Result<(), SafetyError> {
    if tree.facts.mount.noexec && tree.facts.shared_objects {
        return Err(SafetyError::Noexec { dir: tree.dir.clone() });
    }
    Ok(())
}

pub fn shadowing(tree: &Tree, facts: &Facts) -> Result<(), SafetyError> {
    let clashes: Vec<String> = tree
        .facts
        .top_modules
        .iter()
        .filter(|m| !tree.manifest.allow_shadow.contains(m))
        .filter_map(|m| facts.site.modules.get(m).map(|base| format!("`{m}` (base: `{}`)", base.join(m).display())))
        .collect();
    if clashes.is_empty() {
        return Ok(());
    }
    Err(SafetyError::Shadows { family: tree.family.clone(), clashes })
}
