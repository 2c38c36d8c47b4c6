//! The service's own counters and histograms for `/metrics` (Prometheus text format), kept in
//! atomics so recording never waits: acquires and actions by outcome, how long acquires
//! waited and actions ran. Gauges (workers, queues, sessions) are read when scraped.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the histograms' buckets, in seconds (`+Inf` is implied).
const BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// A Prometheus histogram with fixed buckets.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// Sum in microseconds.
    sum_us: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            if secs <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(d.as_micros().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {}", bucket.load(Ordering::Relaxed));
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {sum}\n{name}_count{braces} {count}");
    }
}

/// The service's counters. Cheap to share (`Arc`).
#[derive(Debug, Default)]
pub struct Metrics {
    acquire_wait: Histogram,
    acquires: Mutex<BTreeMap<&'static str, u64>>,
    /// Per canonical action name (a bounded set; unknown names count as `unknown`).
    action_duration: Mutex<BTreeMap<String, std::sync::Arc<Histogram>>>,
    actions: Mutex<BTreeMap<(String, &'static str), u64>>,
}

impl Metrics {
    /// An `Acquire` ended: `outcome` is `ok`, `queue_full`, `timeout`, `unavailable` or
    /// `error`; `waited` is how long it took.
    pub fn acquired(&self, outcome: &'static str, waited: Duration) {
        self.acquire_wait.observe(waited);
        *self.acquires.lock().unwrap_or_else(|e| e.into_inner()).entry(outcome).or_default() += 1;
    }

    /// An action ended (`action` canonical, or `unknown`).
    pub fn acted(&self, action: &str, ok: bool, took: Duration) {
        let histogram = self
            .action_duration
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(action.to_string())
            .or_default()
            .clone();
        histogram.observe(took);
        let outcome = if ok { "ok" } else { "error" };
        *self.actions.lock().unwrap_or_else(|e| e.into_inner()).entry((action.to_string(), outcome)).or_default() += 1;
    }

    /// Appends the counters and histograms in Prometheus text format.
    pub fn write(&self, out: &mut String) {
        let name = "browserpool_acquire_wait_seconds";
        let _ = writeln!(out, "# HELP {name} How long Acquire calls took, queueing included.\n# TYPE {name} histogram");
        self.acquire_wait.write(out, name, "");
        let name = "browserpool_acquires_total";
        let _ = writeln!(out, "# HELP {name} Acquire calls by outcome.\n# TYPE {name} counter");
        for (outcome, n) in self.acquires.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = writeln!(out, "{name}{{outcome=\"{outcome}\"}} {n}");
        }
        let name = "browserpool_action_duration_seconds";
        let _ = writeln!(out, "# HELP {name} How long actions ran, by canonical action.\n# TYPE {name} histogram");
        let histograms: Vec<_> = self
            .action_duration
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(a, h)| (a.clone(), h.clone()))
            .collect();
        for (action, histogram) in histograms {
            histogram.write(out, name, &format!("action=\"{action}\""));
        }
        let name = "browserpool_actions_total";
        let _ = writeln!(out, "# HELP {name} Actions by canonical action and outcome.\n# TYPE {name} counter");
        for ((action, outcome), n) in self.actions.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = writeln!(out, "{name}{{action=\"{action}\",outcome=\"{outcome}\"}} {n}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counters_by_label() {
        let m = Metrics::default();
        m.acquired("ok", Duration::from_millis(3));
        m.acquired("ok", Duration::from_millis(700));
        m.acquired("timeout", Duration::from_secs(60));
        m.acted("navigate", true, Duration::from_millis(40));
        m.acted("navigate", false, Duration::from_millis(40));
        let mut out = String::new();
        m.write(&mut out);
        assert!(out.contains("browserpool_acquire_wait_seconds_bucket{le=\"0.005\"} 1\n"), "{out}");
        assert!(out.contains("browserpool_acquire_wait_seconds_bucket{le=\"1\"} 2\n"), "{out}");
        assert!(out.contains("browserpool_acquire_wait_seconds_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("browserpool_acquire_wait_seconds_count 3\n"), "{out}");
        assert!(out.contains("browserpool_acquires_total{outcome=\"ok\"} 2\n"), "{out}");
        assert!(out.contains("browserpool_acquires_total{outcome=\"timeout\"} 1\n"), "{out}");
        assert!(
            out.contains("browserpool_action_duration_seconds_bucket{action=\"navigate\",le=\"0.05\"} 2\n"),
            "{out}"
        );
        assert!(out.contains("browserpool_action_duration_seconds_sum{action=\"navigate\"} 0.08\n"), "{out}");
        assert!(out.contains("browserpool_actions_total{action=\"navigate\",outcome=\"error\"} 1\n"), "{out}");
    }
}
