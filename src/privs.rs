//! Dropping Linux capabilities before exec, in the safe order: the bounding set first
//! (needs CAP_SETPCAP, which is dropped later), then effective/permitted/inheritable,
//! then ambient. Optionally no_new_privs.

use std::str::FromStr;

use caps::{CapSet, Capability, CapsHashSet};

use crate::error::{Exit, Refusal};

/// `net_bind_service,CAP_KILL` → the set; `none` (or empty) → keep nothing.
pub fn parse_keep(list: &[String]) -> Result<CapsHashSet, Refusal> {
    let mut keep = CapsHashSet::new();
    for name in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty() && !s.eq_ignore_ascii_case("none")) {
        let canon = caps::to_canonical(name);
        let cap = Capability::from_str(&canon).map_err(|_| {
            Refusal::new(Exit::Usage, "drop-caps-invalid", format!("--drop-caps: `{name}` is not a Linux capability"))
                .hint("name capabilities as in capabilities(7), e.g. net_bind_service or CAP_IPC_LOCK")
        })?;
        keep.insert(cap);
    }
    Ok(keep)
}

pub fn drop_all_but(keep: &CapsHashSet, no_new_privs: bool) -> Result<(), Refusal> {
    let fail = |what: &str, e: caps::errors::CapsError| {
        Refusal::new(Exit::CannotExec, "drop-caps-failed", format!("cannot drop capabilities ({what}): {e}"))
    };
    let bounding = caps::read(None, CapSet::Bounding).map_err(|e| fail("read bounding", e))?;
    for c in bounding.difference(keep) {
        caps::drop(None, CapSet::Bounding, *c).map_err(|e| fail("bounding", e))?;
    }
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
        let now = caps::read(None, set).map_err(|e| fail("read", e))?;
        let new: CapsHashSet = now.intersection(keep).copied().collect();
        caps::set(None, set, &new).map_err(|e| fail(&format!("{set:?}"), e))?;
    }
    let ambient = caps::read(None, CapSet::Ambient).map_err(|e| fail("read ambient", e))?;
    for c in ambient.difference(keep) {
        caps::drop(None, CapSet::Ambient, *c).map_err(|e| fail("ambient", e))?;
    }
    if no_new_privs {
        nix::sys::prctl::set_no_new_privs().map_err(|e| {
            Refusal::new(Exit::CannotExec, "no-new-privs-failed", format!("cannot set no_new_privs: {e}"))
        })?;
    }
    Ok(())
}
