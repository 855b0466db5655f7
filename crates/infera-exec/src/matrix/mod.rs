//! `check` over images × trees, for CI: `--image` repeated, `--family all`, or `--output
//! junit`. Each image is read once (its archive, or `--root`) and its facts gathered once;
//! each cell is the plan `check` makes for that image with that tree, ok or refused with its
//! code. A column of `--family all` is judged, not forced: a tree built for another Python or
//! HIP ABI does not apply to the image (`not-applicable`, skipped in JUnit), and never fails.
//!
//! Exit: the one cell's own code for one image × one tree; else the image's code (65, 66) when
//! an image cannot be read; 1 when an applicable cell is refused (or, with `--fail-on warn`,
//! warned), or an image has no applicable tree at all; else 0.

pub(crate) mod render;

use serde_json::Value;

use crate::choices::FailOn;
use crate::cli::{Output, ALL_FAMILIES};
use crate::error::{Exit, Refusal};
use crate::plan::TreeChoice;
use crate::request::{Request, Role};
use crate::{Env, Gathered};

/// The row's facts name no GPU count: each cell's plan has its own (its node's).
static NO_GPUS: Result<infera_facts::Gpus, infera_facts::GpuError> =
    Ok(infera_facts::Gpus { count: None, source: infera_facts::GpuSource::Nothing });

/// The exit code when several cells were judged and one was refused.
pub const CELL_REFUSED: i32 = 1;

/// Does the request ask for the matrix rather than one plan?
pub fn wanted(req: &Request) -> bool {
    req.role == Role::Check
        && (req.image.image.len() > 1
            || req.node.len() > 1
            || req.family.as_deref() == Some(ALL_FAMILIES)
            || req.output == Output::Junit)
}

/// A column: the tree a cell is planned with, on the node (`--node`'s, in order; none given:
/// this node at root `/`, else none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub tree: TreeChoice,
    /// The index of the node in `--node`, and its spec.
    pub node: Option<(usize, String)>,
    name: String,
}

impl Column {
    pub fn new(tree: TreeChoice, node: Option<(usize, String)>) -> Column {
        let t = match &tree {
            TreeChoice::Matching => "matching tree",
            TreeChoice::Forced(f) | TreeChoice::Judged(f) => f,
        };
        let name = match &node {
            Some((_, spec)) => format!("{t} on {spec}"),
            None => t.to_string(),
        };
        Column { tree, node, name }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// One image's row: what it is, its facts, and a cell per column; or why it cannot be read.
pub struct Row {
    /// The reference given (`--image`), or the root directory.
    pub image: String,
    /// How long reading the image and judging its cells took, in seconds.
    pub seconds: f64,
    pub identity: Option<infera_core::image::Identity>,
    pub facts: Value,
    pub cells: Vec<Cell>,
    pub error: Option<Refusal>,
}

/// One image with one tree.
pub struct Cell {
    /// The tree planned with (None: none was selected).
    pub family: Option<String>,
    /// The plan as `check --output json` prints it, without the image's facts (the row's).
    pub plan: Value,
    pub error: Option<Refusal>,
    pub verdict: Verdict,
    /// The plan's warnings, `(code, message)`: reported for a cell that passes too.
    pub warnings: Vec<(String, String)>,
    pub seconds: f64,
}

/// What a cell says about its image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Refused,
    /// A tree of `--family all` built for another CPython or HIP ABI than the image's.
    NotApplicable,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Refused => "refused",
            Verdict::NotApplicable => "not-applicable",
        }
    }
}

impl Cell {
    /// Does this cell fail the gate?
    pub fn fails(&self, fail_on: FailOn) -> bool {
        match self.verdict {
            Verdict::Refused => true,
            Verdict::Ok => fail_on == FailOn::Warn && !self.warnings.is_empty(),
            Verdict::NotApplicable => false,
        }
    }
}

impl Row {
    /// An image read whose every cell is not applicable: no tree of the overlay runs it.
    pub fn none_applies(&self) -> bool {
        self.error.is_none() && !self.cells.is_empty() && self.cells.iter().all(|c| c.verdict == Verdict::NotApplicable)
    }

    /// Why the image cannot run with this overlay, when no tree applies.
    pub fn no_tree(&self) -> Option<Refusal> {
        self.none_applies().then(|| MatrixError::NoTree { abi: render::abi(&self.facts) }.into())
    }
}

/// An image the matrix judged as a whole.
#[derive(Debug, Clone, PartialEq, thiserror::Error, infera_exec_derive::Refuse)]
pub enum MatrixError {
    #[error("no tree of this overlay is built for this image's CPython and HIP ABI ({abi}): it cannot run with it")]
    #[refuse(
        code = "no-applicable-tree",
        exit = Unsupported,
        hint = "build the overlay with a tree for this ABI, or run an image of an ABI it has"
    )]
    NoTree { abi: String },
}

