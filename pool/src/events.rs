//! Live events of one worker, fanned out to any number of readers without ever blocking the
//! browser: a bounded broadcast ring; a reader that falls behind loses the oldest events and
//! is told how many.

use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use tokio::sync::broadcast;

/// How many events a reader may fall behind before it starts losing them.
pub const EVENT_RING: usize = 4096;

/// Kinds of dialog, as the wire names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialogKind {
    Alert,
    Confirm,
    Prompt,
    BeforeUnload,
    BasicAuth,
    Permission,
}

/// A dialog as the client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct DialogInfo {
    pub kind: DialogKind,
    pub message: String,
    pub url: String,
    pub default_prompt: String,
    /// The selector-grammar lines that answer it, e.g. `click dialog::accept`.
    pub grammar: Vec<String>,
    pub tab_index: i32,
}

/// Something that happened in the browser (or to the session).
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    DialogOpened(DialogInfo),
    DialogClosed {
        kind: DialogKind,
        accepted: bool,
        tab_index: i32,
    },
    Console {
        level: String,
        text: String,
        tab_index: i32,
    },
    Navigated {
        url: String,
        tab_index: i32,
    },
    TabOpened {
        tab_index: i32,
        url: String,
    },
    TabClosed {
        tab_index: i32,
    },
    /// Pushed by the session owner just before `SessionEnded`: what the session leaves (files,
    /// recording) is not kept, and why (its tenant's artifact cap).
    ArtifactsRefused {
        reason: String,
    },
    /// Pushed by the session owner when the session ends; the last event of a worker.
    SessionEnded {
        state: String,
        reason: String,
    },
}

/// One event with its time.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub at: SystemTime,
    pub kind: EventKind,
}

/// The sending side; cloning shares the ring.
#[derive(Debug, Clone)]
pub struct EventHub {
    ring: Arc<Ring<Event>>,
}

impl Default for EventHub {
    fn default() -> Self {
        EventHub { ring: Arc::new(Ring::new(EVENT_RING)) }
    }
}

impl EventHub {
    /// Publishes an event; never waits (nobody listening is fine).
    pub fn emit(&self, kind: EventKind) {
        self.ring.send_with(|| Event { at: SystemTime::now(), kind });
    }

    /// A reader that sees every event from now on.
    pub fn subscribe(&self) -> EventReader {
        EventReader { rx: self.ring.subscribe() }
    }
}

/// A broadcast ring made at its first reader. A broadcast channel fills every slot as it is
/// made (an [`EVENT_RING`] of events is about 600 KiB, resident at once), and most sessions
/// and every warm worker have no reader of their events: a message sent with no reader is
/// dropped all the same, so a ring nobody reads need not exist.
#[derive(Debug)]
pub(crate) struct Ring<T> {
    capacity: usize,
    tx: OnceLock<broadcast::Sender<T>>,
}

impl<T: Clone> Ring<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        Ring { capacity, tx: OnceLock::new() }
    }

    /// Sends what `make` makes to the readers there are, if any (made only then).
    pub(crate) fn send_with(&self, make: impl FnOnce() -> T) {
        if let Some(tx) = self.tx.get().filter(|tx| tx.receiver_count() > 0) {
            let _ = tx.send(make());
        }
    }

    /// A reader of everything sent from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<T> {
        self.tx.get_or_init(|| broadcast::channel(self.capacity).0).subscribe()
    }
}

/// One reader of the ring.
pub struct EventReader {
    rx: broadcast::Receiver<Event>,
}

impl EventReader {
    /// The next event and how many were dropped just before it because this reader was slow.
    /// `None` when the worker is gone and everything was read.
    pub async fn next(&mut self) -> Option<(Event, u64)> {
        let mut dropped = 0u64;
        loop {
            match self.rx.recv().await {
                Ok(event) => return Some((event, dropped)),
                Err(broadcast::error::RecvError::Lagged(n)) => dropped += n,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slow_reader_loses_oldest_and_is_told_how_many() {
        let hub = EventHub::default();
        let mut reader = hub.subscribe();
        for i in 0..(EVENT_RING + 10) {
            hub.emit(EventKind::TabClosed { tab_index: i as i32 });
        }
        let (first, dropped) = reader.next().await.unwrap();
        assert_eq!(dropped, 10);
        assert_eq!(first.kind, EventKind::TabClosed { tab_index: 10 });
        let (second, dropped) = reader.next().await.unwrap();
        assert_eq!((second.kind, dropped), (EventKind::TabClosed { tab_index: 11 }, 0));
    }

    #[tokio::test]
    async fn a_ring_is_made_at_its_first_reader_and_events_before_it_are_nobody_s() {
        let hub = EventHub::default();
        let clone = hub.clone();
        clone.emit(EventKind::TabClosed { tab_index: 0 });
        assert!(hub.ring.tx.get().is_none(), "no reader, no ring");
        let mut reader = hub.subscribe();
        assert!(hub.ring.tx.get().is_some());
        clone.emit(EventKind::TabClosed { tab_index: 1 });
        let (event, dropped) = reader.next().await.unwrap();
        assert_eq!((event.kind, dropped), (EventKind::TabClosed { tab_index: 1 }, 0));
        // What is sent while its only reader is gone is not made, and not kept for the next.
        drop(reader);
        let made = std::sync::atomic::AtomicBool::new(false);
        hub.ring.send_with(|| {
            made.store(true, std::sync::atomic::Ordering::Relaxed);
            Event { at: SystemTime::now(), kind: EventKind::TabClosed { tab_index: 2 } }
        });
        assert!(!made.into_inner());
        let mut reader = hub.subscribe();
        clone.emit(EventKind::TabClosed { tab_index: 3 });
        assert_eq!(reader.next().await.unwrap().0.kind, EventKind::TabClosed { tab_index: 3 });
    }

    #[tokio::test]
    async fn reader_ends_when_hub_is_gone() {
        let hub = EventHub::default();
        let mut reader = hub.subscribe();
        hub.emit(EventKind::TabClosed { tab_index: 0 });
        drop(hub);
        assert!(reader.next().await.is_some());
        assert!(reader.next().await.is_none());
    }
}
