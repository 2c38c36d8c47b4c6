//! `GET /sessions/{session}/files/{name}`, `GET /sessions/{session}/files.zip` and
//! `GET /sessions/{session}/recording`: a session's files and recording for `curl` and
//! browsers, with the Bearer token and the rules of `GetFile` (a request reaching another
//! replica is relayed to the one holding the session). Each fetch is an audit record with the
//! names and sizes, never the content.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{refuse, HttpState, Refusal};
use crate::auth::Claims;
use crate::error::ServiceError;
use crate::sessions::SessionFile;

/// The `rpc` of the audit record of a file fetched over HTTP.
pub const FILE_RPC: &str = "GET /sessions/{session}/files/{name}";
/// The `rpc` of the audit record of a zip of a session's files.
pub const ZIP_RPC: &str = "GET /sessions/{session}/files.zip";
/// The `rpc` of the audit record of a recording fetched over HTTP.
pub const RECORDING_RPC: &str = "GET /sessions/{session}/recording";

/// One file, as it is, with its media type, size and SHA-256 (`x-checksum-sha256`).
pub(super) async fn file(
    State(state): State<HttpState>,
    Path((session, name)): Path<(String, String)>,
    peer: Option<axum::Extension<crate::tls::PeerAddr>>,
    headers: HeaderMap,
) -> Response {
    let (sessions, id) = (state.app.sessions.clone(), session.clone());
    let open = |claims: Claims| async move { sessions.open_file(&claims, &id, &name).await };
    one(&state, peer, &headers, (FILE_RPC, &session), open).await
}

/// The recording of an ended session (WebM), as `file` serves a file.
pub(super) async fn recording(
    State(state): State<HttpState>,
    Path(session): Path<String>,
    peer: Option<axum::Extension<crate::tls::PeerAddr>>,
    headers: HeaderMap,
) -> Response {
    let (sessions, id) = (state.app.sessions.clone(), session.clone());
    let open = |claims: Claims| async move { sessions.open_recording(&claims, &id).await };
    one(&state, peer, &headers, (RECORDING_RPC, &session), open).await
}

/// Serves the one file `open` opens for the caller.
async fn one<F, Fut>(
    state: &HttpState,
    peer: Option<axum::Extension<crate::tls::PeerAddr>>,
    headers: &HeaderMap,
    (rpc, session): (&'static str, &str),
    open: F,
) -> Response
where
    F: FnOnce(Claims) -> Fut,
    Fut: std::future::Future<Output = Result<(std::fs::File, SessionFile), ServiceError>>,
{
    let source = super::source(peer);
    let claims = match bearer(state, headers, &source, session, rpc) {
        Ok(claims) => claims,
        Err(refused) => return *refused,
    };
    let opened = async {
        let place = state.app.audit.reserve_call()?;
        let (file, info) = open(claims.clone()).await?;
        Ok::<_, ServiceError>((place, file, info))
    };
    let (place, file, info) = match opened.await {
        Ok(opened) => opened,
        Err(e) => return failed(state, &source, &claims, session, rpc, e),
    };
    record(place, &claims, session, rpc, target(&[&info]));
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file)));
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(info.info.mime_type));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(info.info.size));
    h.insert(header::CONTENT_DISPOSITION, attachment(&info.info.name));
    h.insert("x-checksum-sha256", HeaderValue::from_str(&info.info.sha256).expect("hex"));
    response
}

