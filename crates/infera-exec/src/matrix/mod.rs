//! `check` over images × trees, for CI: `--image` repeated, `--family all`, or `--output
//! junit`. Each image is read once (its archive, or `--root`) and its facts gathered once;
//! each cell is the plan `check` makes for that image with that tree, ok or refused with its
//! code. A column of `--family all` is judged, not forced: a tree built for another Python or
//! HIP ABI is refused (`family-mismatch`).
//!
//! Exit: the one cell's own code for one image × one tree; else the image's code (65) when
//! an image cannot be read, 1 when a cell is refused, 0 when every cell is ok.

pub(crate) mod render;

use serde_json::Value;

use crate::cli::{Output, ALL_FAMILIES};
use crate::error::{Exit, Refusal};
use crate::request::{Request, Role};
use crate::{Env, Gathered};

/// The row's facts name no GPU count: each cell's plan has its own (its node's).
static NO_GPUS: Result<crate::facts::Gpus, crate::facts::GpuError> =
    Ok(crate::facts::Gpus { count: None, source: crate::facts::GpuSource::Nothing });

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
    pub tree: Tree,
    /// The index of the node in `--node`, and its spec.
    pub node: Option<(usize, String)>,
    name: String,
}

/// The tree of a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tree {
    /// The tree the image's ABI selects (no `--family`).
    Matching,
    /// `--family NAME`: forced, as a run forces it.
    Forced(String),
    /// A tree of `--family all`: judged against the image.
    Judged(String),
}

impl Column {
    pub fn new(tree: Tree, node: Option<(usize, String)>) -> Column {
        let t = match &tree {
            Tree::Matching => "matching tree",
            Tree::Forced(f) | Tree::Judged(f) => f,
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
    let code = exit(&rows, columns.len());
    let out = match req.output {
        Output::Text => render::text(&rows, &columns),
        Output::Json => render::json(&rows, &columns, code),
        Output::Junit => render::junit(&rows, &columns),
    };
    if let Err(c) = crate::emit(&out) {
        return c;
    }
    if code != 0 {
        let (refused, cells) = counts(&rows, columns.len());
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("check: {refused} of {cells} image × tree cells refused (exit {code}); the matrix is on stdout\n")
                .as_bytes(),
        );
    }
    code
}

/// The columns: every tree of the overlay for `--family all`, else the one `--family` forces,
/// else the tree each image's ABI selects; each on every `--node`.
fn columns(req: &Request, overlay: &Result<crate::overlay::Overlay, Refusal>) -> Result<Vec<Column>, Refusal> {
    let trees = match req.family.as_deref() {
        Some(ALL_FAMILIES) => {
            let ov = overlay.as_ref().map_err(Clone::clone)?;
            ov.trees.iter().map(|t| Tree::Judged(t.family.clone())).collect()
        }
        Some(f) => vec![Tree::Forced(f.to_string())],
        None => vec![Tree::Matching],
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
    overlay: &Result<crate::overlay::Overlay, Refusal>,
    opts: &crate::overlay::LoadOptions,
) -> Row {
    let name = image.map_or_else(|| req.root.display().to_string(), |i| i.to_string_lossy().into_owned());
    let mut g = match Gathered::read(req, env, image) {
        Ok(g) => g,
        Err(e) => return Row { image: name, identity: None, facts: Value::Null, cells: Vec::new(), error: Some(e) },
    };
    g.read_models(req);
    let (node, gpus) = match g.nodes.as_slice() {
        [one] => (one.facts.as_ref(), &one.gpus),
        _ => (None, &NO_GPUS),
    };
    let view = g.facts.view(&g.models, node, gpus);
    let facts = serde_json::to_value(view).unwrap_or(Value::Null);
    let cells = columns
        .iter()
        .map(|c| {
            let mut r = req.clone();
            r.family = match &c.tree {
                Tree::Matching => None,
                Tree::Forced(f) | Tree::Judged(f) => Some(f.clone()),
            };
            r.family_judged = matches!(c.tree, Tree::Judged(_));
            let Some(node) = g.nodes.get(c.node.as_ref().map_or(0, |n| n.0)) else {
                let error = Some(crate::error::internal("no node for this column"));
                return Cell { family: None, plan: Value::Null, error };
            };
            let (plan, error, family) = g.judge(&r, node, overlay, opts);
            Cell { family, plan: without_facts(plan), error }
        })
        .collect();
    Row { image: name, identity: g.facts.root.image().cloned(), facts, cells, error: None }
}

fn without_facts(mut plan: Value) -> Value {
    if let Some(o) = plan.as_object_mut() {
        o.remove("facts");
    }
    plan
}

/// What went wrong and how often: (refused cells, cells), an unreadable image counting a
/// refused cell per column.
fn counts(rows: &[Row], columns: usize) -> (usize, usize) {
    let refused =
        |r: &Row| if r.error.is_some() { columns } else { r.cells.iter().filter(|c| c.error.is_some()).count() };
    (rows.iter().map(refused).sum(), rows.len() * columns)
}

/// The exit code of the matrix (the module's rule).
fn exit(rows: &[Row], columns: usize) -> i32 {
    if let ([r], 1) = (rows, columns) {
        let e = r.error.as_ref().or_else(|| r.cells.first().and_then(|c| c.error.as_ref()));
        return e.map_or(Exit::Ok, |e| e.exit).code();
    }
    if let Some(e) = rows.iter().find_map(|r| r.error.as_ref()) {
        return e.exit.code();
    }
    if counts(rows, columns).0 > 0 {
        return CELL_REFUSED;
    }
    Exit::Ok.code()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[Option<Exit>], error: Option<Exit>) -> Row {
        let refusal = |e: Exit| Refusal { code: "x".into(), message: "m".into(), hint: None, exit: e };
        Row {
            image: "i".into(),
            identity: None,
            facts: Value::Null,
            cells: cells.iter().map(|e| Cell { family: None, plan: Value::Null, error: e.map(refusal) }).collect(),
            error: error.map(refusal),
        }
    }

    #[test]
    fn one_cell_exits_with_its_own_code_a_matrix_with_1_or_the_archives() {
        assert_eq!(exit(&[row(&[None], None)], 1), 0);
        assert_eq!(exit(&[row(&[Some(Exit::Refused)], None)], 1), 78);
        assert_eq!(exit(&[row(&[], Some(Exit::Invalid))], 1), 65);
        assert_eq!(exit(&[row(&[None, None], None)], 2), 0);
        assert_eq!(exit(&[row(&[None, Some(Exit::Refused)], None)], 2), CELL_REFUSED);
        assert_eq!(exit(&[row(&[Some(Exit::Unsupported)], None), row(&[None], None)], 1), CELL_REFUSED);
        assert_eq!(exit(&[row(&[Some(Exit::Unsupported)], None), row(&[], Some(Exit::Invalid))], 1), 65);
        assert_eq!(counts(&[row(&[Some(Exit::Unsupported), None], None), row(&[], Some(Exit::Invalid))], 2), (3, 4));
    }
}
