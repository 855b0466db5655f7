//! A scanner of `config.json` for the fields the rules read, quick over everything it
//! skips: a multi-MB list of layer names is stepped over many bytes at a time, not value
//! by value through serde. It answers only where it answers as serde_json does; anything
//! else (an escape in a key, a control character, a number that may not fit, nesting
//! deeper than it follows, an error of any kind) gives None, and serde_json reads the file
//! as before, with every answer and every message (line and column) its own.
//!
//! What serde_json accepts in a value it skips, this accepts too: a skipped string's bytes
//! are not checked as UTF-8 by serde_json either. Values the rules read (`model_type`,
//! `kv_lora_rank`, …) are handed to serde_json one by one when they are scalars.

use serde_json::Value;

use super::{Level, Small, Top, HYBRID_KEYS};

/// Deeper nesting is left to serde_json (and its recursion limit).
const MAX_DEPTH: usize = 64;

pub(super) fn top(b: &[u8]) -> Option<Top> {
    let mut s = Scan { b, i: 0, depth: 0, width: width(b) };
    let mut t = Top::default();
    s.ws();
    s.object(true, |s, key| {
        match key {
            b"text_config" => t.text = s.maybe_level()?,
            b"vision_config" => t.vision = s.present()?,
            k => {
                if !s.level_entry(&mut t.level, k)? {
                    s.skip()?;
                }
            }
        }
        Some(())
    })?;
    s.ws();
    (s.i == b.len()).then_some(t)
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
    width: Width,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// `{ key: value, … }`; `f` reads or skips each value. `simple_keys`: a key with an
    /// escape or a byte outside printable ASCII gives None (serde_json decodes keys the
    /// rules match on; this does not).
    fn object(&mut self, simple_keys: bool, mut f: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        if self.eat(b'}').is_some() {
            self.depth -= 1;
            return Some(());
        }
        loop {
            let start = self.i + 1;
            self.string()?;
            let key = &self.b[start..self.i - 1];
            if simple_keys && !key.iter().all(|&c| (0x20..0x7f).contains(&c) && c != b'\\') {
                return None;
            }
            self.ws();
            self.eat(b':')?;
            self.ws();
            f(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b'}' => {
                    self.i += 1;
                    self.depth -= 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// One entry of a level the rules read; false: not one of its keys.
    fn level_entry(&mut self, l: &mut Level, key: &[u8]) -> Option<bool> {
        match key {
            b"model_type" => l.model_type = self.small()?.and_then(|v| v.as_str().map(str::to_string)),
            b"kv_lora_rank" => l.kv_lora_rank = self.small()?,
            b"num_attention_heads" => l.num_attention_heads = self.small()?,
            k => match HYBRID_KEYS.iter().position(|h| h.as_bytes() == k) {
                Some(i) => l.hybrid[i] = self.present()?,
                None => return Some(false),
            },
        }
        Some(true)
    }

    /// `text_config`: a level when it is an object, nothing otherwise.
    fn maybe_level(&mut self) -> Option<Option<Level>> {
        match self.peek()? {
            b'{' => {
                let mut l = Level::default();
                self.object(true, |s, k| {
                    if !s.level_entry(&mut l, k)? {
                        s.skip()?;
                    }
                    Some(())
                })?;
                Some(Some(l))
            }
            b'[' => self.skip().map(|()| None),
            _ => self.scalar().map(|_| None),
        }
    }

    /// Present and not null (a compound value is skipped whatever its size).
    fn present(&mut self) -> Option<bool> {
        self.small().map(|v| v.is_some())
    }

    /// A value as [`Small`] reads it: a scalar by serde_json, a compound one by its kind.
    fn small(&mut self) -> Option<Option<Value>> {
        match self.peek()? {
            b'[' => self.skip().map(|()| Some(Value::String("[...]".into()))),
            // serde_json reads this map's own keys as strings (escapes and UTF-8 checked):
            // only plain ones are taken here; its values are skipped.
            b'{' => self.object(true, |s, _| s.skip()).map(|()| Some(Value::String("{...}".into()))),
            _ => self.scalar(),
        }
    }

    /// A string, number, `true`, `false` or `null` where the rules read one: skipped to
    /// find its end, then read by serde_json (its number and string rules, exactly).
    fn scalar(&mut self) -> Option<Option<Value>> {
        let start = self.i;
        self.skip()?;
        serde_json::from_slice::<Small>(&self.b[start..self.i]).ok().map(|s| s.0)
    }

    /// Step over one value.
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string(),
            b'{' => self.object(false, |s, _| s.skip()),
            b'[' => self.array(),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.b[self.i..].starts_with(word).then(|| self.i += word.len())
    }

    fn array(&mut self) -> Option<()> {
        self.eat(b'[')?;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        if self.eat(b']').is_some() {
            self.depth -= 1;
            return Some(());
        }
        loop {
            // A run of plain strings (a list of layer names) in one pass; what it does not
            // take (an escape, another kind of value) is skipped value by value.
            let run = if self.peek() == Some(b'"') { strings(self.b, self.i, self.width) } else { self.i };
            if run > self.i {
                self.i = run;
            } else {
                self.skip()?;
            }
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b']' => {
                    self.i += 1;
                    self.depth -= 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, as JSON has it.
    fn number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }

    /// A string (the opening quote at `i`), stepped over to after its closing quote.
    fn string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            self.i = special(self.b, self.i, self.width);
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => self.escape()?,
                // Not ASCII: content (serde_json does not check a skipped string's UTF-8
                // either; a string the rules read is serde_json's to check).
                c if c >= 0x80 => self.i += 1,
                // A control character: serde_json's error.
                _ => return None,
            }
        }
    }

    fn escape(&mut self) -> Option<()> {
        match *self.b.get(self.i + 1)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
            b'u' => {
                let hex = self.b.get(self.i + 2..self.i + 6)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                self.i += 6;
            }
            _ => return None,
        }
        Some(())
    }
}

/// How many bytes at a time the scanner looks: one at a time (16 for a string's plain run),
/// or, for a large file where the CPU has them, 32 (AVX2) and, in runs of strings, 64
/// (AVX-512BW where present, two AVX2 halves otherwise), with carry-less multiplies
/// (PCLMULQDQ) for the prefix XORs.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Width {
    Narrow,
    Avx2,
    Avx512,
}

