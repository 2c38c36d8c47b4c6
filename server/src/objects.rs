//! An S3-compatible object store (`--artifact-store s3://bucket/prefix`) where ended sessions'
//! artifacts are copied so they outlive the replica that made them. Requests are signed by
//! `rusty-s3` (SigV4, presigned for a few minutes) and sent by `reqwest` over rustls (ring);
//! the endpoint, region and credentials come from the usual `AWS_*` variables.

use std::path::Path;
use std::time::Duration;

use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use tokio::io::AsyncWriteExt;

/// How long a signed request stays valid: it is sent at once.
const SIGNED_FOR: Duration = Duration::from_secs(300);
/// A stalled transfer (no byte either way) fails after this.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Keys one listing returns at most.
const PAGE: usize = 1000;

/// What went wrong with the object store, in words an operator can act on.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// `--artifact-store` or the `AWS_*` variables are not usable.
    #[error("--artifact-store: {0}")]
    Config(String),
    /// The store could not be reached, or the transfer broke.
    #[error("object store {url}: {why}")]
    Unreachable { url: String, why: String },
    /// The store answered with an error status.
    #[error("object store: {op} {key} answered {status}: {body}")]
    Refused { op: &'static str, key: String, status: u16, body: String },
    /// No such object.
    #[error("object store: no object {0}")]
    NotFound(String),
    /// A local file could not be read or written.
    #[error("{0}")]
    Local(String),
}

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its key below the store's prefix.
    pub key: String,
    pub size: u64,
}

/// An S3 bucket and the prefix every key goes under.
#[derive(Clone)]
pub struct ObjectStore {
    bucket: Bucket,
    credentials: Option<Credentials>,
    http: reqwest::Client,
    /// `""` or ending in `/`.
    prefix: String,
    /// `s3://bucket/prefix`, for messages.
    url: String,
}

impl std::fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the credentials.
        write!(f, "ObjectStore({} at {})", self.url, self.bucket.base_url())
    }
}

