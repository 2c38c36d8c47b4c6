//! A budget per source address for calls that carry no valid token: past it, such calls are
//! refused `RESOURCE_EXHAUSTED` at once, saying when to retry. Calls with a valid token are
//! never counted nor refused here, so a legitimate client behind the same address as a
//! flooder (a NAT, a CI runner) is served as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Calls without a valid token an address may make per second, sustained.
pub const RATE: f64 = 10.0;
/// ... and in a burst (a misconfigured client's first retries all get the real answer).
pub const BURST: f64 = 50.0;
/// Addresses tracked at once; past it, those with a full budget are forgotten first.
const MAX_SOURCES: usize = 4096;

#[derive(Clone)]
pub struct Throttle {
    buckets: Arc<Mutex<HashMap<String, Bucket>>>,
    rate: f64,
    burst: f64,
}

struct Bucket {
    left: f64,
    at: Instant,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new(RATE, BURST)
    }
}

impl Throttle {
    pub fn new(rate: f64, burst: f64) -> Throttle {
        Throttle { buckets: Arc::default(), rate, burst }
    }

    /// Spends one of `source`'s calls; `Err(wait)` when its budget is spent, `wait` being
    /// when the next is allowed.
    pub fn spend(&self, source: &str, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_SOURCES && !buckets.contains_key(source) {
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, b| refilled(b, now, rate, burst) < burst);
            if buckets.len() >= MAX_SOURCES {
                buckets.clear();
            }
        }
        let bucket = buckets.entry(source.to_string()).or_insert(Bucket { left: self.burst, at: now });
        bucket.left = refilled(bucket, now, self.rate, self.burst);
        bucket.at = now;
        if bucket.left >= 1.0 {
            bucket.left -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.left) / self.rate))
        }
    }

    /// The refusal's words, naming this budget's rate.
    pub fn words(&self, source: &str, wait: Duration) -> String {
        format!(
            "too many calls without a valid token from {source} (more than {} a second); retry in {} ms, with a valid token",
            self.rate,
            wait.as_millis().max(1)
        )
    }
}

fn refilled(b: &Bucket, now: Instant, rate: f64, burst: f64) -> f64 {
    (b.left + now.saturating_duration_since(b.at).as_secs_f64() * rate).min(burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate_per_address() {
        let t = Throttle::new(10.0, 5.0);
        let t0 = Instant::now();
        for _ in 0..5 {
            assert!(t.spend("10.0.0.1", t0).is_ok());
        }
        let wait = t.spend("10.0.0.1", t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        assert!(t.spend("10.0.0.2", t0).is_ok(), "another address has its own budget");
        assert!(t.spend("10.0.0.1", t0 + Duration::from_millis(100)).is_ok(), "one call back per 100 ms");
        assert!(t.spend("10.0.0.1", t0 + Duration::from_millis(150)).is_err());
        for _ in 0..5 {
            assert!(t.spend("10.0.0.1", t0 + Duration::from_secs(60)).is_ok(), "refilled up to the burst");
        }
        assert!(t.spend("10.0.0.1", t0 + Duration::from_secs(60)).is_err(), "never past the burst");
        assert!(t.words("10.0.0.1", wait).contains("more than 10 a second); retry in 100 ms"));
    }

    #[test]
    fn the_table_is_bounded() {
        let t = Throttle::new(10.0, 5.0);
        let t0 = Instant::now();
        for i in 0..MAX_SOURCES + 10 {
            let _ = t.spend(&format!("a{i}"), t0);
        }
        assert!(t.buckets.lock().unwrap().len() <= MAX_SOURCES);
    }
}
