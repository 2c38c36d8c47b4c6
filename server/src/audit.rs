//! The audit trail: one record per RPC and per action, hash-chained, written off the hot path.
//!
//! One writer task per server takes entries from a channel in order, batches what is waiting,
//! and appends the batch in one transaction that holds the database's audit lock, reads the
//! tail and assigns `seq` and `hash = SHA-256(prev_hash || canonical record)`: replicas sharing
//! one database extend one chain, which cannot fork. Results do not wait for their record to
//! be durable (see ARCHITECTURE.md); instead, when a write fails the log turns unhealthy and
//! new actions are refused with UNAVAILABLE until a retry succeeds, so nothing runs
//! unrecorded for longer than one batch.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};

use crate::context::jcs;
use crate::sessions::now_ms;
use crate::store::Store;

/// What happened, before it has a place in the chain.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Entry {
    pub tenant: String,
    pub subject: String,
    pub jti_hash: String,
    pub session_id: String,
    pub rpc: String,
    pub action: String,
    pub alias_of: String,
    /// Session id, URL without its userinfo or query, selector, origin: never typed text or
    /// secrets.
    pub target: String,
    /// `ok`, `error` or `denied`.
    pub outcome: String,
    /// gRPC status or action error code on failure.
    pub code: String,
    pub duration_ms: u32,
}

/// A chained record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub seq: u64,
    pub at_ms: i64,
    pub entry: Entry,
    pub prev_hash: String,
    pub hash: String,
}

impl Record {
    /// The canonical (RFC 8785) JSON the hash covers.
    pub fn canonical(&self) -> String {
        let e = &self.entry;
        jcs(&json!({
            "seq": self.seq, "at": self.at_ms, "tenant": e.tenant, "subject": e.subject,
            "jtiHash": e.jti_hash, "sessionId": e.session_id, "rpc": e.rpc, "action": e.action,
            "aliasOf": e.alias_of, "target": e.target, "outcome": e.outcome, "code": e.code,
            "durationMs": e.duration_ms,
        }))
    }

    /// `SHA-256(prev_hash || canonical)`, lowercase hex.
    pub fn compute_hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.prev_hash.as_bytes());
        h.update(self.canonical().as_bytes());
        hex::encode(h.finalize())
    }
}

/// The sending side of the trail. Cheap to clone.
#[derive(Clone)]
pub struct AuditLog {
    tx: mpsc::UnboundedSender<Entry>,
    healthy: Arc<AtomicBool>,
}

impl AuditLog {
    /// The log and its writer; run the writer with [`Writer::run`].
    pub fn new(store: Store) -> (AuditLog, Writer) {
        let (tx, rx) = mpsc::unbounded_channel();
        let healthy = Arc::new(AtomicBool::new(true));
        (AuditLog { tx, healthy: healthy.clone() }, Writer { store, rx, healthy })
    }

    /// Queues a record; never waits.
    pub fn record(&self, entry: Entry) {
        let _ = self.tx.send(entry);
    }

    /// False while the store refuses writes: new actions must not run.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::SeqCst)
    }
}

/// The session an RPC is about: the auth layer puts one in each request's extensions, the
/// handler names the session (from the request, or the one Acquire created), and the layer's
/// RPC-level record carries it once the call returns.
#[derive(Debug, Clone, Default)]
pub struct RpcTarget(Arc<std::sync::Mutex<String>>);

impl RpcTarget {
    pub fn set(&self, session_id: &str) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = session_id.to_string();
    }

    pub fn take(&self) -> String {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Removes the userinfo, query and fragment of a URL (each may carry secrets).
pub fn url_target(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            // Fails only for URLs without a host, which have no userinfo either.
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => origin_target(url),
    }
}

/// An origin as a client wrote it (it may not be canonical), without userinfo, query or
/// fragment; unlike [`url_target`] it adds no trailing `/`.
pub fn origin_target(origin: &str) -> String {
    without_userinfo(origin.split(['?', '#']).next().unwrap_or_default())
}

/// Drops everything up to the last `@` of the authority, for text no URL parser accepts: the
/// authority is what follows `scheme:` and any slashes, up to the next `/`, `\`, `?` or `#`.
fn without_userinfo(text: &str) -> String {
    let Some(colon) = text.find(':') else { return text.to_string() };
    let rest = &text[colon + 1..];
    let slashes = rest.len() - rest.trim_start_matches(['/', '\\']).len();
    let authority = &rest[slashes..];
    let end = authority.find(['/', '\\', '?', '#']).unwrap_or(authority.len());
    match authority[..end].rfind('@') {
        Some(at) => format!("{}{}", &text[..colon + 1 + slashes], &authority[at + 1..]),
        None => text.to_string(),
    }
}

/// Owns the chain; the only code that appends to the audit table.
pub struct Writer {
    store: Store,
    rx: mpsc::UnboundedReceiver<Entry>,
    healthy: Arc<AtomicBool>,
}