/// Where `s3://bucket/prefix` with `var`'s `AWS_*` variables points: the endpoint, whether it
/// is addressed by path, the region, the bucket and the prefix (`""` or ending in `/`).
fn locate(
    url: &str,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<(url::Url, UrlStyle, String, String, String), ObjectError> {
    let bad = |why: &str| ObjectError::Config(format!("{url:?} {why}; give it as s3://bucket/prefix"));
    let parsed = url::Url::parse(url).map_err(|e| bad(&format!("is not a URL ({e})")))?;
    if parsed.scheme() != "s3" {
        return Err(bad(&format!("has scheme {:?}, not s3", parsed.scheme())));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() || !parsed.username().is_empty() {
        return Err(bad("has a query, fragment or user name"));
    }
    let bucket = parsed.host_str().filter(|b| !b.is_empty()).ok_or_else(|| bad("names no bucket"))?.to_string();
    let valid_bucket = (3..=63).contains(&bucket.len())
        && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !valid_bucket {
        return Err(bad(&format!("names bucket {bucket:?}, which S3 does not allow")));
    }
    let path = parsed.path().trim_matches('/');
    let prefix = if path.is_empty() { String::new() } else { format!("{path}/") };
    let var = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let region = var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION")).unwrap_or_else(|| "us-east-1".into());
    // An endpoint of its own (MinIO, Ceph, a test server) is addressed by path; AWS by host.
    let (endpoint, style) = match var("AWS_ENDPOINT_URL_S3").or_else(|| var("AWS_ENDPOINT_URL")) {
        Some(endpoint) => {
            let parsed = url::Url::parse(&endpoint)
                .map_err(|e| ObjectError::Config(format!("AWS_ENDPOINT_URL {endpoint:?} is not a URL ({e})")))?;
            (parsed, UrlStyle::Path)
        }
        None => {
            let aws = format!("https://s3.{region}.amazonaws.com");
            let parsed =
                url::Url::parse(&aws).map_err(|e| ObjectError::Config(format!("AWS_REGION {region:?}: {e}")))?;
            let style = if bucket.contains('.') { UrlStyle::Path } else { UrlStyle::VirtualHost };
            (parsed, style)
        }
    };
    Ok((endpoint, style, region, bucket, prefix))
}

impl ObjectStore {
    /// The store `url` (`s3://bucket/prefix`) names, with its endpoint (`AWS_ENDPOINT_URL_S3`
    /// or `AWS_ENDPOINT_URL`, else AWS in `AWS_REGION`), region (`AWS_REGION`,
    /// `AWS_DEFAULT_REGION`, else `us-east-1`), credentials (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`; none: unsigned requests) and extra CA
    /// certificates (`AWS_CA_BUNDLE`), read through `var`.
    pub fn new(url: &str, var: impl Fn(&str) -> Option<String>) -> Result<ObjectStore, ObjectError> {
        let (endpoint, style, region, name, prefix) = locate(url, &var)?;
        let shown = endpoint.to_string();
        let bucket = Bucket::new(endpoint, style, name, region)
            .map_err(|e| ObjectError::Config(format!("endpoint {shown}: {e}")))?;
        let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let credentials = match (get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")) {
            (Some(key), Some(secret)) => Some(match get("AWS_SESSION_TOKEN") {
                Some(token) => Credentials::new_with_token(key, secret, token),
                None => Credentials::new(key, secret),
            }),
            (None, None) => None,
            _ => {
                return Err(ObjectError::Config(
                    "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither".into(),
                ))
            }
        };
        // reqwest's rustls takes the process's provider: ring, as everywhere here.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut http = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT).read_timeout(READ_TIMEOUT);
        if let Some(bundle) = get("AWS_CA_BUNDLE") {
            let pem =
                std::fs::read(&bundle).map_err(|e| ObjectError::Config(format!("AWS_CA_BUNDLE {bundle}: {e}")))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| ObjectError::Config(format!("AWS_CA_BUNDLE {bundle}: {e}")))?;
            http = http.tls_certs_merge(certs);
        }
        let http = http.build().map_err(|e| ObjectError::Config(format!("HTTP client: {e}")))?;
        Ok(ObjectStore { bucket, credentials, http, prefix, url: url.to_string() })
    }

    /// `s3://bucket/prefix`, as configured.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn unreachable(&self, e: reqwest::Error) -> ObjectError {
        ObjectError::Unreachable { url: self.bucket.base_url().to_string(), why: error_chain(&e) }
    }

    /// Sends a signed request; an error status is `Refused` (404: `NotFound`).
    async fn send(
        &self,
        op: &'static str,
        key: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ObjectError> {
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        if status == reqwest::StatusCode::NOT_FOUND && op != "check bucket" {
            return Err(ObjectError::NotFound(key.to_string()));
        }
        let body = response.text().await.unwrap_or_default();
        Err(ObjectError::Refused { op, key: key.to_string(), status: status.as_u16(), body: s3_message(&body) })
    }

    /// Whether the bucket answers and these credentials may use it.
    pub async fn check(&self) -> Result<(), ObjectError> {
        let url = self.bucket.head_bucket(self.credentials.as_ref()).sign(SIGNED_FOR);
        let probe = self.http.head(url);
        match self.send("check bucket", self.bucket.name(), probe).await {
            Err(ObjectError::Refused { status: 404, .. }) => Err(ObjectError::Config(format!(
                "bucket {:?} does not exist at {}",
                self.bucket.name(),
                self.bucket.base_url()
            ))),
            Err(ObjectError::Refused { status, .. }) => Err(ObjectError::Config(format!(
                "bucket {:?} answered {status}: check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION",
                self.bucket.name()
            ))),
            other => other.map(drop),
        }
    }

    /// Uploads the file at `path` as `key`, streamed; its size.
    pub async fn put_file(&self, key: &str, path: &Path) -> Result<u64, ObjectError> {
        let local = |e: std::io::Error| ObjectError::Local(format!("read {}: {e}", path.display()));
        let file = tokio::fs::File::open(path).await.map_err(local)?;
        let size = file.metadata().await.map_err(local)?.len();
        let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(file));
        let full = self.key(key);
        let url = self.bucket.put_object(self.credentials.as_ref(), &full).sign(SIGNED_FOR);
        let put = self.http.put(url).header(reqwest::header::CONTENT_LENGTH, size).body(body);
        self.send("put", &full, put).await?;
        Ok(size)
    }

    /// Uploads `bytes` as `key`.
    pub async fn put_bytes(&self, key: &str, bytes: Vec<u8>) -> Result<(), ObjectError> {
        let full = self.key(key);
        let url = self.bucket.put_object(self.credentials.as_ref(), &full).sign(SIGNED_FOR);
        self.send("put", &full, self.http.put(url).body(bytes)).await.map(drop)
    }

    async fn get(&self, key: &str) -> Result<reqwest::Response, ObjectError> {
        let full = self.key(key);
        let url = self.bucket.get_object(self.credentials.as_ref(), &full).sign(SIGNED_FOR);
        self.send("get", &full, self.http.get(url)).await
    }

    /// Object `key` whole, if it holds at most `max` bytes.
    pub async fn get_bytes(&self, key: &str, max: u64) -> Result<Vec<u8>, ObjectError> {
        let mut response = self.get(key).await?;
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.unreachable(e))? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > max {
                return Err(ObjectError::Local(format!("object {key} is larger than {max} bytes")));
            }
        }
        Ok(bytes)
    }

    /// Writes object `key` into `file`, streamed; its size and hex SHA-256.
    pub async fn get_into(&self, key: &str, file: &mut tokio::fs::File) -> Result<(u64, String), ObjectError> {
        use sha2::Digest;
        let mut response = self.get(key).await?;
        let (mut size, mut hash) = (0, sha2::Sha256::new());
        while let Some(chunk) = response.chunk().await.map_err(|e| self.unreachable(e))? {
            file.write_all(&chunk).await.map_err(|e| ObjectError::Local(format!("write {key}: {e}")))?;
            hash.update(&chunk);
            size += chunk.len() as u64;
        }
        file.flush().await.map_err(|e| ObjectError::Local(format!("write {key}: {e}")))?;
        Ok((size, hex::encode(hash.finalize())))
    }

    /// Every object whose key starts with `prefix` (below the store's), in key order.
    pub async fn list(&self, prefix: &str) -> Result<Vec<Listed>, ObjectError> {
        let full = self.key(prefix);
        let mut listed = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut action = self.bucket.list_objects_v2(self.credentials.as_ref());
            action.with_prefix(full.as_str());
            action.with_max_keys(PAGE);
            if let Some(token) = &token {
                action.with_continuation_token(token.as_str());
            }
            let url = action.sign(SIGNED_FOR);
            let body = self.send("list", &full, self.http.get(url)).await?;
            let body = body.text().await.map_err(|e| self.unreachable(e))?;
            let page = rusty_s3::actions::ListObjectsV2::parse_response(&body)
                .map_err(|e| ObjectError::Local(format!("a listing of {full} that does not parse: {e}")))?;
            listed.extend(page.contents.into_iter().filter_map(|c| {
                let key = c.key.strip_prefix(&self.prefix)?.to_string();
                Some(Listed { key, size: c.size.unwrap_or(0) })
            }));
            match page.next_continuation_token {
                Some(next) => token = Some(next),
                None => return Ok(listed),
            }
        }
    }

    /// Deletes object `key` (gone already is fine).
    pub async fn delete(&self, key: &str) -> Result<(), ObjectError> {
        let full = self.key(key);
        let url = self.bucket.delete_object(self.credentials.as_ref(), &full).sign(SIGNED_FOR);
        match self.send("delete", &full, self.http.delete(url)).await {
            Ok(_) | Err(ObjectError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// An error with its causes ("error sending request: connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut words = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        words.push_str(": ");
        words.push_str(&cause.to_string());
        source = cause.source();
    }
    words
}

/// The `<Code>` and `<Message>` of an S3 error body, else its first 200 bytes.
fn s3_message(body: &str) -> String {
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = body.find(&open)? + open.len();
        let end = body[start..].find(&format!("</{name}>"))?;
        Some(body[start..start + end].to_string())
    };
    match (tag("Code"), tag("Message")) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code,
        _ => body.chars().take(200).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn an_s3_url_names_bucket_and_prefix_and_the_endpoint_comes_from_the_environment() {
        let (endpoint, style, region, bucket, prefix) =
            locate("s3://ci-artifacts/fleet/a", &vars(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")])).unwrap();
        assert_eq!(endpoint.as_str(), "http://127.0.0.1:9000/");
        assert!(matches!(style, UrlStyle::Path));
        assert_eq!((region.as_str(), bucket.as_str(), prefix.as_str()), ("us-east-1", "ci-artifacts", "fleet/a/"));

        let (endpoint, style, region, _, prefix) =
            locate("s3://ci-artifacts", &vars(&[("AWS_REGION", "eu-west-3")])).unwrap();
        assert_eq!(endpoint.as_str(), "https://s3.eu-west-3.amazonaws.com/");
        assert!(matches!(style, UrlStyle::VirtualHost));
        assert_eq!((region.as_str(), prefix.as_str()), ("eu-west-3", ""));

        // The S3-only endpoint wins over the general one; AWS_DEFAULT_REGION is read too.
        let env = vars(&[
            ("AWS_ENDPOINT_URL", "http://a:1"),
            ("AWS_ENDPOINT_URL_S3", "http://b:2"),
            ("AWS_DEFAULT_REGION", "ap-south-1"),
        ]);
        let (endpoint, _, region, _, _) = locate("s3://bkt/", &env).unwrap();
        assert_eq!((endpoint.as_str(), region.as_str()), ("http://b:2/", "ap-south-1"));
    }

    #[test]
    fn a_bad_store_url_or_half_credentials_say_what_to_fix() {
        let none = vars(&[]);
        for (url, says) in [
            ("http://bucket/p", "not s3"),
            ("s3://", "names no bucket"),
            ("s3:///prefix", "names no bucket"),
            ("s3://Upper_Case/p", "does not allow"),
            ("s3://b/p?x=1", "query"),
            ("bucket/prefix", "is not a URL"),
        ] {
            let e = locate(url, &none).map(drop).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("s3://bucket/prefix"), "{url}: {e}");
        }
        let e = locate("s3://bkt", &vars(&[("AWS_ENDPOINT_URL", "not a url")])).map(drop).unwrap_err();
        assert!(e.to_string().contains("AWS_ENDPOINT_URL"), "{e}");
        let e = ObjectStore::new("s3://bkt", vars(&[("AWS_ACCESS_KEY_ID", "AKIA")])).unwrap_err();
        assert!(e.to_string().contains("both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"), "{e}");
        let store =
            ObjectStore::new("s3://bkt", vars(&[("AWS_ACCESS_KEY_ID", "AKIA"), ("AWS_SECRET_ACCESS_KEY", "s3cr3t")]))
                .unwrap();
        assert!(!format!("{store:?}").contains("s3cr3t"), "credentials never reach a log line");
    }

    #[test]
    fn an_s3_error_body_is_shown_as_its_code_and_message() {
        let body = "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";
        assert_eq!(s3_message(body), "AccessDenied: Access Denied");
        assert_eq!(s3_message("plain"), "plain");
    }
}
