//! The audit trail's records and their hash chain, a leaf the store builds on:
//! `hash = SHA-256(prev_hash || JCS(record))`; [`chain`] extends it, [`verify_chain`] walks it.

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::jcs::jcs;

/// What happened, before it has a place in the chain.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
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

/// Entries one transaction appends, all with one time, named by a random `id` the chain keeps
/// on the first of them: a write whose outcome is unknown (the connection cut while the commit
/// was on its way) is retried with the same id, and the store skips a batch whose id it already
/// has, so no record goes in twice.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub id: String,
    pub at_ms: i64,
    pub entries: Vec<Entry>,
}

impl Batch {
    /// A batch of `entries` that happened at `at_ms`, under a new id.
    pub fn new(entries: Vec<Entry>, at_ms: i64) -> Batch {
        Batch { id: uuid::Uuid::new_v4().simple().to_string(), at_ms, entries }
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

/// Checks a chain one record at a time, in order, so a verifier never holds all of it.
#[derive(Debug, Default)]
pub struct ChainCheck {
    prev: String,
    checked: u64,
}

impl ChainCheck {
    /// Takes the next record: `Err((seq, why))` at the first one that breaks the chain.
    pub fn next(&mut self, r: &Record) -> Result<(), (u64, String)> {
        let expected_seq = self.checked + 1;
        if r.seq != expected_seq {
            return Err((r.seq, format!("seq {} follows {}", r.seq, expected_seq - 1)));
        }
        if r.prev_hash != self.prev {
            return Err((r.seq, "prev_hash does not match the previous record".into()));
        }
        if r.compute_hash() != r.hash {
            return Err((r.seq, "hash does not match the record".into()));
        }
        self.prev = r.hash.clone();
        self.checked += 1;
        Ok(())
    }

    /// Records that passed so far (the last one's seq).
    pub fn checked(&self) -> u64 {
        self.checked
    }
}

/// Walks the chain in order; returns (records checked, first bad seq and why).
pub fn verify_chain(records: &[Record]) -> (u64, Option<(u64, String)>) {
    let mut check = ChainCheck::default();
    for r in records {
        if let Err(bad) = check.next(r) {
            return (check.checked(), Some(bad));
        }
    }
    (check.checked(), None)
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
}
