//! The one question asked of an engine's parser sources: where a call of `add_argument`
//! inside `add_cli_args` or `make_arg_parser` (what infera's wrapper calls to build the
//! engine's parser) passes argparse `deprecated=` — as a keyword, whatever its spacing, or in
//! a `**{"deprecated": …}` literal — read as Python's tokenizer reads the file: never inside a
//! string, a docstring or a comment.
//!
//! Tokenized here rather than by a Python parser crate: the one that builds on this toolchain
//! (RustPython's publish of ruff's parser, 0.15) recurses without a bound on a hostile file's
//! nesting (a stack overflow is a death by signal) and keeps its lexer's token ranges private.
//! This tokenizer is a loop over the bytes: strings (every prefix, triple quotes, escapes),
//! comments, names, numbers, operators, brackets, and the INDENT/DEDENT of logical lines.

/// A token and the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok<'a> {
    Name(&'a str),
    /// A string literal's contents (its prefix and quotes left out).
    Str(&'a str),
    Number(&'a str),
    Op(&'a str),
    Newline,
    Indent,
    Dedent,
}

/// The operators of more than one character, longest first.
const OPS: &[&str] = &[
    "**=", "//=", ">>=", "<<=", "...", "->", ":=", "**", "//", "==", "!=", "<=", ">=", "<<", ">>", "+=", "-=", "*=",
    "/=", "%=", "&=", "|=", "^=", "@=",
];

/// The file as text: UTF-8 (a byte order mark dropped), or the Latin-1 its PEP 263 coding
/// line declares; Err(why) for another coding, or bytes that are not its coding's.
pub fn decode(bytes: &[u8]) -> Result<String, String> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let coding = bytes.split(|b| *b == b'\n').take(2).find_map(|l| {
        let l = std::str::from_utf8(l).ok()?.trim_start();
        let rest = l.strip_prefix('#')?;
        let at = rest.find("coding")? + "coding".len();
        let rest = rest[at..].strip_prefix([':', '='])?.trim_start();
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c)).collect();
        Some(name.to_ascii_lowercase().replace('_', "-"))
    });
    match coding.as_deref() {
        None | Some("utf-8" | "utf8") => {
            String::from_utf8(bytes.to_vec()).map_err(|e| format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to()))
        }
        Some("latin-1" | "iso-8859-1" | "iso8859-1" | "latin1" | "l1") => {
            Ok(bytes.iter().map(|b| *b as char).collect())
        }
        Some("ascii" | "us-ascii") if bytes.is_ascii() => Ok(String::from_utf8_lossy(bytes).into_owned()),
        Some(other) => Err(format!("its coding line declares `{other}`, which is not read here")),
    }
}

