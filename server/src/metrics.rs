//! The service's metrics for `/metrics`, through `prometheus-client`: its counters and
//! histograms (acquires and actions by outcome, how long acquires waited and actions ran) live
//! as long as the server and are recorded without waiting; each scrape builds a [`Scrape`] of
//! them plus the gauges read then (workers, queues, sessions, the audit trail), typed label sets
//! throughout, and encodes it as OpenMetrics text.

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

/// The media type of what [`Scrape::encode`] writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the histograms' buckets, in seconds (`+Inf` is implied).
const BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// How an `Acquire` ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AcquireLabels {
    outcome: &'static str,
}

/// A canonical action's name (`unknown` for names that are not actions: a client's string is
/// never a label).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionOutcomeLabels {
    action: String,
    outcome: Outcome,
}

/// What became of a recording at its session's end: `kept`, `dropped` (its mode did not keep it
/// for that end), `refused` (the tenant's cap) or `failed` (encoding or disk).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RecordingLabels {
    outcome: &'static str,
}

/// Network bytes of ended sessions: their tenant, their upstream proxy (empty: straight out)
/// and `sent` or `received`. Tenants and proxies are an admin's ids, never a client's string.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NetworkLabels {
    tenant: String,
    proxy: String,
    direction: &'static str,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
enum Outcome {
    ok,
    error,
}

/// The service's counters and histograms. Cheap to share (`Arc`); clones of its metrics read
/// the same values.
#[derive(Debug)]
pub struct Metrics {
    acquire_wait: Histogram,
    acquires: Family<AcquireLabels, Counter>,
    action_duration: Family<ActionLabels, Histogram, fn() -> Histogram>,
    actions: Family<ActionOutcomeLabels, Counter>,
    recordings: Family<RecordingLabels, Counter>,
    recorded_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    stored: Family<RecordingLabels, Counter>,
    live_viewers: prometheus_client::metrics::gauge::Gauge,
    live_frames: Counter,
    live_dropped: Counter,
    network_bytes: Family<NetworkLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            acquire_wait: histogram(),
            acquires: Family::default(),
            action_duration: Family::new_with_constructor(histogram),
            actions: Family::default(),
            recordings: Family::default(),
            recorded_seconds: Counter::default(),
            stored: Family::default(),
            live_viewers: Default::default(),
            live_frames: Counter::default(),
            live_dropped: Counter::default(),
            network_bytes: Family::default(),
        }
    }
}

impl Metrics {
    /// An `Acquire` ended: `outcome` is `ok`, `queue_full`, `timeout`, `unavailable`,
    /// `refused` or `error`; `waited` is how long it took.
    pub fn acquired(&self, outcome: &'static str, waited: Duration) {
        self.acquire_wait.observe(waited.as_secs_f64());
        self.acquires.get_or_create(&AcquireLabels { outcome }).inc();
    }

    /// An action ended (`action` canonical, or `unknown`).
    pub fn acted(&self, action: &str, ok: bool, took: Duration) {
        let action = action.to_string();
        self.action_duration.get_or_create(&ActionLabels { action: action.clone() }).observe(took.as_secs_f64());
        let outcome = if ok { Outcome::ok } else { Outcome::error };
        self.actions.get_or_create(&ActionOutcomeLabels { action, outcome }).inc();
    }

    /// A recording ended with its session: how long it was, and what became of it (see
    /// `RecordingLabels`).
    pub fn recorded(&self, length: Duration, outcome: &'static str) {
        self.recorded_seconds.inc_by(length.as_secs_f64());
        self.recordings.get_or_create(&RecordingLabels { outcome }).inc();
    }

    /// An ended session's artifacts were copied to the object store (`stored`), or could not
    /// be (`failed`: retried by the sweep while they are kept here).
    pub fn stored(&self, outcome: &'static str) {
        self.stored.get_or_create(&RecordingLabels { outcome }).inc();
    }

    /// A live viewer came (`1`) or left (`-1`).
    pub fn live_viewers(&self, delta: i64) {
        self.live_viewers.inc_by(delta);
    }

    /// A frame was sent to a live viewer.
    pub fn live_frame_sent(&self) {
        self.live_frames.inc();
    }

    /// A live viewer skipped `n` frames: newer ones came before it took the last (a slow
    /// viewer gets the latest picture, never a queue).
    pub fn live_frames_dropped(&self, n: u64) {
        self.live_dropped.inc_by(n);
    }

    /// A session ended having carried `bytes` (sent, received) over the network.
    pub fn network_bytes(&self, tenant: &str, proxy: &str, bytes: (u64, u64)) {
        for (direction, n) in [("sent", bytes.0), ("received", bytes.1)] {
            let labels = NetworkLabels { tenant: tenant.to_string(), proxy: proxy.to_string(), direction };
            self.network_bytes.get_or_create(&labels).inc_by(n);
        }
    }