fn width(b: &[u8]) -> Width {
    if b.len() <= 1 << 16 {
        return Width::Narrow;
    }
    let w = cpu::width();
    tracing::debug!(code = "config-scan", "a config.json of {} bytes: read {}", b.len(), w.describe());
    w
}

impl Width {
    fn describe(self) -> &'static str {
        match self {
            Width::Narrow => "16 bytes at a time (SSE2; no AVX2 or no PCLMULQDQ)",
            Width::Avx2 => "32 and 64 bytes at a time with AVX2",
            Width::Avx512 => "32 and 64 bytes at a time with AVX2 and AVX-512BW",
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod cpu {
    use super::Width;

    /// What the CPU has, from glibc's table where glibc is the C library: it probed the CPU
    /// at start (its CPUID instructions are part of every static glibc program's start-up)
    /// and keeps what it found and what the kernel enables. `std`'s detection would run
    /// seven CPUID instructions more, each a trap to the hypervisor on a VM (60 µs here).
    pub(super) fn width() -> Width {
        let (avx2, avx512bw, clmul) = features();
        match (clmul, avx2, avx512bw) {
            (true, true, true) => Width::Avx512,
            (true, true, false) => Width::Avx2,
            _ => Width::Narrow,
        }
    }

    #[cfg(target_env = "gnu")]
    fn features() -> (bool, bool, bool) {
        // <sys/platform/x86.h> (glibc 2.33+): per CPUID leaf (index 0: leaf 1, index 1:
        // leaf 7), the registers CPUID gave and the bits usable (`active`: the CPU has the
        // feature and the kernel saves its registers).
        #[repr(C)]
        struct CpuidFeature {
            cpuid: [u32; 4],
            active: [u32; 4],
        }
        extern "C" {
            fn __x86_get_cpuid_feature_leaf(leaf: u32) -> *const CpuidFeature;
        }
        const EBX: usize = 1;
        const ECX: usize = 2;
        // SAFETY: glibc returns a pointer to its static table (or to a zeroed one for a leaf
        // it does not know), valid for the whole process.
        let (leaf1, leaf7) = unsafe { (&*__x86_get_cpuid_feature_leaf(0), &*__x86_get_cpuid_feature_leaf(1)) };
        let bit = |r: u32, n: u32| r & (1 << n) != 0;
        (bit(leaf7.active[EBX], 5), bit(leaf7.active[EBX], 30) && bit(leaf7.active[EBX], 16), bit(leaf1.active[ECX], 1))
    }

    #[cfg(not(target_env = "gnu"))]
    fn features() -> (bool, bool, bool) {
        use std::arch::is_x86_feature_detected as has;
        (has!("avx2"), has!("avx512bw") && has!("avx512f"), has!("pclmulqdq"))
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod cpu {
    pub(super) fn width() -> super::Width {
        super::Width::Narrow
    }
}

/// The first byte at or after `i` that ends a string's plain run: `"`, `\`, a control
/// character, or a byte outside ASCII; `b.len()` if none.
fn special(b: &[u8], i: usize, width: Width) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if width != Width::Narrow {
            // SAFETY: `width` is wider than narrow only where AVX2 is present.
            return unsafe { special_avx2(b, i) };
        }
        special_sse2(b, i)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = width;
        special_tail(b, i)
    }
}

/// From an opening quote at `i`: past as many plain strings (no escape, no control
/// character) separated by `,` and whitespace as follow, to just after the last one's
/// closing quote (`i` when the first is not plain). The separators after it are left to
/// the caller, as is anything else.
fn strings(b: &[u8], i: usize, width: Width) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `Avx2` only where AVX2 and PCLMULQDQ are present, `Avx512` where
        // AVX-512BW is too.
        match width {
            Width::Avx2 => return unsafe { strings_avx2(b, i) },
            Width::Avx512 => return unsafe { strings_avx512(b, i) },
            Width::Narrow => {}
        }
    }
    strings_with(b, i, |b, j| special(b, j, Width::Narrow))
}

