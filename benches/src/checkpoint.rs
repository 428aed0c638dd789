//! `gpupool-bench checkpoint [--quick|--full]`: what `gpupool checkpoint` (README.md,
//! "Checkpoints") costs, against baselines from the same run. The release daemon serves one
//! simulated GPU; a client fills 1 GiB (`--quick` 256 MiB; `--full` adds 8 GiB when the host has
//! the memory) in 32 MiB allocations, each memset, and then, per round:
//!
//! - **Full checkpoint bandwidth**: the bytes over the daemon's own timing of the write (its
//!   reply's `write_ns`: copies, file writes, fsyncs, manifest), next to a plain
//!   `cuMemcpyDtoH_v2` of the same bytes by the same release simulator in this process, 64 MiB
//!   at a time, each written to one file, fsynced at the end (the baseline), and that copy alone.
//! - **Pause**: while the checkpoint is written a client thread keeps making small calls on the
//!   same session (4-byte device-to-host copies); its longest call against the median of its
//!   calls before the checkpoint.
//! - **Restore bandwidth**: a last full checkpoint, the daemon killed, and a new daemon started
//!   with `--restore` on it (once per round): the bytes over its own timing of the pass (the
//!   status document's `restore.ns`: manifests, mapping, file reads, copies), next to reading the
//!   baseline's file back and copying it host-to-device in this process.
//! - **Incremental**: 1% of the memory is then changed by host-to-device copies (1 MiB each,
//!   spread over the allocations) and the session checkpointed to the same directory again: the
//!   bytes it wrote and its time against the full one's.

use crate::evict::{Client, Daemon, LOW_TOKEN, median};
use crate::pool::build_pool;
use crate::sim::{filled_buffer, ok};
use gpupool_e2e::call;
use gpupool_protocol::ops::{HostSrc, Memset, MemsetValue, StagingRegion};
use gpupool_protocol::transport::Transport;
use gpupool_protocol::{DevicePtr, Request};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const ALLOC: u64 = 32 * MIB;

/// The daemon's answer for one session (`checkpoint::Written`).
struct Written {
    bytes: u64,
    written: u64,
    incremental: bool,
    write_ns: f64,
}

/// One request on `<socket>.ckpt`, as `gpupool checkpoint` sends it.
fn checkpoint(socket: &Path, session: u64, to: &Path) -> Result<Written, String> {
    let path = format!("{}.ckpt", socket.display());
    let mut s = UnixStream::connect(&path).map_err(|e| format!("{path}: {e}"))?;
    let req = serde_json::json!({ "target": session.to_string(), "to": to, "timeout_ms": 600_000 });
    writeln!(s, "{req}").map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).map_err(|e| e.to_string())?;
    let r: serde_json::Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
    if r["ok"] != true {
        return Err(format!("checkpoint failed: {}", r["error"]));
    }
    let w = &r["sessions"][0];
    Ok(Written {
        bytes: w["bytes"].as_u64().unwrap_or(0),
        written: w["written"].as_u64().unwrap_or(0),
        incremental: w["incremental"].as_bool().unwrap_or(false),
        write_ns: w["write_ns"].as_f64().unwrap_or(0.0),
    })
}

struct Run {
    bytes: u64,
    rounds: usize,
    full_gbs: f64,
    plain_gbs: f64,
    copy_gbs: f64,
    pause_ms: f64,
    call_us: f64,
    incr_written: u64,
    incr_ms: f64,
    full_ms: f64,
    /// `gpupool daemon --restore` of the last full checkpoint, by the daemon's own timing.
    restore_gbs: f64,
    /// The same bytes read back from a file and copied host-to-device in this process.
    plain_restore_gbs: f64,
}

