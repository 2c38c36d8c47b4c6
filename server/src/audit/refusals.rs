//! Refused calls (bad token, missing scope) as bounded audit rows: a flood from one source costs
//! a few records, not one per call.
//!
//! Only calls whose caller is unknown (no valid token) are counted so: a known caller's
//! refusals are each recorded, and its token can be revoked. The first refusal of a source for
//! a reason (and session) within [`WINDOW_MS`] is recorded as it comes; the ones after it are
//! counted, and once the window is over one record says "N more refused
//! calls from ADDR, first .. last". A caller's rpc name is recorded through [`rpc_name`]: only
//! an rpc of this service as sent, any other path as `unknown` with its length, so a client
//! cannot grow a record with the path it sends.

use std::collections::HashMap;

use super::Entry;

/// How long refusals of one source and reason are counted into one record.
pub const WINDOW_MS: i64 = 10_000;

/// Most (source, reason) pairs counted at once; past it, refusals of new pairs count under
/// one pair for every source, so the map stays bounded whatever addresses a flood uses.
const MAX_TALLIES: usize = 1024;

/// The longest rpc name kept as sent (every rpc of this service is shorter).
const MAX_RPC: usize = 96;

/// The rpc name a refused call's record holds: the path when it is an rpc of this service
/// (`/browserpool.v1.Sessions/Acquire`, reflection, health), else `unknown (N bytes)`.
pub fn rpc_name(path: &str) -> String {
    let known = path.len() <= MAX_RPC
        && ["/browserpool.v1.", "/grpc.health.v1.", "/grpc.reflection."].iter().any(|p| path.starts_with(p))
        && path[1..].split('/').count() == 2
        && path.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/' || b == b'_');
    if known {
        path.to_string()
    } else {
        format!("unknown ({} bytes)", path.len())
    }
}

/// A session id a client sent, as a record may hold it: as sent when it looks like one of
/// ours (short, plain characters), else `unknown (N bytes)`.
pub fn id_name(id: &str) -> String {
    if id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        id.to_string()
    } else {
        format!("unknown ({} bytes)", id.len())
    }
}

#[derive(Debug)]
struct Tally {
    first_ms: i64,
    last_ms: i64,
    /// Refusals after the one recorded when the window opened.
    more: u64,
    /// The first refusal's record, whose fields the closing record repeats.
    entry: Entry,
}

impl Tally {
    /// The window's closing record: none when nothing came after its first refusal.
    fn closing(self, source: &str) -> Option<Entry> {
        (self.more > 0).then(|| Entry {
            target: format!(
                "{} more refused calls from {source} between {} and {} (ms since the epoch)",
                self.more, self.first_ms, self.last_ms
            ),
            ..self.entry
        })
    }
}

/// The open windows, per (source, reason, session named).
#[derive(Debug, Default)]
pub struct Refusals {
    tallies: HashMap<(String, String, String), Tally>,
    /// Closing records of windows a new refusal ended before a sweep did.
    closed: Vec<Entry>,
}

impl Refusals {
    /// A refusal from `source` at `now_ms`: the record to write now, if any (the first of its
    /// window), else `None` (counted into the window's closing record).
    pub fn refused(&mut self, source: &str, mut entry: Entry, now_ms: i64) -> Option<Entry> {
        let mut key = (source.to_string(), entry.code.clone(), entry.session_id.clone());
        if !self.tallies.contains_key(&key) && self.tallies.len() >= MAX_TALLIES {
            key.0 = "many sources".into();
        }
        match self.tallies.get_mut(&key) {
            Some(tally) if now_ms - tally.first_ms < WINDOW_MS => {
                tally.more += 1;
                tally.last_ms = now_ms;
                None
            }
            _ => {
                entry.target = format!("refused call from {}", key.0);
                let tally = Tally { first_ms: now_ms, last_ms: now_ms, more: 0, entry: entry.clone() };
                if let Some(ended) = self.tallies.insert(key.clone(), tally) {
                    self.closed.extend(ended.closing(&key.0));
                }
                Some(entry)
            }
        }
    }

