//! Time, a leaf every other module may use: wall-clock milliseconds, and the sessions' clock.
//!
//! The sessions' clock is ours: milliseconds since the epoch read at start, advanced by tokio's
//! monotonic clock. Deadlines then ignore wall-clock jumps, and tests drive them on paused
//! virtual time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Wall-clock milliseconds since the epoch (records' timestamps).
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Milliseconds since the epoch, advanced by tokio's clock (virtual when paused).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch_ms_at_start: i64,
    start: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock { epoch_ms_at_start: now_ms(), start: Instant::now() }
    }

    pub fn now_ms(&self) -> i64 {
        self.epoch_ms_at_start + self.start.elapsed().as_millis() as i64
    }

    /// The instant of `at_ms` on this clock (now, when it is past).
    pub(crate) fn instant_of(&self, at_ms: i64) -> Instant {
        let ahead = (at_ms - self.now_ms()).max(0) as u64;
        Instant::now() + Duration::from_millis(ahead)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}