/// The blocks, then the loop from where they stopped (see `Run`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn strings_from_blocks(b: &[u8], (o, before): (usize, usize), special: impl Fn(&[u8], usize) -> usize) -> usize {
    let done = strings_with(b, o, special);
    if done > o {
        done
    } else {
        before
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,pclmulqdq")]
unsafe fn strings_avx2(b: &[u8], i: usize) -> usize {
    // SAFETY (of the calls): this function runs only where AVX2 and PCLMULQDQ are present.
    strings_from_blocks(b, unsafe { blocks_avx2(b, i) }, |b, j| unsafe { special_avx2(b, j) })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512bw,pclmulqdq")]
unsafe fn strings_avx512(b: &[u8], i: usize) -> usize {
    // SAFETY (of the calls): this function runs only where AVX-512BW, AVX2 and PCLMULQDQ
    // are present.
    strings_from_blocks(b, unsafe { blocks_avx512(b, i) }, |b, j| unsafe { special_avx2(b, j) })
}

#[cfg(target_arch = "x86_64")]
/// One 64-byte block's bits: quotes, commas, what stops a run inside a string (`\\` or a
/// control character), and what may stand outside one (whitespace, `,`, `"`).
struct Masks {
    quotes: u64,
    commas: u64,
    bad_inside: u64,
    allowed_outside: u64,
}

#[cfg(target_arch = "x86_64")]
/// Whitespace, `,` and `"`, by their low nibble, for a byte shuffle (which gives 0 for a
/// byte from 0x80, which then matches nothing): `" "` 0x20, `"` 0x22, tab 0x09, LF 0x0a,
/// `,` 0x2c, CR 0x0d; 0xff (0x00 at 0xf) where no byte with that low nibble is allowed.
const OUTSIDE: [i8; 16] = [0x20, -1, 0x22, -1, -1, -1, -1, -1, -1, 0x09, 0x0a, -1, 0x2c, 0x0d, -1, 0];

/// A run's blocks from its opening quote at `i` to the last whole one or to what stops the
/// run (see `Run`), with AVX2: each block as two 32-byte halves.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,pclmulqdq")]
unsafe fn blocks_avx2(b: &[u8], i: usize) -> (usize, usize) {
    use std::arch::x86_64::*;
    // SAFETY: `OUTSIDE` is 16 bytes, read unaligned.
    let table = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(OUTSIDE.as_ptr().cast()) });
    let half = |c: __m256i| {
        let allowed = _mm256_cmpeq_epi8(_mm256_shuffle_epi8(table, c), c);
        let q = _mm256_cmpeq_epi8(c, _mm256_set1_epi8(b'"' as i8));
        let cm = _mm256_cmpeq_epi8(c, _mm256_set1_epi8(b',' as i8));
        let bs = _mm256_cmpeq_epi8(c, _mm256_set1_epi8(b'\\' as i8));
        let ctl = _mm256_cmpeq_epi8(_mm256_min_epu8(c, _mm256_set1_epi8(0x1f)), c);
        let m = |v: __m256i| _mm256_movemask_epi8(v) as u32 as u64;
        (m(q), m(cm), m(_mm256_or_si256(bs, ctl)), m(allowed))
    };
    let (mut run, mut p) = (Run::new(i), i);
    while p + 64 <= b.len() {
        // SAFETY: `p + 64 <= b.len()`: both 32-byte loads are inside `b` (unaligned); a
        // prefetch of any address is harmless.
        let (lo, hi) = unsafe {
            _mm_prefetch::<_MM_HINT_T0>(b.as_ptr().wrapping_add(p + PREFETCH).cast());
            let at = b.as_ptr().add(p).cast::<__m256i>();
            (half(_mm256_loadu_si256(at)), half(_mm256_loadu_si256(at.add(1))))
        };
        let m = Masks {
            quotes: lo.0 | hi.0 << 32,
            commas: lo.1 | hi.1 << 32,
            bad_inside: lo.2 | hi.2 << 32,
            allowed_outside: lo.3 | hi.3 << 32,
        };
        // SAFETY (of the call): this function runs only where PCLMULQDQ is present.
        if !run.step(p, m, |x| unsafe { clmul_prefix_xor(x) }) {
            break;
        }
        p += 64;
    }
    run.end()
}

