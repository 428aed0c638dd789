//! `gpupool cert`: a private CA and a daemon certificate it signs, for trials and small
//! sites. Clients trust the CA (`GPUPOOL_CA`), so the daemon's certificate can be
//! reissued (new names, renewal) without touching them.

use anyhow::{Context as _, Result, bail};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

pub fn run(out: &Path, names: &[String], days: u32) -> Result<()> {
    let names = if names.is_empty() { default_names() } else { names.to_vec() };
    let files = ["ca.pem", "ca.key", "cert.pem", "key.pem"].map(|f| out.join(f));
    if let Some(f) = files.iter().find(|f| f.exists()) {
        bail!("{} exists; not overwriting (choose another --out)", f.display());
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;

    let now = time_now();
    let until = now + std::time::Duration::from_secs(u64::from(days) * 86_400);
    let ca_key = KeyPair::generate().context("generating the CA key")?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, "gpupool CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    (ca.not_before, ca.not_after) = (now.into(), until.into());
    let ca_cert = ca.self_signed(&ca_key).context("signing the CA certificate")?;
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate().context("generating the daemon key")?;
    let mut leaf = CertificateParams::new(names.clone()).context("the names given")?;
    leaf.distinguished_name.push(DnType::CommonName, names[0].clone());
    (leaf.not_before, leaf.not_after) = (now.into(), until.into());
    let cert = leaf.signed_by(&key, &issuer).context("signing the daemon certificate")?;

    write(&files[0], ca_cert.pem().as_bytes(), 0o644)?;
    write(&files[1], issuer.key().serialize_pem().as_bytes(), 0o600)?;
    write(&files[2], cert.pem().as_bytes(), 0o644)?;
    write(&files[3], key.serialize_pem().as_bytes(), 0o600)?;
    println!(
        "wrote {} (for clients: GPUPOOL_CA), {} and {} (daemon: --tls-cert, --tls-key), {}",
        files[0].display(),
        files[2].display(),
        files[3].display(),
        files[1].display()
    );
    println!("names: {}; valid {days} days", names.join(", "));
    Ok(())
}

fn default_names() -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(h) = rustix::system::uname().nodename().to_str()
        && !h.is_empty()
    {
        names.push(h.to_string());
    }
    names.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
    names
}

fn time_now() -> std::time::SystemTime {
    std::time::SystemTime::now()
}

/// Creates `path` with `mode` (never following or replacing an existing file).
fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("writing {}", path.display()))
}