fn measure(bytes: u64, rounds: usize) -> Result<Run, String> {
    let d = Daemon::start(&format!("{}MiB", bytes / MIB + 256))?;
    let fail = |e: String| format!("{e}\ndaemon log:\n{}", d.log());
    let mut c = Client::connect(&d.socket(), LOW_TOKEN).map_err(fail)?;
    let ctx = c.ctx().map_err(fail)?;
    let mut bufs = Vec::new();
    for i in 0..bytes / ALLOC {
        let p = c.alloc(ctx, ALLOC).map_err(fail)?;
        let set = Memset { dst: p, value: MemsetValue::U32(i as u32 + 1), width: ALLOC / 4, height: 1, pitch: 0 };
        c.call(Request::Memset { set }).map_err(fail)?;
        bufs.push(p);
    }
    let session = c.session;
    let root = std::env::temp_dir().join(format!("gpupool-bench-ckpt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (mut full, mut plain, mut copy, mut pause, mut call_us, mut incr_ms, mut full_ms) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut incr_written, mut plain_restore) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let dir = root.join(format!("round-{r}"));
        // The client's small calls before and during the full checkpoint.
        let stop = Arc::new(AtomicBool::new(false));
        let during = Arc::new(AtomicBool::new(false));
        let probe = bufs[0];
        let caller = {
            let (stop, during) = (stop.clone(), during.clone());
            std::thread::spawn(move || {
                let (mut before, mut worst) = (Vec::new(), 0f64);
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    c.call(Request::MemcpyDtoHInline { src: probe, len: 4 })?;
                    let us = t0.elapsed().as_secs_f64() * 1e6;
                    if during.load(Ordering::Relaxed) {
                        worst = worst.max(us);
                    } else {
                        before.push(us);
                    }
                }
                Ok((c, before, worst))
            })
        };
        std::thread::sleep(Duration::from_millis(200));
        during.store(true, Ordering::Relaxed);
        let w = checkpoint(&d.socket(), session, &dir).map_err(fail);
        stop.store(true, Ordering::Relaxed);
        let (back, before, worst) =
            caller.join().map_err(|_| "the calling thread panicked".to_string())?.map_err(fail)?;
        c = back;
        let w = w?;
        if w.bytes != bytes || w.written != bytes || w.incremental {
            return Err(fail(format!("a full checkpoint held {} and wrote {} bytes, not {bytes}", w.bytes, w.written)));
        }
        full.push(bytes as f64 / w.write_ns);
        full_ms.push(w.write_ns / 1e6);
        pause.push(worst / 1e3);
        call_us.push(median(before));

        // 1% changed, 1 MiB at a time, spread over the allocations.
        let changes = (bytes / 100).div_ceil(MIB);
        let staging = c.t.staging().ok_or("no staging area")?;
        staging.write(0, &vec![0xa5u8 ^ r as u8; MIB as usize]).map_err(|e| e.to_string())?;
        for k in 0..changes {
            let buf = bufs[(k as usize * 7) % bufs.len()];
            let dst = DevicePtr(buf.0 + (k * 3 % (ALLOC / MIB)) * MIB);
            let src = HostSrc::Staging(StagingRegion { offset: 0, len: MIB });
            c.call(Request::MemcpyHtoD { dst, src }).map_err(fail)?;
        }
        let w = checkpoint(&d.socket(), session, &dir).map_err(fail)?;
        if !w.incremental {
            return Err(fail("the second checkpoint to the same directory was not incremental".into()));
        }
        incr_written.push(w.written as f64);
        incr_ms.push(w.write_ns / 1e6);
        let _ = std::fs::remove_dir_all(&dir);

        let (p, cp, back) = plain_copy_write_and_read(bytes, &root.join("plain.bin"))?;
        plain.push(p);
        copy.push(cp);
        plain_restore.push(back);
    }
    // Restore: a last full checkpoint, the daemon killed (SIGKILL), a new one started on it with
    // `--restore`, once per round.
    let dir = root.join("restore");
    let w = checkpoint(&d.socket(), session, &dir).map_err(fail)?;
    if w.incremental || w.written != bytes {
        return Err(fail(format!("the checkpoint to restore wrote {} bytes, not {bytes}", w.written)));
    }
    let memory = format!("{}MiB", bytes / MIB + 256);
    drop(d);
    drop(c);
    let mut restore = Vec::new();
    for _ in 0..rounds {
        let d = Daemon::start_with(&memory, &["--restore".as_ref(), dir.as_os_str()])?;
        let doc = d.status(Duration::from_secs(600)).map_err(|e| format!("{e}\ndaemon log:\n{}", d.log()))?;
        let r = &doc["restore"];
        if r["sessions"] != 1 || r["bytes"] != bytes {
            return Err(format!(
                "--restore brought back {r}, not one session of {bytes} bytes\ndaemon log:\n{}",
                d.log()
            ));
        }
        restore.push(bytes as f64 / r["ns"].as_f64().unwrap_or(f64::NAN));
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(Run {
        bytes,
        rounds,
        full_gbs: median(full),
        plain_gbs: median(plain),
        copy_gbs: median(copy),
        pause_ms: median(pause),
        call_us: median(call_us),
        incr_written: median(incr_written) as u64,
        incr_ms: median(incr_ms),
        full_ms: median(full_ms),
        restore_gbs: median(restore),
        plain_restore_gbs: median(plain_restore),
    })
}

/// The baselines: the same release simulator in this process copies `bytes` device-to-host,
/// 64 MiB at a time, each written to `path`, fsynced at the end; then reads the file back 64 MiB
/// at a time, each copied host-to-device. GB/s of the first, of its copies alone, and of the
/// read back.
fn plain_copy_write_and_read(bytes: u64, path: &Path) -> Result<(f64, f64, f64), String> {
    let step = 64 * MIB;
    let (d, ctx, p) = filled_buffer(bytes, 7)?;
    let mut host = vec![0u8; step as usize];
    let mut f = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let mut copying = Duration::ZERO;
    let t0 = Instant::now();
    let mut off = 0;
    while off < bytes {
        let n = step.min(bytes - off) as usize;
        let t = Instant::now();
        ok(call!(d.cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), p + off, n)), "cuMemcpyDtoH_v2")?;
        copying += t.elapsed();
        f.write_all(&host[..n]).map_err(|e| e.to_string())?;
        off += n as u64;
    }
    f.sync_all().map_err(|e| e.to_string())?;
    let all = t0.elapsed();
    drop(f);
    if host[0] != 7 {
        return Err("cuMemcpyDtoH_v2 did not copy".into());
    }
    ok(call!(d.cuMemsetD8_v2(p, 0, bytes as usize)), "cuMemsetD8_v2")?;
    let t0 = Instant::now();
    let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut off = 0;
    while off < bytes {
        let n = step.min(bytes - off) as usize;
        f.read_exact(&mut host[..n]).map_err(|e| e.to_string())?;
        ok(call!(d.cuMemcpyHtoD_v2(p + off, host.as_ptr().cast(), n)), "cuMemcpyHtoD_v2")?;
        off += n as u64;
    }
    let back = t0.elapsed();
    let mut last = 0u8;
    ok(call!(d.cuMemcpyDtoH_v2((&mut last as *mut u8).cast(), p + bytes - 1, 1)), "cuMemcpyDtoH_v2")?;
    let _ = call!(d.cuMemFree_v2(p));
    let _ = call!(d.cuCtxDestroy_v2(ctx));
    let _ = std::fs::remove_file(path);
    if last != 7 {
        return Err("the file read back did not reach the device".into());
    }
    let gbs = |t: Duration| bytes as f64 / t.as_nanos() as f64;
    Ok((gbs(all), gbs(copying), gbs(back)))
}