/// Every file of the session in one zip (stored, not compressed: downloads are mostly
/// compressed already), `<session>.zip`.
pub(super) async fn zip(
    State(state): State<HttpState>,
    Path(session): Path<String>,
    peer: Option<axum::Extension<crate::tls::PeerAddr>>,
    headers: HeaderMap,
) -> Response {
    let source = super::source(peer);
    let claims = match bearer(&state, &headers, &source, &session, ZIP_RPC) {
        Ok(claims) => claims,
        Err(refused) => return *refused,
    };
    let gathered = async {
        let place = state.app.audit.reserve_call()?;
        let mut opened = Vec::new();
        for listed in state.app.sessions.list_files(&claims, &session).await? {
            match state.app.sessions.open_file(&claims, &session, &listed.info.name).await {
                Ok(file) => opened.push(file),
                // Deleted meanwhile: not in the zip.
                Err(ServiceError::Files(crate::files::FileError::NotFound(_))) => {}
                Err(e) => return Err(e),
            }
        }
        let infos: Vec<SessionFile> = opened.iter().map(|(_, info)| info.clone()).collect();
        let zipped = tokio::task::spawn_blocking(move || write_zip(opened))
            .await
            .map_err(|e| ServiceError::Internal(format!("zip task: {e}")))?
            .map_err(|e| ServiceError::Internal(format!("zip: {e}")))?;
        Ok::<_, ServiceError>((place, infos, zipped))
    };
    let (place, infos, (zipped, size)) = match gathered.await {
        Ok(gathered) => gathered,
        Err(e) => return failed(&state, &source, &claims, &session, ZIP_RPC, e),
    };
    record(place, &claims, &session, ZIP_RPC, target(&infos.iter().collect::<Vec<_>>()));
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(zipped)));
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/zip"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    h.insert(header::CONTENT_DISPOSITION, attachment(&format!("{session}.zip")));
    response
}

/// Writes the files into a zip in an unnamed temporary file, rewound; and its size.
fn write_zip(files: Vec<(std::fs::File, SessionFile)>) -> std::io::Result<(std::fs::File, u64)> {
    use std::io::Seek;
    let mut zip = zip::ZipWriter::new(tempfile::tempfile()?);
    for (mut file, info) in files {
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(info.info.size >= u32::MAX as u64);
        zip.start_file(info.info.name.as_str(), options).map_err(std::io::Error::other)?;
        std::io::copy(&mut file, &mut zip)?;
    }
    let mut out = zip.finish().map_err(std::io::Error::other)?;
    let size = out.stream_position()?;
    out.rewind()?;
    Ok((out, size))
}

/// The caller's claims from its `Authorization: Bearer` header; a missing or bad token is
/// refused 401 (and counted against its address).
fn bearer(
    state: &HttpState,
    headers: &HeaderMap,
    source: &str,
    session: &str,
    rpc: &str,
) -> Result<Claims, Box<Response>> {
    let header = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    state.app.tokens.verify_header(header).map_err(|e| {
        let refusal = Refusal { source, claims: None, session, rpc, unproven: true };
        Box::new(refuse(state, refusal, StatusCode::UNAUTHORIZED, e.to_string()))
    })
}

/// A refused or failed fetch, as the matching HTTP status with the rpc's message.
fn failed(state: &HttpState, source: &str, claims: &Claims, session: &str, rpc: &str, e: ServiceError) -> Response {
    let status = tonic::Status::from(e);
    let code = match status.code() {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
        tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
        tonic::Code::FailedPrecondition => StatusCode::CONFLICT,
        tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let refusal = Refusal { source, claims: Some(claims), session, rpc, unproven: false };
    refuse(state, refusal, code, status.message().to_string())
}

fn record(place: crate::audit::Place, claims: &Claims, session: &str, rpc: &str, target: String) {
    place.record(claims.entry(session, rpc, target, "ok"));
}

/// What a fetch's record names: each file's name, size and hash.
fn target(files: &[&SessionFile]) -> String {
    files.iter().map(|f| f.audit_target()).collect::<Vec<_>>().join("; ")
}

/// `attachment; filename*=UTF-8''<name>`, the name percent-encoded (RFC 6266).
fn attachment(name: &str) -> HeaderValue {
    let encoded: String = name
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    HeaderValue::from_str(&format!("attachment; filename*=UTF-8''{encoded}")).expect("ascii")
}
