//! `gpupool oci-hook STAGE`: the OCI runtime hook. The runtime gives it the container's state
//! on stdin (`id`, `pid`, `bundle`, per the OCI runtime spec); it reads the bundle's
//! `config.json` for the rootfs, the annotations and the process environment.
//!
//! - `create-runtime` (or `prestart`, its older name; both run in the runtime's namespaces
//!   after the container's mounts and before `pivot_root`): asks the daemon for the
//!   container's endpoint (tenant `gpupool.io/tenant`, else the config's default tenant;
//!   `gpupool.io/memory` per device, `gpupool.io/compute` percent and `gpupool.io/devices`
//!   (`0,1` or `all`; a CDI device's `GPUPOOL_CDI_DEVICE_<N>` in the environment otherwise),
//!   which only narrow the tenant's quota), then mounts it and the pool's libraries into the
//!   container ([`super::mounts`]). A failure is the hook's exit status 1 with the reason on
//!   stderr, so the runtime refuses to start the container rather than start it outside the pool.
//! - `poststop`: removes the endpoint; the daemon ends its sessions and frees what they held
//!   (also after SIGKILL: poststop runs whenever the container is deleted).

use super::{
    ANNOTATION_COMPUTE, ANNOTATION_DEVICES, ANNOTATION_MEMORY, ANNOTATION_TENANT, CDI_DEVICE_ENV, libdir, mounts,
};
use crate::daemon::containers::{ContainerReply, ContainerRequest, socket_path};
use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{BufRead as _, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Which hook the runtime is running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Stage {
    /// `createRuntime`: make the endpoint and the mounts.
    CreateRuntime,
    /// `prestart`: the same (the deprecated name of that point).
    Prestart,
    /// `poststop`: remove the endpoint.
    Poststop,
}

pub struct Options {
    pub stage: Stage,
    /// The daemon's socket (its `<socket>.containers` is asked).
    pub endpoint: Option<String>,
    /// Where library directories are kept on the host.
    pub lib_dir: PathBuf,
    /// The runtime mounted the libraries and the preload file from a CDI spec.
    pub cdi: bool,
    /// The endpoint was made before the container (a DRA claim's): mounted, not made or removed.
    pub claim: Option<String>,
}

/// The container state (OCI runtime spec, "State").
#[derive(Deserialize)]
struct State {
    id: String,
    #[serde(default)]
    pid: Option<u32>,
    bundle: PathBuf,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// What the hook reads of `config.json`.
#[derive(Deserialize, Default)]
struct Config {
    root: Option<Root>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    process: Option<Process>,
}

#[derive(Deserialize)]
struct Root {
    path: PathBuf,
}

#[derive(Deserialize, Default)]
struct Process {
    #[serde(default)]
    env: Vec<String>,
}

/// Sends one request on the daemon's `<socket>.containers` and reads the reply.
pub fn request(main_socket: &Path, req: &ContainerRequest) -> Result<ContainerReply> {
    let path = socket_path(main_socket);
    let mut s = UnixStream::connect(&path).with_context(|| format!("connecting to {}", path.display()))?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut reply = String::new();
    std::io::BufReader::new(s).read_line(&mut reply)?;
    serde_json::from_str(&reply).with_context(|| format!("the daemon's reply {reply:?}"))
}

fn main_socket(endpoint: Option<String>) -> Result<PathBuf> {
    match endpoint {
        Some(e) => crate::daemon::listener::parse_endpoint(&e),
        None => Ok(crate::daemon::listener::default_socket_path()),
    }
}

/// Devices from the annotation (`0,1`, `all`) or the CDI devices' variables; `None`: all.
fn devices(annotations: &BTreeMap<String, String>, env: &[String]) -> Result<Option<Vec<u32>>> {
    if let Some(v) = annotations.get(ANNOTATION_DEVICES) {
        if v.trim() == "all" {
            return Ok(None);
        }
        let parsed = v.split(',').map(|d| d.trim().parse::<u32>()).collect::<Result<Vec<_>, _>>();
        return parsed.map(Some).with_context(|| format!("{ANNOTATION_DEVICES}={v}: device ordinals, or all"));
    }
    let mut out = Vec::new();
    for var in env {
        let Some(rest) = var.strip_prefix(CDI_DEVICE_ENV) else { continue };
        let name = rest.split('=').next().unwrap_or_default();
        if name == "ALL" {
            return Ok(None);
        }
        out.push(name.parse::<u32>().with_context(|| format!("{var}: not a CDI device of gpupool"))?);
    }
    out.sort_unstable();
    out.dedup();
    Ok(if out.is_empty() { None } else { Some(out) })
}

pub fn run(o: Options) -> Result<()> {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).context("reading the container state on stdin")?;
    let state: State = serde_json::from_str(&text).context("the container state on stdin (OCI runtime spec)")?;
    let socket = main_socket(o.endpoint)?;
    match o.stage {
        // The claim's endpoint outlives its containers: `gpupool dra` removes it at unprepare.
        Stage::Poststop if o.claim.is_some() => Ok(()),
        Stage::CreateRuntime | Stage::Prestart if o.claim.is_some() => {
            claim(&o.lib_dir, o.cdi, &socket, o.claim.as_deref().unwrap_or_default(), state)
        }
        Stage::Poststop => {
            let r = request(&socket, &ContainerRequest::Remove { id: state.id.clone() })?;
            if !r.ok {
                bail!("removing container {}'s endpoint: {}", state.id, r.error.unwrap_or_default());
            }
            Ok(())
        }
        Stage::CreateRuntime | Stage::Prestart => create(&o.lib_dir, o.cdi, &socket, state),
    }
}

/// The container's rootfs (a host path) from its bundle.
fn rootfs_of(state: &State, config: &Config) -> Result<PathBuf> {
    let rootfs = config.root.as_ref().context("config.json has no root")?.path.clone();
    Ok(if rootfs.is_absolute() { rootfs } else { state.bundle.join(rootfs) })
}

fn read_config(state: &State) -> Result<Config> {
    let config_path = state.bundle.join("config.json");
    serde_json::from_slice(&std::fs::read(&config_path).with_context(|| format!("reading {}", config_path.display()))?)
        .with_context(|| format!("parsing {}", config_path.display()))
}

/// Mounts the existing endpoint `id` (a DRA claim's) and the linker cache into the container;
/// its limits are the claim's, whatever the container's annotations say.
fn claim(lib_base: &Path, cdi: bool, socket: &Path, id: &str, state: State) -> Result<()> {
    use std::os::unix::fs::FileTypeExt as _;
    let Some(pid) = state.pid else { bail!("the container state has no pid: run as createRuntime or prestart") };
    let endpoint =
        crate::daemon::containers::endpoint_socket(socket, id).with_context(|| format!("endpoint id {id:?}"))?;
    let is_socket = std::fs::symlink_metadata(&endpoint).is_ok_and(|m| m.file_type().is_socket());
    if !is_socket {
        bail!("claim endpoint {id}: no socket at {} (is the claim prepared, the daemon the same?)", endpoint.display());
    }
    let rootfs = rootfs_of(&state, &read_config(&state)?)?;
    let libraries = if cdi { None } else { Some((libdir::prepare(lib_base)?, crate::run::interposer()?)) };
    mounts::enter(pid)
        .and_then(|()| {
            mounts::inject(&mounts::Injection {
                rootfs: &rootfs,
                socket: &endpoint,
                libraries: libraries.as_ref().map(|(d, i)| (d.as_path(), i.as_path())),
            })
        })
        .with_context(|| format!("setting up container {} on claim endpoint {id}", state.id))
}

fn create(lib_base: &Path, cdi: bool, socket: &Path, state: State) -> Result<()> {
    let Some(pid) = state.pid else { bail!("the container state has no pid: run as createRuntime or prestart") };
    let config = read_config(&state)?;
    let rootfs = rootfs_of(&state, &config)?;
    let mut annotations = state.annotations;
    annotations.extend(config.annotations);
    let env = config.process.unwrap_or_default().env;
    let compute = match annotations.get(ANNOTATION_COMPUTE) {
        Some(c) => Some(c.trim().parse::<u8>().with_context(|| format!("{ANNOTATION_COMPUTE}={c}: a percent"))?),
        None => None,
    };
    let req = ContainerRequest::Create {
        id: state.id.clone(),
        tenant: annotations.get(ANNOTATION_TENANT).cloned(),
        memory: annotations.get(ANNOTATION_MEMORY).cloned(),
        compute,
        devices: devices(&annotations, &env)?,
    };
    // Prepared before the daemon is asked: a failure here leaves nothing to undo.
    let libraries = if cdi {
        None
    } else {
        let dir = libdir::prepare(lib_base)?;
        Some((dir, crate::run::interposer()?))
    };
    let reply = request(socket, &req)?;
    if !reply.ok {
        bail!("the daemon refused container {}'s endpoint: {}", state.id, reply.error.unwrap_or_default());
    }
    let endpoint = reply.socket.context("the daemon's reply names no socket")?;
    let injected = mounts::enter(pid).and_then(|()| {
        mounts::inject(&mounts::Injection {
            rootfs: &rootfs,
            socket: &endpoint,
            libraries: libraries.as_ref().map(|(d, i)| (d.as_path(), i.as_path())),
        })
    });
    if let Err(e) = injected {
        // The container will not start: its endpoint goes now (poststop may never run).
        let _ = request(socket, &ContainerRequest::Remove { id: state.id.clone() });
        return Err(e.context(format!("setting up container {}", state.id)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(v: &str) -> BTreeMap<String, String> {
        [(ANNOTATION_DEVICES.to_string(), v.to_string())].into()
    }

    #[test]
    fn devices_come_from_the_annotation_else_the_cdi_devices_else_all() {
        let none = BTreeMap::new();
        assert_eq!(devices(&ann("0,1"), &[]).unwrap(), Some(vec![0, 1]));
        assert_eq!(devices(&ann("all"), &[]).unwrap(), None);
        assert!(devices(&ann("gpu0"), &[]).is_err());
        let env = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            devices(&none, &env(&["PATH=/bin", "GPUPOOL_CDI_DEVICE_1=1", "GPUPOOL_CDI_DEVICE_0=1"])).unwrap(),
            Some(vec![0, 1])
        );
        assert_eq!(devices(&none, &env(&["GPUPOOL_CDI_DEVICE_0=1", "GPUPOOL_CDI_DEVICE_ALL=1"])).unwrap(), None);
        assert_eq!(devices(&none, &env(&["PATH=/bin"])).unwrap(), None);
        assert!(devices(&none, &env(&["GPUPOOL_CDI_DEVICE_x=1"])).is_err());
        // The annotation wins over the CDI variables.
        assert_eq!(devices(&ann("1"), &env(&["GPUPOOL_CDI_DEVICE_0=1"])).unwrap(), Some(vec![1]));
    }
}