/// The tokens of `src` with their lines; Err(why) where Python's tokenizer would refuse it.
fn tokenize(src: &str) -> Result<Vec<(Tok<'_>, usize)>, String> {
    let b = src.as_bytes();
    let (mut out, mut i, mut line, mut depth) = (Vec::new(), 0usize, 1usize, 0usize);
    let mut indents = vec![0usize];
    let mut line_start = true;
    while i < b.len() {
        if line_start && depth == 0 {
            let (width, after) = indentation(b, i);
            i = after;
            line_start = false;
            // A blank or comment-only line has no indentation of its own.
            if matches!(b.get(i), None | Some(b'\n' | b'\r' | b'#')) {
                continue;
            }
            let top = *indents.last().unwrap_or(&0);
            if width > top {
                indents.push(width);
                out.push((Tok::Indent, line));
            }
            while width < *indents.last().unwrap_or(&0) {
                indents.pop();
                out.push((Tok::Dedent, line));
            }
            if width != *indents.last().unwrap_or(&0) {
                return Err(format!("line {line}: an indentation that matches no outer level"));
            }
        }
        let c = b[i];
        match c {
            b'\n' => {
                if depth == 0 && !matches!(out.last(), Some((Tok::Newline | Tok::Indent | Tok::Dedent, _)) | None) {
                    out.push((Tok::Newline, line));
                }
                line += 1;
                i += 1;
                // Inside brackets a line continues the logical line: no indentation.
                line_start = depth == 0;
            }
            b' ' | b'\t' | b'\r' | b'\x0c' => i += 1,
            b'\\' if matches!(b.get(i + 1), Some(b'\n')) => {
                i += 2;
                line += 1;
            }
            b'\\' if b.get(i + 1..i + 3) == Some(b"\r\n") => {
                i += 3;
                line += 1;
            }
            b'#' => i += b[i..].iter().position(|x| *x == b'\n').unwrap_or(b.len() - i),
            _ if string_start(b, i).is_some() => {
                let (content, end, lines) = string(src, i, string_start(b, i).unwrap_or(0), line)?;
                out.push((Tok::Str(content), line));
                line += lines;
                i = end;
            }
            _ if c == b'_' || c.is_ascii_alphabetic() || c >= 0x80 => {
                let end = i + b[i..]
                    .iter()
                    .position(|x| !(*x == b'_' || x.is_ascii_alphanumeric() || *x >= 0x80))
                    .unwrap_or(b.len() - i);
                out.push((Tok::Name(&src[i..end]), line));
                i = end;
            }
            _ if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) => {
                let end = number_end(b, i);
                out.push((Tok::Number(&src[i..end]), line));
                i = end;
            }
            _ => {
                let op = OPS.iter().find(|o| b[i..].starts_with(o.as_bytes())).copied().unwrap_or(&src[i..i + 1]);
                match op {
                    "(" | "[" | "{" => depth += 1,
                    ")" | "]" | "}" => {
                        depth = depth.checked_sub(1).ok_or(format!("line {line}: an unmatched `{op}`"))?
                    }
                    _ if !c.is_ascii() => return Err(format!("line {line}: a character Python does not read")),
                    _ => {}
                }
                out.push((Tok::Op(op), line));
                i += op.len();
            }
        }
    }
    out.push((Tok::Newline, line));
    out.extend(indents.iter().skip(1).map(|_| (Tok::Dedent, line)));
    Ok(out)
}

/// A line's indentation (tabs to the next multiple of 8, as Python counts them) and where
/// its first other character is.
fn indentation(b: &[u8], mut i: usize) -> (usize, usize) {
    let mut width = 0;
    while let Some(c) = b.get(i) {
        match c {
            b' ' => width += 1,
            b'\t' => width = (width / 8 + 1) * 8,
            b'\x0c' => width = 0,
            _ => break,
        }
        i += 1;
    }
    (width, i)
}

/// Where a number's token ends: digits, letters (hex, suffixes, exponents), `_`, `.`, and the
/// sign of an exponent.
fn number_end(b: &[u8], mut i: usize) -> usize {
    while let Some(c) = b.get(i) {
        let signed = matches!(c, b'+' | b'-') && matches!(b.get(i.wrapping_sub(1)), Some(b'e' | b'E'));
        if !(c.is_ascii_alphanumeric() || *c == b'_' || *c == b'.' || signed) {
            break;
        }
        i += 1;
    }
    i
}

/// The length of a string's prefix when a string literal starts at `i` (`r`, `b`, `f`, `u`,
/// `t`, two of them, or none, then a quote).
fn string_start(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && (b[i - 1] == b'_' || b[i - 1].is_ascii_alphanumeric() || b[i - 1] >= 0x80) {
        return None; // inside a name
    }
    (0..=2).find(|n| {
        b.get(i..i + n).is_some_and(|p| p.iter().all(|c| b"rRbBfFuUtT".contains(c)))
            && matches!(b.get(i + n), Some(b'\'' | b'"'))
    })
}

/// The string literal at `at` (its prefix `prefix` bytes long): its contents, where it ends,
/// and the newlines it spans.
fn string(src: &str, at: usize, prefix: usize, line: usize) -> Result<(&str, usize, usize), String> {
    let b = src.as_bytes();
    let q = b[at + prefix];
    let triple = b.get(at + prefix..at + prefix + 3) == Some(&[q, q, q][..]);
    let open = at + prefix + if triple { 3 } else { 1 };
    let (mut i, mut lines) = (open, 0);
    while i < b.len() {
        match b[i] {
            b'\\' => {
                lines += usize::from(b.get(i + 1) == Some(&b'\n'));
                i += 2;
                continue;
            }
            b'\n' if !triple => return Err(format!("line {line}: a string that ends with its line")),
            b'\n' => lines += 1,
            c if c == q && (!triple || b.get(i..i + 3) == Some(&[q, q, q][..])) => {
                let end = i + if triple { 3 } else { 1 };
                return Ok((&src[open..i], end, lines));
            }
            _ => {}
        }
        i += 1;
    }
    Err(format!("line {line}: a string that is never closed"))
}

