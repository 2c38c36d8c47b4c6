//! What a refused token is told: the cause in words (expired when, not valid until when, signed
//! by another key, which part is malformed) and what to do, never a library's error name.

use base64::Engine;
use jsonwebtoken::errors::{Error, ErrorKind};

/// What to do about a token that will never work.
const REISSUE: &str =
    "issue a new one (`browserpool admin tokens issue`, or `browserpool token issue` on the server's data dir)";

/// `e`, from checking `token`, said for a person; `leeway_s` is the clock skew allowed.
pub(super) fn explain(e: &Error, token: &str, leeway_s: u64) -> String {
    match e.kind() {
        ErrorKind::ExpiredSignature => {
            format!("token expired{} (clock skew allowed: {leeway_s} s); {REISSUE}", at(token, "exp"))
        }
        ErrorKind::ImmatureSignature => format!(
            "token not valid until{} (clock skew allowed: {leeway_s} s): the clock where it was issued is ahead of \
             this server's; wait, or fix that clock",
            at(token, "nbf")
        ),
        ErrorKind::InvalidSignature => format!(
            "token signature does not match this server's signing keys: it was signed by another server's key, by a \
             key since retired and deleted, or altered; {REISSUE}"
        ),
        ErrorKind::InvalidIssuer | ErrorKind::InvalidAudience => {
            format!("token was not issued for browserpool (iss and aud must be \"browserpool\"); {REISSUE}")
        }
        ErrorKind::MissingRequiredClaim(claim) => format!("token lacks the {claim:?} claim; {REISSUE}"),
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm | ErrorKind::InvalidAlgorithmName => {
            format!("token's algorithm (alg) is not the one of this server's key; {REISSUE}")
        }
        ErrorKind::Json(json) => match json.to_string().strip_prefix("missing field `").and_then(|r| r.split_once('`'))
        {
            Some((claim, _)) => format!("token lacks the {claim:?} claim; {REISSUE}"),
            None => format!("malformed token: its payload is not the JSON browserpool signs ({json}); {REISSUE}"),
        },
        ErrorKind::Base64(_) | ErrorKind::Utf8(_) | ErrorKind::InvalidToken => {
            format!("malformed token: {}; {REISSUE}", malformed(token))
        }
        _ => format!("token refused ({e}); {REISSUE}"),
    }
}

/// What is wrong with a token that does not parse: a JWT is three base64url parts,
/// `header.payload.signature`, the first two JSON.
pub(super) fn malformed(token: &str) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 {
        return format!(
            "a JWT is three base64url parts joined by dots (header.payload.signature); this has {} (check that it \
             was copied whole)",
            parts.len()
        );
    }
    for (i, (name, part)) in ["header", "payload", "signature"].iter().zip(&parts).enumerate() {
        let n = i + 1;
        let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part) else {
            return format!("its {name} (part {n} of 3) is not base64url (check that it was copied whole)");
        };
        if *name != "signature" && serde_json::from_slice::<serde_json::Value>(&bytes).is_err() {
            return format!("its {name} (part {n} of 3) is not JSON");
        }
    }
    "its header does not name a key and algorithm of browserpool's".into()
}

/// ` at <RFC 3339>` for the token's `claim` (a time in seconds), if it can be read.
fn at(token: &str, claim: &str) -> String {
    let payload = token.split('.').nth(1).unwrap_or_default();
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok();
    let value = json.and_then(|j| serde_json::from_slice::<serde_json::Value>(&j).ok());
    match value.and_then(|v| v[claim].as_u64()) {
        Some(secs) => format!(
            " at {}",
            humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_token_is_told_which_part_is_wrong() {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        assert!(malformed("abc").contains("this has 1"), "{}", malformed("abc"));
        assert!(malformed("a.b").contains("this has 2"));
        let header = b64(r#"{"alg":"HS256"}"#);
        assert!(malformed(&format!("{header}.%%%.sig")).contains("its payload (part 2 of 3) is not base64url"));
        assert!(malformed(&format!("{}.{}.c2ln", b64("not json"), b64("{}")))
            .contains("its header (part 1 of 3) is not JSON"));
        assert!(malformed(&format!("{header}.{}.c2ln", b64("[1,"))).contains("its payload (part 2 of 3) is not JSON"));
    }

    #[test]
    fn an_expired_token_says_when() {
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"exp":1800000000}"#);
        let token = format!("e30.{payload}.c2ln");
        let said = explain(&Error::from(ErrorKind::ExpiredSignature), &token, 5);
        assert!(
            said.starts_with("token expired at 2027-01-15T08:00:00Z (clock skew allowed: 5 s); issue a new one"),
            "{said}"
        );
        let said = explain(&Error::from(ErrorKind::InvalidSignature), &token, 5);
        assert!(said.contains("signed by another server's key"), "{said}");
        assert!(!said.contains("InvalidSignature"), "{said}");
    }
}