const BATCH: usize = 256;

impl Writer {
    /// Appends entries until shutdown, then drains what is queued and returns.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut pending: Vec<Entry> = Vec::new();
        loop {
            if pending.is_empty() {
                tokio::select! {
                    e = self.rx.recv() => match e {
                        Some(e) => pending.push(e),
                        None => break,
                    },
                    changed = shutdown.changed() => if changed.is_err() || *shutdown.borrow() { break },
                }
            }
            while pending.len() < BATCH {
                match self.rx.try_recv() {
                    Ok(e) => pending.push(e),
                    Err(_) => break,
                }
            }
            match self.store.append_audit(&pending, now_ms()).await {
                Ok(()) => {
                    pending.clear();
                    self.healthy.store(true, Ordering::SeqCst);
                }
                Err(e) => {
                    tracing::error!(error = %e, queued = pending.len(), "audit write failed; refusing new actions until it succeeds");
                    self.healthy.store(false, Ordering::SeqCst);
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                        changed = shutdown.changed() => if changed.is_err() || *shutdown.borrow() { break },
                    }
                }
            }
        }
        // Shutdown: what was queued still goes in, in order.
        self.rx.close();
        while let Some(e) = self.rx.recv().await {
            pending.push(e);
        }
        if !pending.is_empty() {
            if let Err(e) = self.store.append_audit(&pending, now_ms()).await {
                tracing::error!(error = %e, lost = pending.len(), "audit records lost at shutdown");
            }
        }
        tracing::debug!("audit writer ended");
    }
}

/// Chains `entries` after the record (`seq`, `prev_hash`): the store calls this under the
/// audit lock with the tail it just read.
pub fn chain(mut seq: u64, mut prev: String, entries: &[Entry], at_ms: i64) -> Vec<Record> {
    entries
        .iter()
        .map(|e| {
            seq += 1;
            let mut r =
                Record { seq, at_ms, entry: e.clone(), prev_hash: std::mem::take(&mut prev), hash: String::new() };
            r.hash = r.compute_hash();
            prev = r.hash.clone();
            r
        })
        .collect()
}

/// Walks the chain in order; returns (records checked, first bad seq and why).
pub fn verify_chain(records: &[Record]) -> (u64, Option<(u64, String)>) {
    let mut prev = String::new();
    for (i, r) in records.iter().enumerate() {
        let expected_seq = i as u64 + 1;
        if r.seq != expected_seq {
            return (i as u64, Some((r.seq, format!("seq {} follows {}", r.seq, expected_seq - 1))));
        }
        if r.prev_hash != prev {
            return (i as u64, Some((r.seq, "prev_hash does not match the previous record".into())));
        }
        if r.compute_hash() != r.hash {
            return (i as u64, Some((r.seq, "hash does not match the record".into())));
        }
        prev = r.hash.clone();
    }
    (records.len() as u64, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain_of(n: u64) -> Vec<Record> {
        let mut prev = String::new();
        (1..=n)
            .map(|seq| {
                let entry = Entry { tenant: "t".into(), rpc: "/x".into(), outcome: "ok".into(), ..Default::default() };
                let mut r =
                    Record { seq, at_ms: 1000 + seq as i64, entry, prev_hash: prev.clone(), hash: String::new() };
                r.hash = r.compute_hash();
                prev = r.hash.clone();
                r
            })
            .collect()
    }

    #[test]
    fn intact_chain_verifies_and_any_edit_is_named() {
        let records = chain_of(5);
        assert_eq!(verify_chain(&records), (5, None));
        let mut edited = records.clone();
        edited[2].entry.target = "changed".into();
        assert_eq!(verify_chain(&edited).1.map(|(seq, _)| seq), Some(3));
        let mut dropped = records.clone();
        dropped.remove(1);
        assert_eq!(verify_chain(&dropped).1.map(|(seq, _)| seq), Some(3));
    }

    #[test]
    fn urls_lose_query_and_fragment() {
        assert_eq!(url_target("https://a.test/p?token=secret#x"), "https://a.test/p");
        assert_eq!(url_target("not a url?x=1"), "not a url");
    }

    #[test]
    fn urls_and_origins_lose_userinfo() {
        assert_eq!(url_target("http://user:secret@127.0.0.1:8080/p?q=1"), "http://127.0.0.1:8080/p");
        assert_eq!(url_target("https://user@a.test/"), "https://a.test/");
        // Unparseable (a bad port), yet the credentials still go.
        assert_eq!(url_target("http://user:secret@a.test:99999/x"), "http://a.test:99999/x");
        assert_eq!(origin_target("http://user:secret@127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(origin_target("http:user:secret@a.test?x"), "http:a.test");
        assert_eq!(origin_target("https://a.test"), "https://a.test");
    }
}
