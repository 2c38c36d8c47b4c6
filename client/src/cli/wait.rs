//! A call that may wait long (an Acquire in the tenant's queue), shown while it waits: a
//! spinner with the seconds on a terminal, a plain line every 5 s in a CI log, each with the
//! call's place in the queue and what it waits for as the server reports them.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio_stream::StreamExt;

use crate::pb;

/// Acquires, showing the wait: through `AcquireWatched`, so the lines say the call's place
/// in the queue; a server without it (older) answers `Acquire` as before.
pub(super) async fn acquire(
    client: &crate::Client,
    show: Show,
    budget: Duration,
    req: pb::AcquireRequest,
) -> Result<pb::Session, tonic::Status> {
    let (said, heard) = watch::channel(None);
    let call = async {
        let mut sessions = client.sessions();
        let mut stream = match sessions.acquire_watched(req.clone()).await {
            Ok(stream) => stream.into_inner(),
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                return sessions.acquire(req).await.map(tonic::Response::into_inner);
            }
            Err(s) => return Err(s),
        };
        while let Some(progress) = stream.next().await {
            match progress?.progress {
                Some(pb::acquire_progress::Progress::Session(session)) => return Ok(session),
                Some(pb::acquire_progress::Progress::Waiting(w)) => {
                    let _ = said.send(Some(standing(&w)));
                }
                None => {}
            }
        }
        Err(tonic::Status::unknown("the server ended AcquireWatched without a session"))
    };
    waiting(show, "waiting for a browser", budget, heard, call).await
}

/// A wait report in words: `place 2 of 3 in tenant ci's queue; tenant ci is at its quota: ...`.
fn standing(w: &pb::AcquireWait) -> String {
    match w.position {
        0 => format!("tenant {}: {}", w.tenant, w.reason),
        place => format!("place {place} of {} in tenant {}'s queue; {}", w.queued, w.tenant, w.reason),
    }
}

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
/// ends) or, in a log, a line every 5 s, each with the latest word on where the call stands
/// (`standing`). Nothing is polled: the timer only ticks while the one call is pending.
/// `budget` is the longest the call waits (said in the lines).
pub(super) async fn waiting<F: Future>(
    show: Show,
    what: &str,
    budget: Duration,
    standing: watch::Receiver<Option<String>>,
    call: F,
) -> F::Output {
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
                let said = standing.borrow().clone();
                if show == Show::Lines && waited >= next_line {
                    next_line += LINE_EVERY;
                    eprintln!(
                        "{what}: {}s so far (waits up to {}); {}",
                        waited.as_secs(),
                        humantime::format_duration(budget),
                        said.as_deref().unwrap_or("every browser of the tenant is in use")
                    );
                }
                // A warm pool answers at once: no flicker for that.
                if show == Show::Spinner && waited >= Duration::from_millis(300) {
                    let spin = ['|', '/', '-', '\\'][frame % 4];
                    frame += 1;
                    shown = true;
                    let place = said.map(|s| format!("({s}) ")).unwrap_or_default();
                    eprint!("\r\x1b[2K{spin} {what}... {}s {place}", waited.as_secs());
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

    #[test]
    fn a_report_reads_as_the_place_in_the_queue_or_what_is_awaited() {
        let w = pb::AcquireWait {
            tenant: "ci".into(),
            position: 2,
            queued: 3,
            waited_ms: 5000,
            reason: "tenant ci is at its quota: 2 of its max_slots 2 sessions in use".into(),
        };
        assert_eq!(
            standing(&w),
            "place 2 of 3 in tenant ci's queue; tenant ci is at its quota: 2 of its max_slots 2 sessions in use"
        );
        let booting = pb::AcquireWait { position: 0, reason: "waiting for a browser to finish booting".into(), ..w };
        assert_eq!(standing(&booting), "tenant ci: waiting for a browser to finish booting");
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_returns_the_call_s_answer() {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            7
        };
        let (_said, heard) = watch::channel(None);
        assert_eq!(waiting(Show::Spinner, "waiting for a test", Duration::from_secs(30), heard.clone(), slow).await, 7);
        let slow = async {
            tokio::time::sleep(Duration::from_secs(11)).await;
            8
        };
        assert_eq!(waiting(Show::Lines, "waiting for a test", Duration::from_secs(30), heard, slow).await, 8);
    }
}
