//! Privilege steps before exec, in the safe order: the bounding set first (needs
//! CAP_SETPCAP, which is dropped later), then effective/permitted/inheritable, then
//! ambient; then no_new_privs.

use caps::{CapSet, Capability, CapsHashSet};
use thiserror::Error;

use crate::spec::Privileges;
use infera_exec_derive::Refuse;

#[derive(Debug, Error, Refuse)]
pub(crate) enum PrivError {
    #[error("cannot drop capabilities ({what}): {cause}")]
    #[refuse(code = "drop-caps-failed", exit = CannotExec)]
    DropCaps { what: String, cause: caps::errors::CapsError },
    #[error("cannot set no_new_privs: {cause}")]
    #[refuse(code = "no-new-privs-failed", exit = CannotExec)]
    NoNewPrivs { cause: nix::errno::Errno },
}

/// Carry out the plan's privilege steps on this process.
pub(crate) fn apply(p: &Privileges) -> Result<(), PrivError> {
    if let Some(keep) = &p.keep_caps {
        drop_all_but(&keep.iter().copied().collect())?;
    }
    if p.no_new_privs {
        nix::sys::prctl::set_no_new_privs().map_err(|cause| PrivError::NoNewPrivs { cause })?;
    }
    Ok(())
}

fn drop_all_but(keep: &CapsHashSet) -> Result<(), PrivError> {
    let fail = |what: &str| {
        let what = what.to_string();
        move |cause| PrivError::DropCaps { what, cause }
    };
    let bounding = caps::read(None, CapSet::Bounding).map_err(fail("read bounding"))?;
    for c in bounding.difference(keep) {
        caps::drop(None, CapSet::Bounding, *c).map_err(fail("bounding"))?;
    }
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
        let now = caps::read(None, set).map_err(fail("read"))?;
        let new: CapsHashSet = now.intersection(keep).copied().collect::<std::collections::HashSet<Capability>>();
        caps::set(None, set, &new).map_err(fail(&format!("{set:?}")))?;
    }
    let ambient = caps::read(None, CapSet::Ambient).map_err(fail("read ambient"))?;
    for c in ambient.difference(keep) {
        caps::drop(None, CapSet::Ambient, *c).map_err(fail("ambient"))?;
    }
    Ok(())
}
