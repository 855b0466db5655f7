//! `--image-env`: the environment an image's containers start with (its `ENV` lines), for a
//! dry run against an unpacked image (`--root`). Inside a container the launcher's own
//! environment already is that; on a build host it is the host's, whose PATH and ROCM_PATH
//! say nothing about the image.
//!
//! Each value is one `KEY=VALUE`, or a file (`-`: stdin; a pipe such as `<(podman image
//! inspect IMAGE)` is read to its end): the JSON of `podman/docker image inspect`
//! (`[{"Config": {"Env": [...]}}]`), an OCI image config (`{"config": {"Env": [...]}}`), or
//! `KEY=VALUE` lines (`#` comments), as `docker run --env-file` reads them. Later values win.
//!
//! `--env`/`--env-file` are the pod's own variables: with them, or with `--image` (whose
//! config's `Env` is the image's), this shell's variables are not carried into the plan but
//! the launcher's own settings (`INFERA_*`); those an engine or the plan reads are named
//! (`host-env-left-out`).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use infera_facts::envvars::Env;

use crate::error::UsageError;

/// The largest file read (an image config is a few KiB).
const MAX_FILE: u64 = 4 << 20;

/// The variables of this shell an engine or the plan reads (by prefix): left out of a pod's
/// environment, they are named, since a runner's could have changed the verdict.
const READ_BY_ENGINES: &[&str] = &[
    "PYTHON",
    "LD_",
    "HIP_",
    "ROCR_",
    "ROCM_",
    "HSA_",
    "CUDA_",
    "VLLM_",
    "SGLANG_",
    "NCCL_",
    "RCCL_",
    "GLOO_",
    "MC_",
    "HF_",
    "TORCH",
    "OMP_",
    "MIOPEN_",
    "AMD_",
    "UCX_",
    "TRANSFORMERS_",
    "LWS_",
    "POD_IP",
];

