//! The audit spool: a file in the data dir where the writer keeps, durably and in order, the
//! records the database refuses (an outage, a lock held too long, its disk full), so actions
//! go on while it is away and nothing is lost if this server dies before it is back. One JSON
//! line per record, `{"at": ms, "entry": {...}}`, each batch fsynced before the writer takes
//! the next; a torn last line (the server died mid-write) is the only thing skipped on
//! reading, and the log says so. Bounded by [`SPOOL_MAX`] records: past it, or when the file
//! cannot be written, the trail refuses actions as it would without a spool.
//!
//! Moved into the chain in one transaction (see [`super::Sink::append`]), then the file is
//! emptied. Each line keeps the id of its batch: a batch whose write was cut while committing
//! (so it may be in the chain already), or a spool that was moved but not emptied (the server
//! died between the two), is offered again as a retry, and the store skips the batches it has.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{Batch, Entry};

/// Name of the spool file in the data dir.
pub const SPOOL_FILE: &str = "audit-spool.jsonl";

/// Most records the spool holds (a few hundred bytes each: about 30 MB).
pub const SPOOL_MAX: usize = 100_000;

/// One spooled record, as a line of the file.
#[derive(serde::Serialize, serde::Deserialize)]
struct Line {
    at: i64,
    /// Its batch's id (absent in lines written before batches had one).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    batch: String,
    entry: Entry,
}

/// The spool file, open for appending.
#[derive(Debug)]
pub struct Spool {
    path: PathBuf,
    file: File,
    /// Records in the file.
    len: usize,
    max: usize,
}

impl Spool {
    /// Opens (or creates) the spool at `path`, keeping what a previous run left in it.
    pub fn open(path: &Path) -> io::Result<Spool> {
        Spool::open_bounded(path, SPOOL_MAX)
    }

    /// [`Spool::open`] holding at most `max` records.
    pub fn open_bounded(path: &Path, max: usize) -> io::Result<Spool> {
        // Owner-only, like the database file: records name tenants, subjects and URLs.
        let file = OpenOptions::new().create(true).append(true).read(true).mode(0o600).open(path)?;
        let mut spool = Spool { path: path.to_path_buf(), file, len: 0, max };
        spool.len = spool.read()?.len();
        Ok(spool)
    }