/// Judge every image with every column, print the matrix, and exit as the module says.
pub fn run(req: &Request, env: &Env) -> i32 {
    let (overlay, opts) = crate::load_overlay(req);
    let columns = match columns(req, &overlay) {
        Ok(c) => c,
        Err(r) => return crate::refuse_in(&r, req.output, env),
    };
    let sources: Vec<Option<&std::ffi::OsStr>> = match req.image.image.as_slice() {
        [] => vec![None],
        refs => refs.iter().map(|r| Some(r.as_os_str())).collect(),
    };
    let rows: Vec<Row> = sources.into_iter().map(|s| row(req, env, s, &columns, &overlay, &opts)).collect();
    let code = exit(&rows, columns.len(), req.fail_on);
    let out = match req.output {
        Output::Text => render::text(&rows, &columns, req.fail_on),
        Output::Json => render::json(&rows, &columns, code, req.fail_on),
        Output::Yaml => crate::report::yaml(&render::json(&rows, &columns, code, req.fail_on)).unwrap_or_default(),
        Output::Junit => render::junit(&rows, &columns, req.fail_on),
    };
    if let Err(c) = crate::emit(&out) {
        return c;
    }
    if code != 0 {
        let (failed, cells) = counts(&rows, columns.len(), req.fail_on);
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("check: {failed} of {cells} image × tree cells failed (exit {code}); the matrix is on stdout\n")
                .as_bytes(),
        );
    }
    code
}

/// The columns: every tree of the overlay for `--family all`, else the one `--family` forces,
/// else the tree each image's ABI selects; each on every `--node`.
fn columns(req: &Request, overlay: &Result<infera_overlay::overlay::Overlay, Refusal>) -> Result<Vec<Column>, Refusal> {
    let trees = match req.family.as_deref() {
        Some(ALL_FAMILIES) => {
            let ov = overlay.as_ref().map_err(Clone::clone)?;
            ov.trees.iter().map(|t| TreeChoice::Judged(t.family.clone())).collect()
        }
        Some(f) => vec![TreeChoice::Forced(f.to_string())],
        None => vec![TreeChoice::Matching],
    };
    let nodes: Vec<Option<(usize, String)>> = match req.node.as_slice() {
        [] => vec![None],
        specs => specs.iter().cloned().enumerate().map(Some).collect(),
    };
    Ok(trees.iter().flat_map(|t| nodes.iter().map(|n| Column::new(t.clone(), n.clone()))).collect())
}

/// One image read and judged with every column.
fn row(
    req: &Request,
    env: &Env,
    image: Option<&std::ffi::OsStr>,
    columns: &[Column],
    overlay: &Result<infera_overlay::overlay::Overlay, Refusal>,
    opts: &infera_overlay::overlay::LoadOptions,
) -> Row {
    let started = std::time::Instant::now();
    let name = image.map_or_else(|| req.root.display().to_string(), |i| i.to_string_lossy().into_owned());
    let mut g = match Gathered::read(req, env, image) {
        Ok(g) => g,
        Err(e) => {
            let seconds = started.elapsed().as_secs_f64();
            return Row { image: name, seconds, identity: None, facts: Value::Null, cells: Vec::new(), error: Some(e) };
        }
    };
    g.read_models(req);
    let (node, gpus) = match g.nodes.as_slice() {
        [one] => (one.facts.as_ref(), &one.gpus),
        _ => (None, &NO_GPUS),
    };
    let view = g.facts.view(&g.models, node, gpus);
    let facts = serde_json::to_value(view).unwrap_or(Value::Null);
    let cells = columns.iter().map(|c| cell(&g, req, c, overlay, opts)).collect();
    let identity = g.facts.root.image().cloned();
    Row { image: name, seconds: started.elapsed().as_secs_f64(), identity, facts, cells, error: None }
}

