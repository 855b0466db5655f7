//! What the real run does before the exec: the overlay's engine patches, for the engines
//! the image has (known from its files), and the host's RoCE provider made the one
//! libibverbs loads. Neither can stop the start.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::choices::Role;
use crate::request::Request;
use crate::spec::Step;
use infera_facts::envvars::{self as ev, Env};
use infera_facts::finding::Finding;
use infera_facts::ionic::HOST_LIBIONIC;
use infera_facts::Facts;
use infera_overlay::overlay::Overlay;

/// The engine patches for the engines the image has. `interpreter`: the container path
/// they run with, and its file on this host with --root.
pub(super) fn patches(
    req: &Request,
    facts: &Facts,
    overlay: &Overlay,
    interpreter: (&PathBuf, Option<&PathBuf>),
    findings: &mut Vec<Finding>,
) -> Vec<Step> {
    let mut steps = Vec::new();
    // Patches fix engine code: for the runs that load it (the engine; a Ray or debug run
    // that starts engine workers), not for the router.
    if !matches!(req.role, Role::Worker | Role::Run) {
        return steps;
    }
    let installed: Vec<(&infera_overlay::overlay::Patch, &infera_facts::site::EngineInstall)> = overlay
        .patches
        .iter()
        .filter_map(|p| Some((p, facts.engine(infera_facts::engines::Engine::from_name(p.engine)?)?)))
        .collect();
    if installed.is_empty() {
        return steps;
    }
    if req.skip_engine_patches {
        findings.push(Finding::warn(
            "engine-patches-skipped",
            format!("{} engine patches not run: INFERA_SKIP_ENGINE_PATCHES is set", installed.len()),
        ));
        return steps;
    }
    for (p, install) in installed {
        let lock = install.record.parent().unwrap_or(std::path::Path::new("/")).to_path_buf();
        steps.push(Step::Patch {
            engine: p.engine,
            file: p.file.clone(),
            argv: vec![interpreter.0.clone().into_os_string(), OsString::from(&p.file)],
            host_program: interpreter.1.cloned(),
            timeout_seconds: req.engine_patch_timeout,
            host_lock: facts.root.host_of(&lock),
            lock,
        });
    }
    steps
}

/// How the host's RoCE provider reaches the engine: by path through `RDMAV_DRIVERS` and the
/// overlay's `rdma/libionic-rdmav<PABI>.so` link (nothing written), else the stack's way,
/// copied over the image's copy. Returns the variable to set, or the step.
pub(super) fn libionic(
    facts: &Facts,
    overlay: &Overlay,
    env: &Env,
    findings: &mut Vec<Finding>,
) -> (Option<OsString>, Option<Step>) {
    let Some(ionic) = &facts.ionic else { return (None, None) };
    let Some(pabi) = ionic.image_pabi else {
        findings.push(Finding::warn(
            "libionic-unused",
            format!("{HOST_LIBIONIC} is mounted but the image has no libibverbs providers (lib*-rdmav*.so): nothing would load it"),
        ));
        return (None, None);
    };
    if let Some(host) = ionic.host_pabi.filter(|h| *h != pabi) {
        // Copying it over the image's provider would break every ionic device instead.
        findings.push(Finding::warn(
            "libionic-abi",
            format!(
                "{HOST_LIBIONIC} needs IBVERBS_PRIVATE_{host} but the image's libibverbs is PABI {pabi}: it cannot be loaded here; \
                 the image's own provider stays (RDMA may be unavailable)"
            ),
        ));
        return (None, None);
    }
    if let Some(value) = by_path(overlay, pabi, env, findings) {
        return (Some(value), None);
    }
    (None, replace(facts, ionic, pabi, findings))
}

/// `RDMAV_DRIVERS` naming the overlay's link to the host's build for this PABI, if it has one.
fn by_path(overlay: &Overlay, pabi: u32, env: &Env, findings: &mut Vec<Finding>) -> Option<OsString> {
    let link = overlay.rdma.get(&pabi)?;
    let mut value = link.to_string_lossy().strip_suffix(&format!("-rdmav{pabi}.so")).map(OsString::from)?;
    // Setting RDMAV_DRIVERS hides IBV_DRIVERS: keep what the pod listed, after ours.
    let theirs = ev::get_nonempty(env, ev::RDMAV_DRIVERS).or_else(|| ev::get_nonempty(env, ev::IBV_DRIVERS));
    if let Some(t) = theirs {
        value.push(":");
        value.push(t);
    }
    findings.push(Finding::info(
        "libionic-host",
        format!(
            "the host's RoCE provider {HOST_LIBIONIC} is loaded first through {}={} (`{}`), nothing in the image is written",
            ev::RDMAV_DRIVERS,
            value.to_string_lossy(),
            link.display()
        ),
    ));
    Some(value)
}

/// The stack's way: the host's build copied over the image's provider, when it differs and
/// the image's copy can be written.
fn replace(facts: &Facts, ionic: &infera_facts::ionic::Ionic, pabi: u32, findings: &mut Vec<Finding>) -> Option<Step> {
    match (&ionic.target, ionic.same, ionic.writable) {
        (Err(why), _, _) => findings.push(Finding::warn(
            "libionic-no-target",
            format!(
                "{HOST_LIBIONIC} is mounted, the overlay has no rdma/libionic-rdmav{pabi}.so, and the image has no provider to replace ({why}); RDMA may be unavailable"
            ),
        )),
        (Ok(t), true, _) => findings.push(Finding::info(
            "libionic-current",
            format!("the image's `{}` already is the host's libionic build", t.display()),
        )),
        (Ok(t), false, false) => findings.push(Finding::warn(
            "libionic-read-only",
            format!(
                "cannot put the host's libionic in place of `{}` (read-only root filesystem?) and the overlay has no rdma/libionic-rdmav{pabi}.so; RDMA may be unavailable",
                t.display()
            ),
        )),
        (Ok(t), false, true) => {
            return Some(Step::Replace {
                from: HOST_LIBIONIC.into(),
                to: t.clone(),
                host_from: facts.root.host_of(std::path::Path::new(HOST_LIBIONIC)),
                host_to: facts.root.host_of(t),
                why: "the image's RoCE provider differs from the host's build and the overlay has no link for its PABI: \
                      libibverbs rejects every device whose kernel driver ABI its provider does not match"
                    .into(),
            });
        }
    }
    None
}