/// This shell's environment as a pod's starts: only the launcher's own settings (`INFERA_*`),
/// and the names of the variables left out that an engine or the plan reads.
pub(crate) fn launcher_only(env: &Env) -> (Env, Vec<String>) {
    let ours = |k: &OsString| k.as_encoded_bytes().starts_with(b"INFERA_");
    let kept = env.iter().filter(|(k, _)| ours(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    let dropped = env
        .keys()
        .filter(|k| !ours(k))
        .map(|k| k.to_string_lossy().into_owned())
        .filter(|k| READ_BY_ENGINES.iter().any(|p| k.starts_with(p)))
        .collect();
    (kept, dropped)
}

/// What names this shell's variables left out of the pod's environment: information, not a
/// warning, since they no longer change the verdict (a CI runner's own PYTHONUNBUFFERED must
/// not fail a `--fail-on warn` gate).
pub(crate) fn dropped_finding(dropped: &[String]) -> Option<infera_facts::finding::Finding> {
    (!dropped.is_empty()).then(|| {
        infera_facts::finding::Finding::info(
            "host-env-left-out",
            format!(
                "this shell's {} left out: the environment planned with is the image's and the pod's (--env, \
                 --env-file), not this runner's; give the pod's own with --env KEY=VALUE",
                dropped.join(", ")
            ),
        )
    })
}

/// The `(KEY, VALUE)` pairs the values give, in order.
pub(crate) fn resolve(values: &[OsString], root: &Path, said: &str) -> Result<Vec<(OsString, OsString)>, UsageError> {
    if values.is_empty() {
        return Ok(Vec::new());
    }
    if root == Path::new("/") {
        return Err(UsageError::ImageEnvWithoutRoot { said: said.to_string() });
    }
    pairs(values, said)
}

/// `--env-file` (files of KEY=VALUE lines, as `resolve` reads a file) then `--env` (each a
/// KEY=VALUE): the pod's variables, for a dry run with `--root` or `--image` only (in the pod
/// they already are its environment). A bare `--env KEY` is docker's pass-through of this
/// shell's variable, which says nothing of the pod's: refused.
pub(crate) fn resolve_pod(
    files: &[OsString],
    values: &[OsString],
    root: &Path,
    image: bool,
) -> Result<Vec<(OsString, OsString)>, UsageError> {
    if (!files.is_empty() || !values.is_empty()) && root == Path::new("/") && !image {
        return Err(UsageError::PodEnvWithoutImage);
    }
    let mut out = Vec::new();
    for f in files {
        out.extend(file(Path::new(f), "--env-file")?);
    }
    for v in values {
        match pair(v.as_encoded_bytes()) {
            Some(kv) => out.push(kv),
            None if is_name(v.as_encoded_bytes()) => {
                return Err(UsageError::PodEnvPassThrough { key: v.to_string_lossy().into_owned() })
            }
            None => out.extend(file(Path::new(v), "--env")?),
        }
    }
    Ok(out)
}

fn pairs(values: &[OsString], said: &str) -> Result<Vec<(OsString, OsString)>, UsageError> {
    let mut out = Vec::new();
    for v in values {
        match pair(v.as_encoded_bytes()) {
            Some(kv) => out.push(kv),
            None => out.extend(file(Path::new(v), said)?),
        }
    }
    Ok(out)
}

/// An image config's `Env` entries as a process can be given them: `KEY=VALUE` with a variable
/// name as KEY, and no NUL (which no process environment can hold) or newline; the others
/// are returned apart, to be said.
pub(crate) fn config_env(entries: &[String]) -> (Vec<(OsString, OsString)>, Vec<String>) {
    let (mut kept, mut dropped) = (Vec::new(), Vec::new());
    for e in entries {
        match pair(e.as_bytes()).filter(|_| !e.contains(['\0', '\n', '\r'])) {
            Some(kv) => kept.push(kv),
            None => dropped.push(e.escape_debug().to_string()),
        }
    }
    (kept, dropped)
}

/// `KEY=VALUE` with a variable name as KEY.
fn pair(b: &[u8]) -> Option<(OsString, OsString)> {
    let eq = b.iter().position(|c| *c == b'=')?;
    let key = &b[..eq];
    is_name(key).then(|| (OsString::from_vec(key.to_vec()), OsString::from_vec(b[eq + 1..].to_vec())))
}

/// A variable's name: letters, digits and `_`, not starting with a digit.
fn is_name(key: &[u8]) -> bool {
    !key.is_empty() && !key[0].is_ascii_digit() && key.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

fn file(path: &Path, said: &str) -> Result<Vec<(OsString, OsString)>, UsageError> {
    let invalid =
        |reason: String| UsageError::ImageEnvInvalid { said: said.to_string(), path: path.to_path_buf(), reason };
    use std::os::unix::fs::FileTypeExt;
    let bounded = |r: &mut dyn std::io::Read| {
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(r, MAX_FILE + 1), &mut text)
            .map_err(|e| invalid(infera_core::rootfs::io_reason(&e)))?;
        match text.len() as u64 > MAX_FILE {
            true => Err(invalid(format!("more than {MAX_FILE} bytes, more than an image config"))),
            false => Ok(text),
        }
    };
    // `-` is this launcher's stdin, a pipe (`<(podman image inspect IMAGE)`) is read to its
    // end: both are the user's own, given on this command line.
    let text = match std::fs::metadata(path) {
        _ if path == Path::new("-") => bounded(&mut std::io::stdin())?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(UsageError::ImageEnvMissing { said: said.to_string(), path: PathBuf::from(path) })
        }
        Err(e) => return Err(invalid(infera_core::rootfs::io_reason(&e))),
        Ok(m) if m.file_type().is_fifo() => {
            bounded(&mut std::fs::File::open(path).map_err(|e| invalid(infera_core::rootfs::io_reason(&e)))?)?
        }
        Ok(m) if !m.is_file() => return Err(invalid("not a regular file, a pipe or `-`".into())),
        Ok(m) if m.len() > MAX_FILE => return Err(invalid(format!("{} bytes, more than an image config", m.len()))),
        Ok(_) => std::fs::read(path).map_err(|e| invalid(infera_core::rootfs::io_reason(&e)))?,
    };
    // A UTF-8 byte order mark (an editor's) is no part of the first name, as docker reads it.
    let text = match text.strip_prefix(b"\xef\xbb\xbf") {
        Some(rest) => rest.to_vec(),
        None => text,
    };
    let start = text.iter().find(|c| !c.is_ascii_whitespace());
    if matches!(start, Some(b'[' | b'{')) {
        let json: serde_json::Value = serde_json::from_slice(&text).map_err(|e| invalid(format!("not JSON ({e})")))?;
        return json_env(&json).ok_or_else(|| {
            invalid("no environment in it: expected `podman image inspect` output ([{\"Config\": {\"Env\": [...]}}]) or an OCI image config ({\"config\": {\"Env\": [...]}})".into())
        })?
        .iter()
        .map(|e| {
            let s = e.as_str().ok_or_else(|| invalid(format!("an Env entry is not a string: {e}")))?;
            if s.contains('\0') {
                return Err(invalid(format!("the Env entry {e} holds a NUL byte, which no process environment can")));
            }
            pair(s.as_bytes()).ok_or_else(|| invalid(format!("the Env entry `{s}` is not KEY=VALUE")))
        })
        .collect();
    }
    let mut out = Vec::new();
    for (n, line) in text.split(|c| *c == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let trimmed = line.trim_ascii_start();
        if trimmed.is_empty() || trimmed.starts_with(b"#") {
            continue;
        }
        if trimmed.contains(&0) {
            let shown = String::from_utf8_lossy(line).escape_debug().to_string();
            return Err(invalid(format!(
                "line {}: `{shown}` holds a NUL byte, which no process environment can (execve would refuse it)",
                n + 1
            )));
        }
        let kv = pair(trimmed)
            .ok_or_else(|| invalid(format!("line {}: `{}` is not KEY=VALUE", n + 1, String::from_utf8_lossy(line))))?;
        out.push(kv);
    }
    Ok(out)
}

/// `Config.Env` of `image inspect` (an array of images: the first), or `config.Env` of an OCI config.
fn json_env(v: &serde_json::Value) -> Option<&Vec<serde_json::Value>> {
    let image = match v {
        serde_json::Value::Array(a) => a.first()?,
        other => other,
    };
    ["Config", "config"].iter().find_map(|k| image.get(k)?.get("Env")?.as_array())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        v.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
    }

    #[test]
    fn forms() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let inspect = d.path().join("inspect.json");
        std::fs::write(&inspect, r#"[{"Id":"x","Config":{"Env":["PATH=/opt/venv/bin:/usr/bin","GPU_ARCH=rocm720"]}}]"#)
            .unwrap();
        let oci = d.path().join("config.json");
        std::fs::write(&oci, r#"{"architecture":"amd64","config":{"Env":["ROCM_PATH=/opt/rocm"]}}"#).unwrap();
        let lines = d.path().join("env");
        std::fs::write(&lines, "# the image's ENV\nPATH=/usr/local/bin:/usr/bin\r\n\nA=b=c\n").unwrap();
        let got = resolve(
            &os(&[inspect.to_str().unwrap(), oci.to_str().unwrap(), lines.to_str().unwrap(), "X=1"]),
            root,
            "--image-env",
        )
        .unwrap();
        assert_eq!(
            got,
            pairs(&[
                ("PATH", "/opt/venv/bin:/usr/bin"),
                ("GPU_ARCH", "rocm720"),
                ("ROCM_PATH", "/opt/rocm"),
                ("PATH", "/usr/local/bin:/usr/bin"),
                ("A", "b=c"),
                ("X", "1"),
            ])
        );
    }

    #[test]
    fn refusals() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let e = resolve(&os(&["X=1"]), Path::new("/"), "--image-env").unwrap_err();
        assert!(matches!(e, UsageError::ImageEnvWithoutRoot { .. }));
        let missing = d.path().join("nope.json");
        let e = resolve(&[missing.clone().into()], root, "INFERA_IMAGE_ENV").unwrap_err();
        assert_eq!(e, UsageError::ImageEnvMissing { said: "INFERA_IMAGE_ENV".into(), path: missing });
        let bad = d.path().join("bad");
        std::fs::write(&bad, "PATH=/bin\nexport\n").unwrap();
        let e = resolve(&[bad.clone().into()], root, "--image-env").unwrap_err();
        assert_eq!(e.to_string(), format!("--image-env `{}`: line 2: `export` is not KEY=VALUE", bad.display()));
        std::fs::write(&bad, r#"[{"Config":{"Cmd":["bash"]}}]"#).unwrap();
        let e = resolve(&[bad.clone().into()], root, "--image-env").unwrap_err();
        assert!(e.to_string().contains("no environment in it"), "{e}");
        // A NUL byte would be planned and then refused by execve: refused now, named.
        std::fs::write(&bad, b"A=1\nB=x\0y\n").unwrap();
        let e = resolve(&[bad.clone().into()], root, "--env").unwrap_err();
        assert!(e.to_string().contains("line 2: `B=x\\0y` holds a NUL byte"), "{e}");
        std::fs::write(&bad, r#"{"config":{"Env":["A=\u0000"]}}"#).unwrap();
        assert!(resolve(&[bad.clone().into()], root, "--env").unwrap_err().to_string().contains("holds a NUL byte"));
        // A byte order mark is dropped, as docker drops it.
        std::fs::write(&bad, b"\xef\xbb\xbfA=1\n").unwrap();
        assert_eq!(resolve(&[bad.into()], root, "--env").unwrap(), pairs(&[("A", "1")]));
    }
}
