//! Secrets at rest (an upstream proxy's password): sealed with AES-256-GCM under the data
//! dir's key (`secrets.key`: 32 random bytes, 0600, made on first use). Replicas sharing a
//! database share it the way they share the signing keys (the chart's keys Secret). A sealed
//! value is bound to what it belongs to (its proxy's id), so a row's secret copied onto
//! another row does not open.

use std::path::Path;

use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};

/// The key file in the data dir.
pub const KEY_FILE: &str = "secrets.key";
/// What every sealed value starts with (its format's version).
const PREFIX: &str = "v1:";

/// Seals and opens secrets under one key. Its `Debug` never shows the key.
pub struct Sealer {
    key: LessSafeKey,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

impl Sealer {
    /// The data dir's key, made (0600) when there is none.
    pub fn load_or_create(data_dir: &Path) -> Result<Sealer, String> {
        let path = data_dir.join(KEY_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut fresh = [0u8; 32];
                getrandom::fill(&mut fresh).map_err(|e| format!("no randomness for {}: {e}", path.display()))?;
                match write_new_private(&path, &fresh) {
                    Ok(()) => fresh.to_vec(),
                    // Another server made it first: that one is the key.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        std::fs::read(&path).map_err(|e| format!("read {}: {e}", path.display()))?
                    }
                    Err(e) => return Err(format!("write {}: {e}", path.display())),
                }
            }
            Err(e) => return Err(format!("read {}: {e}", path.display())),
        };
        let key: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            format!("{} holds {} bytes, not 32: restore it or remove it", path.display(), b.len())
        })?;
        Ok(Sealer::from_key(&key))
    }

    pub fn from_key(key: &[u8; 32]) -> Sealer {
        let unbound = UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte AES-256 key");
        Sealer { key: LessSafeKey::new(unbound) }
    }

    /// `plain` sealed for `owner` (a fresh random nonce each time): `v1:<base64>`.
    pub fn seal(&self, plain: &str, owner: &str) -> Result<String, String> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| format!("no randomness: {e}"))?;
        let mut buf = plain.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(owner.as_bytes()), &mut buf)
            .map_err(|_| "sealing failed".to_string())?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&buf);
        Ok(format!("{PREFIX}{}", base64::engine::general_purpose::STANDARD.encode(out)))
    }

    /// The plain text of a value [`Sealer::seal`] made for `owner` under this key; an error
    /// (never the value) for anything else.
    pub fn open(&self, sealed: &str, owner: &str) -> Result<String, String> {
        let not_ours =
            || format!("a secret of {owner} does not open with this data dir's {KEY_FILE}: was it replaced?");
        let raw = sealed
            .strip_prefix(PREFIX)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .filter(|raw| raw.len() > NONCE_LEN)
            .ok_or_else(|| format!("a secret of {owner} is not in a format this server reads"))?;
        let (nonce, rest) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| not_ours())?;
        let mut buf = rest.to_vec();
        let plain = self.key.open_in_place(nonce, Aad::from(owner.as_bytes()), &mut buf).map_err(|_| not_ours())?;
        String::from_utf8(plain.to_vec()).map_err(|_| not_ours())
    }
}

/// Creates `path` owner-only (0600) with `bytes`; an existing file is an error (two servers
/// starting at once: the second reads the first's key).
fn write_new_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_with_its_key_and_for_its_owner() {
        let sealer = Sealer::from_key(&[7; 32]);
        let sealed = sealer.seal("hunter2", "eu-1").unwrap();
        assert!(sealed.starts_with("v1:") && !sealed.contains("hunter2"), "{sealed}");
        assert_ne!(sealed, sealer.seal("hunter2", "eu-1").unwrap(), "a fresh nonce each time");
        assert_eq!(sealer.open(&sealed, "eu-1").unwrap(), "hunter2");
        assert!(sealer.open(&sealed, "us-1").unwrap_err().contains("does not open"), "bound to its owner");
        assert!(Sealer::from_key(&[8; 32]).open(&sealed, "eu-1").is_err(), "another key");
        let mut tampered = sealed.clone();
        tampered.pop();
        tampered.push(if sealed.ends_with('A') { 'B' } else { 'A' });
        assert!(sealer.open(&tampered, "eu-1").is_err());
        assert!(sealer.open("hunter2", "eu-1").unwrap_err().contains("not in a format"));
        assert_eq!(format!("{sealer:?}"), "Sealer(..)");
    }

    #[test]
    fn the_key_is_made_once_owner_only_and_a_bad_one_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let sealed = Sealer::load_or_create(dir.path()).unwrap().seal("p", "x").unwrap();
        let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(Sealer::load_or_create(dir.path()).unwrap().open(&sealed, "x").unwrap(), "p", "the same key again");
        std::fs::write(dir.path().join(KEY_FILE), b"short").unwrap();
        assert!(Sealer::load_or_create(dir.path()).unwrap_err().contains("holds 5 bytes, not 32"));
    }
}
