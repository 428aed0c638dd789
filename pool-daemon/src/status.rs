//! `gpupool status [--json] [--endpoint ADDR]`: reads the daemon's control socket
//! (`<socket>.ctl`, which answers one JSON document per connection and closes it) and
//! prints it as JSON or as tables.

use crate::daemon::listener::{control_path, default_socket_path, parse_endpoint};
use anyhow::{Context as _, Result};
use serde_json::Value;
use std::io::Read as _;
use std::os::unix::net::UnixStream;
use std::time::Duration;

pub fn endpoint(arg: Option<String>) -> Result<std::path::PathBuf> {
    match arg.or_else(|| std::env::var("GPUPOOL_ENDPOINT").ok().filter(|s| !s.is_empty())) {
        Some(e) => parse_endpoint(&e),
        None => Ok(default_socket_path()),
    }
}

pub fn fetch(socket: &std::path::Path) -> Result<Value> {
    let ctl = control_path(socket);
    let mut s = UnixStream::connect(&ctl).with_context(|| format!("no gpupool daemon answers on {}", ctl.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut text = String::new();
    s.read_to_string(&mut text).context("reading the daemon's status")?;
    serde_json::from_str(&text).context("the daemon's status is not JSON")
}

/// A JSON value as plain text (strings without quotes), for padding in tables.
fn txt(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

fn mib(v: &Value) -> String {
    v.as_u64().map_or_else(|| "unlimited".to_string(), |b| format!("{} MiB", b >> 20))
}

pub fn run(json: bool, endpoint_arg: Option<String>) -> Result<()> {
    let doc = fetch(&endpoint(endpoint_arg)?)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    let d = &doc["daemon"];
    let v = d["driver_version"].as_u64().unwrap_or(0);
    println!(
        "daemon pid {} on {} (driver {}.{}, config {})",
        d["pid"],
        d["endpoints"],
        v / 1000,
        v % 1000 / 10,
        d["config"].as_str().unwrap_or("built-in default")
    );
    println!("\nDEVICE  NAME                                 MEMORY");
    for dev in doc["devices"].as_array().into_iter().flatten() {
        println!(
            "{:<7} {:<36} {}",
            txt(&dev["ordinal"]),
            dev["name"].as_str().unwrap_or("?"),
            mib(&dev["total_memory"])
        );
    }
    println!("\nTENANT               SESSIONS  DEVICE  USED           QUOTA          COMPUTE          SHARE 1s/10s");
    for t in doc["tenants"].as_array().into_iter().flatten() {
        for dev in t["devices"].as_array().into_iter().flatten() {
            println!(
                "{:<20} {:<9} {:<7} {:<14} {:<14} {:<16} {}",
                t["tenant"].as_str().unwrap_or("?"),
                txt(&t["sessions"]),
                txt(&dev["device"]),
                format!("{} MiB", dev["used"].as_u64().unwrap_or(0) as f64 / 1048576.0),
                mib(&dev["quota"]),
                format!(
                    "{}% {} {}",
                    txt(&t["compute"]),
                    t["mode"].as_str().unwrap_or("?"),
                    t["priority"].as_str().unwrap_or("?")
                ),
                match &dev["compute"] {
                    Value::Null => "-".to_string(),
                    c => format!(
                        "{:.1}% / {:.1}%",
                        c["share_1s"].as_f64().unwrap_or(0.0) * 100.0,
                        c["share_10s"].as_f64().unwrap_or(0.0) * 100.0
                    ),
                }
            );
        }
    }
    println!("\nTENANT               PAGE-LOCKED HOST MEMORY / QUOTA");
    for t in doc["tenants"].as_array().into_iter().flatten() {
        println!("{:<20} {} / {}", t["tenant"].as_str().unwrap_or("?"), mib(&t["pinned"]), mib(&t["pinned_quota"]));
    }
    println!("\nSESSION  PID      UID    TENANT               CLIENT");
    for s in doc["sessions"].as_array().into_iter().flatten() {
        println!(
            "{:<8} {:<8} {:<6} {:<20} {}",
            txt(&s["id"]),
            txt(&s["pid"]),
            txt(&s["uid"]),
            s["tenant"].as_str().unwrap_or("?"),
            s["client"].as_str().unwrap_or("")
        );
    }
    Ok(())
}
