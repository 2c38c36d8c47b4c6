//! Retrying `Acquire` while the service is full or briefly unreachable.

use std::time::Duration;

use browserpool_proto::tonic::Code;

use crate::Error;

/// How [`crate::Client::session`] retries an `Acquire` the server could not serve yet.
///
/// Only `RESOURCE_EXHAUSTED` (the tenant's queue is full) and `UNAVAILABLE` (the server is
/// draining, restarting, or could not be reached) are retried, with exponential backoff and
/// full jitter, until `overall` has passed since the first attempt. Actions are never
/// retried: a click or a navigation may have happened even when its answer was lost.
///
/// ```
/// use std::time::Duration;
/// use browserpool_client::Retry;
///
/// let patient = Retry { overall: Duration::from_secs(120), ..Retry::default() };
/// assert_eq!(patient.first_backoff, Duration::from_millis(200));
/// assert_eq!(Retry::never().overall, Duration::ZERO);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// Give up once this long has passed since the first attempt (the last error is returned).
    pub overall: Duration,
    /// The backoff before the second attempt; it doubles after each attempt.
    pub first_backoff: Duration,
    /// The longest backoff between two attempts.
    pub max_backoff: Duration,
}

impl Default for Retry {
    /// Up to 30 s overall, backoff 200 ms doubling to at most 5 s.
    fn default() -> Self {
        Retry {
            overall: Duration::from_secs(30),
            first_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl Retry {
    /// One attempt, no retry.
    pub fn never() -> Retry {
        Retry { overall: Duration::ZERO, ..Retry::default() }
    }

    /// Whether an `Acquire` that failed with `error` may be tried again.
    pub fn retries(error: &Error) -> bool {
        match error {
            Error::Status(status) => matches!(status.code(), Code::ResourceExhausted | Code::Unavailable),
            Error::Connect(_) => true,
            _ => false,
        }
    }

    /// The pause before attempt `attempt + 1` (`attempt` counts from 1): a uniformly random
    /// share of the capped exponential backoff, so many clients refused at once spread out.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let cap = self.first_backoff.saturating_mul(1u32 << attempt.saturating_sub(1).min(16)).min(self.max_backoff);
        cap.mul_f64(jitter())
    }

    /// Runs `attempt` until it succeeds, fails with an error that is not retried, or
    /// `overall` runs out.
    pub(crate) async fn run<T, F, Fut>(&self, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let started = tokio::time::Instant::now();
        let mut n = 0;
        loop {
            n += 1;
            let error = match attempt().await {
                Ok(value) => return Ok(value),
                Err(e) if Retry::retries(&e) => e,
                Err(e) => return Err(e),
            };
            let pause = self.backoff(n);
            if started.elapsed() + pause >= self.overall {
                return Err(error);
            }
            tokio::time::sleep(pause).await;
        }
    }
}

/// A number in [0, 1) from the OS's random source (0.5 if it fails).
fn jitter() -> f64 {
    let mut bytes = [0u8; 8];
    match getrandom::fill(&mut bytes) {
        Ok(()) => (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use browserpool_proto::tonic::Status;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn backoff_grows_to_its_cap_and_is_jittered() {
        let r = Retry {
            overall: Duration::from_secs(60),
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        for (attempt, cap) in [(1, 100), (2, 200), (3, 400), (4, 800), (5, 1000), (40, 1000)] {
            let pauses: Vec<Duration> = (0..50).map(|_| r.backoff(attempt)).collect();
            assert!(pauses.iter().all(|p| *p <= Duration::from_millis(cap)), "attempt {attempt}: {pauses:?}");
            assert!(pauses.windows(2).any(|w| w[0] != w[1]), "attempt {attempt}: no jitter in {pauses:?}");
        }
    }

    #[test]
    fn only_a_full_or_unreachable_service_is_retried() {
        assert!(Retry::retries(&Error::Status(Status::resource_exhausted("queue full"))));
        assert!(Retry::retries(&Error::Status(Status::unavailable("draining"))));
        assert!(!Retry::retries(&Error::Status(Status::deadline_exceeded("waited"))));
        assert!(!Retry::retries(&Error::Status(Status::permission_denied("scope"))));
        assert!(!Retry::retries(&Error::BadToken));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_success_or_the_overall_deadline() {
        let calls = AtomicU32::new(0);
        let r = Retry {
            overall: Duration::from_secs(10),
            first_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(100),
        };
        let got = r
            .run(|| async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0..=2 => Err(Error::Status(Status::resource_exhausted("full"))),
                    _ => Ok(7),
                }
            })
            .await;
        assert_eq!((got.unwrap(), calls.load(Ordering::SeqCst)), (7, 4));

        let calls = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let got: Result<(), Error> = r
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(Error::Status(Status::unavailable("down")))
            })
            .await;
        assert!(matches!(got, Err(Error::Status(ref s)) if s.code() == Code::Unavailable));
        assert!(started.elapsed() <= Duration::from_secs(10), "{:?}", started.elapsed());
        assert!(calls.load(Ordering::SeqCst) > 5);

        let calls = AtomicU32::new(0);
        let got: Result<(), Error> = Retry::never()
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(Error::Status(Status::resource_exhausted("full")))
            })
            .await;
        assert!(got.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "never means one attempt");

        let calls = AtomicU32::new(0);
        let got: Result<(), Error> = r
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(Error::Status(Status::not_found("no")))
            })
            .await;
        assert!(got.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "NOT_FOUND is not retried");
    }
}
