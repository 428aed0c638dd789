//! The daemon's sockets: `--sim`, stale sockets, a socket in use, mode 0660.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn sim_daemon_replaces_a_stale_socket_and_refuses_a_live_one() {
    let d = Daemon::start(None);
    // A second daemon on the same (live) socket is refused.
    let out = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["daemon", "--sim", "--listen", &d.endpoint()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use by a running daemon"));
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);

    // A stale socket (nobody listening) is replaced; --sim finds the simulator.
    let dir = d.dir.join("stale");
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("s.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["daemon", "--sim", "--listen", &format!("unix://{}", sock.display())])
        .env("GPUPOOL_SIM_DEVICES", "1")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let mut client = loop {
        if let Ok(s) = std::os::unix::net::UnixStream::connect(&sock) {
            drop(s);
            break Client::connect(&sock);
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "daemon --sim did not come up");
        std::thread::sleep(Duration::from_millis(10));
    };
    let ctx = client.ctx(0);
    client.alloc(ctx, MIB).unwrap();
    let _ = child.kill();
    let _ = child.wait();
}