/// Where a call of `add_argument` inside `add_cli_args` or `make_arg_parser` passes
/// `deprecated=` (or `**{"deprecated": …}`) a value other than `False`, `None` or `0`: its
/// line; Err(why) where the file is no Python the tokenizer reads.
pub fn deprecated_line(src: &str) -> Result<Option<usize>, String> {
    let toks = tokenize(src)?;
    let (mut depth, mut level) = (0usize, 0usize);
    // The functions the tokens are in, with the indentation level of their body.
    let mut defs: Vec<(&str, usize)> = Vec::new();
    let mut pending: Option<&str> = None;
    // The bracket depth of each open `add_argument(` call's arguments, and of each
    // `**{…}` literal among them.
    let (mut calls, mut spread): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
    for (k, (t, _)) in toks.iter().enumerate() {
        let next = |n: usize| toks.get(k + n).map(|(t, _)| t);
        match t {
            Tok::Name("def") => {
                pending = match next(1) {
                    Some(Tok::Name(n)) => Some(n),
                    _ => None,
                }
            }
            Tok::Indent => {
                level += 1;
                if let Some(n) = pending.take() {
                    defs.push((n, level));
                }
            }
            Tok::Dedent => {
                level = level.saturating_sub(1);
                defs.retain(|(_, l)| *l <= level);
            }
            // A one-line `def`: no body to be in.
            Tok::Newline if next(1) != Some(&Tok::Indent) => pending = None,
            Tok::Op("{") if calls.last() == Some(&depth) && k > 0 && toks[k - 1].0 == Tok::Op("**") => {
                depth += 1;
                spread.push(depth);
                continue;
            }
            Tok::Op("(" | "[" | "{") => depth += 1,
            Tok::Op(")" | "]" | "}") => {
                depth = depth.saturating_sub(1);
                calls.retain(|d| *d <= depth);
                spread.retain(|d| *d <= depth);
            }
            _ => {}
        }
        let inside = defs.iter().any(|(n, _)| matches!(*n, "add_cli_args" | "make_arg_parser"));
        if inside && *t == Tok::Name("add_argument") && next(1) == Some(&Tok::Op("(")) {
            calls.push(depth + 1);
        }
        let value = &toks[(k + 2).min(toks.len())..];
        let hit = match (t, next(1)) {
            // `deprecated=VALUE` among the call's own arguments.
            (Tok::Name("deprecated"), Some(Tok::Op("="))) => calls.last() == Some(&depth),
            // `**{"deprecated": VALUE}` among them.
            (Tok::Str("deprecated"), Some(Tok::Op(":"))) => spread.last() == Some(&depth),
            _ => false,
        };
        if hit && given(value) {
            return Ok(Some(toks[k].1));
        }
    }
    Ok(None)
}

