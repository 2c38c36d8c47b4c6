//! A call that may wait long (an Acquire in the tenant's queue), shown while it waits: a
//! spinner with the seconds on a terminal, a plain line every 5 s in a CI log.

use std::future::Future;
use std::time::Duration;

/// How a wait shows while it lasts.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Show {
    /// A spinner and the seconds waited, erased when it ends (stderr is a terminal).
    Spinner,
    /// A plain line every [`LINE_EVERY`] (a CI log: stderr is a file or a pipe).
    Lines,
}

/// How often a wait says it still waits, in a log.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// Awaits `call`; meanwhile, on stderr, a spinner with the seconds waited (erased when it
/// ends) or, in a log, a line every 5 s. Nothing is polled: the timer only ticks while the one
/// call is pending. `budget` is the longest the call waits (said in the lines).
pub(super) async fn waiting<F: Future>(show: Show, what: &str, budget: Duration, call: F) -> F::Output {
    use std::io::Write;
    tokio::pin!(call);
    let started = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut frame = 0usize;
    let (mut shown, mut next_line) = (false, LINE_EVERY);
    let out = loop {
        tokio::select! {
            out = &mut call => break out,
            _ = tick.tick() => {
                let waited = started.elapsed();
                if show == Show::Lines && waited >= next_line {
                    next_line += LINE_EVERY;
                    eprintln!(
                        "{what}: {}s so far (waits up to {}); every browser of the tenant is in use",
                        waited.as_secs(),
                        humantime::format_duration(budget)
                    );
                }
                // A warm pool answers at once: no flicker for that.
                if show == Show::Spinner && waited >= Duration::from_millis(300) {
                    let spin = ['|', '/', '-', '\\'][frame % 4];
                    frame += 1;
                    shown = true;
                    eprint!("\r{spin} {what}... {}s ", waited.as_secs());
                    let _ = std::io::stderr().flush();
                }
            }
        }
    };
    if shown {
        eprint!("\r\x1b[2K");
        let _ = std::io::stderr().flush();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waiting_returns_the_call_s_answer() {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            7
        };
        assert_eq!(waiting(Show::Spinner, "waiting for a test", Duration::from_secs(30), slow).await, 7);
        let slow = async {
            tokio::time::sleep(Duration::from_secs(11)).await;
            8
        };
        assert_eq!(waiting(Show::Lines, "waiting for a test", Duration::from_secs(30), slow).await, 8);
    }
}
