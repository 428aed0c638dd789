//! `gpupool run [--endpoint ADDR] [--memory SIZE] [--compute PCT] [--gpus N] -- CMD ARGS...`:
//! runs CMD unmodified with `libgpupool.so` (built next to this executable) preloaded and the
//! endpoint and its requests in the environment (`GPUPOOL_ENDPOINT`, `GPUPOOL_MEMORY`,
//! `GPUPOOL_COMPUTE`, `GPUPOOL_GPUS`; the client sends them in its hello, where they can only narrow the
//! tenant's quota). Exits with CMD's exit code (128+N when a signal N killed it).
//!
//! The endpoint (`--endpoint`, else `GPUPOOL_ENDPOINT`) is any the interposer takes, parsed
//! by the same code: a unix socket, `tcp://`, `tls://`, or several network endpoints
//! separated by commas. `GPUPOOL_TOKEN`, `GPUPOOL_CA` and `GPUPOOL_TIMEOUT` pass through to
//! CMD; a network endpoint without a token, or `tls://` without a CA that loads, is refused
//! before CMD starts.
//!
//! Programs linked against `libcudart.so.12` / `.13` (nvcc `-cudart shared`) get
//! stand-ins of those sonames on `LD_LIBRARY_PATH` (built by build.rs, written once per
//! user to a private directory): the loader needs the file and its symbol version, and
//! every runtime function then resolves to the preloaded interposer. cuBLAS and cuBLASLt
//! (`libcublas.so.12` / `.13`, `libcublasLt.so.12` / `.13`) get stand-ins the same way: their
//! calls are forwarded to the daemon, which runs them with its backend's library. The same directory
//! links `libcuda.so.1` and `libnvidia-ml.so.1` to the interposer, for programs that
//! name the driver in DT_NEEDED on a machine without one.
//!
//! `--cudart nvidia` (or `GPUPOOL_CUDART=nvidia`) gives the program NVIDIA's own CUDA runtime
//! instead: nothing is preloaded (a preloaded libgpupool.so would win every `cuda*` symbol),
//! the library path gets only the driver links, so NVIDIA's runtime (which the program finds
//! itself: its run path, `LD_LIBRARY_PATH`, a full path) dlopens `libcuda.so.1` and gets
//! libgpupool.so, and serves every runtime call over the pool's driver API through the
//! driver's private tables (interpose/EXPORT_TABLES.md). `pool` stays the default: it needs no
//! NVIDIA runtime on the client, it keeps cuBLAS forwarded to the daemon (the cuBLAS stand-ins
//! resolve to the preloaded library), and a call the pool refuses is named in a log line,
//! where NVIDIA's runtime reports a driver entry point it lacks as
//! cudaErrorCallRequiresNewerDriver. Statically linked runtimes (default-flag nvcc programs,
//! CuPy 13+) are NVIDIA's either way.

use anyhow::{Context as _, Result, bail};
use gpupool_protocol::transport::endpoint::{Endpoint, NetSettings};
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::Command;

pub struct Options {
    pub endpoint: Option<String>,
    pub memory: Option<String>,
    pub compute: Option<u8>,
    /// Placement: this many GPUs, chosen by the daemon.
    pub gpus: Option<u32>,
    /// None: `GPUPOOL_CUDART` (`pool` or `nvidia`), else `pool`.
    pub cudart: Option<Cudart>,
    pub command: Vec<String>,
}

/// Which CUDA runtime the program gets (see the module's doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Cudart {
    /// libgpupool.so's own runtime (preloaded; stand-ins for libcudart.so.12/.13).
    Pool,
    /// NVIDIA's libcudart, over the pool's driver API.
    Nvidia,
}

/// `libgpupool.so` next to the gpupool executable (`target/<profile>/`).
pub fn interposer() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("the executable has no directory")?;
    let lib = dir.join("libgpupool.so");
    if !lib.exists() {
        bail!("{} not found: build the interposer (`cargo build -p gpupool-interpose`) next to gpupool", lib.display());
    }
    Ok(lib)
}

pub(crate) const STAND_INS: [(&str, &[u8]); 6] = [
    ("libcudart.so.12", include_bytes!(concat!(env!("OUT_DIR"), "/libcudart.so.12"))),
    ("libcudart.so.13", include_bytes!(concat!(env!("OUT_DIR"), "/libcudart.so.13"))),
    ("libcublas.so.12", include_bytes!(concat!(env!("OUT_DIR"), "/libcublas.so.12"))),
    ("libcublas.so.13", include_bytes!(concat!(env!("OUT_DIR"), "/libcublas.so.13"))),
    ("libcublasLt.so.12", include_bytes!(concat!(env!("OUT_DIR"), "/libcublasLt.so.12"))),
    ("libcublasLt.so.13", include_bytes!(concat!(env!("OUT_DIR"), "/libcublasLt.so.13"))),
];

/// Driver sonames a program may name in DT_NEEDED (linked with `-lcuda`, as CuPy 12's
/// modules are, or with `-lascendcl`, as a CANN program is): links to the interposer itself,
/// so a client machine needs no driver and no CANN.
pub(crate) const DRIVER_SONAMES: [&str; 8] = [
    "libcuda.so.1",
    "libcuda.so",
    "libnvidia-ml.so.1",
    "libascendcl.so",
    // CANN ships aclCreateTensor and the rest of acl_meta.h here; its samples link it.
    "libnnopbase.so",
    "libopapi.so",
    "libdcmi.so",
    // CANN's lower runtime (rtMalloc, rtFree, rtMemGetInfoEx), which libraries beneath AscendCL call.
    "libruntime.so",
];

