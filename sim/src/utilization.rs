//! Busy time of a simulated device, as NVML reports it: the share of the last
//! second during which at least one kernel (or, for memory, one copy or memset) was
//! running. Measured from what the stream workers actually executed.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    Kernel = 0,
    Memory = 1,
}

pub const WINDOW: Duration = Duration::from_secs(1);
const MAX_INTERVALS: usize = 4096;

#[derive(Default)]
struct ChannelState {
    active: u32,
    since: Option<Instant>,
    /// Closed busy intervals, oldest first, merged when they touch.
    intervals: VecDeque<(Instant, Instant)>,
}

#[derive(Default)]
pub struct Utilization {
    channels: Mutex<[ChannelState; 2]>,
}

impl Utilization {
    pub fn begin(&self, ch: Channel) {
        let mut c = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut c[ch as usize];
        if s.active == 0 {
            s.since = Some(Instant::now());
        }
        s.active += 1;
    }

    pub fn end(&self, ch: Channel) {
        let mut c = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut c[ch as usize];
        s.active = s.active.saturating_sub(1);
        if s.active == 0
            && let Some(start) = s.since.take()
        {
            let now = Instant::now();
            match s.intervals.back_mut() {
                Some(last) if last.1 >= start => last.1 = now,
                _ => s.intervals.push_back((start, now)),
            }
            while s.intervals.len() > MAX_INTERVALS
                || s.intervals.front().is_some_and(|i| now.duration_since(i.1) > WINDOW)
            {
                s.intervals.pop_front();
            }
        }
    }

    /// Percent (0..=100) of the last [`WINDOW`] during which the channel was busy.
    pub fn percent(&self, ch: Channel) -> u32 {
        let now = Instant::now();
        let from = now.checked_sub(WINDOW).unwrap_or(now);
        let c = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let s = &c[ch as usize];
        let mut busy = Duration::ZERO;
        let clip = |a: Instant, b: Instant| if b > a.max(from) { b - a.max(from) } else { Duration::ZERO };
        for &(a, b) in &s.intervals {
            busy += clip(a, b);
        }
        if let Some(a) = s.since {
            busy += clip(a, now);
        }
        ((busy.as_secs_f64() / WINDOW.as_secs_f64()) * 100.0).round().min(100.0) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_is_zero_and_busy_is_counted() {
        let u = Utilization::default();
        assert_eq!(u.percent(Channel::Kernel), 0);
        u.begin(Channel::Kernel);
        std::thread::sleep(Duration::from_millis(300));
        let during = u.percent(Channel::Kernel);
        u.end(Channel::Kernel);
        assert!((20..=60).contains(&during), "{during}");
        assert!(u.percent(Channel::Kernel) >= 20);
        assert_eq!(u.percent(Channel::Memory), 0, "channels are separate");
    }
}
