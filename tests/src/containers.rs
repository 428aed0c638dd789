//! OCI bundles for pool-daemon/tests/containers.rs and `gpupool-bench containers`: a rootfs
//! that holds only `/app/<program>`, `/etc/ld.so.conf*` and mount points, with the host's
//! `/usr`, `/bin`, `/lib`, `/lib64` bind-mounted read-only (DESIGN.md §8: what Debian's runc runs
//! on these machines), and a `config.json` from `runc spec` with the network namespace dropped,
//! the process's environment exactly what the caller gives (nothing by default), and the caller's
//! annotations, hooks and extra mounts.
//!
//! Debian's `runc` and `podman` are required: a missing one is a failure naming the package
//! (scripts/test installs them), never a skip.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The full path of `tool` on PATH, or a panic naming the Debian package to install.
pub fn require_tool(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("`{tool}` is not installed: apt-get install --no-install-recommends {tool} (scripts/test does)")
        })
}

/// `dir/rootfs` with `program` as `/app/<its file name>`.
pub fn rootfs(dir: &Path, program: &Path) -> PathBuf {
    let root = dir.join("rootfs");
    for d in ["usr", "bin", "lib", "lib64", "etc", "proc", "dev", "sys", "tmp", "app", "run"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    etc(&root);
    std::fs::copy(program, root.join("app").join(program.file_name().unwrap())).unwrap();
    root
}

/// The image's `/etc`: the host's loader configuration (so the image's own libraries are in
/// the cache the hook regenerates), and a root user.
fn etc(root: &Path) {
    std::fs::copy("/etc/ld.so.conf", root.join("etc/ld.so.conf")).unwrap();
    let conf_d = root.join("etc/ld.so.conf.d");
    std::fs::create_dir_all(&conf_d).unwrap();
    for e in std::fs::read_dir("/etc/ld.so.conf.d").unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), conf_d.join(e.file_name())).unwrap();
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
}

/// What a bundle's `config.json` says beyond `runc spec`'s defaults.
#[derive(Default)]
pub struct Spec<'a> {
    /// The process: `/app/...` and its arguments.
    pub args: Vec<String>,
    /// `KEY=VALUE`; empty: nothing at all in the environment.
    pub env: Vec<String>,
    pub annotations: Vec<(&'a str, String)>,
    /// `hooks` as the OCI runtime spec writes them (`{"createRuntime": [...], ...}`).
    pub hooks: Option<Value>,
    /// Extra read-only bind mounts, host path to container path.
    pub binds: Vec<(PathBuf, String)>,
}

/// The hooks that put a container in the pool: `gpupool oci-hook` at createRuntime and poststop.
pub fn pool_hooks(gpupool: &Path, endpoint: &str, lib_dir: &Path) -> Value {
    let g = gpupool.display().to_string();
    json!({
        "createRuntime": [{"path": g, "args": ["gpupool", "oci-hook", "create-runtime", "--endpoint", endpoint,
                                              "--lib-dir", lib_dir.display().to_string()]}],
        "poststop": [{"path": g, "args": ["gpupool", "oci-hook", "poststop", "--endpoint", endpoint]}],
    })
}

/// Writes `dir/config.json` (`dir/rootfs` must exist).
pub fn write_config(dir: &Path, spec: &Spec) {
    let runc = require_tool("runc");
    let _ = std::fs::remove_file(dir.join("config.json"));
    let out = Command::new(runc).args(["spec", "--bundle"]).arg(dir).output().unwrap();
    assert!(out.status.success(), "runc spec: {}", crate::output_text(&out));
    let path = dir.join("config.json");
    let mut c: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    c["root"] = json!({"path": "rootfs", "readonly": false});
    c["process"]["args"] = json!(spec.args);
    c["process"]["env"] = json!(spec.env);
    c["process"]["terminal"] = json!(false);
    let mounts = c["mounts"].as_array_mut().unwrap();
    for d in ["/usr", "/bin", "/lib", "/lib64"] {
        mounts.push(json!({"destination": d, "type": "bind", "source": d, "options": ["rbind", "ro"]}));
    }
    for (src, dst) in &spec.binds {
        mounts.push(json!({"destination": dst, "type": "bind", "source": src, "options": ["rbind", "ro"]}));
    }
    let ns = c["linux"]["namespaces"].as_array_mut().unwrap();
    ns.retain(|n| n["type"] != "network");
    c["annotations"] = spec.annotations.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    if let Some(h) = &spec.hooks {
        c["hooks"] = h.clone();
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&c).unwrap()).unwrap();
}

/// `runc run --bundle DIR ID`, its stdio for the caller to set.
pub fn runc_run(dir: &Path, id: &str) -> Command {
    let mut c = Command::new(require_tool("runc"));
    c.args(["run", "--bundle"]).arg(dir).arg(id);
    c
}

/// A rootfs for `podman run --rootfs`, which mounts nothing of the host's: the host's `/usr`
/// bind-mounted read-only onto `rootfs/usr` (on the host, until drop) and `bin`, `lib`, `lib64`
/// as the links a merged-/usr Debian has.
pub struct HostUsrRootfs {
    pub root: PathBuf,
}

impl HostUsrRootfs {
    pub fn new(dir: &Path, program: &Path, name_in_app: &str) -> HostUsrRootfs {
        let root = dir.join("rootfs");
        for d in ["usr", "etc", "app", "proc", "dev", "sys", "tmp", "run"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for l in ["bin", "lib", "lib64"] {
            let target = std::fs::read_link(Path::new("/").join(l))
                .unwrap_or_else(|_| panic!("/{l} is not a link into /usr: this helper expects Debian's merged /usr"));
            let _ = std::fs::remove_file(root.join(l));
            std::os::unix::fs::symlink(target, root.join(l)).unwrap();
        }
        etc(&root);
        std::fs::copy(program, root.join("app").join(name_in_app)).unwrap();
        let usr = root.join("usr");
        let st = Command::new("mount").args(["--bind", "/usr"]).arg(&usr).status().unwrap();
        assert!(st.success(), "mount --bind /usr {}", usr.display());
        let st = Command::new("mount").args(["-o", "remount,bind,ro"]).arg(&usr).status().unwrap();
        assert!(st.success(), "remount {} read-only", usr.display());
        HostUsrRootfs { root }
    }
}

impl Drop for HostUsrRootfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.root.join("usr")).status();
    }
}