/// As `blocks_avx2`, with AVX-512BW: a block in one register, its masks straight from
/// compares.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,pclmulqdq")]
unsafe fn blocks_avx512(b: &[u8], i: usize) -> (usize, usize) {
    use std::arch::x86_64::*;
    // SAFETY: `OUTSIDE` is 16 bytes, read unaligned.
    let table = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(OUTSIDE.as_ptr().cast()) });
    let (mut run, mut p) = (Run::new(i), i);
    while p + 64 <= b.len() {
        // SAFETY: `p + 64 <= b.len()`: the load is inside `b` (unaligned); a prefetch of
        // any address is harmless.
        let c = unsafe {
            _mm_prefetch::<_MM_HINT_T0>(b.as_ptr().wrapping_add(p + PREFETCH).cast());
            _mm512_loadu_si512(b.as_ptr().add(p).cast())
        };
        let eq = |x: u8| _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8(x as i8));
        let m = Masks {
            quotes: eq(b'"'),
            commas: eq(b','),
            bad_inside: eq(b'\\') | _mm512_cmplt_epu8_mask(c, _mm512_set1_epi8(0x20)),
            allowed_outside: _mm512_cmpeq_epi8_mask(_mm512_shuffle_epi8(table, c), c),
        };
        // SAFETY (of the call): this function runs only where PCLMULQDQ is present.
        if !run.step(p, m, |x| unsafe { clmul_prefix_xor(x) }) {
            break;
        }
        p += 64;
    }
    run.end()
}

/// A run of plain strings read 64 bytes at a time (`blocks_avx2`, `blocks_avx512`), as
/// `strings_with` reads it: from the opening quote at `i`, to the last opening quote `o` up
/// to which every string is plain and closed and every gap between two of them is
/// whitespace around exactly one comma. `end` gives `o` and the end of the string before it
/// (`i` for the first), from where `strings_with` takes over: the last string, the tail
/// under 64 bytes, or whatever stopped the run.
///
/// Per block: the quotes' prefix XOR (carried over blocks) marks what is inside a string;
/// inside, a `\\` or a control character stops the run (bytes from 0x80 are content, as in
/// `Scan::string`); outside, anything but whitespace, `,` and `"` does. The opening quotes
/// and the commas outside strings must alternate, the first opening quote first: a second
/// prefix XOR, over both, tells each one's place (odd: a quote, even: a comma).
///
/// Where the run stands after the blocks read so far.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
struct Run {
    /// All ones where the last block read ended inside a string / after an odd event.
    inside: u64,
    odd: u64,
    /// The last block with an opening quote (its start, and its opening and closing quotes
    /// up to what stopped the run), and the end of the last string closed before it.
    o_at: usize,
    o_open: u64,
    o_close: u64,
    o_before: usize,
    /// The end of the last string closed so far.
    last_c: usize,
}

#[cfg(target_arch = "x86_64")]
impl Run {
    /// From the opening quote at `i`.
    fn new(i: usize) -> Run {
        Run { inside: 0, odd: 0, o_at: i, o_open: 1, o_close: 0, o_before: i, last_c: i }
    }

    /// The block at `p` (its masks); false where it stops the run.
    #[inline(always)]
    fn step(&mut self, p: usize, m: Masks, prefix_xor: impl Fn(u64) -> u64) -> bool {
        let s = prefix_xor(m.quotes) ^ self.inside;
        let (open, close, comma) = (m.quotes & s, m.quotes & !s, m.commas & !s);
        let x = prefix_xor(open | comma) ^ self.odd;
        let bad = (m.bad_inside & s) | (!s & !m.allowed_outside) | (open & !x) | (comma & x);
        if bad != 0 {
            // What comes before the first byte that stops the run.
            let valid = (1u64 << bad.trailing_zeros()) - 1;
            if open & valid != 0 {
                (self.o_at, self.o_open, self.o_close, self.o_before) = (p, open & valid, close & valid, self.last_c);
            }
            return false;
        }
        if open != 0 {
            (self.o_at, self.o_open, self.o_close, self.o_before) = (p, open, close, self.last_c);
        }
        if close != 0 {
            self.last_c = p + 64 - close.leading_zeros() as usize;
        }
        self.inside = ((s as i64) >> 63) as u64;
        self.odd = ((x as i64) >> 63) as u64;
        true
    }

