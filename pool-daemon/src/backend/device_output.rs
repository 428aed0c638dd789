//! Device `printf` output, delivered to the client whose kernels printed it.
//!
//! A driver keeps what kernels print in a buffer per context and writes it to the process's
//! standard output when the program launches, synchronizes, copies memory with a blocking copy,
//! loads or unloads a module, or destroys the context (CUDA C++ Programming Guide, "Formatted
//! Output"). In the daemon that process is the daemon: a tenant's kernel output would land in the
//! daemon's log, interleaved with every other tenant's, and the client would never see it.
//!
//! So `gpupool daemon` points its standard output at a pipe ([`install`]) and brackets each
//! backend call that may flush ([`flushes`], checked by `call!` at compile time) on a context
//! that may print ([`note_printer`]: a module referring to `vprintf` was loaded into it) with a
//! [`Window`]: one window at a time, so the bytes that reach the pipe while it is open are the
//! flush of that call, on that context. Anything written while no window is open (nothing
//! should be) goes on to the daemon's original standard output.
//!
//! A tenant's sessions share its backend context on a device, and with it the driver's buffer,
//! so a flush is the context's, not the calling session's. It goes to the session that loaded a
//! printing module into that context ([`note_printer`]) when there is one; when several did, to
//! the caller if it is one of them, else to the longest-lived. Each session's share waits in its
//! mailbox until the reply to its next request at which CUDA writes output ([`take_pending`];
//! the session decides which). So a tenant's process whose kernels print sees
//! its lines even when a sibling process's synchronization or end flushed them, and two of a
//! tenant's processes printing at the same time may see each other's lines (never another
//! tenant's). What a session's own end flushes with no other printer left goes nowhere, as it
//! would for a process that exits without synchronizing.
//!
//! Owns: the pipe, its reader thread and the windows. Must not: decide what a client may see
//! beyond "what its own context's flush wrote", or hold a window across anything but one
//! backend call (other printing contexts' flushing calls wait for it).

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// What a session keeps of its kernels' output between two replies: beyond this, the oldest
/// bytes go, as a driver's circular buffer overwrites its oldest records.
pub const MAX_PENDING: usize = 16 << 20;

struct Capture {
    /// Held by the open window.
    window: Mutex<()>,
    /// The pipe's read end (non-blocking), read only while `pipe` is held.
    read: OwnedFd,
    pipe: Mutex<Pipe>,
    original: OwnedFd,
    /// Backend contexts a module that may print was loaded into.
    printing: Mutex<HashSet<usize>>,
    printing_count: AtomicUsize,
    /// Live sessions that loaded a printing module, by backend context, in arrival order.
    printers: Mutex<HashMap<usize, Vec<u64>>>,
    /// What each live session is owed, until its next reply.
    mailboxes: Mutex<HashMap<u64, Vec<u8>>>,
}

struct Pipe {
    /// Read while a window is open: that window's.
    caught: Vec<u8>,
    open: bool,
}

static CAPTURE: OnceLock<Capture> = OnceLock::new();