    /// The closing records of every window over at `now_ms` (all of them with `all`, at
    /// shutdown); windows without a further refusal close without a record.
    pub fn sweep(&mut self, now_ms: i64, all: bool) -> Vec<Entry> {
        let mut out = std::mem::take(&mut self.closed);
        self.tallies.retain(|(source, _, _), tally| {
            if all || now_ms - tally.first_ms >= WINDOW_MS {
                let ended =
                    std::mem::replace(tally, Tally { first_ms: 0, last_ms: 0, more: 0, entry: Entry::default() });
                out.extend(ended.closing(source));
                false
            } else {
                true
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(rpc: &str) -> Entry {
        Entry { rpc: rpc.into(), outcome: "denied".into(), code: "Unauthenticated".into(), ..Default::default() }
    }

    #[test]
    fn rpc_names_are_this_service_s_or_a_fixed_word() {
        assert_eq!(rpc_name("/browserpool.v1.Sessions/Acquire"), "/browserpool.v1.Sessions/Acquire");
        assert_eq!(rpc_name("/grpc.health.v1.Health/Check"), "/grpc.health.v1.Health/Check");
        let long = format!("/browserpool.v1.Sessions/{}", "A".repeat(8000));
        assert_eq!(rpc_name(&long), format!("unknown ({} bytes)", long.len()));
        assert_eq!(rpc_name("/x/\n forged line"), "unknown (16 bytes)");
        assert_eq!(rpc_name("/browserpool.v1.Sessions/Get/extra"), "unknown (34 bytes)");
        assert_eq!(id_name("s-0f3a"), "s-0f3a");
        assert_eq!(id_name(&"a".repeat(65)), "unknown (65 bytes)");
        assert_eq!(id_name("s-1\nforged"), "unknown (10 bytes)");
    }

    #[test]
    fn a_flood_from_one_source_costs_two_records_a_window() {
        let mut r = Refusals::default();
        let first = r
            .refused("10.0.0.1", refusal(&rpc_name(&format!("/{}", "x".repeat(8192)))), 0)
            .expect("the first is recorded");
        assert_eq!(first.rpc, "unknown (8193 bytes)");
        assert_eq!(first.target, "refused call from 10.0.0.1");
        for t in 1..10_000 {
            assert!(r.refused("10.0.0.1", refusal("/browserpool.v1.Admin/ListTenants"), t % WINDOW_MS).is_none());
        }
        // Another source and another reason each open their own window.
        assert!(r.refused("10.0.0.2", refusal("/a"), 5).is_some());
        let denied = Entry { code: "PermissionDenied".into(), ..refusal("/browserpool.v1.Admin/ListTenants") };
        assert!(r.refused("10.0.0.1", denied, 6).is_some());
        assert!(r.sweep(WINDOW_MS - 1, false).is_empty(), "windows still open");
        let closed = r.sweep(WINDOW_MS + 10, false);
        assert_eq!(closed.len(), 1, "only the window with more refusals gives a record: {closed:?}");
        assert!(closed[0].target.starts_with("9999 more refused calls from 10.0.0.1 between 0 and"), "{closed:?}");
        assert!(r.tallies.is_empty());
    }

    #[test]
    fn a_window_that_ends_by_the_next_refusal_is_not_lost() {
        let mut r = Refusals::default();
        assert!(r.refused("h", refusal("/a"), 0).is_some());
        assert!(r.refused("h", refusal("/a"), 1).is_none());
        assert!(r.refused("h", refusal("/a"), WINDOW_MS + 1).is_some(), "a new window opens");
        let closed = r.sweep(WINDOW_MS + 2, false);
        assert_eq!(closed.len(), 1, "{closed:?}");
        assert!(closed[0].target.starts_with("1 more refused calls from h "), "{closed:?}");
        assert!(r.sweep(i64::MAX, true).is_empty(), "the new window has no further refusal");
    }

    #[test]
    fn sources_are_bounded() {
        let mut r = Refusals::default();
        for i in 0..(MAX_TALLIES + 500) {
            r.refused(&format!("10.1.{}.{}", i / 256, i % 256), refusal("/a"), 1);
        }
        assert_eq!(r.tallies.len(), MAX_TALLIES + 1, "one shared window past the cap");
        let closed = r.sweep(0, true);
        assert_eq!(closed.len(), 1);
        assert!(closed[0].target.starts_with("499 more refused calls from many sources"), "{closed:?}");
    }
}
