//! GPU code read from real ROCm binaries (PyPI wheels fetched by scripts/fetch-rocm-binaries:
//! plain bundles in gafime-rocm, CCOB v3 zstd in jax-rocm7-plugin) and from generated ELF
//! files, held to the reference reader ../shared/tools/fatbin_targets.py.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use infera_facts::fatbin;

use crate::support::*;

pub fn rocm_binaries() -> PathBuf {
    let o = Command::new(repo().join("scripts/fetch-rocm-binaries")).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    PathBuf::from(String::from_utf8(o.stdout).unwrap().trim()).join("unpacked")
}

/// Distinct target sets, each with how many bundles carry it.
type Sets = Vec<(BTreeSet<String>, usize)>;

/// The reference reader's answer: None for "no .hip_fatbin", else (bundles, sets).
fn oracle(path: &Path) -> Option<(usize, Sets)> {
    // Beside the checkout, else where this project's machines keep it (as scripts/upstream-dir).
    let tool =
        [repo().join("../shared/tools/fatbin_targets.py"), PathBuf::from("/work/shared/tools/fatbin_targets.py")]
            .into_iter()
            .find(|p| p.is_file())
            .expect("the reference reader shared/tools/fatbin_targets.py, beside the checkout or in /work/shared");
    let o = Command::new("python3").arg(&tool).arg(path).output().unwrap();
    assert!(o.status.success(), "{}: {}", tool.display(), String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    if text.contains(": no .hip_fatbin") {
        return None;
    }
    let bundles = text.split(" B, ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    let sets = text
        .lines()
        .skip(1)
        .map(|l| {
            let (n, ids) = l.trim().split_once(" x ").unwrap();
            (ids.split(", ").map(String::from).collect(), n.parse().unwrap())
        })
        .collect();
    Some((bundles, sets))
}

fn ours(path: &Path) -> Option<fatbin::Targets> {
    let f = std::fs::File::open(path).unwrap();
    let size = f.metadata().unwrap().len();
    fatbin::read(&f, size).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn real_rocm_binaries_give_the_reference_readers_targets() {
    let dir = rocm_binaries();
    let mut libs: Vec<PathBuf> = Vec::new();
    for pkg in ["gafime_rocm", "jax_rocm7_plugin"] {
        for e in std::fs::read_dir(dir.join(pkg)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "so") {
                libs.push(p);
            }
        }
    }
    libs.sort();
    let mut with_code = 0;
    for lib in &libs {
        let (want, got) = (oracle(lib), ours(lib));
        match (want, got) {
            (None, None) => {}
            (Some((bundles, sets)), Some(t)) => {
                with_code += 1;
                assert_eq!((t.bundles, &t.sets, t.sampled), (bundles, &sets, false), "{}", lib.display());
            }
            (w, g) => panic!("{}: reference {w:?}, ours {g:?}", lib.display()),
        }
    }
    assert!(with_code >= 4, "{with_code} libraries with GPU code among {libs:?}");
    let gafime = ours(&dir.join("gafime_rocm/libgafime_rocm.so")).unwrap();
    let all = gafime.all();
    assert_eq!(all.len(), 13);
    for g in ["gfx90a", "gfx942", "gfx950"] {
        assert!(all.contains(format!("hipv4-amdgcn-amd-amdhsa--{g}").as_str()), "{all:?}");
    }
}