    /// Records waiting in it.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `batch` and waits until it is on disk. All or none: a batch that would pass the
    /// bound, or whose write fails, leaves the file as it was.
    pub fn push(&mut self, batch: &Batch) -> io::Result<()> {
        if self.len + batch.entries.len() > self.max {
            return Err(io::Error::other(format!("the local audit spool is full ({} records)", self.max)));
        }
        let mut text = String::new();
        for entry in &batch.entries {
            let line = Line { at: batch.at_ms, batch: batch.id.clone(), entry: entry.clone() };
            text.push_str(&serde_json::to_string(&line).map_err(io::Error::other)?);
            text.push('\n');
        }
        let before = self.file.metadata()?.len();
        let written = self.file.write_all(text.as_bytes()).and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            // A partial line must not stay in front of the next batch.
            let _ = self.file.set_len(before);
            return Err(io::Error::new(e.kind(), format!("{}: {e}", self.path.display())));
        }
        self.len += batch.entries.len();
        Ok(())
    }

    /// Every record in it, in order, in the batches they were pushed in (lines from before
    /// batches had ids: grouped by time, with no id).
    pub fn batches(&self) -> io::Result<Vec<Batch>> {
        let mut batches: Vec<Batch> = Vec::new();
        for Line { at, batch, entry } in self.read()? {
            match batches.last_mut() {
                Some(last) if last.at_ms == at && last.id == batch => last.entries.push(entry),
                _ => batches.push(Batch { id: batch, at_ms: at, entries: vec![entry] }),
            }
        }
        Ok(batches)
    }

    /// Empties it, once what it held is in the chain.
    pub fn clear(&mut self) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.sync_data()?;
        self.len = 0;
        Ok(())
    }

    fn read(&self) -> io::Result<Vec<Line>> {
        let mut lines = Vec::new();
        let reader = io::BufReader::new(File::open(&self.path)?);
        for (n, text) in reader.lines().enumerate() {
            let text = text?;
            match serde_json::from_str::<Line>(&text) {
                Ok(line) => lines.push(line),
                Err(e) => {
                    tracing::error!(file = %self.path.display(), line = n + 1, error = %e, "a torn audit spool line is skipped (the server died while writing it)");
                }
            }
        }
        Ok(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(rpc: &str) -> Entry {
        Entry { tenant: "t".into(), rpc: rpc.into(), outcome: "ok".into(), ..Default::default() }
    }

    fn batch(rpcs: &[&str], at_ms: i64) -> Batch {
        Batch::new(rpcs.iter().map(|rpc| entry(rpc)).collect(), at_ms)
    }

    fn rpcs(spool: &Spool) -> Vec<(i64, Vec<String>)> {
        spool
            .batches()
            .unwrap()
            .into_iter()
            .map(|b| (b.at_ms, b.entries.into_iter().map(|e| e.rpc).collect()))
            .collect()
    }

    #[test]
    fn records_survive_a_reopen_in_order_in_their_batches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SPOOL_FILE);
        let mut spool = Spool::open(&path).unwrap();
        assert!(spool.is_empty());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let pushed = [batch(&["/a", "/b"], 10), batch(&["/c"], 20), batch(&["/d"], 20)];
        for b in &pushed {
            spool.push(b).unwrap();
        }
        drop(spool);
        let mut spool = Spool::open(&path).unwrap();
        assert_eq!(spool.len(), 4);
        // Two batches of one time stay two: each keeps its id.
        assert_eq!(spool.batches().unwrap(), pushed);
        assert_eq!(rpcs(&spool)[0], (10, vec!["/a".to_string(), "/b".into()]));
        spool.clear().unwrap();
        assert!(Spool::open(&path).unwrap().is_empty());
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SPOOL_FILE);
        let mut spool = Spool::open(&path).unwrap();
        spool.push(&batch(&["/a"], 10)).unwrap();
        drop(spool);
        OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"at\":11,\"entry\":{\"ten").unwrap();
        let spool = Spool::open(&path).unwrap();
        assert_eq!(rpcs(&spool), [(10, vec!["/a".to_string()])]);
    }

    #[test]
    fn a_batch_past_the_bound_is_refused_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open_bounded(&dir.path().join(SPOOL_FILE), 3).unwrap();
        spool.push(&batch(&["/a", "/b"], 1)).unwrap();
        let e = spool.push(&batch(&["/c", "/d"], 2)).unwrap_err();
        assert!(e.to_string().contains("spool is full (3 records)"), "{e}");
        assert_eq!(spool.len(), 2);
        spool.push(&batch(&["/c"], 2)).unwrap();
        let all: Vec<String> = rpcs(&spool).into_iter().flat_map(|(_, r)| r).collect();
        assert_eq!(all, ["/a", "/b", "/c"]);
    }

    #[test]
    fn lines_from_before_batch_ids_are_grouped_by_time_with_no_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SPOOL_FILE);
        let line =
            |at: i64, rpc: &str| format!("{{\"at\":{at},\"entry\":{}}}\n", serde_json::to_string(&entry(rpc)).unwrap());
        std::fs::write(&path, [line(10, "/a"), line(10, "/b"), line(20, "/c")].concat()).unwrap();
        let spool = Spool::open(&path).unwrap();
        let batches = spool.batches().unwrap();
        assert_eq!(
            batches.iter().map(|b| (b.id.as_str(), b.at_ms, b.entries.len())).collect::<Vec<_>>(),
            [("", 10, 2), ("", 20, 1)]
        );
    }
}
