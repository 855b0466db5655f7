//! The support matrix: what each tree of an overlay runs (CPython, HIP ABI, ROCm bound,
//! engines and their version ranges, the router) and the engine images this release was
//! judged on (`manifests/images.toml`). Printed by `--version` (for the overlay at hand)
//! and in the README's "Supported images" and docs/support.md (for the shipped manifests; a
//! test keeps them so).

use infera_overlay::manifest::Manifest;
use serde::Deserialize;

const IMAGES: &str = include_str!("../../../manifests/images.toml");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    image: Vec<Image>,
}

/// One engine image and what this release makes of it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Image {
    pub name: String,
    pub engine: String,
    pub python: String,
    pub rocm: String,
    /// The tree `check` selects, or `refused: CODE`.
    pub verdict: String,
    pub note: Option<String>,
    pub source: String,
    /// The `examples/make-image-root` layout a test checks the verdict on.
    pub layout: Option<String>,
}

/// The images of `manifests/images.toml` (compiled in; a test parses it, so none is lost).
pub fn images() -> Vec<Image> {
    toml::from_str::<File>(IMAGES).map(|f| f.image).unwrap_or_default()
}

/// What a tree runs, on one line: `CPython 3.12, HIP ABI 7: vllm >=0.9, <0.29; router`.
pub fn tree_line(m: &Manifest) -> String {
    let mut runs: Vec<String> = m
        .engines
        .iter()
        .map(|(e, entry)| format!("{e} {}", entry.versions.as_deref().unwrap_or("(any version)")))
        .collect();
    if m.server.is_some() {
        runs.push("router".into());
    }
    let rocm = m.abi.rocm_release.as_deref().map(|r| format!(", ROCm {r}")).unwrap_or_default();
    format!("CPython {}, HIP ABI {}{rocm}: {}", m.abi.python, m.abi.hip, runs.join("; "))
}

/// The matrix as `--version` prints it, after the overlay line.
pub fn text(trees: &[&Manifest]) -> String {
    let mut out = String::new();
    for m in trees {
        out.push_str(&format!("  {:<13} {}\n", m.family, tree_line(m)));
        let caps: Vec<&str> = m.capabilities.keys().map(String::as_str).collect();
        if !caps.is_empty() {
            out.push_str(&format!("  {:<13} capabilities: {}\n", "", caps.join(", ")));
        }
    }
    out.push_str("images this release was judged on (verdict: the tree selected, or the refusal):\n");
    for i in images() {
        out.push_str(&format!(
            "  {}\n      {}; CPython {}; ROCm {} → {}\n",
            i.name, i.engine, i.python, i.rocm, i.verdict
        ));
    }
    out
}

/// The README's "Supported images" table of the trees.
#[cfg(test)]
fn trees_markdown(trees: &[&Manifest]) -> String {
    let mut out = String::from(
        "<!-- Generated from manifests/*.toml; `INFERA_UPDATE_DOCS=1 cargo test -p infera-exec support` rewrites \
         it. -->\n\n| tree | CPython | HIP ABI | engines (versions) | capabilities |\n|---|---|---|---|---|\n",
    );
    for m in trees {
        let engines: Vec<String> =
            m.engines.iter().map(|(e, x)| format!("{e} `{}`", x.versions.as_deref().unwrap_or("any"))).collect();
        let caps: Vec<&str> = m.capabilities.keys().map(String::as_str).collect();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            m.family,
            m.abi.python,
            m.abi.hip,
            engines.join(", "),
            caps.join(", ")
        ));
    }
    out
}

/// docs/support.md's table of the images this release was judged on, with why and the source.
#[cfg(test)]
fn images_markdown() -> String {
    let mut out = String::from(
        "<!-- Generated from manifests/images.toml; `INFERA_UPDATE_DOCS=1 cargo test -p infera-exec support` \
         rewrites it. -->\n\n| image | engine | CPython | ROCm | verdict | source |\n|---|---|---|---|---|---|\n",
    );
    for i in images() {
        let verdict = match &i.note {
            Some(n) => format!("**{}** ({n})", i.verdict),
            None => format!("**{}**", i.verdict),
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {verdict} | {} |\n",
            i.name.replace('|', "\\|"),
            i.engine,
            i.python,
            i.rocm,
            i.source
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> Vec<Manifest> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../manifests");
        ["rocm7-py312", "rocm7-py310"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(format!("{dir}/{f}.toml")).unwrap();
                infera_overlay::manifest::parse(&text, f).unwrap()
            })
            .collect()
    }

    #[test]
    fn the_images_file_parses_and_every_verdict_is_a_tree_or_a_refusal() {
        let images = images();
        assert!(images.len() >= 10, "{}", images.len());
        let families: Vec<String> = shipped().into_iter().map(|m| m.family).collect();
        for i in &images {
            assert!(
                families.contains(&i.verdict) || i.verdict.starts_with("refused: "),
                "{}: verdict `{}`",
                i.name,
                i.verdict
            );
        }
    }

    /// The README's table of the trees and docs/support.md's of the images are the generated ones.
    #[test]
    fn support_matrix_in_the_docs_is_current() {
        let trees = shipped();
        let trees = trees_markdown(&trees.iter().collect::<Vec<_>>());
        for (doc, want) in [("README.md", trees), ("docs/support.md", images_markdown())] {
            let path = format!("{}/../../{doc}", env!("CARGO_MANIFEST_DIR"));
            let (start, end) = ("<!-- support matrix -->\n", "<!-- end support matrix -->");
            let text = std::fs::read_to_string(&path).unwrap();
            let (Some(a), Some(b)) = (text.find(start), text.find(end)) else {
                panic!("{doc} has no `{start}` … `{end}` section")
            };
            let have = &text[a + start.len()..b];
            if std::env::var_os("INFERA_UPDATE_DOCS").is_some() && have != want {
                std::fs::write(&path, format!("{}{want}{}", &text[..a + start.len()], &text[b..])).unwrap();
                continue;
            }
            assert!(
                have == want,
                "{doc}'s support matrix is stale: run `INFERA_UPDATE_DOCS=1 cargo test -p infera-exec support`"
            );
        }
    }
}
