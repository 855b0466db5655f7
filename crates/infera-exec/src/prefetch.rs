//! The launcher's own read-ahead of the weights (`--prefetch`): a process beside the engine
//! that reads the checkpoint's files into the page cache in the order the engine's loader
//! reads them, so the loader finds them cached instead of waiting on the storage.
//!
//! - **Bounded lead.** It reads at most `lead_bytes` past where the engine's loader is:
//!   the highest page of each file the engine's processes have mapped (`/proc/PID/maps` and
//!   the present bit of `/proc/PID/pagemap`: safetensors' `safe_open` maps the file) or the
//!   offset of a descriptor they read it through (`/proc/PID/fdinfo`). Once the pod's memory
//!   cgroup is nearly full the lead is 64 MiB, and each chunk is read twice: what the loader
//!   has read stays mapped by it, which the kernel keeps before pages read once, so a longer
//!   lead, or pages read once, would be evicted before the loader got to them (measured:
//!   BENCHMARKS.md, the cells at twice the pod's limit).
//! - **Parallel ranges.** `ranges` threads take the next 4 MiB of the files in turn: on a
//!   network or FUSE filesystem each request pays a round trip, and several in flight fill
//!   the link.
//! - **After the open (FUSE).** A FUSE filesystem without `kernel_cache` drops a file's cache
//!   when the file is opened: a file is read only once the engine has it open (every file is
//!   opened here first, so the engine's open is the last one). There a chunk's reads are
//!   queued with the kernel (`POSIX_FADV_WILLNEED`) rather than made by the thread: the
//!   kernel's queue of FUSE requests stays full, in the loader's order.
//!
//! **Lifecycle.** `spawn` starts it just before the exec (or, with `--init`, beside the
//! child) as `infera-exec __prefetch`, in the pod's cgroup with the launcher's privileges
//! after the drop. It asks the kernel to SIGKILL it when its parent dies
//! (`PR_SET_PDEATHSIG`): its parent is the engine itself after the exec, or init. It stops
//! when done, on SIGTERM (default action), or when the engine exits. Without `--init` its
//! parent is the engine, which does not reap children it did not start: once done it stays,
//! asleep, until the engine exits (then the kernel kills it and whoever reaps the engine's
//! orphans — the container's init, or the runtime — reaps it), so it is never a zombie of a
//! running engine. With `--init` the launcher reaps it, so it exits when done.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::spec::PrefetchSpec;

/// What one thread reads at a time: the readers take the checkpoint's MiBs in order, so what
/// is in flight is the next MiBs, in the order the loader will want them (a loader that
/// reaches the front then waits on a read already made instead of making a small one of its
/// own, which costs a round trip, or one of a throttled volume's IOPS).
const CHUNK: u64 = 1 << 20;
/// One read's buffer: a chunk is read in pieces of this size, the memory a thread holds.
const PIECE: usize = 1 << 20;
/// How often the loader's place is looked at while the lead is used up.
const POLL: Duration = Duration::from_millis(20);
/// A chunk this far behind the loader's place is not read: the loader has read it (the
/// place is its highest page mapped, and a copy of one tensor may touch the tensor's end
/// first — glibc's large memcpy works on several pages apart — so a chunk just behind it
/// may not have been read yet).
const BEHIND: u64 = 256 << 20;
/// The lead while the pod's memory is nearly full (see `Loader::pressed`): measured best on
/// a checkpoint twice the pod's limit (BENCHMARKS.md).
const PRESSED_LEAD: u64 = 64 << 20;
/// Files opened up front (more are opened when reached): well under a pod's 1024 descriptors.
const OPEN_AHEAD: usize = 512;

/// Start the read-ahead beside this process; `linger` without `--init` (see the module doc).
/// A failure to start is a warning: the engine loads without it.
pub(crate) fn spawn(spec: &PrefetchSpec, linger: bool) {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg0("infera-exec")
        .args(["__prefetch", "--parent", &std::process::id().to_string()])
        .args(["--lead", &spec.lead_bytes.to_string(), "--ranges", &spec.ranges.to_string()])
        .args(spec.after_open.then_some("--after-open"))
        .args(spec.with_loader.then_some("--with-loader"))
        .args(linger.then_some("--linger"))
        .arg("--")
        .args(&spec.files)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    match cmd.spawn() {
        Ok(c) => tracing::debug!(code = "prefetch", "read-ahead started (pid {})", c.id()),
        Err(e) => {
            tracing::warn!(code = "prefetch", "cannot start the read-ahead of the weights ({e}): loading without it")
        }
    }
}

