//! The model the args name (the worker's, or the router's tokenizer): it must be where the
//! engine will look for it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use thiserror::Error;

use crate::plan::defaults::Ctx;
use crate::request::Request;
use infera_core::error::Refusal;
use infera_exec_derive::Refuse;
use infera_facts::dialect::Setting;
use infera_facts::engines::Opt;
use infera_facts::finding::Finding;
use infera_facts::model::{Model, ModelFacts};
use infera_facts::Facts;

/// A model path the engine would not find.
#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum ModelError {
    #[error("the model path `{}` does not exist in this container{waited}", path.display())]
    #[refuse(code = "model-missing", exit = Missing, hint = "mount the model volume (PVC) at that path, or fix --model")]
    ModelMissing { path: PathBuf, waited: String },
    #[error("the model path `{}` is not in the volume `--volume {}={}` gives", path.display(), at.display(), dir.display())]
    #[refuse(
        code = "model-missing",
        exit = Missing,
        hint_opt = Some(nearest.as_ref().map_or_else(
            || format!("fix the path, or give the directory that holds it as --volume {}=DIR", at.display()),
            |n| format!("did you mean `{}`? (the volume holds it; paths are case-sensitive)", n.display())
        ))
    )]
    NotInVolume { path: PathBuf, at: PathBuf, dir: PathBuf, nearest: Option<PathBuf> },
    #[error("the model `{reference}` is a relative path, but the engine runs in `{}` (INFERA_EXEC_CHDIR): it would read another directory", dir.display())]
    #[refuse(
        code = "model-path-relative",
        exit = Usage,
        hint = "give the model's absolute path, or set INFERA_EXEC_CHDIR to the directory it is relative to"
    )]
    RelativeModel { reference: String, dir: PathBuf },
}

/// The model the args name, as its config.json says it (what the rules need of it), or why
/// it cannot be: not there where the engine looks, or a relative path the engine reads elsewhere.
pub(crate) fn model_of<'a>(ctx: &Ctx<'a>, findings: &mut Vec<Finding>) -> Result<Option<&'a Model>, Refusal> {
    let Some(Setting::Value(reference)) = ctx.parsed.get(Opt::Model) else {
        findings.push(Finding::info("model-unknown", "no model in the args: model rules skipped"));
        return Ok(None);
    };
    match ctx.models.get(reference) {
        Some(ModelFacts::Known(m)) => {
            if let Some(v) = &m.model_type_unusable {
                findings.push(Finding::warn(
                    "model-type-unusable",
                    format!(
                        "model_type = {v} in `{}` is not a name: the rules that depend on the model's type (MLA) are not checked",
                        m.config.display()
                    ),
                ));
            }
            if let Some(v) = &m.heads_unusable {
                findings.push(Finding::warn(
                    "model-heads-unusable",
                    format!(
                        "num_attention_heads = {v} in `{}` is not a positive count: the rule on how tensor parallelism divides the heads is not checked",
                        m.config.display()
                    ),
                ));
            }
            Ok(Some(m))
        }
        Some(ModelFacts::Missing { path, nearest, .. }) => {
            let words = ["", ": model rules skipped", " to run them"];
            missing(ctx.req, ctx.facts, path, nearest.as_deref(), words, findings)?;
            Ok(None)
        }
        Some(ModelFacts::Relative { reference }) => match &ctx.req.chdir {
            Some(dir) => Err(ModelError::RelativeModel { reference: reference.clone(), dir: dir.clone() }.into()),
            None => {
                findings.push(Finding::warn(
                    "model-unreadable",
                    format!("`{reference}` is relative to the launcher's working directory: model rules skipped"),
                ));
                Ok(None)
            }
        },
        Some(ModelFacts::Unreadable { reason, .. }) => {
            findings.push(Finding::warn(
                "model-unreadable",
                format!("{reason}: model rules skipped, nothing refused on a guess"),
            ));
            Ok(None)
        }
        None => Ok(None),
    }
}

/// The router's tokenizer path, when it is one: missing at the image's root it is refused
/// as a worker's model is (the router would try to download a path); under `--root` (a
/// volume in the pod) it is a warning.
pub(crate) fn tokenizer(
    req: &Request,
    facts: &Facts,
    models: &BTreeMap<OsString, ModelFacts>,
    router: &infera_facts::router_args::RouterArgs,
    findings: &mut Vec<Finding>,
) -> Result<(), ModelError> {
    let Some(Some(ModelFacts::Missing { path, nearest, .. })) = router.tokenizer_path().map(|p| models.get(p)) else {
        return Ok(());
    };
    missing(req, facts, path, nearest.as_deref(), [" (--router-tokenizer-path)", "", ""], findings)
}

/// A model path that is not there: refused at the image's root (the pod's own files) and
/// under a `--volume` given (the user's volume is the truth about its paths), a warning
/// elsewhere under `--root`, where it is most likely one of the pod's volumes. `words`: what
/// follows the path, what follows "(a volume in the pod?)", what ends the warning.
fn missing(
    req: &Request,
    facts: &Facts,
    path: &std::path::Path,
    nearest: Option<&std::path::Path>,
    [named, skipped, purpose]: [&str; 3],
    findings: &mut Vec<Finding>,
) -> Result<(), ModelError> {
    if facts.root.is_host_root() {
        return Err(ModelError::ModelMissing { path: path.to_path_buf(), waited: waited(req, true) });
    }
    if let Some((at, dir)) = req.volumes.iter().find(|(at, _)| path.starts_with(at)) {
        let (path, at, dir) = (path.to_path_buf(), at.clone(), dir.clone());
        return Err(ModelError::NotInVolume { path, at, dir, nearest: nearest.map(std::path::Path::to_path_buf) });
    }
    let msg = format!(
        "`{}`{named} is not in the image root (a volume in the pod?){}{skipped}; give its files with --volume {}=DIR{purpose}",
        path.display(),
        waited(req, false),
        volume_of(path).display()
    );
    findings.push(Finding::warn("model-unreadable", msg));
    Ok(())
}

/// How the model wait went, for a model still missing: with --wait-model a real run in the
/// pod (at the root `/`) refuses only once the wait is over; one under --root does not wait.
pub(crate) fn waited(req: &Request, at_host_root: bool) -> String {
    match &req.wait_model {
        None => String::new(),
        Some(w) if req.dry_run => format!(" (a real run in the pod waits {} for it: {})", w.how_long(), w.said),
        Some(w) if at_host_root => {
            format!(" after waiting {} for it ({})", w.how_long().trim_start_matches("up to "), w.said)
        }
        Some(w) => format!(" (not waited for: {} waits in the pod, at its root `/`, not under --root)", w.said),
    }
}

/// The directory a pod would mount for a model path: its first component (`/models`).
fn volume_of(path: &std::path::Path) -> PathBuf {
    path.components().take(2).collect()
}
