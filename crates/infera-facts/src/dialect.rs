//! Reading engine args in the engine's own dialect: every form argparse accepts
//! (`--flag v`, `--flag=v`, vLLM's `--flag_with_underscores`, short aliases, `--no-...`
//! booleans, unambiguous prefixes; the last one wins), with the spellings of the engine
//! table (`engines/`). The reader never changes the args; planning only appends absent
//! flags.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use crate::engines::{Engine, Normalise, Opt, OptionList, Spelling};

/// The option strings an engine's args are matched against, built once per read: the
/// launcher's own spellings by name (exact lookups), and the names abbreviations are resolved
/// against (the engine's full list when recorded, else the launcher's long names), sorted so
/// that a prefix is a range. Each arg then costs a few binary searches, whatever the number
/// of args or options.
struct Table<'l> {
    engine: Engine,
    own: Vec<(&'static str, Opt, Spelling)>,
    names: &'l [&'static str],
    checked: bool,
}

impl<'l> Table<'l> {
    fn new(engine: Engine, list: Option<&'l OptionList>) -> Table<'l> {
        // Every option string the engine has for the launcher's options.
        let own = Opt::ALL
            .iter()
            .filter_map(|o| engine.spelling(*o).map(|sp| (*o, sp)))
            .flat_map(|(o, sp)| sp.names().map(move |n| (n, o, sp)))
            .collect();
        // A recorded list is sorted and without duplicates (a unit test checks the files),
        // so a prefix is a range of it.
        let names: &[&'static str] = list.map(|l| l.names()).unwrap_or_default();
        Table { engine, own, names, checked: list.is_some() }
    }

    /// The launcher's option spelled exactly `name` (a few dozen spellings: a scan).
    fn own(&self, name: &str) -> Option<(Opt, Spelling)> {
        self.own.iter().find(|(n, _, _)| *n == name).map(|(_, o, sp)| (*o, *sp))
    }

    /// argparse accepts an unambiguous prefix of a long option (`--tp` for `--tp-size`, as
    /// sglang's docs write it), resolved against every option the parser has. With the
    /// engine's recorded list that is exactly the engine's answer (ambiguous included);
    /// without one, the launcher's own spellings are all it can use (`checked: false`).
    fn unabbreviate(&self, name: &str) -> Abbrev {
        if !name.starts_with("--") || name.len() < 3 || name.contains('.') {
            return Abbrev::AsIs;
        }
        let mut hits: Vec<&'static str> = if self.checked {
            if self.names.binary_search(&name).is_ok() {
                return Abbrev::AsIs;
            }
            let from = self.names.partition_point(|n| *n < name);
            self.names[from..].iter().take_while(|n| n.starts_with(name)).copied().collect()
        } else {
            if self.own(name).is_some() {
                return Abbrev::AsIs;
            }
            self.own.iter().map(|(n, _, _)| *n).filter(|n| n.starts_with("--") && n.starts_with(name)).collect()
        };
        hits.dedup();
        match hits.as_slice() {
            [] => Abbrev::AsIs,
            [one] => Abbrev::Of { full: one.to_string(), checked: self.checked },
            _ if !self.checked => Abbrev::AsIs,
            _ => Abbrev::Ambiguous(hits),
        }
    }
}

/// What an abbreviated long option means.
enum Abbrev {
    /// The name as written (exact, unknown, or not an abbreviation at all).
    AsIs,
    /// An unambiguous prefix of this option; `checked`: against the engine's full list.
    Of { full: String, checked: bool },
    /// A prefix of several of the engine's options: its parser exits 2.
    Ambiguous(Vec<&'static str>),
}

/// The `--config FILE` pairs of the args, as both engines find them: the exact token
/// `--config` (no `=` form, no abbreviation), before a `--`. (index of `--config`, FILE);
/// FILE is None when `--config` is the last arg.
pub fn config_pairs(args: &[OsString]) -> Vec<(usize, Option<OsString>)> {
    args.iter()
        .take_while(|a| a.as_bytes() != b"--")
        .enumerate()
        .filter(|(_, a)| a.as_bytes() == b"--config")
        .map(|(i, _)| (i, args.get(i + 1).cloned()))
        .collect()
}

/// An integer option's value as the engine's parser reads it: argparse `type=int`, which is
/// Python's `int(str)`: surrounding whitespace ignored, a sign, decimal digits with single
/// underscores between them (`1_6`), leading zeros allowed. `Err(())` where `int()` raises
/// (the engine exits 2); `Ok(None)` for text with non-ASCII characters, which `int()` may
/// read as digits of another script and this reader does not (the caller says so).
/// Values beyond `i64` saturate (Python's ints do not overflow; any such size is absurd).
pub fn py_int(s: &str) -> Result<Option<i64>, NotAnInt> {
    // str.isspace: Unicode white space plus the ASCII separators U+001C..U+001F.
    let t = s.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c));
    if !t.is_ascii() {
        return Ok(None);
    }
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let b = digits.as_bytes();
    if b.is_empty() || !b[0].is_ascii_digit() || !b[b.len() - 1].is_ascii_digit() {
        return Err(NotAnInt);
    }
    let mut n: i64 = 0;
    let mut prev_underscore = false;
    for &c in b {
        match c {
            b'_' if !prev_underscore => prev_underscore = true,
            b'0'..=b'9' => {
                prev_underscore = false;
                n = n.saturating_mul(10).saturating_add(i64::from(c - b'0'));
            }
            _ => return Err(NotAnInt),
        }
    }
    Ok(Some(if neg { -n } else { n }))
}