/// MemAvailable of /proc/meminfo, bytes.
fn available() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kib = text.lines().find_map(|l| l.strip_prefix("MemAvailable:")).and_then(|v| v.split_whitespace().next());
    kib.and_then(|k| k.parse::<u64>().ok()).map_or(0, |k| k * 1024)
}

fn print(run: &Run) {
    let mib = run.bytes / MIB;
    println!("checkpoint of {mib} MiB in {} allocations of 32 MiB, {} rounds (medians)", run.bytes / ALLOC, run.rounds);
    println!("{:<52} | {:>10} | vs baseline", "figure", "value");
    let rel = run.full_gbs / run.plain_gbs;
    println!(
        "{:<52} | {:>10.3} | {rel:.2}x of plain copy + write",
        format!("full checkpoint GB/s ({mib} MiB)"),
        run.full_gbs
    );
    println!("{:<52} | {:>10.3} | 1.00x", format!("plain DtoH + file write + fsync GB/s ({mib} MiB)"), run.plain_gbs);
    println!(
        "{:<52} | {:>10.3} | {:.2}x",
        format!("plain DtoH alone GB/s ({mib} MiB)"),
        run.copy_gbs,
        run.copy_gbs / run.plain_gbs
    );
    println!(
        "{:<52} | {:>10.3} | {:.2}x of plain read + copy",
        format!("restore GB/s ({mib} MiB)"),
        run.restore_gbs,
        run.restore_gbs / run.plain_restore_gbs
    );
    println!("{:<52} | {:>10.3} | 1.00x", format!("plain file read + HtoD GB/s ({mib} MiB)"), run.plain_restore_gbs);
    println!(
        "{:<52} | {:>10.1} | {:.0}x a call's median ({:.1} us)",
        format!("longest call during the checkpoint ms ({mib} MiB)"),
        run.pause_ms,
        run.pause_ms * 1e3 / run.call_us,
        run.call_us
    );
    println!(
        "{:<52} | {:>10.1} | {:.2}% of the memory",
        format!("incremental after 1% changed: MiB written ({mib} MiB)"),
        run.incr_written as f64 / MIB as f64,
        run.incr_written as f64 * 100.0 / run.bytes as f64
    );
    println!(
        "{:<52} | {:>10.1} | {:.3}x of the full one ({:.1} ms)",
        format!("incremental after 1% changed: ms ({mib} MiB)"),
        run.incr_ms,
        run.incr_ms / run.full_ms,
        run.full_ms
    );
}

pub fn main(args: &[String]) -> ExitCode {
    let (sizes, rounds): (Vec<u64>, usize) = match args {
        [] => (vec![1024 * MIB], 3),
        [q] if q == "--quick" => (vec![256 * MIB], 2),
        [f] if f == "--full" => (vec![1024 * MIB, 8192 * MIB], 3),
        _ => {
            eprintln!("usage: gpupool-bench checkpoint [--quick|--full]");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = build_pool() {
        eprintln!("gpupool-bench checkpoint: {e}");
        return ExitCode::FAILURE;
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at the start: {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    for bytes in sizes {
        // The simulated device's memory, the baseline's device copy and the page cache's
        // dirty pages are all host memory.
        let need = bytes * 3;
        if available() < need {
            println!(
                "{} MiB skipped: it needs about {} MiB of host memory, {} MiB available",
                bytes / MIB,
                need / MIB,
                available() / MIB
            );
            continue;
        }
        match measure(bytes, rounds) {
            Ok(run) => print(&run),
            Err(e) => {
                eprintln!("gpupool-bench checkpoint: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
