//! Whether the selected tree can be run from as it is: it matches its integrity record
//! (when asked), its shared objects can be mapped, it does not shadow the image's packages.

use std::collections::BTreeMap;
use std::path::PathBuf;

use thiserror::Error;

use super::caps::{Copy, Import};
use infera_core::error::Refusal;
use infera_exec_derive::Refuse;
use infera_facts::site::SiteIndex;
use infera_overlay::manifest::Prefer;
use infera_overlay::overlay::Problem;
use infera_overlay::overlay::Tree;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum SafetyError {
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
        hint = if capabilities.is_empty() {
            "remove the package from the tree, or list it in the manifest's `allow_shadow` if the tree's copy must win".to_string()
        } else {
            format!(
                "stage the capability's packages in the tree's own `capabilities/{0}/` (overlay-layout/stage --capability {0}=...) so the image's copy can be used, or set `prefer = \"tree\"` in [capabilities.{0}] if the tree's copy must win",
                capabilities[0]
            )
        }
    )]
    Shadows { family: String, clashes: Vec<String>, capabilities: Vec<String> },
}

/// The integrity check gathered for the tree (INFERA_VERIFY), if it was asked for.
pub(crate) fn integrity(tree: &Tree) -> Result<(), SafetyError> {
    match tree.facts.integrity.as_ref().map(|i| &i.result) {
        Some(Err(problems)) => Err(SafetyError::Integrity { family: tree.family.clone(), problems: problems.clone() }),
        _ => Ok(()),
    }
}

/// The walk of the tree's files (links, set-id, special files, ownership) refused it.
pub(crate) fn walked(tree: &Tree) -> Result<(), Refusal> {
    match &tree.facts.walked {
        Some(Err(e)) => Err(e.clone().into()),
        _ => Ok(()),
    }
}

/// A tree with shared objects on a `noexec` mount cannot load them.
pub(crate) fn noexec(tree: &Tree) -> Result<(), SafetyError> {
    if tree.facts.mount.noexec && tree.facts.shared_objects {
        return Err(SafetyError::Noexec { dir: tree.dir.clone() });
    }
    Ok(())
}

/// Nothing the child imports from the tree may replace a package of the image, except what
/// the manifest says may: a capability whose tree copy is preferred, or `allow_shadow`.
pub(crate) fn shadowing(tree: &Tree, site: &SiteIndex, copies: &BTreeMap<String, Import>) -> Result<(), SafetyError> {
    // The site directories and the capability directories the child gets.
    let own = tree.facts.cap_modules.iter().filter(|(c, _)| copies.get(*c).is_some_and(|i| i.copy == Copy::Tree));
    let on_path = tree.facts.top_modules.keys().chain(own.flat_map(|(_, ms)| ms));
    let preferred = |m: &str| {
        tree.manifest
            .capabilities
            .values()
            .any(|c| c.prefer == Prefer::Tree && c.modules.iter().any(|x| x.split('.').next() == Some(m)))
    };
    let mut clashes: Vec<String> = Vec::new();
    let mut hint_caps: Vec<String> = Vec::new();
    for m in on_path {
        let Some(base) = site.modules.get(m) else { continue };
        if tree.manifest.allow_shadow.contains(m) || preferred(m) {
            continue;
        }
        clashes.push(format!("`{m}` (base: `{}`)", base.join(m).display()));
        if let Some((c, _)) = tree
            .manifest
            .capabilities
            .iter()
            .find(|(_, c)| c.modules.iter().any(|x| x.split('.').next() == Some(m.as_str())))
        {
            hint_caps.push(c.clone());
        }
    }
    if clashes.is_empty() {
        return Ok(());
    }
    Err(SafetyError::Shadows { family: tree.family.clone(), clashes, capabilities: hint_caps })
}