/// A directory holding the runtime stand-ins and the driver links, private to this
/// user: under `$XDG_RUNTIME_DIR` (else the temp dir), named by their content and the
/// interposer's path so a newer build never reuses an older one, written atomically so
/// concurrent runs agree.
pub fn cudart_stand_ins(interposer: &std::path::Path) -> Result<PathBuf> {
    library_dir(interposer, &STAND_INS, "cudart")
}

/// A directory holding only the driver links (for `--cudart nvidia`).
pub fn driver_links(interposer: &std::path::Path) -> Result<PathBuf> {
    library_dir(interposer, &[], "driver")
}

/// The directory `<prefix>-<hash>` with `files` and the driver links (see [`cudart_stand_ins`]).
fn library_dir(interposer: &std::path::Path, files: &[(&str, &[u8])], prefix: &str) -> Result<PathBuf> {
    use std::hash::{Hash as _, Hasher as _};
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    files.hash(&mut h);
    interposer.hash(&mut h);
    let uid = rustix::process::getuid().as_raw();
    let base = match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d).join("gpupool"),
        None => std::env::temp_dir().join(format!("gpupool-{uid}")),
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", base.display())),
    }
    // Someone else's directory (or a link planted in a shared temp dir) is refused.
    let meta = std::fs::symlink_metadata(&base).with_context(|| format!("{}", base.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o022 != 0 {
        bail!("{} is not a private directory of this user; remove it", base.display());
    }
    let dir = base.join(format!("{prefix}-{:016x}", h.finish()));
    let names = files.iter().map(|(n, _)| *n).chain(DRIVER_SONAMES);
    if names.into_iter().all(|name| dir.join(name).exists()) {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = |name: &str| dir.join(format!(".{name}.{}", std::process::id()));
    for &(name, bytes) in files {
        std::fs::write(tmp(name), bytes).with_context(|| format!("writing {}", tmp(name).display()))?;
        std::fs::rename(tmp(name), dir.join(name))
            .with_context(|| format!("installing {name} in {}", dir.display()))?;
    }
    for name in DRIVER_SONAMES {
        let _ = std::fs::remove_file(tmp(name));
        std::os::unix::fs::symlink(interposer, tmp(name))
            .with_context(|| format!("linking {}", tmp(name).display()))?;
        std::fs::rename(tmp(name), dir.join(name))
            .with_context(|| format!("installing {name} in {}", dir.display()))?;
    }
    Ok(dir)
}

/// `dir` in front of the current LD_LIBRARY_PATH.
pub fn library_path_with(dir: &std::path::Path) -> std::ffi::OsString {
    let mut v = dir.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

pub fn run(o: Options) -> Result<i32> {
    let Some((prog, args)) = o.command.split_first() else {
        bail!("gpupool run: no command given (gpupool run -- CMD ARGS...)")
    };
    if let Some(m) = &o.memory {
        let b = gpupool_quota::parse_size(m).with_context(|| format!("--memory {m}"))?;
        gpupool_quota::sizes::require_whole_mib(b).with_context(|| format!("--memory {m}"))?;
    }
    if let Some(c) = o.compute
        && !(1..=100).contains(&c)
    {
        bail!("--compute {c}: a percent in 1..=100");
    }
    if o.gpus == Some(0) {
        bail!("--gpus 0: at least one GPU");
    }
    let cudart = match o.cudart {
        Some(c) => c,
        None => match std::env::var("GPUPOOL_CUDART").ok().filter(|v| !v.is_empty()).as_deref() {
            None | Some("pool") => Cudart::Pool,
            Some("nvidia") => Cudart::Nvidia,
            Some(other) => bail!("GPUPOOL_CUDART={other}: `pool` or `nvidia`"),
        },
    };
    let lib = interposer()?;
    let endpoints = crate::status::endpoints(o.endpoint)?;
    NetSettings::from_env().check(&endpoints).map_err(anyhow::Error::msg)?;
    let endpoints: Vec<String> = endpoints.iter().map(Endpoint::to_string).collect();
    let mut cmd = Command::new(prog);
    cmd.args(args).env("GPUPOOL_ENDPOINT", endpoints.join(","));
    match cudart {
        Cudart::Pool => {
            let mut preload = lib.display().to_string();
            if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
                preload.push(':');
                preload.push_str(&old.to_string_lossy());
            }
            cmd.env("GPUPOOL_CUDART", "pool").env("LD_PRELOAD", preload);
            cmd.env("LD_LIBRARY_PATH", library_path_with(&cudart_stand_ins(&lib)?));
        }
        Cudart::Nvidia => {
            cmd.env("GPUPOOL_CUDART", "nvidia").env("LD_LIBRARY_PATH", library_path_with(&driver_links(&lib)?));
        }
    }
    if let Some(m) = &o.memory {
        cmd.env("GPUPOOL_MEMORY", m);
    }
    if let Some(c) = o.compute {
        cmd.env("GPUPOOL_COMPUTE", c.to_string());
    }
    if let Some(n) = o.gpus {
        cmd.env("GPUPOOL_GPUS", n.to_string());
    }
    let status = cmd.status().with_context(|| format!("cannot run {prog}"))?;
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}