/// The most reads at once (a network link is full well before).
pub(crate) const MAX_RANGES: u32 = 64;

/// `infera-exec __prefetch`'s arguments, each bounded (it is a command anyone can run).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Args {
    /// The process whose descendants load the weights (the engine, or init).
    #[arg(long)]
    pub parent: i32,
    /// Bytes read past the loader's place, at most 16 TiB (more than any checkpoint).
    #[arg(long, value_parser = clap::value_parser!(u64).range(..=(16u64 << 40)))]
    pub lead: u64,
    #[arg(long, default_value = "2", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_RANGES)))]
    pub ranges: u32,
    #[arg(long)]
    pub after_open: bool,
    #[arg(long)]
    pub linger: bool,
    /// Start once the engine has opened one of the files (the loader has started).
    #[arg(long)]
    pub with_loader: bool,
    #[arg(last = true)]
    pub files: Vec<PathBuf>,
}

/// The read-ahead process: read, log what it read, then stay until the parent dies when
/// asked to linger. Returns the exit code.
pub(crate) fn main(a: &Args) -> i32 {
    if a.files.len() > infera_facts::model::MAX_FILES {
        eprintln!(
            "error[usage]: {} files: more than a checkpoint has ({} at most)",
            a.files.len(),
            infera_facts::model::MAX_FILES
        );
        return infera_core::error::Exit::Usage.code();
    }
    // The launcher blocks SIGTERM and SIGINT in init mode (to forward them), and a child
    // inherits its mask: unblocked here, so that they end this process as they end any.
    let _ = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    );
    if nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).is_err()
        || nix::unistd::getppid().as_raw() != a.parent
    {
        return 0; // the parent is already gone: nothing to read ahead for
    }
    let started = Instant::now();
    clock();
    let (read, how) = run(a);
    let secs = started.elapsed().as_secs_f64();
    let n = a.files.len();
    tracing::info!(
        code = "prefetch",
        "read {} of {n} file{} ahead of the engine in {secs:.1} s{how}",
        amount(read),
        if n == 1 { "" } else { "s" }
    );
    if a.linger {
        loop {
            nix::unistd::pause();
        }
    }
    0
}

/// Seconds since this process's first look at the clock (the debug log's timeline).
fn clock() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

fn amount(bytes: u64) -> String {
    match bytes {
        r if r < 1 << 30 => format!("{} MiB", r >> 20),
        r => format!("{:.1} GiB", r as f64 / (1u64 << 30) as f64),
    }
}

/// A file of the checkpoint, opened or not yet (its place: the `Place` of the same index).
struct Shard {
    path: PathBuf,
    file: Option<File>,
}

/// Read every file, never more than the lead past the loader; returns the bytes read, and
/// how many reads it had at once at most.
fn run(a: &Args) -> (u64, String) {
    let (mut start, mut shards, mut places) = (0, Vec::new(), Vec::new());
    for (i, p) in a.files.iter().enumerate() {
        // The plan names each file resolved inside the root: a link found here was put there
        // since, and is not followed.
        let Some(m) = std::fs::symlink_metadata(p).ok().filter(|m| m.is_file()) else {
            tracing::warn!(code = "prefetch", "`{}` is not a regular file (or a link): not read ahead", p.display());
            continue;
        };
        let file = (i < OPEN_AHEAD).then(|| open(p)).flatten();
        shards.push(Shard { path: p.clone(), file });
        places.push(Place { id: (m.dev(), m.ino()), start, len: m.len(), request: window(m.dev()) });
        start += m.len();
    }
    let total = start;
    let work = Mutex::new(Work { shard: 0, offset: 0, front: 0, read: 0 });
    let loader = Mutex::new(Loader { parent: a.parent, me: std::process::id() as i32, ..Loader::default() });
    let shards = Mutex::new(shards);
    let pace = Mutex::new(Pace::new(a.ranges.max(1) as usize, total));
    std::thread::scope(|s| {
        for i in 0..a.ranges.max(1) as usize {
            let (places, shards, work, loader, pace) = (&places, &shards, &work, &loader, &pace);
            s.spawn(move || reader(a, i, places, shards, work, loader, pace));
        }
    });
    let read = work.into_inner().map(|w| w.read).unwrap_or(0);
    let how =
        pace.into_inner().map(|p| format!(", at most {} read{} at once", p.peak, if p.peak == 1 { "" } else { "s" }));
    let how = how.unwrap_or_default();
    (read, how)
}