/// A keyword's value, from its first token to the `,` or closing bracket at its own depth:
/// anything but the literal `False`, `None` or `0` gives argparse the keyword.
fn given(value: &[(Tok<'_>, usize)]) -> bool {
    let mut depth = 0usize;
    let end = value
        .iter()
        .position(|(t, _)| match t {
            Tok::Op("(" | "[" | "{") => {
                depth += 1;
                false
            }
            Tok::Op(")" | "]" | "}") if depth == 0 => true,
            Tok::Op(")" | "]" | "}") => {
                depth -= 1;
                false
            }
            Tok::Op(",") => depth == 0,
            _ => false,
        })
        .unwrap_or(value.len());
    !matches!(&value[..end], [(Tok::Name("False" | "None") | Tok::Number("0"), _)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(src: &str) -> Option<usize> {
        deprecated_line(src).unwrap_or_else(|e| panic!("{e}: {src}"))
    }

    const REAL: &str = "class EngineArgs:\n    @staticmethod\n    def add_cli_args(parser):\n        \"\"\"Shared CLI \
                        arguments for vLLM engine; deprecated=True is said here.\"\"\"\n        g = \
                        parser.add_argument_group()\n        g.add_argument(\n            \"--disable-log-requests\",\n\
                        \x20           help=\"[DEPRECATED] (see #123) Disable logging requests.\",\n            \
                        deprecated=True,\n        )\n        return parser\n";

    #[test]
    fn a_keyword_of_add_argument_in_add_cli_args() {
        assert_eq!(line(REAL), Some(9));
        // Whatever the spacing, and with a `#` inside the help string on its line.
        assert_eq!(line(&REAL.replace("deprecated=True", "deprecated = True")), Some(9));
        assert_eq!(line(&REAL.replace("            deprecated=True,\n", "")), None);
        assert_eq!(line(&REAL.replace("deprecated=True", "**{\"deprecated\": True}")), Some(9));
        assert_eq!(line(&REAL.replace("deprecated=True", "**{'deprecated' :True, 'x': 1}")), Some(9));
        // A value that passes nothing.
        assert_eq!(line(&REAL.replace("deprecated=True", "deprecated=False")), None);
        assert_eq!(line(&REAL.replace("deprecated=True", "deprecated=None")), None);
        assert_eq!(line(&REAL.replace("deprecated=True", "deprecated=flag")), Some(9));
    }

    #[test]
    fn never_in_a_string_a_comment_or_another_function() {
        let in_string = "def add_cli_args(p):\n    p.add_argument('--x', help='deprecated=True')\n";
        assert_eq!(line(in_string), None);
        let in_comment = "def add_cli_args(p):\n    p.add_argument('--x')  # deprecated=True\n";
        assert_eq!(line(in_comment), None);
        let docstring = "def add_cli_args(p):\n    '''p.add_argument('--x', deprecated=True)'''\n    return p\n";
        assert_eq!(line(docstring), None);
        let wrapped = "def add_cli_args(p):\n    raise E(\n        'x'\n    ) from e\n    p.add_argument('--x', deprecated=True)\n";
        assert_eq!(line(wrapped), Some(5), "a bracket's lines carry no indentation");
        let helper =
            "def _unused(p):\n    p.add_argument('--x', deprecated=True)\n\ndef add_cli_args(p):\n    return p\n";
        assert_eq!(line(helper), None);
        let after = "def add_cli_args(p):\n    return p\np.add_argument('--x', deprecated=True)\n";
        assert_eq!(line(after), None, "after the function's body");
        let other_call = "def add_cli_args(p):\n    q = dict(deprecated=True)\n    p.add_argument('--x', **q)\n";
        assert_eq!(line(other_call), None);
        let nested = "def make_arg_parser(p):\n    p.add_argument('--x', type=f(deprecated=True))\n";
        assert_eq!(line(nested), None, "a keyword of another call inside the arguments");
        let f_string = "def add_cli_args(p):\n    p.add_argument('--x', help=f\"{x} deprecated=True\")\n";
        assert_eq!(line(f_string), None);
    }

    #[test]
    fn codings_and_what_python_would_refuse() {
        assert_eq!(decode(b"\xef\xbb\xbfx = 1\n").unwrap(), "x = 1\n");
        let latin = b"# -*- coding: latin-1 -*-\ns = '\xe9'\n";
        assert_eq!(decode(latin).unwrap(), "# -*- coding: latin-1 -*-\ns = '\u{e9}'\n");
        assert!(decode(b"s = '\xe9'\n").unwrap_err().starts_with("not UTF-8"));
        assert!(decode(b"# coding: cp1252\n").unwrap_err().contains("`cp1252`"));
        assert!(deprecated_line("def f(:\n  x = 'open\n").unwrap_err().contains("a string that ends with its line"));
        assert!(deprecated_line("x = (1))\n").unwrap_err().contains("an unmatched `)`"));
        assert!(deprecated_line("if x:\n        a\n    b\n").unwrap_err().contains("matches no outer level"));
        // Deep nesting is a loop, not a recursion.
        let deep = format!("x = {}1{}\n", "(".repeat(200_000), ")".repeat(200_000));
        assert_eq!(line(&deep), None);
    }
}
