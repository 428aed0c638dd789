//! A terminal program under test in a detached tmux session on a private tmux server: start
//! it, wait for what its screen must show, send keys, and stop it.

use std::process::Command;
use std::time::{Duration, Instant};

/// One tmux server (socket named after the test process and `name`) with one session.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// Runs `command` (a shell line) in a `width`x`height` terminal.
    pub fn start(name: &str, command: &str, width: u16, height: u16) -> Tmux {
        let t = Tmux { socket: format!("gpupool-{name}-{}", std::process::id()) };
        let (w, h) = (width.to_string(), height.to_string());
        t.run(&["new-session", "-d", "-s", "main", "-x", &w, "-y", &h, command]);
        t
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux (scripts/test installs it)");
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// What the terminal shows now.
    pub fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "main"])
    }

    /// Waits until the screen shows every string of `want` (at most `timeout`); returns it.
    pub fn screen_with(&self, want: &[&str], timeout: Duration) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if want.iter().all(|w| s.contains(w)) {
                return s;
            }
            assert!(t0.elapsed() < timeout, "the screen never showed {want:?}:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn send_keys(&self, keys: &str) {
        self.run(&["send-keys", "-t", "main", keys]);
    }

    /// Whether the program still runs (its session exists).
    pub fn running(&self) -> bool {
        Command::new("tmux")
            .args(["-L", &self.socket, "has-session", "-t", "main"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ =
            Command::new("tmux").args(["-L", &self.socket, "kill-server"]).stderr(std::process::Stdio::null()).status();
    }
}
