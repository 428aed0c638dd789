//! AI Core utilization as DCMI reports it: the share of the last second each device spent
//! running operators (overlapping streams count once, capped at 100%).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_secs(1);

/// Each device's recent operator runs, oldest first.
type Spans = HashMap<u32, VecDeque<(Instant, Instant)>>;

static BUSY: Mutex<Option<Spans>> = Mutex::new(None);

/// Records that `device` ran an operator from `start` to `end`.
pub fn busy(device: u32, start: Instant, end: Instant) {
    let mut g = BUSY.lock().unwrap_or_else(|e| e.into_inner());
    let q = g.get_or_insert_with(HashMap::new).entry(device).or_default();
    q.push_back((start, end));
    while q.front().is_some_and(|&(_, e)| end.saturating_duration_since(e) > WINDOW) {
        q.pop_front();
    }
}

/// Percent of the last second `device` was running operators.
pub fn percent(device: u32) -> u32 {
    let now = Instant::now();
    let from = now.checked_sub(WINDOW).unwrap_or(now);
    let g = BUSY.lock().unwrap_or_else(|e| e.into_inner());
    let Some(q) = g.as_ref().and_then(|m| m.get(&device)) else { return 0 };
    let mut spans: Vec<(Instant, Instant)> =
        q.iter().filter(|&&(_, e)| e > from).map(|&(s, e)| (s.max(from), e.min(now))).collect();
    spans.sort();
    let mut total = Duration::ZERO;
    let mut cur: Option<(Instant, Instant)> = None;
    for (s, e) in spans {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    ((total.as_secs_f64() / WINDOW.as_secs_f64() * 100.0).round() as u32).min(100)
}
