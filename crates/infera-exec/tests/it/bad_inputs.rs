//! The bad-input corpus (tests/bad-inputs/cases.toml): every case gets its documented exit
//! code and message, and none dies by a signal.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use serde::Deserialize;

use crate::support::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Corpus {
    case: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    remove: Vec<String>,
    #[serde(default)]
    mkdir: Vec<String>,
    #[serde(default)]
    write: BTreeMap<String, String>,
    #[serde(default)]
    write_hex: BTreeMap<String, String>,
    #[serde(default)]
    replace: Vec<(String, String, String)>,
    #[serde(default)]
    link: BTreeMap<String, String>,
    #[serde(default)]
    mode: BTreeMap<String, u32>,
    #[serde(default)]
    sparse: BTreeMap<String, u64>,
    /// FIFOs (no writer ever comes): where the launcher reads a file, it must not block.
    #[serde(default)]
    fifo: Vec<String>,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    args_hex: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    env_hex: BTreeMap<String, String>,
    /// Variables the case's launcher does not get (`INFERA_ROOT`, for `check --image`).
    #[serde(default)]
    env_remove: Vec<String>,
    exit: i32,
    message: String,
}

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect()
}

fn run_case(c: &Case) -> Result<(), String> {
    let img = match c.image.as_deref() {
        None | Some("vllm") => vllm_image(None),
        Some("sglang") => sglang_image("3.10", None),
        // Any layout of examples/make-image-root by its kind.
        Some(kind) => image(kind),
    };
    let ov = shipped_overlay();
    let at = |p: &str| -> PathBuf {
        if let Some(r) = p.strip_prefix("root:") {
            img.p(r)
        } else if let Some(o) = p.strip_prefix("overlay:") {
            ov.overlay().join(o)
        } else {
            panic!("{}: path `{p}` needs root: or overlay:", c.name)
        }
    };
    let parent = |p: &PathBuf| std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    for p in &c.remove {
        let p = at(p);
        if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir_all(&p).unwrap();
        } else {
            std::fs::remove_file(&p).map_err(|e| format!("remove {}: {e}", p.display()))?;
        }
    }
    for p in &c.mkdir {
        std::fs::create_dir_all(at(p)).unwrap();
    }
    for (p, text) in &c.write {
        let p = at(p);
        parent(&p);
        std::fs::write(&p, text).unwrap();
    }
    for (p, hex) in &c.write_hex {
        let p = at(p);
        parent(&p);
        std::fs::write(&p, unhex(hex)).unwrap();
    }
    for (p, from, to) in &c.replace {
        let p = at(p);
        let text = std::fs::read_to_string(&p).unwrap();
        if !text.contains(from.as_str()) {
            return Err(format!("replace: `{from}` not in {}", p.display()));
        }
        std::fs::write(&p, text.replace(from.as_str(), to)).unwrap();
    }
    for (p, target) in &c.link {
        let p = at(p);
        parent(&p);
        std::os::unix::fs::symlink(target, &p).unwrap();
    }
    for (p, mode) in &c.mode {
        std::fs::set_permissions(at(p), std::os::unix::fs::PermissionsExt::from_mode(*mode)).unwrap();
    }
    for (p, size) in &c.sparse {
        let p = at(p);
        parent(&p);
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(*size).unwrap();
    }
    for p in &c.fifo {
        let p = at(p);
        parent(&p);
        if p.symlink_metadata().is_ok() {
            if p.is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
        let st = std::process::Command::new("mkfifo").arg(&p).status().unwrap();
        assert!(st.success(), "mkfifo {}", p.display());
    }
    let default: Vec<String> = ["worker", "--dry-run", "--", "--model", "/models/m"].map(String::from).to_vec();
    let args: Vec<OsString> = c
        .args
        .as_ref()
        .unwrap_or(&default)
        .iter()
        .map(OsString::from)
        .chain(c.args_hex.iter().map(|h| OsString::from_vec(unhex(h))))
        .collect();
    let mut run = infera(&[]).root(&img).overlay(&ov.overlay()).args(args);
    for (k, v) in &c.env {
        run = run.env(k, v);
    }
    for (k, v) in &c.env_hex {
        run = run.env(k, OsString::from_vec(unhex(v)));
    }
    for k in &c.env_remove {
        run = run.env_remove(k);
    }
    let out = run.run(); // panics if the launcher died by a signal
    if out.code != c.exit {
        return Err(format!("exit {} (want {})\nstdout:\n{}\nstderr:\n{}", out.code, c.exit, out.stdout, out.stderr));
    }
    if !out.stdout.contains(&c.message) && !out.stderr.contains(&c.message) {
        return Err(format!("{:?} not in the output\nstdout:\n{}\nstderr:\n{}", c.message, out.stdout, out.stderr));
    }
    // Refusals say `error[code]: ...`; usage errors found by the argument parser `error: ...`.
    if c.exit != 0
        && !(out.stderr.starts_with("error[") || out.stderr.starts_with("error:") || out.stderr.contains("\nerror["))
    {
        return Err(format!("a refusal must start with `error` on stderr:\n{}", out.stderr));
    }
    Ok(())
}

#[test]
fn every_case_gets_its_exit_code_and_message() {
    let text = std::fs::read_to_string(repo().join("tests/bad-inputs/cases.toml")).unwrap();
    let corpus: Corpus = toml::from_str(&text).unwrap();
    assert!(corpus.case.len() >= 40, "the corpus has {} cases", corpus.case.len());
    let mut names = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for c in &corpus.case {
        assert!(names.insert(c.name.clone()), "duplicate case {}", c.name);
        if let Err(e) = run_case(c) {
            failures.push(format!("case {}: {e}", c.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        corpus.case.len(),
        failures.join("\n\n")
    );
}