    /// Puts the counters and histograms in `scrape`.
    pub fn scraped(&self, scrape: &mut Scrape) {
        scrape.add(
            "browserpool_acquire_wait_seconds",
            "How long Acquire calls took, queueing included",
            self.acquire_wait.clone(),
        );
        scrape.add("browserpool_acquires", "Acquire calls by outcome", self.acquires.clone());
        scrape.add(
            "browserpool_action_duration_seconds",
            "How long actions ran, by canonical action",
            self.action_duration.clone(),
        );
        scrape.add("browserpool_actions", "Actions by canonical action and outcome", self.actions.clone());
        scrape.add(
            "browserpool_recordings",
            "Recordings at their session's end, by outcome (kept, dropped, refused, failed)",
            self.recordings.clone(),
        );
        scrape.add(
            "browserpool_recording_seconds",
            "Seconds of sessions recorded (kept or not)",
            self.recorded_seconds.clone(),
        );
        scrape.add(
            "browserpool_artifact_uploads",
            "Ended sessions' artifacts copied to --artifact-store, by outcome (stored, failed)",
            self.stored.clone(),
        );
        scrape.add(
            "browserpool_live_viewers",
            "People watching sessions through live view links now",
            self.live_viewers.clone(),
        );
        scrape.add("browserpool_live_frames", "Frames sent to live viewers", self.live_frames.clone());
        scrape.add(
            "browserpool_live_frames_dropped",
            "Frames a slow live viewer skipped (it got a newer one instead)",
            self.live_dropped.clone(),
        );
        scrape.add(
            "browserpool_network_bytes",
            "Bytes ended sessions' pages sent and received over the network, by tenant, upstream proxy and direction",
            self.network_bytes.clone(),
        );
    }
}

/// One scrape: one registry of everything `/metrics` answers.
#[derive(Debug, Default)]
pub struct Scrape {
    registry: Registry,
}

impl Scrape {
    /// Adds a metric. `name` is the family's (a counter's without `_total`, which the
    /// encoding adds); `help` is one sentence without its closing period (added too).
    pub fn add(&mut self, name: &str, help: &str, metric: impl Metric) {
        self.registry.register(name, help, metric);
    }

    /// A gauge read now.
    pub fn gauge(&mut self, name: &str, help: &str, value: u64) {
        let gauge = Gauge::<i64>::default();
        gauge.set(value.min(i64::MAX as u64) as i64);
        self.add(name, help, gauge);
    }

    /// A gauge per label set, read now.
    pub fn gauges<L>(&mut self, name: &str, help: &str, values: impl IntoIterator<Item = (L, u64)>)
    where
        L: EncodeLabelSet + Clone + Hash + Eq + Debug + Send + Sync + 'static,
    {
        let family = Family::<L, Gauge<i64>>::default();
        for (labels, value) in values {
            family.get_or_create(&labels).set(value.min(i64::MAX as u64) as i64);
        }
        self.add(name, help, family);
    }

    /// A counter kept elsewhere (an atomic), read now.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.counters(name, help, [(NoLabels {}, value)]);
    }

    /// A counter per label set, kept elsewhere, read now.
    pub fn counters<L>(&mut self, name: &str, help: &str, values: impl IntoIterator<Item = (L, u64)>)
    where
        L: EncodeLabelSet + Clone + Hash + Eq + Debug + Send + Sync + 'static,
    {
        let family = Family::<L, Counter>::default();
        for (labels, value) in values {
            family.get_or_create(&labels).inc_by(value);
        }
        self.add(name, help, family);
    }

    /// The OpenMetrics text, `# EOF` last.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// A metric without labels, in a family.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NoLabels {}

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
        let mut scrape = Scrape::default();
        m.scraped(&mut scrape);
        scrape.gauge("browserpool_workers_warm", "Workers booted and idle", 2);
        scrape.counter("browserpool_worker_cleanup_retries", "Deletes tried again", 5);
        let out = scrape.encode();
        for line in [
            "# HELP browserpool_acquire_wait_seconds How long Acquire calls took, queueing included.\n",
            "# TYPE browserpool_acquire_wait_seconds histogram\n",
            "browserpool_acquire_wait_seconds_bucket{le=\"0.005\"} 1\n",
            "browserpool_acquire_wait_seconds_bucket{le=\"1.0\"} 2\n",
            "browserpool_acquire_wait_seconds_bucket{le=\"+Inf\"} 3\n",
            "browserpool_acquire_wait_seconds_count 3\n",
            "# TYPE browserpool_acquires counter\n",
            "browserpool_acquires_total{outcome=\"ok\"} 2\n",
            "browserpool_acquires_total{outcome=\"timeout\"} 1\n",
            "browserpool_action_duration_seconds_bucket{le=\"0.05\",action=\"navigate\"} 2\n",
            "browserpool_action_duration_seconds_sum{action=\"navigate\"} 0.08\n",
            "browserpool_actions_total{action=\"navigate\",outcome=\"error\"} 1\n",
            "browserpool_workers_warm 2\n",
            "browserpool_worker_cleanup_retries_total 5\n",
        ] {
            assert!(out.contains(line), "{line:?} missing from:\n{out}");
        }
        assert!(out.ends_with("# EOF\n"), "{out}");
    }
}