    /// The last opening quote, and the end of the string closed before it: in its block,
    /// or before.
    fn end(&self) -> (usize, usize) {
        let at = 63 - self.o_open.leading_zeros() as usize;
        let closed = self.o_close & ((1u64 << at) - 1);
        let before = if closed != 0 { self.o_at + 64 - closed.leading_zeros() as usize } else { self.o_before };
        (self.o_at + at, before)
    }
}

/// A block's distance ahead to prefetch.
const PREFETCH: usize = 2048;

/// Bit k of the result: the XOR of bits 0..=k of `x` (a carry-less multiply by all ones).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq")]
unsafe fn clmul_prefix_xor(x: u64) -> u64 {
    use std::arch::x86_64::*;
    let m = _mm_clmulepi64_si128(_mm_set_epi64x(0, x as i64), _mm_set1_epi8(-1), 0);
    _mm_cvtsi128_si64(m) as u64
}

#[inline(always)]
fn strings_with(b: &[u8], mut i: usize, find: impl Fn(&[u8], usize) -> usize) -> usize {
    let ws = |b: &[u8], mut i: usize| {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = b.get(i) {
            i += 1;
        }
        i
    };
    let mut done = i;
    while b.get(i) == Some(&b'"') {
        let mut j = find(b, i + 1);
        // Bytes outside ASCII are content (see `Scan::string`).
        while j < b.len() && b[j] >= 0x80 {
            j = find(b, j + 1);
        }
        if b.get(j) != Some(&b'"') {
            break;
        }
        done = j + 1;
        // `", "` (as Python's json writes lists) without the general whitespace loops.
        if b.get(done..done + 3) == Some(&b", \""[..]) {
            i = done + 2;
            continue;
        }
        i = ws(b, done);
        if b.get(i) != Some(&b',') {
            break;
        }
        i = ws(b, i + 1);
    }
    done
}

fn special_tail(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\\' || !(0x20..0x80).contains(&c) {
            return i;
        }
        i += 1;
    }
    i
}

#[cfg(target_arch = "x86_64")]
fn special_sse2(b: &[u8], mut i: usize) -> usize {
    use std::arch::x86_64::*;
    // SSE2 is part of x86_64. A signed compare with 0x20 is true for control characters
    // and for every byte from 0x80 (negative as i8): one test for both.
    while i + 16 <= b.len() {
        // SAFETY: `i + 16 <= b.len()`: the 16 bytes read are inside `b` (unaligned load).
        let mask = unsafe {
            let c = _mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>());
            let q = _mm_cmpeq_epi8(c, _mm_set1_epi8(b'"' as i8));
            let e = _mm_cmpeq_epi8(c, _mm_set1_epi8(b'\\' as i8));
            let l = _mm_cmplt_epi8(c, _mm_set1_epi8(0x20));
            _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(q, e), l)) as u32
        };
        if mask != 0 {
            return i + mask.trailing_zeros() as usize;
        }
        i += 16;
    }
    special_tail(b, i)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn special_avx2(b: &[u8], mut i: usize) -> usize {
    use std::arch::x86_64::*;
    // As `special_sse2`, 32 bytes at a time (a signed compare: control characters and
    // bytes from 0x80).
    while i + 32 <= b.len() {
        // SAFETY: `i + 32 <= b.len()`: the 32 bytes read are inside `b` (unaligned load).
        let c = unsafe { _mm256_loadu_si256(b.as_ptr().add(i).cast::<__m256i>()) };
        let q = _mm256_cmpeq_epi8(c, _mm256_set1_epi8(b'"' as i8));
        let e = _mm256_cmpeq_epi8(c, _mm256_set1_epi8(b'\\' as i8));
        let l = _mm256_cmpgt_epi8(_mm256_set1_epi8(0x20), c);
        let mask = _mm256_movemask_epi8(_mm256_or_si256(_mm256_or_si256(q, e), l)) as u32;
        if mask != 0 {
            return i + mask.trailing_zeros() as usize;
        }
        i += 32;
    }
    special_sse2(b, i)
}

#[cfg(test)]
mod tests {
    use super::super::serde_top;
    use super::*;

