//! `gpupool cdi generate`: a CDI spec (Container Device Interface, kind `gpupool.io/gpu`) for
//! runtimes that read `/etc/cdi` and `/var/run/cdi` (podman `--device gpupool.io/gpu=0`).
//!
//! One device per device of the running daemon (`0`, `1`, ...) and `all`; each device's
//! edits set `GPUPOOL_CDI_DEVICE_<N>=1` (or `_ALL`), which the hook turns into the endpoint's
//! devices. The spec's own edits mount the library directory, the interposer and
//! `/etc/ld.so.preload` read-only, set `GPUPOOL_ENDPOINT` to the mounted socket (for a
//! non-root user in the container, whose default socket path differs), and name the hook:
//! `createRuntime` (`--cdi`: only the endpoint and the linker cache are left to it) and
//! `poststop`.
//!
//! Written with serde: the `container-device-interface` crate (1.1) would add jsonschema,
//! oci-spec, regex and serde_yaml to the daemon for five structs it only writes. The version
//! written is the oldest with every field used (0.5.0: env, mounts, hooks), which podman 4.3
//! (Debian 12) reads; `--cdi-version` writes another.

use super::{CDI_DEVICE_ENV, CONTAINER_INTERPOSER, CONTAINER_LIB_DIR, CONTAINER_SOCKET, libdir};
use anyhow::{Context as _, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

pub const KIND: &str = "gpupool.io/gpu";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    cdi_version: String,
    kind: &'static str,
    devices: Vec<Device>,
    container_edits: Edits,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Device {
    name: String,
    container_edits: Edits,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Edits {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    env: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    mounts: Vec<Mount>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    hooks: Vec<Hook>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Mount {
    host_path: PathBuf,
    container_path: String,
    options: Vec<&'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Hook {
    hook_name: &'static str,
    path: PathBuf,
    args: Vec<String>,
}

pub struct Options {
    pub output: PathBuf,
    pub endpoint: Option<String>,
    pub lib_dir: PathBuf,
    pub cdi_version: String,
}

fn read_only(host_path: PathBuf, container_path: &str) -> Mount {
    Mount { host_path, container_path: container_path.into(), options: vec!["ro", "nosuid", "nodev", "bind"] }
}

pub fn generate(o: Options) -> Result<()> {
    let socket = match &o.endpoint {
        Some(e) => crate::daemon::listener::parse_endpoint(e)?,
        None => crate::daemon::listener::default_socket_path(),
    };
    let status = crate::status::fetch(&socket).context("asking the daemon for its devices")?;
    let count = status["devices"].as_array().map_or(0, Vec::len);
    let lib = libdir::prepare(&o.lib_dir)?;
    let interposer = crate::run::interposer()?;
    let gpupool = std::env::current_exe()?;
    let endpoint_args = ["--endpoint".to_string(), format!("unix://{}", socket.display())];
    let hook = |stage: &str, extra: &[&str]| {
        let mut args = vec!["gpupool".to_string(), "oci-hook".into(), stage.into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(endpoint_args.iter().cloned());
        args
    };
    let mut devices: Vec<Device> = (0..count)
        .map(|d| Device {
            name: d.to_string(),
            container_edits: Edits { env: vec![format!("{CDI_DEVICE_ENV}{d}=1")], ..Default::default() },
        })
        .collect();
    devices.push(Device {
        name: "all".into(),
        container_edits: Edits { env: vec![format!("{CDI_DEVICE_ENV}ALL=1")], ..Default::default() },
    });
    let spec = Spec {
        cdi_version: o.cdi_version,
        kind: KIND,
        devices,
        container_edits: Edits {
            env: vec![format!("GPUPOOL_ENDPOINT=unix://{CONTAINER_SOCKET}")],
            mounts: vec![
                read_only(lib.clone(), CONTAINER_LIB_DIR),
                read_only(interposer, CONTAINER_INTERPOSER),
                read_only(lib.join(libdir::PRELOAD_FILE), "/etc/ld.so.preload"),
            ],
            hooks: vec![
                Hook {
                    hook_name: "createRuntime",
                    path: gpupool.clone(),
                    args: hook("create-runtime", &["--cdi", "--lib-dir", &o.lib_dir.display().to_string()]),
                },
                Hook { hook_name: "poststop", path: gpupool, args: hook("poststop", &[]) },
            ],
        },
    };
    write(&o.output, &serde_json::to_vec_pretty(&spec)?)?;
    eprintln!("wrote {} ({count} devices and `all`, kind {KIND})", o.output.display());
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