/// One image with one column's tree on its node.
fn cell(
    g: &Gathered,
    req: &Request,
    c: &Column,
    overlay: &Result<infera_overlay::overlay::Overlay, Refusal>,
    opts: &infera_overlay::overlay::LoadOptions,
) -> Cell {
    let started = std::time::Instant::now();
    let Some(node) = g.nodes.get(c.node.as_ref().map_or(0, |n| n.0)) else {
        let error = Some(crate::error::internal("no node for this column"));
        return Cell {
            family: None,
            plan: Value::Null,
            error,
            verdict: Verdict::Refused,
            warnings: vec![],
            seconds: 0.0,
        };
    };
    let (plan, error, family) = g.judge(req, &c.tree, node, overlay, opts);
    let verdict = match &error {
        None => Verdict::Ok,
        Some(e) if matches!(c.tree, TreeChoice::Judged(_)) && e.code == "family-mismatch" => Verdict::NotApplicable,
        Some(_) => Verdict::Refused,
    };
    let warnings = plan["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["level"] == "warn")
        .map(|f| {
            (f["code"].as_str().unwrap_or_default().to_string(), f["message"].as_str().unwrap_or_default().to_string())
        })
        .collect();
    let seconds = started.elapsed().as_secs_f64();
    Cell { family, plan: without_facts(plan), error, verdict, warnings, seconds }
}

fn without_facts(mut plan: Value) -> Value {
    if let Some(o) = plan.as_object_mut() {
        o.remove("facts");
    }
    plan
}

/// What failed and how often: (failed cells, cells), an unreadable image counting a failed
/// cell per column, an image no tree applies to one.
fn counts(rows: &[Row], columns: usize, fail_on: FailOn) -> (usize, usize) {
    let failed = |r: &Row| {
        if r.error.is_some() {
            columns
        } else {
            r.cells.iter().filter(|c| c.fails(fail_on)).count() + usize::from(r.none_applies())
        }
    };
    (rows.iter().map(failed).sum(), rows.len() * columns)
}

/// The exit code of the matrix (the module's rule).
fn exit(rows: &[Row], columns: usize, fail_on: FailOn) -> i32 {
    if let ([r], 1) = (rows, columns) {
        let cell = r.cells.first();
        if let Some(e) = r.error.as_ref().or_else(|| cell.filter(|c| c.verdict == Verdict::Refused)?.error.as_ref()) {
            return e.exit.code();
        }
    }
    if let Some(e) = rows.iter().find_map(|r| r.error.as_ref()) {
        return e.exit.code();
    }
    if counts(rows, columns, fail_on).0 > 0 {
        return CELL_REFUSED;
    }
    Exit::Ok.code()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell: `Some(exit)` refused, `None` ok; `W` ok with a warning; `NA` not applicable.
    const W: Option<Exit> = Some(Exit::Ok);
    const NA: Option<Exit> = Some(Exit::Usage);

    fn row(cells: &[Option<Exit>], error: Option<Exit>) -> Row {
        let refusal = |e: Exit| Refusal { code: "x".into(), message: "m".into(), hint: None, exit: e };
        let cell = |e: &Option<Exit>| {
            let (verdict, error, warnings) = match *e {
                None => (Verdict::Ok, None, vec![]),
                W => (Verdict::Ok, None, vec![("w".to_string(), "warned".to_string())]),
                NA => (Verdict::NotApplicable, Some(refusal(Exit::Unsupported)), vec![]),
                Some(x) => (Verdict::Refused, Some(refusal(x)), vec![]),
            };
            Cell { family: None, plan: Value::Null, error, verdict, warnings, seconds: 0.0 }
        };
        Row {
            image: "i".into(),
            seconds: 0.0,
            identity: None,
            facts: Value::Null,
            cells: cells.iter().map(cell).collect(),
            error: error.map(refusal),
        }
    }

    #[test]
    fn one_cell_exits_with_its_own_code_a_matrix_with_1_or_the_archives() {
        let r = FailOn::Refusal;
        assert_eq!(exit(&[row(&[None], None)], 1, r), 0);
        assert_eq!(exit(&[row(&[Some(Exit::Refused)], None)], 1, r), 78);
        assert_eq!(exit(&[row(&[], Some(Exit::Invalid))], 1, r), 65);
        assert_eq!(exit(&[row(&[None, None], None)], 2, r), 0);
        assert_eq!(exit(&[row(&[None, Some(Exit::Refused)], None)], 2, r), CELL_REFUSED);
        assert_eq!(exit(&[row(&[Some(Exit::Unsupported)], None), row(&[None], None)], 1, r), CELL_REFUSED);
        assert_eq!(exit(&[row(&[Some(Exit::Unsupported)], None), row(&[], Some(Exit::Invalid))], 1, r), 65);
        let rows = [row(&[Some(Exit::Unsupported), None], None), row(&[], Some(Exit::Invalid))];
        assert_eq!(counts(&rows, 2, r), (3, 4));
    }

    #[test]
    fn cells_that_do_not_apply_never_fail_but_an_image_none_applies_to_does() {
        let r = FailOn::Refusal;
        assert_eq!(exit(&[row(&[None, NA], None)], 2, r), 0);
        assert_eq!(exit(&[row(&[None, NA], None), row(&[NA, None], None)], 2, r), 0);
        assert_eq!(counts(&[row(&[None, NA], None)], 2, r), (0, 2));
        assert_eq!(exit(&[row(&[NA, NA], None), row(&[None, NA], None)], 2, r), CELL_REFUSED);
        assert_eq!(counts(&[row(&[NA, NA], None)], 2, r), (1, 2));
        assert_eq!(exit(&[row(&[NA], None)], 1, r), CELL_REFUSED);
    }

    #[test]
    fn a_warning_fails_only_with_fail_on_warn() {
        assert_eq!(exit(&[row(&[W, NA], None)], 2, FailOn::Refusal), 0);
        assert_eq!(exit(&[row(&[W, NA], None)], 2, FailOn::Warn), CELL_REFUSED);
        assert_eq!(exit(&[row(&[W], None)], 1, FailOn::Warn), CELL_REFUSED);
        assert_eq!(exit(&[row(&[None, NA], None)], 2, FailOn::Warn), 0);
    }
}
