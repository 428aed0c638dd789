//! The host directory a container's `/opt/gpupool/lib` is mounted from: the stand-ins of
//! `gpupool run` (the same bytes), the driver sonames as relative links to `libgpupool.so`,
//! an empty `libgpupool.so` that the interposer itself is bind-mounted onto (so a rebuilt
//! interposer is never stale and 40 MB are not copied per version), and `ld.so.preload`
//! naming the interposer's path inside the container (for CDI's mount of `/etc/ld.so.preload`).
//!
//! Named `<base>/lib-<hash of the contents>`, written once, each file atomically (temp file
//! and rename), so hooks of containers starting together agree.

use super::CONTAINER_INTERPOSER;
use crate::run::{DRIVER_SONAMES, STAND_INS};
use anyhow::{Context as _, Result};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The file in the directory holding the container's `/etc/ld.so.preload`.
pub const PRELOAD_FILE: &str = "ld.so.preload";

/// What the directory holds, by name.
fn contents() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = STAND_INS.iter().map(|(n, b)| (n.to_string(), b.to_vec())).collect();
    files.push(("libgpupool.so".into(), Vec::new()));
    files.push((PRELOAD_FILE.into(), format!("{CONTAINER_INTERPOSER}\n").into_bytes()));
    files
}

/// The library directory under `base`, made if missing.
pub fn prepare(base: &Path) -> Result<PathBuf> {
    use std::hash::{Hash as _, Hasher as _};
    let files = contents();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    files.hash(&mut h);
    DRIVER_SONAMES.hash(&mut h);
    let dir = base.join(format!("lib-{:016x}", h.finish()));
    let names = files.iter().map(|(n, _)| n.as_str()).chain(DRIVER_SONAMES);
    if names.into_iter().all(|n| dir.join(n).symlink_metadata().is_ok()) {
        return Ok(dir);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let tmp = |name: &str| dir.join(format!(".{name}.{}", std::process::id()));
    for (name, bytes) in &files {
        std::fs::write(tmp(name), bytes).with_context(|| format!("writing {}", tmp(name).display()))?;
        std::fs::set_permissions(tmp(name), std::fs::Permissions::from_mode(0o755))?;
        std::fs::rename(tmp(name), dir.join(name))
            .with_context(|| format!("installing {name} in {}", dir.display()))?;
    }
    for name in DRIVER_SONAMES {
        let _ = std::fs::remove_file(tmp(name));
        std::os::unix::fs::symlink("libgpupool.so", tmp(name)).with_context(|| format!("linking {name}"))?;
        std::fs::rename(tmp(name), dir.join(name))
            .with_context(|| format!("installing {name} in {}", dir.display()))?;
    }
    Ok(dir)
}