const PAGE: u64 = 4096;

/// The readahead window of the filesystem on `dev` (`/sys/class/bdi/MAJ:MIN/read_ahead_kb`;
/// a FUSE mount's is its own), 128 KiB (the kernel's default) where it cannot be read.
fn window(dev: u64) -> u64 {
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let kb = infera_core::rootfs::system_value(Path::new(&format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb")));
    let kb = kb.and_then(|t| t.parse::<u64>().ok()).unwrap_or(128);
    (kb << 10).clamp(PAGE, CHUNK)
}

/// How many readers work, chosen by what the storage answers.
///
/// - **Ramping.** Two readers first; every `WINDOW` the readers' throughput is measured, and
///   their number doubles while each doubling adds at least a fifth (a network storage's
///   round trips overlap; a local disk needs few), up to `--ranges`; the first doubling that
///   does not pay is undone and the number kept. A window in which the readers waited for the
///   loader (the lead used up) ends the ramp: they are as far ahead as allowed. A wait for the
///   engine to open a file is not one: the window starts again once it is open.
/// - **The loader catching up.** A window in which the loader reached a quarter of the chunks
///   as they were read doubles the readers (up to `--ranges`), whatever the throughput said:
///   a loader at the front issues reads of its own, small ones, which take a network's round
///   trips or a throttled volume's IOPS from the read-ahead (measured: bench/load). During the
///   ramp such a doubling is one of the ramp's: the next window keeps or undoes it.
/// - **Progress.** A line every 30 s or every tenth of the checkpoint, whichever comes later.
struct Pace {
    allowed: usize,
    /// The most readers at work at once so far.
    peak: usize,
    max: usize,
    window: Window,
    /// The throughput at the number of readers before the last doubling.
    before: Option<f64>,
    settled: bool,
    total: u64,
    said: (Instant, u64),
    read: u64,
}

#[derive(Clone, Copy)]
struct Window {
    started: Instant,
    bytes: u64,
    chunks: u32,
    /// Chunks the loader had reached by the time they were read.
    reached: u32,
    waited: bool,
}

impl Window {
    fn new() -> Window {
        Window { started: Instant::now(), bytes: 0, chunks: 0, reached: 0, waited: false }
    }
}

/// How long the readers' throughput is measured before a number of readers is judged.
const WINDOW: Duration = Duration::from_millis(250);
/// Reads in flight at the least: one more than the loader's own, so that a page it faults on
/// is one already requested.
const MIN_READS: usize = 2;
/// How often progress is said, at the least.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

impl Pace {
    fn new(max: usize, total: u64) -> Pace {
        Pace {
            allowed: MIN_READS.min(max),
            peak: MIN_READS.min(max),
            max,
            window: Window::new(),
            before: None,
            settled: max == 1,
            total,
            said: (Instant::now(), 0),
            read: 0,
        }
    }

    /// A chunk read (`bytes`, and whether the loader had reached it), or a wait on the lead.
    fn record(&mut self, bytes: u64, reached: bool, waited: bool, ahead: u64) {
        self.count(bytes, reached, waited);
        if self.window.started.elapsed() >= WINDOW && self.window.chunks > 0 {
            self.judge();
        }
        if let Some(line) = self.progress(ahead, Instant::now()) {
            tracing::info!(code = "prefetch", "{line}");
        }
    }

    /// The readers waited for the engine to open a file: a window that has measured nothing
    /// yet starts now, so that the wait is not taken for the storage's pace (nor for the
    /// lead's, which ends the ramp).
    fn opened(&mut self) {
        if self.window.chunks == 0 {
            self.window = Window::new();
        }
    }

    fn count(&mut self, bytes: u64, reached: bool, waited: bool) {
        self.read += bytes;
        let w = &mut self.window;
        w.bytes += bytes;
        w.chunks += u32::from(bytes > 0);
        w.reached += u32::from(bytes > 0 && reached);
        w.waited |= waited;
    }

    fn judge(&mut self) {
        let w = std::mem::replace(&mut self.window, Window::new());
        self.judge_window(w, w.started.elapsed().as_secs_f64());
    }

    /// What a window of `secs` says about the number of readers.
    fn judge_window(&mut self, w: Window, secs: f64) {
        let rate = w.bytes as f64 / secs.max(1e-3);
        tracing::debug!(
            code = "prefetch-pace",
            "{:.2} s: {} MB/s with {} reading, {} of {} chunks reached by the loader as read, waited on the lead: {}",
            clock(),
            (rate / 1e6) as u64,
            self.allowed,
            w.reached,
            w.chunks,
            w.waited
        );
        if w.waited {
            self.settled = true;
            return;
        }
        // The loader reached a quarter of the chunks as they were read: it is at the front,
        // issuing reads of its own (each a round trip, or one of a throttled volume's IOPS).
        // More reads in flight keep it on pages already requested.
        // During the ramp it is one of its doublings, judged by the next window like any other.
        if w.reached * 4 >= w.chunks && self.allowed < self.max {
            if !self.settled {
                self.before = Some(rate);
            }
            self.allowed = (self.allowed * 2).min(self.max);
            self.peak = self.peak.max(self.allowed);
            return;
        }
        if self.settled {
            return;
        }
        match self.before {
            Some(before) if rate < before * 1.2 => {
                self.allowed = (self.allowed / 2).max(MIN_READS);
                self.settled = true;
            }
            _ if self.allowed >= self.max => self.settled = true,
            _ => {
                self.before = Some(rate);
                self.allowed = (self.allowed * 2).min(self.max);
                self.peak = self.peak.max(self.allowed);
            }
        }
    }

    /// A line at `now` when `PROGRESS_EVERY` and a tenth of the checkpoint have both passed
    /// since the last: every 30 s or every tenth, whichever is later.
    fn progress(&mut self, ahead: u64, now: Instant) -> Option<String> {
        let (at, bytes) = self.said;
        let since = now.saturating_duration_since(at);
        if since < PROGRESS_EVERY || (self.read - bytes) * 10 < self.total {
            return None;
        }
        let rate = (self.read - bytes) as f64 / since.as_secs_f64() / 1e6;
        self.said = (now, self.read);
        Some(format!(
            "read {} of {} ({:.0} %) at {rate:.0} MB/s, {} ahead of the engine's loader, {} read{} at once",
            amount(self.read),
            amount(self.total),
            self.read as f64 * 100.0 / self.total.max(1) as f64,
            amount(ahead),
            self.allowed,
            if self.allowed == 1 { "" } else { "s" }
        ))
    }
}

/// A regular file, read-only, opened without blocking (a FIFO in the model directory) and
/// without following a link as its last component.
fn open(p: &Path) -> Option<File> {
    let flags = nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(flags).open(p).ok()?;
    f.metadata().is_ok_and(|m| m.is_file()).then_some(f)
}

/// Where a file is in the checkpoint, and which file it is.
struct Place {
    id: (u64, u64),
    start: u64,
    len: u64,
    /// What one call queues on FUSE: the filesystem's readahead window.
    request: u64,
}

/// The next chunk to hand out (a file and an offset; `front` the same in the whole
/// checkpoint), and what has been read.
struct Work {
    shard: usize,
    offset: u64,
    front: u64,
    read: u64,
}

/// A chunk to read: the file's index, the file, the offset in it, the length.
struct Chunk {
    index: usize,
    file: File,
    offset: u64,
    len: u64,
    /// Its end in the whole checkpoint.
    end: u64,
}

/// Reader `i`: while the pace lets it work, take the next chunk, wait until the lead allows
/// it, read it (unless the loader got there first), and tell the pace.
fn reader(
    a: &Args,
    i: usize,
    places: &[Place],
    shards: &Mutex<Vec<Shard>>,
    work: &Mutex<Work>,
    loader: &Mutex<Loader>,
    pace: &Mutex<Pace>,
) {
    let mut buf = vec![0u8; PIECE];
    loop {
        match pace.lock().map(|p| i < p.allowed) {
            Ok(true) => {}
            Ok(false) => {
                // Not at work: while there is work, until the pace lets this reader in.
                if work.lock().map_or(true, |w| w.shard >= places.len()) {
                    return;
                }
                std::thread::sleep(POLL);
                continue;
            }
            Err(_) => return,
        }
        let Some(c) = next_chunk(places, shards, work) else { return };
        // `waited`: on the lead (as far ahead as allowed); `for_open`: on the engine's open.
        let (mut behind, mut waited, mut for_open) = (false, false, false);
        loop {
            let Ok(mut l) = loader.lock() else { return };
            let front = work.lock().map(|w| w.front).unwrap_or(0);
            l.refresh(places, front + a.lead);
            if c.end + BEHIND <= l.position {
                behind = true;
                break;
            }
            let lead = if l.pressed { a.lead.min(PRESSED_LEAD) } else { a.lead };
            let opened = match (a.after_open, a.with_loader) {
                (true, _) => l.opened.is_some_and(|o| o >= c.index),
                (false, true) => l.opened.is_some(),
                (false, false) => true,
            };
            if c.end <= l.position + lead && opened {
                break;
            }
            drop(l);
            waited |= opened;
            for_open |= !opened;
            std::thread::sleep(POLL);
        }
        if for_open {
            if let Ok(mut p) = pace.lock() {
                p.opened();
            }
        }
        let pressed = loader.lock().is_ok_and(|l| l.pressed);
        let done = if behind { 0 } else { fetch(a, &c, places[c.index].request, pressed, &mut buf) };
        let position = loader.lock().map(|mut l| {
            l.refresh(places, c.end);
            l.position
        });
        let position = position.unwrap_or(0);
        if let Ok(mut w) = work.lock() {
            w.read += done;
        }
        let ahead = work.lock().map(|w| w.front.saturating_sub(position)).unwrap_or(0);
        if let Ok(mut p) = pace.lock() {
            p.record(done, position > c.end - c.len, waited, ahead);
        }
    }
}

/// Bring a chunk into the page cache: queued on FUSE, read elsewhere; read again when the
/// pod's memory is nearly full. The bytes brought in.
fn fetch(a: &Args, c: &Chunk, request: u64, pressed: bool, buf: &mut [u8]) -> u64 {
    let done = match a.after_open {
        true => queue_range(c, request, buf),
        false => read_range(&c.file, c.offset, c.len, buf),
    };
    if pressed {
        // Read again, from the cache: a page read twice is on the active list, kept before
        // the inactive pages the loader has mapped and read (the kernel activates those
        // only when it scans them), so what is read ahead is not evicted first. Pages
        // queued have not been read once yet.
        for _ in 0..if a.after_open { 2 } else { 1 } {
            read_range(&c.file, c.offset, c.len, buf);
        }
    }
    done
}

/// Queue a chunk's reads with the kernel (`POSIX_FADV_WILLNEED`, `request` bytes a call: the
/// kernel reads no more than the file's readahead window for one), then wait for its last
/// page; the bytes read. On FUSE a read through a thread asks for 128 KiB at a time and
/// waits for each, which leaves the kernel's queue of background requests (12 by default)
/// part empty; queued, the requests wait in that queue in the loader's order and the link
/// stays busy, and nothing is copied to this process (measured: BENCHMARKS.md).
fn queue_range(c: &Chunk, request: u64, buf: &mut [u8]) -> u64 {
    use std::os::fd::AsRawFd;
    let advice = nix::fcntl::PosixFadviseAdvice::POSIX_FADV_WILLNEED;
    let mut at = 0;
    while at < c.len {
        let n = (c.len - at).min(request);
        if nix::fcntl::posix_fadvise(c.file.as_raw_fd(), (c.offset + at) as i64, n as i64, advice).is_err() {
            return read_range(&c.file, c.offset, c.len, buf);
        }
        at += n;
    }
    let last = (c.len - 1) & !(PAGE - 1);
    match read_range(&c.file, c.offset + last, c.len - last, buf) {
        0 => 0,
        _ => c.len,
    }
}

/// Read `len` bytes at `offset` into the page cache (they land in `buf` and are dropped).
fn read_range(file: &File, offset: u64, len: u64, buf: &mut [u8]) -> u64 {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(buf.len() as u64) as usize;
        match file.read_at(&mut buf[..n], offset + done) {
            Ok(0) => break,
            Ok(k) => done += k as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    done
}

fn next_chunk(places: &[Place], shards: &Mutex<Vec<Shard>>, work: &Mutex<Work>) -> Option<Chunk> {
    let mut w = work.lock().ok()?;
    let mut s = shards.lock().ok()?;
    loop {
        let (sh, place) = (s.get_mut(w.shard)?, &places[w.shard]);
        if w.offset >= place.len {
            (w.shard, w.offset) = (w.shard + 1, 0);
            continue;
        }
        if sh.file.is_none() {
            sh.file = open(&sh.path);
        }
        let Some(file) = sh.file.as_ref().and_then(|f| f.try_clone().ok()) else {
            (w.shard, w.offset) = (w.shard + 1, 0);
            continue;
        };
        let len = (place.len - w.offset).min(CHUNK);
        let c = Chunk { index: w.shard, file, offset: w.offset, len, end: place.start + w.offset + len };
        w.offset += len;
        w.front = c.end;
        return Some(c);
    }
}

/// Where the engine's loader is, as seen from /proc.
#[derive(Default)]
struct Loader {
    parent: i32,
    me: i32,
    /// The furthest byte of the checkpoint the loader has reached.
    position: u64,
    /// The last file (index) it has had open.
    opened: Option<usize>,
    /// The pod's memory cgroup is nearly full: what the loader has read is still cached
    /// (mapped by it, so the kernel keeps it before what was read ahead), and a long lead
    /// would be evicted before the loader gets to it.
    pressed: bool,
    last: Option<Instant>,
}

impl Loader {
    /// Look again, at most every POLL: each process of the engine's tree, each file of the
    /// checkpoint it has mapped or open, up to `upto` in the checkpoint (further does not
    /// change what may be read).
    fn refresh(&mut self, places: &[Place], upto: u64) {
        if self.last.is_some_and(|t| t.elapsed() < POLL) {
            return;
        }
        self.last = Some(Instant::now());
        let mem = infera_facts::storage::pod_memory(|p| system(p, infera_core::rootfs::SYSTEM_FILE_LIMIT));
        self.pressed = mem.limit.is_some() && mem.budget().is_some_and(|room| room < 2 * PRESSED_LEAD);
        for pid in crate::procs::descendants(self.parent, self.me) {
            for (i, at) in seen(pid, places, self.position, upto) {
                if self.opened.is_none_or(|o| o < i) {
                    tracing::debug!(code = "prefetch", "the engine opened file {} at {:.2} s", i + 1, clock());
                }
                self.opened = Some(self.opened.map_or(i, |o| o.max(i)));
                if let Some(at) = at {
                    self.position = self.position.max(places[i].start + at);
                }
            }
        }
    }
}

/// The checkpoint files `pid` has mapped or open: (index, how far into it the process has
/// read, when that can be seen), looking between `from` and `upto` of the checkpoint.
fn seen(pid: i32, places: &[Place], from: u64, upto: u64) -> Vec<(usize, Option<u64>)> {
    let find = |dev: u64, ino: u64| places.iter().position(|p| p.id == (dev, ino));
    let mut out = Vec::new();
    let maps = system(Path::new(&format!("/proc/{pid}/maps")), infera_core::rootfs::MAPS_LIMIT).unwrap_or_default();
    let pagemap = File::open(format!("/proc/{pid}/pagemap")).ok();
    for m in maps.lines().filter_map(Mapping::parse) {
        let Some(i) = find(m.dev, m.ino) else { continue };
        let p = &places[i];
        let window = (from.saturating_sub(p.start).min(p.len), upto.saturating_sub(p.start).min(p.len));
        out.push((i, pagemap.as_ref().and_then(|pm| m.highest_present(pm, window))));
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return out };
    for fd in fds.flatten() {
        let Ok(m) = std::fs::metadata(fd.path()) else { continue };
        let Some(i) = find(m.dev(), m.ino()) else { continue };
        let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
        let info = system(Path::new(&info), infera_core::rootfs::SYSTEM_FILE_LIMIT);
        let pos = info.and_then(|t| t.lines().find_map(|l| l.strip_prefix("pos:")?.trim().parse().ok()));
        out.push((i, pos.filter(|p| *p > 0)));
    }
    out
}

/// A system file as [`infera_core::rootfs::read_system`] reads it, None when it cannot be.
fn system(p: &Path, limit: u64) -> Option<String> {
    infera_core::rootfs::read_system(p, limit).ok()
}

/// A line of /proc/PID/maps for a file: its addresses, file offset and identity.
#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    dev: u64,
    ino: u64,
}

impl Mapping {
    /// `7f..-7f.. r--s 00000000 08:01 1234 /models/m/model-00001-of-00004.safetensors`
    fn parse(line: &str) -> Option<Mapping> {
        let mut f = line.split_ascii_whitespace();
        let (start, end) = f.next()?.split_once('-')?;
        let _perms = f.next()?;
        let offset = u64::from_str_radix(f.next()?, 16).ok()?;
        let (major, minor) = f.next()?.split_once(':')?;
        let ino = f.next()?.parse().ok().filter(|i| *i != 0)?;
        let dev = nix::sys::stat::makedev(u64::from_str_radix(major, 16).ok()?, u64::from_str_radix(minor, 16).ok()?);
        Some(Mapping {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            offset,
            dev,
            ino,
        })
    }

    /// How far into the file the process has touched this mapping between the file offsets
    /// `window`: one past the highest page the page tables hold (bit 63 of its pagemap
    /// entry), scanned from the top down in 2 MiB steps. None when nothing there is mapped
    /// in or the pagemap cannot be read.
    fn highest_present(&self, pagemap: &File, window: (u64, u64)) -> Option<u64> {
        const STEP: u64 = 512; // pages: 2 MiB
                               // Blocks without a present page before the scan ends: a loader that copies tensors in
                               // an order other than the file's skips a few; beyond this it has not been.
        const GAP: u32 = 16;
        let addr = |off: u64| (self.start + off.saturating_sub(self.offset)).clamp(self.start, self.end) / PAGE;
        let (mut lo, hi) = (addr(window.0), addr(window.1).max(addr(window.0)));
        let base = self.start / PAGE;
        let mut entries = vec![0u8; (STEP * 8) as usize];
        // Upward from where the loader was: the cost is what it read since, not the lead.
        let (mut found, mut empty) = (None, 0);
        while lo < hi && empty < GAP {
            let top = (lo + STEP).min(hi);
            let n = ((top - lo) * 8) as usize;
            pagemap.read_exact_at(&mut entries[..n], lo * 8).ok()?;
            match entries[..n].chunks_exact(8).rposition(|e| e[7] & 0x80 != 0) {
                Some(k) => {
                    found = Some(self.offset + (lo + k as u64 + 1 - base) * PAGE);
                    empty = 0;
                }
                None => empty += 1,
            }
            lo = top;
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The readers double while each doubling adds a fifth; the first that does not is undone;
    /// waiting on the lead ends the ramp; a loader that catches up adds readers, during the
    /// ramp as one of its doublings.
    #[test]
    fn the_number_of_readers_follows_the_storage() {
        let w = |mb: u64, reached: u32, waited: bool| Window {
            started: Instant::now(),
            bytes: mb * 1_000_000,
            chunks: 10,
            reached,
            waited,
        };
        let mut p = Pace::new(16, 1 << 40);
        for (mb, want) in [(100, 4), (190, 8), (200, 4)] {
            p.judge_window(w(mb, 0, false), 1.0);
            assert_eq!(p.allowed, want, "after {mb} MB/s");
        }
        assert!(p.settled);
        p.judge_window(w(300, 2, false), 1.0);
        assert_eq!((p.allowed, p.settled), (4, true), "ahead: kept");
        p.judge_window(w(300, 3, false), 1.0);
        assert_eq!((p.allowed, p.peak), (8, 8), "the loader caught up: more in flight");
        p.judge_window(w(300, 0, false), 1.0);
        assert_eq!(p.allowed, 8, "kept");
        let mut r = Pace::new(16, 1 << 40);
        r.judge_window(w(100, 3, false), 1.0);
        assert_eq!((r.allowed, r.settled), (4, false), "caught up during the ramp: it goes on");
        r.judge_window(w(190, 0, false), 1.0);
        assert_eq!(r.allowed, 8, "the doubling paid");
        r.judge_window(w(200, 0, false), 1.0);
        assert_eq!((r.allowed, r.settled), (4, true), "this one did not: undone");
        let mut q = Pace::new(16, 1 << 40);
        q.judge_window(w(900, 0, true), 1.0);
        assert_eq!((q.allowed, q.settled), (2, true), "as far ahead as the lead allows");
    }

    /// A wait for the engine's first open is neither the storage's pace nor the lead: the
    /// window starts again once the file is open, and the ramp goes on.
    #[test]
    fn a_wait_for_the_open_is_not_measured() {
        let mut p = Pace::new(16, 1 << 40);
        let born = Instant::now().checked_sub(Duration::from_secs(1)).unwrap();
        p.window.started = born;
        p.opened();
        assert!(p.window.started > born, "an empty window starts again at the open");
        p.record(CHUNK, false, false, 0);
        let started = p.window.started;
        p.opened();
        assert_eq!(p.window.started, started, "a window that measured a chunk is kept");
        p.judge_window(p.window, 0.01);
        assert_eq!((p.allowed, p.settled), (4, false), "not settled: the ramp goes on");
    }

    /// A progress line every 30 s or every tenth of the checkpoint, whichever is later: on a
    /// slow read, every 30 s; on a fast one, every tenth.
    #[test]
    fn progress_every_30_s_or_tenth_whichever_is_later() {
        const GIB: u64 = 1 << 30;
        let mut p = Pace::new(8, 100 * GIB);
        let t0 = p.said.0;
        let at = |s: u64| t0 + Duration::from_secs(s);
        p.count(20 * GIB, false, false);
        assert_eq!(p.progress(GIB, at(29)), None, "a fifth read, but before 30 s");
        let line = p.progress(GIB, at(30)).unwrap();
        assert_eq!(
            line,
            "read 20.0 GiB of 100.0 GiB (20 %) at 716 MB/s, 1.0 GiB ahead of the engine's loader, 2 reads at once"
        );
        p.count(5 * GIB, false, false);
        assert_eq!(p.progress(GIB, at(90)), None, "a minute later, but only a twentieth more");
        p.count(5 * GIB, false, false);
        assert!(p.progress(GIB, at(91)).unwrap().starts_with("read 30.0 GiB of 100.0 GiB (30 %)"));
    }

    #[test]
    fn a_maps_line_of_a_file() {
        let m = Mapping::parse("7f0000000000-7f0040000000 r--s 00001000 fd:01 1234   /m/model-00001.safetensors");
        assert_eq!(
            m,
            Some(Mapping {
                start: 0x7f00_0000_0000,
                end: 0x7f00_4000_0000,
                offset: 0x1000,
                dev: nix::sys::stat::makedev(0xfd, 1),
                ino: 1234
            })
        );
        assert_eq!(Mapping::parse("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]"), None, "not a file");
    }

    /// This process maps a 64 MiB file (not cached) and touches its first page and one at
    /// 20 MiB: the highest page present is seen through its own pagemap, to the size of a
    /// page-cache folio (the kernel maps a whole large folio on a fault).
    #[test]
    fn the_highest_page_touched_is_seen() {
        use std::io::Write;
        const MIB: u64 = 1 << 20;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.safetensors");
        let mut w = std::fs::File::create(&p).unwrap();
        w.write_all(&vec![1u8; 64 << 20]).unwrap();
        w.sync_all().unwrap();
        let f = File::open(&p).unwrap();
        nix::fcntl::posix_fadvise(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        )
        .unwrap();
        // SAFETY: a private read-only map of a file this test owns and does not change.
        let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
        let ino = f.metadata().unwrap().ino();
        let mine = || {
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            maps.lines().filter_map(Mapping::parse).find(|m| m.ino == ino).unwrap()
        };
        let pagemap = File::open("/proc/self/pagemap").unwrap();
        let all = (0, 64 * MIB);
        assert_eq!(mine().highest_present(&pagemap, all), None, "nothing touched yet");
        assert_eq!(map[0] + map[(20 * MIB) as usize], 2);
        let seen = mine().highest_present(&pagemap, all).unwrap();
        assert!((20 * MIB + 4096..=24 * MIB).contains(&seen), "{seen}");
        assert_eq!(mine().highest_present(&pagemap, (0, 10 * MIB)).map(|s| s <= 4 * MIB), Some(true), "the first page");
        assert_eq!(mine().highest_present(&pagemap, (30 * MIB, 64 * MIB)), None, "nothing above");
    }
}