/// What Python's `int()` raises ValueError for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAnInt;

/// What the user's args say about one canonical option (the last occurrence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting {
    Value(OsString),
    On,
    Off,
}

impl Setting {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Setting::Value(v) => v.to_str(),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occurrence {
    pub setting: Setting,
    /// The spelling the user wrote (after vLLM's `_` → `-` rewrite).
    pub spelled: String,
    /// Index of the flag in the args (of `--config` when it came from the config file).
    pub index: usize,
    /// Set in the engine's `--config` file, not on the command line.
    pub from_config: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub opts: BTreeMap<Opt, Occurrence>,
    /// Abbreviations read as a full option: (arg index, as written, the option, checked
    /// against the engine's full list).
    pub abbreviations: Vec<(usize, String, String, bool)>,
    /// Abbreviations the engine's parser finds ambiguous: (arg index, as written, the
    /// options it could be).
    pub ambiguous: Vec<(usize, String, Vec<&'static str>)>,
}

impl Parsed {
    pub fn get(&self, o: Opt) -> Option<&Setting> {
        self.opts.get(&o).map(|x| &x.setting)
    }
    pub fn value(&self, o: Opt) -> Option<&str> {
        self.get(o).and_then(Setting::as_str)
    }
    /// The value in effect: as set, else the one the engine (or infera's wrapper) assumes.
    pub fn value_or_default(&self, e: Engine, o: Opt) -> Option<&str> {
        self.value(o).or_else(|| e.default_of(o))
    }
    pub fn is_set(&self, o: Opt) -> bool {
        self.opts.contains_key(&o)
    }
    /// Set by a `--config` file, not on the command line.
    pub fn from_config(&self, o: Opt) -> bool {
        self.opts.get(&o).is_some_and(|x| x.from_config)
    }
}

/// Normalise a long option name the way the engine's parser does.
pub fn normalise(engine: Engine, name: &[u8]) -> String {
    let s = String::from_utf8_lossy(name).into_owned();
    match engine.info().normalise {
        Normalise::UnderscoresToDashes if s.starts_with("--") => format!("--{}", s[2..].replace('_', "-")),
        _ => s,
    }
}

/// Read the args with the launcher's own spellings (no engine version known).
pub fn read(engine: Engine, args: &[OsString]) -> Parsed {
    read_in(engine, None, args)
}

/// Read the args. Unknown options are skipped (their values are not ours to judge).
/// `list`: the engine's full option list for its version, for abbreviations.
pub fn read_in(engine: Engine, list: Option<&OptionList>, args: &[OsString]) -> Parsed {
    let table = Table::new(engine, list);
    let mut parsed = Parsed::default();
    let mut i = 0;
    while i < args.len() {
        if args[i].as_bytes() == b"--" {
            break;
        }
        let (hit, consumed, abbrev) = match_at(&table, args, i);
        match abbrev {
            Abbrev::AsIs => {}
            Abbrev::Of { full, checked } => {
                let written =
                    String::from_utf8_lossy(args[i].as_bytes()).split('=').next().unwrap_or_default().to_string();
                parsed.abbreviations.push((i, written, full, checked));
            }
            Abbrev::Ambiguous(c) => {
                let written =
                    String::from_utf8_lossy(args[i].as_bytes()).split('=').next().unwrap_or_default().to_string();
                parsed.ambiguous.push((i, written, c));
            }
        }
        if let Some((opt, setting, spelled)) = hit {
            parsed.opts.insert(opt, Occurrence { setting, spelled, index: i, from_config: false });
        }
        i += consumed;
    }
    parsed
}

/// Read the args as the engine does with `--config FILE` at `at`: the file's args first,
/// then the command line's without the pair (so the command line wins). Indices are the
/// command line's; an option from the file has the index of `--config`.
pub fn read_with_config(
    engine: Engine,
    list: Option<&OptionList>,
    config_args: &[OsString],
    args: &[OsString],
    at: usize,
) -> Parsed {
    let n = config_args.len();
    let mut all = config_args.to_vec();
    all.extend_from_slice(&args[..at.min(args.len())]);
    all.extend_from_slice(args.get(at + 2..).unwrap_or_default());
    let mut p = read_in(engine, list, &all);
    let back = |i: usize| match i {
        i if i < n => at,
        i if i - n >= at => i - n + 2,
        i => i - n,
    };
    for occ in p.opts.values_mut() {
        occ.from_config = occ.index < n;
        occ.index = back(occ.index);
    }
    for a in &mut p.abbreviations {
        a.0 = back(a.0);
    }
    for a in &mut p.ambiguous {
        a.0 = back(a.0);
    }
    p
}

/// The args without every occurrence of `opts` (each flag with its value): what ranks of a
/// group must share once the flags that differ per rank are left out.
pub fn strip(engine: Engine, args: &[OsString], opts: &[Opt]) -> Vec<OsString> {
    let table = Table::new(engine, None);
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        if args[i].as_bytes() == b"--" {
            out.extend_from_slice(&args[i..]);
            break;
        }
        let (hit, consumed, _) = match_at(&table, args, i);
        let end = (i + consumed).min(args.len());
        if !hit.is_some_and(|(o, _, _)| opts.contains(&o)) {
            out.extend_from_slice(&args[i..end]);
        }
        i = end;
    }
    out
}

/// The canonical option the flag at `i` sets (with its setting and spelling), and how many
/// args it takes (the flag, and its value when separate).
fn match_at(table: &Table, args: &[OsString], i: usize) -> (Option<(Opt, Setting, String)>, usize, Abbrev) {
    let raw = args[i].as_bytes();
    if !raw.starts_with(b"-") || raw.len() < 2 {
        return (None, 1, Abbrev::AsIs);
    }
    let (name_bytes, inline): (&[u8], Option<&[u8]>) = match raw.iter().position(|b| *b == b'=') {
        Some(p) => (&raw[..p], Some(&raw[p + 1..])),
        None => (raw, None),
    };
    let written = normalise(table.engine, name_bytes);
    let abbrev = table.unabbreviate(&written);
    let name = match &abbrev {
        Abbrev::Of { full, .. } => full.as_str(),
        _ => written.as_str(),
    };
    let Some((opt, sp)) = table.own(name) else { return (None, 1, abbrev) };
    let mut consumed = 1;
    let hit = match sp {
        Spelling::Value(_) | Spelling::ValueOff { .. } => {
            let v = match inline {
                Some(v) => Some(OsStr::from_bytes(v).to_os_string()),
                None => {
                    consumed = 2;
                    args.get(i + 1).cloned()
                }
            };
            v.map(|v| match sp {
                Spelling::ValueOff { value_off, .. } if v == OsStr::new(value_off) => Setting::Off,
                Spelling::ValueOff { .. } => Setting::On,
                _ => Setting::Value(v),
            })
        }
        Spelling::Bool { on, .. } if name == on && inline.is_none() => Some(Setting::On),
        Spelling::Bool { off, .. } if name == off && inline.is_none() => Some(Setting::Off),
        Spelling::OffFlag(_) if inline.is_none() => Some(Setting::Off),
        Spelling::OnFlag(_) if inline.is_none() => Some(Setting::On),
        _ => None,
    };
    match hit {
        Some(setting) => (Some((opt, setting, written)), consumed, abbrev),
        None => (None, consumed, abbrev),
    }
}

/// vLLM's dotted form of a JSON option (`--kv-transfer-config.kv_role kv_producer`, or with
/// `=`): each key given that way, the last occurrence winning, merged over the JSON value
/// of the option itself. Other engines have no such form.
pub fn json_option(
    engine: Engine,
    args: &[OsString],
    parsed: &Parsed,
    opt: Opt,
) -> Result<Option<serde_json::Value>, String> {
    let mut obj = match parsed.get(opt) {
        Some(Setting::Value(v)) => {
            let text = v.to_str().ok_or_else(|| "not valid UTF-8".to_string())?;
            Some(serde_json::from_str::<serde_json::Value>(text).map_err(|e| format!("not JSON ({e}): `{text}`"))?)
        }
        _ => None,
    };
    if engine.info().normalise != Normalise::UnderscoresToDashes {
        return Ok(obj);
    }
    let Some(Spelling::Value(names)) = engine.spelling(opt) else { return Ok(obj) };
    let mut i = 0;
    while i < args.len() {
        let raw = args[i].as_bytes();
        if raw == b"--" {
            break;
        }
        let (flag, inline) = match raw.iter().position(|b| *b == b'=') {
            Some(p) => (&raw[..p], Some(&raw[p + 1..])),
            None => (raw, None),
        };
        let Some(dot) = flag.iter().position(|b| *b == b'.') else {
            i += 1;
            continue;
        };
        let head = normalise(engine, &flag[..dot]);
        if !names.iter().any(|n| *n == head) {
            i += 1;
            continue;
        }
        let key = String::from_utf8_lossy(&flag[dot + 1..]).into_owned();
        let (value, used) = match inline {
            Some(v) => (Some(OsStr::from_bytes(v).to_os_string()), 1),
            None => (args.get(i + 1).cloned(), 2),
        };
        if let Some(v) = value {
            let text = v.to_string_lossy().into_owned();
            // vLLM reads each dotted value as JSON when it parses, else as a string.
            let val = serde_json::from_str::<serde_json::Value>(&text).unwrap_or(serde_json::Value::String(text));
            let map = obj.get_or_insert_with(|| serde_json::Value::Object(Default::default()));
            if let serde_json::Value::Object(m) = map {
                m.insert(key, val);
            }
        }
        i += used;
    }
    Ok(obj)
}

/// The args to append so that `opt` is `value` (the engine's first spelling).
pub fn render(engine: Engine, opt: Opt, value: &str) -> Option<Vec<OsString>> {
    match engine.spelling(opt)? {
        Spelling::Value(names) => Some(vec![names[0].into(), value.into()]),
        Spelling::Bool { on, off } => Some(vec![if value == "on" { on } else { off }.into()]),
        Spelling::OffFlag(f) => (value == "off").then(|| vec![f.into()]),
        Spelling::OnFlag(f) => (value == "on").then(|| vec![f.into()]),
        Spelling::ValueOff { names, value_off } => (value == "off").then(|| vec![names[0].into(), value_off.into()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_python_reads_them() {
        for (s, want) in [
            ("8", Ok(Some(8))),
            (" 8", Ok(Some(8))),
            ("8\n", Ok(Some(8))),
            ("\t+16 ", Ok(Some(16))),
            ("1_6", Ok(Some(16))),
            ("016", Ok(Some(16))),
            ("-1", Ok(Some(-1))),
            ("0", Ok(Some(0))),
            ("\u{1f}4", Ok(Some(4))),
            ("99999999999999999999999", Ok(Some(i64::MAX))),
            ("abc", Err(NotAnInt)),
            ("", Err(NotAnInt)),
            (" ", Err(NotAnInt)),
            ("1__6", Err(NotAnInt)),
            ("_16", Err(NotAnInt)),
            ("16_", Err(NotAnInt)),
            ("1 6", Err(NotAnInt)),
            ("0x10", Err(NotAnInt)),
            ("1.0", Err(NotAnInt)),
            ("+", Err(NotAnInt)),
            ("--8", Err(NotAnInt)),
            ("\u{0663}", Ok(None)),
        ] {
            assert_eq!(py_int(s), want, "{s:?}");
        }
    }

    fn a(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn forms_last_wins() {
        let p = read(Engine::Vllm, &a(&["-tp", "4", "--tensor_parallel_size=8", "--model", "/m"]));
        assert_eq!(p.value(Opt::TensorParallelSize), Some("8"));
        assert_eq!(p.value(Opt::Model), Some("/m"));
        let p = read(Engine::Vllm, &a(&["--enable-prefix-caching", "--no-enable-prefix-caching"]));
        assert_eq!(p.get(Opt::PrefixCaching), Some(&Setting::Off));
        // sglang's argparse does not rewrite underscores.
        let p = read(Engine::Sglang, &a(&["--tp_size", "8", "--tp-size=2"]));
        assert_eq!(p.value(Opt::TensorParallelSize), Some("2"));
        let p = read(Engine::Sglang, &a(&["--chunked-prefill-size", "-1", "--disable-radix-cache"]));
        assert_eq!(p.get(Opt::ChunkedPrefill), Some(&Setting::Off));
        assert_eq!(p.get(Opt::PrefixCaching), Some(&Setting::Off));
        // After `--` nothing is an option.
        let p = read(Engine::Vllm, &a(&["--", "--model", "x"]));
        assert!(!p.is_set(Opt::Model));
    }

    /// Every spelling of every canonical option, in every form argparse accepts.
    #[test]
    fn table_every_option_every_form() {
        for e in Engine::all() {
            for &o in Opt::ALL {
                let Some(sp) = e.spelling(o) else { continue };
                match sp {
                    Spelling::Value(names) | Spelling::ValueOff { names, .. } => {
                        for n in names {
                            let mut forms = vec![a(&[n, "7"]), a(&[&format!("{n}=7")]), a(&["--x", n, "1", n, "7"])];
                            if e.info().normalise == Normalise::UnderscoresToDashes
                                && n.starts_with("--")
                                && n[2..].contains('-')
                            {
                                let u = format!("--{}", n[2..].replace('-', "_"));
                                forms.push(a(&[&u, "7"]));
                                forms.push(a(&[&format!("{u}=7")]));
                            }
                            for f in forms {
                                let p = read(e, &f);
                                let want = match sp {
                                    Spelling::ValueOff { .. } => Setting::On,
                                    _ => Setting::Value("7".into()),
                                };
                                assert_eq!(p.get(o), Some(&want), "{e:?} {o:?} {f:?}");
                            }
                        }
                        if let Spelling::ValueOff { names, value_off } = sp {
                            assert_eq!(read(e, &a(&[names[0], value_off])).get(o), Some(&Setting::Off));
                        }
                    }
                    Spelling::Bool { on, off } => {
                        assert_eq!(read(e, &a(&[on])).get(o), Some(&Setting::On), "{on}");
                        assert_eq!(read(e, &a(&[on, off])).get(o), Some(&Setting::Off), "{off}");
                        assert_eq!(read(e, &a(&[off, on])).get(o), Some(&Setting::On));
                        if e.info().normalise == Normalise::UnderscoresToDashes {
                            let u = format!("--{}", on[2..].replace('-', "_"));
                            assert_eq!(read(e, &a(&[&u])).get(o), Some(&Setting::On), "{u}");
                        }
                    }
                    Spelling::OffFlag(f) => assert_eq!(read(e, &a(&[f])).get(o), Some(&Setting::Off)),
                    Spelling::OnFlag(f) => assert_eq!(read(e, &a(&[f])).get(o), Some(&Setting::On)),
                }
                // Rendering reads back as what was rendered.
                let v = match sp {
                    Spelling::Bool { .. } | Spelling::OnFlag(_) => "on",
                    Spelling::OffFlag(_) | Spelling::ValueOff { .. } => "off",
                    Spelling::Value(_) => "3",
                };
                let r = render(e, o, v).unwrap();
                assert!(read(e, &r).is_set(o), "{e:?} {o:?} {r:?}");
            }
        }
    }

    #[test]
    fn rank_flags_are_stripped_dotted_json_is_merged() {
        let args =
            a(&["--model", "/m", "--node-rank", "1", "-r=2", "--headless", "-tp", "8", "--", "--node-rank", "9"]);
        assert_eq!(
            strip(Engine::Vllm, &args, &[Opt::NodeRank, Opt::Headless]),
            a(&["--model", "/m", "-tp", "8", "--", "--node-rank", "9"])
        );
        let args = a(&[
            "--kv-transfer-config",
            r#"{"kv_connector":"MooncakeConnector","kv_role":"kv_both"}"#,
            "--kv_transfer_config.kv_role",
            "kv_producer",
            "--kv-transfer-config.kv_connector_extra_config={\"bootstrap_server_address\":\"0.0.0.0:8998\"}",
        ]);
        let p = read(Engine::Vllm, &args);
        let j = json_option(Engine::Vllm, &args, &p, Opt::KvTransferConfig).unwrap().unwrap();
        assert_eq!(j["kv_role"], "kv_producer");
        assert_eq!(j["kv_connector"], "MooncakeConnector");
        assert_eq!(j["kv_connector_extra_config"]["bootstrap_server_address"], "0.0.0.0:8998");
        let only_dotted = a(&["--kv-transfer-config.kv_connector", "MooncakeConnector"]);
        let p = read(Engine::Vllm, &only_dotted);
        assert_eq!(
            json_option(Engine::Vllm, &only_dotted, &p, Opt::KvTransferConfig).unwrap().unwrap()["kv_connector"],
            "MooncakeConnector"
        );
    }

    #[test]
    fn unambiguous_prefixes_like_argparse() {
        let p = read(Engine::Sglang, &a(&["--model-path", "/m", "--tp", "4", "--dp", "2"]));
        assert_eq!(p.value(Opt::TensorParallelSize), Some("4"));
        assert_eq!(p.value(Opt::DataParallelSize), Some("2"));
        assert_eq!(p.opts[&Opt::TensorParallelSize].spelled, "--tp");
        let p = read(Engine::Vllm, &a(&["--tensor-parallel", "2", "--kv-cache=fp8"]));
        assert_eq!(p.value(Opt::TensorParallelSize), Some("2"));
        assert_eq!(p.value(Opt::KvCacheDtype), Some("fp8"));
        // Ambiguous (--enable-prefix-caching / --enable-chunked-prefill): not read.
        assert!(read(Engine::Vllm, &a(&["--enable"])).opts.is_empty());
    }

    #[test]
    fn user_args_are_never_changed_by_reading() {
        let args = a(&["--model", "m", "--unknown", "--", "-tp", "8"]);
        let before = args.clone();
        let p = read(Engine::Vllm, &args);
        assert_eq!(args, before);
        assert!(!p.is_set(Opt::TensorParallelSize));
    }
}

#[cfg(test)]
mod table_tests {
    use super::*;

    /// Each option string names one canonical option (the table's lookup relies on it), and
    /// the recorded lists are sorted without duplicates (prefixes are ranges of them).
    #[test]
    fn option_strings_are_unique_and_lists_sorted() {
        for e in Engine::all() {
            let t = Table::new(e, None);
            let mut names: Vec<&str> = t.own.iter().map(|(n, _, _)| *n).collect();
            names.sort_unstable();
            for w in names.windows(2) {
                assert_ne!(w[0], w[1], "{e:?}: {} spells two options", w[0]);
            }
        }
        for l in crate::engines::OptionList::all() {
            let names: Vec<&str> = l.names().to_vec();
            assert!(names.len() > 150, "{} {}", l.engine.name(), l.label());
            for w in names.windows(2) {
                assert!(w[0] < w[1], "{} {}: `{}` before `{}`", l.engine.name(), l.label(), w[0], w[1]);
            }
        }
    }
}
