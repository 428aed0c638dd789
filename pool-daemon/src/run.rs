//! `gpupool run [--endpoint ADDR] [--memory SIZE] [--compute PCT] -- CMD ARGS...`: runs CMD
//! unmodified with `libgpupool.so` (built next to this executable) preloaded and the
//! endpoint and its requests in the environment (`GPUPOOL_ENDPOINT`, `GPUPOOL_MEMORY`,
//! `GPUPOOL_COMPUTE`; the client sends them in its hello, where they can only narrow the
//! tenant's quota). Exits with CMD's exit code (128+N when a signal N killed it).

use anyhow::{Context as _, Result, bail};
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::Command;

pub struct Options {
    pub endpoint: Option<String>,
    pub memory: Option<String>,
    pub compute: Option<u8>,
    pub command: Vec<String>,
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
    let lib = interposer()?;
    let endpoint = crate::status::endpoint(o.endpoint)?;
    let mut preload = lib.display().to_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(':');
        preload.push_str(&old.to_string_lossy());
    }
    let mut cmd = Command::new(prog);
    cmd.args(args).env("LD_PRELOAD", preload).env("GPUPOOL_ENDPOINT", format!("unix://{}", endpoint.display()));
    if let Some(m) = &o.memory {
        cmd.env("GPUPOOL_MEMORY", m);
    }
    if let Some(c) = o.compute {
        cmd.env("GPUPOOL_COMPUTE", c.to_string());
    }
    let status = cmd.status().with_context(|| format!("cannot run {prog}"))?;
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}
