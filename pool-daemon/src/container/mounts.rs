//! The hook's mounts, made in the container's mount namespace before its `pivot_root`
//! (`createRuntime`/`prestart`: the namespace exists, the config's mounts are done and host
//! paths are still visible). The hook enters it with `setns` through `/proc/<pid>/ns/mnt`, so
//! every mount stays the container's and goes with it; nothing is mounted on the host.
//!
//! In the rootfs: a tmpfs on `/run/gpupool` (the endpoint's mount point, the generated
//! `ld.so.preload`, `ld.so.conf` and `ld.so.cache`; remounted read-only when done), the endpoint
//! socket bound onto `/run/gpupool/gpupool.sock`, and read-only binds of the library directory,
//! the interposer, `/etc/ld.so.preload` and `/etc/ld.so.cache`. The cache is made by the host's
//! `ldconfig -X -r ROOTFS` over `/opt/gpupool/lib` then the image's own `/etc/ld.so.conf`, so
//! the image's libraries still resolve and the vendor sonames resolve to the pool's.
//!
//! Paths inside the rootfs are walked component by component and a symbolic link is refused:
//! before `pivot_root` a link in the image would resolve against the host's root.

use super::{CONTAINER_INTERPOSER, CONTAINER_LIB_DIR, CONTAINER_RUN_DIR, CONTAINER_SOCKET, under};
use anyhow::{Context as _, Result, bail};
use rustix::mount::MountFlags;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// What to put into one container.
pub struct Injection<'a> {
    /// The rootfs as a host path.
    pub rootfs: &'a Path,
    /// The container's endpoint socket on the host.
    pub socket: &'a Path,
    /// The library directory and the interposer to mount, or `None` when the runtime mounted
    /// them from a CDI spec.
    pub libraries: Option<(&'a Path, &'a Path)>,
}

/// Enters the container's mount namespace (this process only; it must be single-threaded).
pub fn enter(pid: u32) -> Result<()> {
    let ns =
        std::fs::File::open(format!("/proc/{pid}/ns/mnt")).with_context(|| format!("opening /proc/{pid}/ns/mnt"))?;
    rustix::thread::move_into_link_name_space(
        std::os::fd::AsFd::as_fd(&ns),
        Some(rustix::thread::LinkNameSpaceType::Mount),
    )
    .with_context(|| format!("entering the mount namespace of pid {pid}"))?;
    Ok(())
}

/// `rel` under `root`, refusing symbolic links on the way; missing directories are created
/// when `create_dirs`.
fn checked(root: &Path, rel: &str, create_dirs: bool) -> Result<PathBuf> {
    let mut p = root.to_path_buf();
    for c in Path::new(rel.trim_start_matches('/')).components() {
        let Component::Normal(name) = c else { bail!("{rel}: only plain names are allowed") };
        p.push(name);
        match p.symlink_metadata() {
            Ok(m) if m.file_type().is_symlink() => {
                bail!("{} is a symbolic link in the container's rootfs; refusing to mount through it", p.display())
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create_dirs => {
                std::fs::DirBuilder::new()
                    .mode(0o755)
                    .create(&p)
                    .with_context(|| format!("creating {}", p.display()))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("{}", p.display())),
        }
    }
    Ok(p)
}

/// A file to mount onto at `rel` (its directories made, itself made empty if missing).
fn file_target(root: &Path, rel: &str) -> Result<PathBuf> {
    let parent = Path::new(rel).parent().and_then(Path::to_str).unwrap_or("/");
    checked(root, parent, true)?;
    let p = checked(root, rel, false)?;
    if p.symlink_metadata().is_err() {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&p)
            .with_context(|| format!("creating the mount point {}", p.display()))?;
    }
    Ok(p)
}

fn bind(src: &Path, dst: &Path, read_only: bool) -> Result<()> {
    rustix::mount::mount_bind(src, dst)
        .with_context(|| format!("bind-mounting {} on {}", src.display(), dst.display()))?;
    if read_only {
        rustix::mount::mount_remount(dst, MountFlags::BIND | MountFlags::RDONLY, "")
            .with_context(|| format!("making {} read-only", dst.display()))?;
    }
    Ok(())
}

/// The host's `ldconfig` (a static binary on Debian, so it runs whatever the rootfs holds).
fn ldconfig() -> Result<&'static str> {
    ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .context("no ldconfig on the host (/sbin/ldconfig, /usr/sbin/ldconfig)")
}

/// Makes the mounts described in the module's doc. Call after [`enter`].
pub fn inject(i: &Injection) -> Result<()> {
    let root = i.rootfs;
    let run = checked(root, CONTAINER_RUN_DIR, true)?;
    rustix::mount::mount("tmpfs", &run, "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, c"mode=0755,size=8m")
        .with_context(|| format!("mounting a tmpfs on {}", run.display()))?;
    let sock = file_target(root, CONTAINER_SOCKET)?;
    bind(i.socket, &sock, false)?;
    if let Some((libdir, interposer)) = i.libraries {
        let lib = checked(root, CONTAINER_LIB_DIR, true)?;
        bind(libdir, &lib, true)?;
        bind(interposer, &under(root, CONTAINER_INTERPOSER), true)?;
        // The image's own preload lines are kept, after ours.
        let existing = checked(root, "/etc/ld.so.preload", false)?;
        let mut preload = format!("{CONTAINER_INTERPOSER}\n");
        if let Ok(text) = std::fs::read_to_string(&existing) {
            for line in text.lines().filter(|l| !l.trim().is_empty() && l.trim() != CONTAINER_INTERPOSER) {
                preload.push_str(line);
                preload.push('\n');
            }
        }
        let ours = run.join("ld.so.preload");
        std::fs::write(&ours, preload)?;
        bind(&ours, &file_target(root, "/etc/ld.so.preload")?, true)?;
    }
    let conf = run.join("ld.so.conf");
    std::fs::write(&conf, format!("{CONTAINER_LIB_DIR}\ninclude /etc/ld.so.conf\n"))?;
    let out = Command::new(ldconfig()?)
        .arg("-X")
        .arg("-r")
        .arg(root)
        .args(["-f", &format!("{CONTAINER_RUN_DIR}/ld.so.conf"), "-C", &format!("{CONTAINER_RUN_DIR}/ld.so.cache")])
        .output()
        .context("running ldconfig")?;
    let cache = run.join("ld.so.cache");
    if !cache.exists() {
        bail!("ldconfig made no cache ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    bind(&cache, &file_target(root, "/etc/ld.so.cache")?, true)?;
    rustix::mount::mount_remount(&run, MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV, "")
        .with_context(|| format!("making {} read-only", run.display()))?;
    Ok(())
}
