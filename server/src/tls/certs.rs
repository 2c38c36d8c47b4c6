//! The certificate files: read and checked at start (PEM, validity, the key's permissions),
//! and the serving certificate re-read when its files change on disk.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::{TlsError, RECHECK};

/// The certificate and key, re-read on the next handshake at least [`RECHECK`] after the last
/// look when either file changed (inode, size or modification time: a rewrite or a symlink
/// swap, as a Kubernetes Secret update does). A new pair that fails the checks is logged and
/// the previous one kept. No task of its own: handshakes drive it.
#[derive(Debug)]
pub(super) struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    pub(super) current: Mutex<Current>,
}

#[derive(Debug)]
pub(super) struct Current {
    key: Arc<CertifiedKey>,
    /// The files as last looked at (loaded or refused), so a refused pair is logged once.
    stamp: Option<(FileStamp, FileStamp)>,
    pub(super) checked: Instant,
}

/// What changes when a file is rewritten or replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl FileStamp {
    /// Follows symlinks: a swapped link target is a change.
    fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        })
    }
}

impl ReloadingCert {
    pub(super) fn load(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<ReloadingCert, TlsError> {
        let stamp = FileStamp::of(cert).zip(FileStamp::of(key));
        let loaded = load_pair(cert, key, &provider, SystemTime::now())?;
        Ok(ReloadingCert {
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
            provider,
            current: Mutex::new(Current { key: Arc::new(loaded), stamp, checked: Instant::now() }),
        })
    }

    /// The pair to serve, after a look at the files if [`RECHECK`] has passed. The look (two
    /// `stat`s, and two small reads when they changed) runs under the lock, at most once a
    /// second; handshakes meanwhile wait that long.
    pub(super) fn current(&self) -> Arc<CertifiedKey> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.checked.elapsed() >= RECHECK {
            current.checked = Instant::now();
            // A file missing for a moment (mid-swap) is looked at again next time.
            let stamp = FileStamp::of(&self.cert_path).zip(FileStamp::of(&self.key_path));
            if stamp.is_some() && stamp != current.stamp {
                current.stamp = stamp;
                match load_pair(&self.cert_path, &self.key_path, &self.provider, SystemTime::now()) {
                    Ok(loaded) => {
                        tracing::info!(cert = %self.cert_path.display(), "tls certificate reloaded; new connections use it");
                        current.key = Arc::new(loaded);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "new tls certificate or key refused; serving the previous pair")
                    }
                }
            }
        }
        current.key.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Reads a file named by `flag`; a missing file says so.
fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => TlsError::Missing { flag, path: path.to_path_buf() },
        _ => TlsError::Read { flag, path: path.to_path_buf(), source },
    })
}

fn has_pem(bytes: &[u8]) -> bool {
    bytes.windows(11).any(|w| w == b"-----BEGIN ")
}

/// Every certificate of a PEM file, each a valid X.509 certificate valid at `now`.
pub(super) fn load_certs(
    flag: &'static str,
    path: &Path,
    now: SystemTime,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(flag, path)?;
    if !has_pem(&bytes) {
        return Err(TlsError::NotPem { flag, path: path.to_path_buf() });
    }
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem { flag, path: path.to_path_buf(), reason: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { flag, path: path.to_path_buf() });
    }
    let now = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    for (index, cert) in certs.iter().enumerate() {
        let (not_before, not_after) =
            validity::of(cert).ok_or_else(|| TlsError::BadCertificate { flag, path: path.to_path_buf(), index })?;
        if now > not_after.unix {
            return Err(TlsError::Expired { flag, path: path.to_path_buf(), index, not_after: not_after.text });
        }
        if now < not_before.unix {
            return Err(TlsError::NotYetValid { flag, path: path.to_path_buf(), index, not_before: not_before.text });
        }
    }
    Ok(certs)
}

/// The certificate chain and its key, checked: both parse, the certificates are valid now, the
/// key is the first certificate's.
fn load_pair(cert: &Path, key: &Path, provider: &CryptoProvider, now: SystemTime) -> Result<CertifiedKey, TlsError> {
    let chain = load_certs("--tls-cert", cert, now)?;
    let bytes = read("--tls-key", key)?;
    if !has_pem(&bytes) {
        return Err(TlsError::NotPem { flag: "--tls-key", path: key.to_path_buf() });
    }
    let der = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::NoKey { path: key.to_path_buf() },
        e => TlsError::BadPem { flag: "--tls-key", path: key.to_path_buf(), reason: e.to_string() },
    })?;
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| TlsError::BadKey { path: key.to_path_buf(), reason: e.to_string() })?;
    let pair = CertifiedKey::new(chain, signing);
    match pair.keys_match() {
        Ok(()) => Ok(pair),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::KeyMismatch { cert: cert.to_path_buf(), key: key.to_path_buf() })
        }
        // The provider cannot derive this key's public half: nothing to compare, as rustls does.
        Err(rustls::Error::InconsistentKeys(_)) => Ok(pair),
        Err(e) => Err(TlsError::BadCertificate { flag: "--tls-cert", path: cert.to_path_buf(), index: 0 })
            .inspect_err(|_| tracing::debug!(error = %e, "leaf certificate does not parse")),
    }
}

pub(super) fn load_client_ca(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let certs = load_certs("--tls-client-ca", path, SystemTime::now())?;
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| TlsError::BadClientCa { path: path.to_path_buf(), reason: e.to_string() })?;
    }
    Ok(Arc::new(roots))
}

/// A private key should be the server's alone; Kubernetes mounts Secrets 0644 unless
/// `defaultMode` says otherwise.
pub(super) fn warn_if_key_readable(key: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(key) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                key = %key.display(),
                mode = format!("{mode:o}"),
                "the tls private key is readable by group or others; make it 0600 (or 0400)"
            );
        }
    }
}

/// A certificate's validity, read with `x509-parser` (rustls checks the rest of it).
pub(super) mod validity {
    use x509_parser::time::ASN1Time;

    /// An instant from a certificate, as seconds since the epoch and as written.
    pub struct Time {
        pub unix: i64,
        pub text: String,
    }

    /// `(notBefore, notAfter)` of an X.509 certificate; `None` when it does not parse.
    pub fn of(cert: &[u8]) -> Option<(Time, Time)> {
        let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
        let validity = cert.validity();
        Some((time(&validity.not_before), time(&validity.not_after)))
    }

    fn time(t: &ASN1Time) -> Time {
        let d = t.to_datetime();
        let text = format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            d.year(),
            u8::from(d.month()),
            d.day(),
            d.hour(),
            d.minute(),
            d.second()
        );
        Time { unix: t.timestamp(), text }
    }
}