    /// The scanner's answer is serde_json's, or it leaves the bytes to serde_json; where
    /// serde_json refuses, it never answers.
    fn agrees(doc: &[u8]) -> Option<Top> {
        let fast = top(doc);
        match serde_top(doc) {
            Ok(t) => {
                if let Some(f) = &fast {
                    assert_eq!(f, &t, "{}", String::from_utf8_lossy(doc));
                }
            }
            Err(e) => assert!(fast.is_none(), "serde_json: {e}; scanner: {fast:?} on {}", String::from_utf8_lossy(doc)),
        }
        fast
    }

    /// Shaped like the configs models ship (DeepSeek-V3, Kimi, Qwen3-Next, a VLM), and the
    /// example's: the scanner reads each itself.
    const CONFIGS: &[&str] = &[
        include_str!("../../../examples/models/kimi-k3/config.json"),
        r#"{
  "architectures": ["DeepseekV3ForCausalLM"],
  "attention_bias": false,
  "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
  "first_k_dense_replace": 3,
  "hidden_act": "silu",
  "initializer_range": 0.02,
  "kv_lora_rank": 512,
  "model_type": "deepseek_v3",
  "num_attention_heads": 128,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000,
  "tie_word_embeddings": false,
  "topk_group": 4,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.46.3",
  "use_cache": true,
  "v_head_dim": 128,
  "vocab_size": 129280,
  "eos_token_id": -1,
  "sliding_window": null
}"#,
        r#"{"model_type":"qwen3_next","num_attention_heads":16,"layer_types":["linear_attention","full_attention"],"hybrid_override_pattern":null,"linear_attn_config":{"a":[1,2.5e-3,-0.0]},"text":"caf\u00e9 \"quoted\" \\ \/ \b\f\n\r\t"}"#,
        r#"{"model_type":"kimi_vl","vision_config":{"patch_size":14,"names":["a","b"]},"text_config":{"model_type":"deepseek_v3","kv_lora_rank":512,"num_attention_heads":64,"text_config":{"kv_lora_rank":1}},"ignore":["model.layers.0.mlp", "model.layers.1.mlp","model.layers.2.mlp" ,"x"  ,  "é"]}"#,
        "{\"model_type\" : \"llama\" ,\r\n\t\"num_attention_heads\":32 , \"x\":[[[]],{},[{}],\"\"] }\n",
        r#"{"model_type":"llama","model_type":"deepseek_v3","kv_lora_rank":512,"text_config":{"kv_lora_rank":null},"vision_config":null,"layers_block_type":false}"#,
        r#"{"num_attention_heads":"64","kv_lora_rank":[512],"model_type":7,"text_config":[1,{"model_type":"x"}]}"#,
        r#"{"num_attention_heads":18446744073709551616,"kv_lora_rank":-9223372036854775809,"text_config":"no"}"#,
        "{}",
    ];

    #[test]
    fn configs_as_models_ship_them_are_read_alike() {
        for c in CONFIGS {
            assert!(agrees(c.as_bytes()).is_some(), "the scanner should read {c}");
        }
    }

    /// Everything it must leave to serde_json, or answer as serde_json does.
    #[test]
    fn odd_and_invalid_json_is_left_to_serde_json_or_read_alike() {
        let deep = format!("{{\"x\":{}1{}}}", "[".repeat(200), "]".repeat(200));
        let cases: Vec<Vec<u8>> = [
            // not JSON, or not an object
            "",
            " ",
            "[]",
            "7",
            "\"s\"",
            "null",
            "{",
            "{\"a\"",
            "{\"a\":",
            "{\"a\":1",
            "{\"a\":1,}",
            "{,}",
            "{\"a\":1}}",
            "{\"a\":1} x",
            "\u{feff}{}",
            "{\"a\":[1,]}",
            "{\"a\":[,1]}",
            "{\"a\":[1 2]}",
            "{\"a\" 1}",
            "{'a':1}",
            "{\"a\":tru}",
            "{\"a\":nul}",
            "{\"a\":True}",
            "{\"a\":NaN}",
            "{\"a\":Infinity}",
            // numbers
            "{\"a\":01}",
            "{\"a\":-}",
            "{\"a\":1.}",
            "{\"a\":.5}",
            "{\"a\":1e}",
            "{\"a\":1e+}",
            "{\"a\":+1}",
            "{\"a\":-0}",
            "{\"a\":1E5}",
            "{\"a\":1e999}",
            "{\"kv_lora_rank\":1e999}",
            "{\"num_attention_heads\":-1e-999}",
            "{\"text_config\":1e999}",
            "{\"vision_config\":1e400}",
            // strings and escapes
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\\u12\"}",
            "{\"a\":\"\\u12g4\"}",
            "{\"a\":\"\\ud800\"}",
            "{\"model_type\":\"\\ud800\"}",
            "{\"model_type\":\"\\u0064eepseek_v3\",\"kv_lora_rank\":1}",
            "{\"model\\u005ftype\":\"deepseek_v3\",\"kv_lora_rank\":1}",
            "{\"a\":\"tab\there\"}",
            "{\"a\":\"nl\nhere\"}",
            "{\"a\":\"\u{7f}\"}",
            "{\"a\":\"unterminated}",
            "{\"é\":1,\"model_type\":\"x\"}",
            // The keys of a map the rules look at are read (checked) by serde_json; deeper
            // ones, and those of a map it skips, are not.
            "{\"vision_config\":{\"\\ud800\":1}}",
            "{\"vision_config\":{\"a\":{\"\\ud800\":1}}}",
            "{\"x\":{\"\\ud800\":1}}",
            "{\"kv_lora_rank\":{\"\\udc00x\":1}}",
            "{\"vision_config\":{\"\\u00e9\":1}}",
            "{\"a\":\"\\\"\"}",
            "{\"a\":\"\\\\\"}",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .chain([
            deep.into_bytes(),
            b"{\"a\":\"\xff\xfe\",\"model_type\":\"llama\"}".to_vec(),
            b"{\"model_type\":\"\xff\"}".to_vec(),
            b"{\"\xff\":1}".to_vec(),
            b"{\"a\":[\"\xc3\xa9\",\"\xe2\x82\"]}".to_vec(),
            b"{\"a\":\"\x00\"}".to_vec(),
        ])
        .collect();
        for c in &cases {
            agrees(c);
        }
        // Where it answers, it answers as serde_json: a skipped string's bytes are not UTF-8
        // checked by either; a read one is serde_json's to check.
        assert!(agrees(b"{\"a\":\"\xff\xfe\",\"model_type\":\"llama\"}").is_some());
        assert!(top(b"{\"model_type\":\"\xff\"}").is_none());
    }

    /// Long runs of strings, with and without the 32-byte scan, and strings that end at
    /// every offset of a 16- and a 32-byte block.
    #[test]
    fn runs_of_strings_at_every_length() {
        for wide_file in [false, true] {
            for len in 0..70 {
                let name = "n".repeat(len);
                let mut j = String::from("{\"ignored\":[");
                for k in 0..40 {
                    if k > 0 {
                        j.push_str([", ", ",", " ,\n ", ","][k % 4]);
                    }
                    j.push('"');
                    j.push_str(&name);
                    if k % 7 == 3 {
                        j.push_str("\\\"é");
                    }
                    j.push('"');
                }
                j.push_str("],\"model_type\":\"deepseek_v3\",\"kv_lora_rank\":512}");
                if wide_file {
                    j = j.replacen("{", &format!("{{\"pad\":\"{}\",", "p".repeat(70_000)), 1);
                }
                let t = agrees(j.as_bytes()).expect("read by the scanner");
                assert_eq!(t.level.model_type.as_deref(), Some("deepseek_v3"));
            }
        }
    }

    /// The widths this CPU can run beyond the narrow one.
    #[cfg(target_arch = "x86_64")]
    fn wide_widths() -> Vec<Width> {
        match cpu::width() {
            Width::Avx512 => vec![Width::Avx2, Width::Avx512],
            Width::Avx2 => vec![Width::Avx2],
            Width::Narrow => vec![],
        }
    }

    /// The 64-byte blocks end a run where the loop of strings does, whatever stops it
    /// (built from strings, separators and single bytes anywhere), at every width.
    #[cfg(target_arch = "x86_64")]
    fn blocks_agree(b: &[u8]) {
        if b.first() != Some(&b'"') {
            return;
        }
        let scalar = strings_with(b, 0, |b, j| special(b, j, Width::Narrow));
        for w in wide_widths() {
            assert_eq!(strings(b, 0, w), scalar, "{w:?} {:?}", String::from_utf8_lossy(b));
        }
    }

    /// The CPU's features as glibc's table has them are those `std` finds by CPUID.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_cpus_features_are_the_ones_std_detects() {
        use std::arch::is_x86_feature_detected as has;
        let expected = match (has!("pclmulqdq"), has!("avx2"), has!("avx512bw") && has!("avx512f")) {
            (true, true, true) => Width::Avx512,
            (true, true, false) => Width::Avx2,
            _ => Width::Narrow,
        };
        assert_eq!(cpu::width(), expected);
        assert_eq!(width(&[0; 1 << 16]), Width::Narrow, "a small file is read narrow");
        assert_eq!(width(&[0; (1 << 16) + 1]), expected);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn blocks_stop_where_the_loop_stops() {
        let name = "model.layers.7.self_attn.kv_a_proj_with_mqa";
        let run: String = (0..40).map(|_| format!("\"{name}\", ")).collect();
        for stop in ["]", "1", "\"x\\\"\"", "\"\u{1}\"", "\"\u{e9}\"]", " \"x\"", ",,", ", ]", "\\", "é"] {
            for cut in 0..130 {
                let mut d = run.as_bytes()[..run.len() - cut].to_vec();
                d.extend_from_slice(stop.as_bytes());
                d.extend_from_slice(b"\"tail\"]");
                blocks_agree(&d);
            }
        }
    }

    /// A whole run is taken 64 bytes at a time (stopping early would still give the right
    /// answer, slowly, from the loop): up to the last string's opening quote.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn blocks_take_a_whole_run() {
        let widths = wide_widths();
        for (len, shift, escape) in (0..80).flat_map(|l| (0..64).flat_map(move |s| [(l, s, false), (l, s, true)])) {
            // The first string's length moves the rest across the blocks (which start at
            // the run's first quote); the last string plain or not.
            let start = shift % 7;
            let mut d = vec![b'x'; start];
            // The last string's opening quote; the end of the one before it.
            let (mut last, mut end, mut before) = (start, start, start);
            for k in 0..30 {
                if k > 0 {
                    d.extend_from_slice([", ", ",", " ,\n ", "\t,\r"][k % 4].as_bytes());
                }
                (before, last) = (end, d.len());
                d.push(b'"');
                d.extend(std::iter::repeat_n(b"n\xc3\xa9"[k % 3], if k == 0 { shift } else { len + k % 5 }));
                if escape && k == 29 {
                    d.extend_from_slice(b"\\n");
                }
                d.push(b'"');
                end = d.len();
            }
            d.push(b']');
            d.extend_from_slice(&[b' '; 64]);
            let what = String::from_utf8_lossy(&d);
            for &w in &widths {
                // SAFETY: the CPU has what each width needs (`wide_widths`).
                let blocks = unsafe {
                    match w {
                        Width::Avx512 => blocks_avx512(&d, start),
                        _ => blocks_avx2(&d, start),
                    }
                };
                assert_eq!(blocks, (last, before), "{w:?} {what:?}");
                assert_eq!(strings(&d, start, w), if escape { before } else { end }, "{w:?} {what:?}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 4096, .. Default::default() })]
        #[test]
        fn blocks_read_any_run_as_the_loop_does(
            parts in proptest::collection::vec((0usize..70, proptest::sample::select(vec![", ", ",", " , ", ",\n  ", "", " ", ",,", "\t,\r"])), 1..30),
            edits in proptest::collection::vec((0usize..3000, proptest::sample::select(vec![b'"', b'\\', b',', b' ', b'\n', b']', b'a', 0x01, 0x1f, 0x7f, 0x80, 0xc3, 0xff])), 0..3),
        ) {
            let mut d = Vec::new();
            for (n, sep) in parts {
                d.push(b'"');
                d.extend(std::iter::repeat_n(b'n', n));
                d.push(b'"');
                d.extend_from_slice(sep.as_bytes());
            }
            d.push(b']');
            for (at, c) in edits {
                let at = at % d.len();
                d[at] = c;
            }
            blocks_agree(&d);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2048, .. Default::default() })]
        /// A byte put in, replaced or taken out anywhere in a config: the scanner agrees with
        /// serde_json or leaves the bytes to it.
        #[test]
        fn edits_anywhere_are_read_alike_or_left_to_serde_json(
            which in 0usize..CONFIGS.len(),
            at in 0usize..4000,
            op in 0u8..3,
            c in proptest::sample::select(vec![b'"', b'\\', b'{', b'}', b'[', b']', b':', b',', b' ', b'\n', b'\t',
                b'0', b'1', b'-', b'+', b'.', b'e', b'E', b'u', b'n', b't', b'f', b'a', b'/', 0u8, 0x1f, 0x7f, 0x80, 0xc3, 0xff]),
        ) {
            let mut d = CONFIGS[which].as_bytes().to_vec();
            let at = at % (d.len() + 1);
            match op {
                0 => d.insert(at, c),
                1 if at < d.len() => d[at] = c,
                _ if at < d.len() => {
                    d.remove(at);
                }
                _ => d.push(c),
            }
            agrees(&d);
        }
    }
}