thread_local! {
    /// The session this thread serves, if any.
    static SESSION: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Points standard output at a pipe read by a thread of its own. Called once by `gpupool daemon`
/// before any session starts; later calls do nothing.
pub fn install() -> std::io::Result<()> {
    if CAPTURE.get().is_some() {
        return Ok(());
    }
    use rustix::fs::{Mode, OFlags};
    use rustix::io::fcntl_dupfd_cloexec;
    // Kept at 3 or above, so that replacing fd 1 below never touches it.
    let original = match fcntl_dupfd_cloexec(rustix::stdio::stdout(), 3) {
        Ok(fd) => fd,
        Err(_) => {
            // Started with fd 1 closed: what no window catches goes nowhere. The null device
            // takes fd 1 meanwhile, so the pipe cannot.
            let null = rustix::fs::open("/dev/null", OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
            let kept = fcntl_dupfd_cloexec(&null, 3)?;
            if std::os::fd::AsRawFd::as_raw_fd(&null) == 1 {
                // Fd 1 stays open until the pipe replaces it below.
                let _ = std::os::fd::IntoRawFd::into_raw_fd(null);
            }
            kept
        }
    };
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    rustix::fs::fcntl_setfl(&read, rustix::fs::OFlags::NONBLOCK)?;
    // A bigger pipe means fewer wake-ups of the reader while a large flush is written.
    let _ = rustix::pipe::fcntl_setpipe_size(&read, 1 << 20);
    // Standard output becomes the pipe's write end (the original is kept above).
    rustix::stdio::dup2_stdout(&write)?;
    drop(write);
    let capture = Capture {
        window: Mutex::new(()),
        read,
        pipe: Mutex::new(Pipe { caught: Vec::new(), open: false }),
        original,
        printing: Mutex::new(HashSet::new()),
        printing_count: AtomicUsize::new(0),
        printers: Mutex::new(HashMap::new()),
        mailboxes: Mutex::new(HashMap::new()),
    };
    if CAPTURE.set(capture).is_err() {
        return Ok(());
    }
    std::thread::Builder::new().name("device-output".into()).spawn(read_forever)?;
    Ok(())
}

/// The reader: keeps the pipe from filling while a flush is written, and passes on what is
/// written outside any window.
fn read_forever() {
    let Some(c) = CAPTURE.get() else { return };
    loop {
        let mut fds = [rustix::event::PollFd::new(&c.read, rustix::event::PollFlags::IN)];
        let ready = rustix::event::poll(&mut fds, None);
        if ready.is_err() {
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        let stray = {
            let mut p = lock(&c.pipe);
            let mut got = std::mem::take(&mut p.caught);
            drain(&c.read, &mut got);
            if p.open {
                p.caught = got;
                Vec::new()
            } else {
                got
            }
        };
        if !stray.is_empty() {
            write_all(&c.original, &stray);
        } else if fds[0].revents().intersects(rustix::event::PollFlags::HUP | rustix::event::PollFlags::ERR) {
            // Every write end closed (fd 1 closed by someone): nothing will come; do not spin.
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Capture {
    /// Everything read or readable now, taken; a window is open from here on (`open`) or not.
    fn take_caught(&self, open: bool) -> Vec<u8> {
        let mut p = lock(&self.pipe);
        let mut got = std::mem::take(&mut p.caught);
        drain(&self.read, &mut got);
        p.open = open;
        got
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads everything the pipe holds now.
fn drain(fd: &OwnedFd, into: &mut Vec<u8>) {
    let mut buf = [0u8; 64 << 10];
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => return,
            Ok(n) => into.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
    }
}

/// Passes stray bytes on to the original standard output, as long as it takes them within a
/// second: a reader that stopped reading must not stop this thread, which keeps the pipe drained.
fn write_all(fd: impl AsFd, mut bytes: &[u8]) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    while !bytes.is_empty() {
        let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
        if !matches!(poll(&mut fds, Some(&Timespec { tv_sec: 1, tv_nsec: 0 })), Ok(n) if n > 0) {
            tracing::debug!(bytes = bytes.len(), "the daemon's standard output takes nothing: dropped");
            return;
        }
        // At most PIPE_BUF at a time: writable means at least that much room, so this never blocks.
        match rustix::io::write(&fd, &bytes[..bytes.len().min(4096)]) {
            Ok(0) => return,
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
    }
}

/// Backend calls that write a context's kernel output (CUDA C++ Programming Guide, "Formatted
/// Output"): kernel launches, synchronization, blocking copies, module loads and unloads,
/// context destruction. Evaluated at compile time for each `call!`.
pub const fn flushes(name: &str) -> bool {
    const NAMES: [&str; 14] = [
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuModuleLoadData",
        "cuModuleLoadDataEx",
        "cuModuleLoadFatBinary",
        "cuModuleUnload",
        "cuLibraryLoadData",
        "cuLibraryUnload",
        "cuCtxDestroy_v2",
        "cuDevicePrimaryCtxReset_v2",
    ];
    let n = name.as_bytes();
    let mut i = 0;
    while i < NAMES.len() {
        if same(n, NAMES[i].as_bytes()) {
            return true;
        }
        i += 1;
    }
    // Every blocking copy: cuMemcpy* without "Async".
    starts_with(n, b"cuMemcpy") && !contains(n, b"Async")
}

const fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && starts_with(a, b)
}

const fn starts_with(a: &[u8], prefix: &[u8]) -> bool {
    if a.len() < prefix.len() {
        return false;
    }
    let mut i = 0;
    while i < prefix.len() {
        if a[i] != prefix[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn contains(a: &[u8], needle: &[u8]) -> bool {
    let mut i = 0;
    while i + needle.len() <= a.len() {
        let mut j = 0;
        while j < needle.len() && a[i + j] == needle[j] {
            j += 1;
        }
        if j == needle.len() {
            return true;
        }
        i += 1;
    }
    false
}

/// Whether kernels of a module image may print: it names `vprintf`, in PTX text, a cubin, or any
/// entry of a fat binary (compressed ones decompressed: nvcc compresses by default). An image
/// that cannot be read that far is taken to print.
pub fn may_print(image: &[u8]) -> bool {
    gpupool_abi::fatbin::names(image, b"vprintf").unwrap_or(true)
}

/// Context `ctx` (a backend `CUcontext`) loaded a module that may print: its flushing calls get
/// windows from now on.
fn mark_printing(ctx: usize) {
    let Some(c) = CAPTURE.get() else { return };
    if lock(&c.printing).insert(ctx) {
        c.printing_count.fetch_add(1, Ordering::AcqRel);
        tracing::debug!(ctx, "a module that may print was loaded: the context's flushing calls are bracketed");
    }
}

/// Waits until `query` (a `cuStreamQuery` or `cuEventQuery`) answers anything but
/// `CUDA_ERROR_NOT_READY`: queries flush nothing, so a wait this way needs no window. Yields for
/// the first 50 us (short work ends within a sleep's granularity), then sleeps 50 us doubling up
/// to 1 ms between queries.
pub fn wait_by_queries(query: impl Fn() -> Result<(), super::CudaError>) {
    const NOT_READY: u32 = 600;
    let pending = || matches!(query(), Err(super::CudaError::Call { code: NOT_READY, .. }));
    let t0 = std::time::Instant::now();
    let mut pause = std::time::Duration::from_micros(50);
    while pending() {
        if t0.elapsed() < std::time::Duration::from_micros(50) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(1));
        }
    }
}

/// Whether kernels in backend context `ctx` may print.
pub fn may_print_in(ctx: usize) -> bool {
    CAPTURE.get().is_some_and(|c| c.printing_count.load(Ordering::Acquire) > 0 && lock(&c.printing).contains(&ctx))
}

/// Context `ctx` was destroyed.
pub fn forget_context(ctx: usize) {
    let Some(c) = CAPTURE.get() else { return };
    if lock(&c.printing).remove(&ctx) {
        c.printing_count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// While it lives, the thread serves session `id` (its requests, then its cleanup): the session
/// has a mailbox, and its calls' flushes count as its own.
pub struct SessionThread(u64);

impl SessionThread {
    pub fn start(id: u64) -> SessionThread {
        SESSION.with(|s| s.set(Some(id)));
        if let Some(c) = CAPTURE.get() {
            lock(&c.mailboxes).insert(id, Vec::new());
        }
        SessionThread(id)
    }
}

impl SessionThread {
    /// The session's client is gone: its cleanup's flushes go to another printing session of
    /// the context, if there is one (the lines may be that session's), else nowhere.
    pub fn client_gone(&self) {
        let Some(c) = CAPTURE.get() else { return };
        for sessions in lock(&c.printers).values_mut() {
            sessions.retain(|&s| s != self.0);
        }
    }
}

impl Drop for SessionThread {
    fn drop(&mut self) {
        SESSION.with(|s| s.set(None));
        self.client_gone();
        if let Some(c) = CAPTURE.get() {
            lock(&c.mailboxes).remove(&self.0);
        }
    }
}

/// Session `id` loaded a module that may print into backend context `ctx`.
pub fn note_printer(ctx: usize, id: u64) {
    mark_printing(ctx);
    let Some(c) = CAPTURE.get() else { return };
    let mut printers = lock(&c.printers);
    let sessions = printers.entry(ctx).or_default();
    if !sessions.contains(&id) {
        sessions.push(id);
    }
}

/// What the calling thread's session is owed since it last asked.
pub fn take_pending() -> Vec<u8> {
    let (Some(c), Some(id)) = (CAPTURE.get(), SESSION.with(Cell::get)) else { return Vec::new() };
    lock(&c.mailboxes).get_mut(&id).map(std::mem::take).unwrap_or_default()
}

/// The open window of one flushing call; closed (and what it caught handed on) when dropped.
pub struct Window {
    capture: &'static Capture,
    ctx: usize,
    call: &'static str,
    _one_at_a_time: MutexGuard<'static, ()>,
}

/// A window for backend call `name` when the calling thread's current context (`current`, asked
/// only when some context may print) may print; `None` otherwise, at the cost of an atomic load.
pub fn window(name: &'static str, current: impl FnOnce() -> usize) -> Option<Window> {
    let c = CAPTURE.get()?;
    if c.printing_count.load(Ordering::Acquire) == 0 {
        return None;
    }
    let ctx = current();
    let destroys = matches!(name, "cuCtxDestroy_v2" | "cuDevicePrimaryCtxReset_v2");
    if !destroys && !may_print_in(ctx) {
        return None;
    }
    let guard = lock(&c.window);
    // Anything written before this window is not its call's.
    let stray = c.take_caught(true);
    if !stray.is_empty() {
        write_all(&c.original, &stray);
    }
    Some(Window { capture: c, ctx, call: name, _one_at_a_time: guard })
}

impl Drop for Window {
    fn drop(&mut self) {
        let c = self.capture;
        // A driver that writes through the C library's buffered stdout has written it all now.
        // SAFETY: fflush(NULL) flushes every open output stream; it takes no pointer of ours.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        let caught = c.take_caught(false);
        if caught.is_empty() {
            return;
        }
        let caller = SESSION.with(Cell::get);
        let owner = {
            let printers = lock(&c.printers);
            let sessions = printers.get(&self.ctx).map(Vec::as_slice).unwrap_or_default();
            match (sessions, caller) {
                ([only], _) => Some(*only),
                (_, Some(me)) if sessions.contains(&me) => Some(me),
                ([first, ..], _) => Some(*first),
                ([], _) => caller,
            }
        };
        tracing::trace!(bytes = caught.len(), call = self.call, ?caller, ?owner, "device printf output caught");
        let mut mailboxes = lock(&c.mailboxes);
        match owner.and_then(|o| mailboxes.get_mut(&o)) {
            Some(mailbox) => keep(mailbox, &caught),
            None => {
                tracing::debug!(bytes = caught.len(), "device printf output with no live session to take it: dropped")
            }
        }
    }
}

/// Appends `more` to `to`, dropping the oldest bytes beyond [`MAX_PENDING`].
fn keep(to: &mut Vec<u8>, more: &[u8]) {
    to.extend_from_slice(more);
    if to.len() > MAX_PENDING {
        let cut = to.len() - MAX_PENDING;
        tracing::warn!(
            dropped = cut,
            "device printf output not yet delivered exceeds {MAX_PENDING} bytes: the oldest is dropped"
        );
        to.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flushing_calls_are_the_documented_ones() {
        for name in ["cuLaunchKernel", "cuStreamSynchronize", "cuMemcpyDtoH_v2", "cuMemcpy3D_v2", "cuMemcpyPeer"] {
            assert!(flushes(name), "{name}");
        }
        for name in [
            "cuMemcpyDtoHAsync_v2",
            "cuStreamQuery",
            "cuEventQuery",
            "cuLaunchHostFunc",
            "cuLaunch",
            "cuMemcpy2DAsync_v2",
        ] {
            assert!(!flushes(name), "{name}");
        }
    }

    #[test]
    fn images_that_may_print() {
        assert!(may_print(b".extern .func (.param .b32 r) vprintf (.param .b64 a, .param .b64 b);\0"));
        assert!(!may_print(b".visible .entry k() { ret; }\0"));
        // A fat binary whose entry cannot be read (its header cut short) is taken to print.
        let mut fat = 0xBA55_ED50u32.to_le_bytes().to_vec();
        fat.extend_from_slice(&[1, 0, 16, 0]);
        fat.extend_from_slice(&100u64.to_le_bytes());
        fat.extend_from_slice(&[0u8; 100]);
        assert!(may_print(&fat));
    }
}
