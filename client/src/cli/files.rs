//! `browserpool session files S [get NAME | put PATH | zip | delete NAME]`: a session's
//! downloads and uploads; `session recording S` and `session delete-artifacts S`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;

use super::session::Out;
use super::{CliError, Ctx};
use crate::pb;

#[derive(Debug, Args)]
pub struct FilesArgs {
    /// Session id.
    session: String,
    /// What to do; without one, the files are listed.
    #[command(subcommand)]
    op: Option<FilesOp>,
}

#[derive(Debug, Subcommand)]
pub enum FilesOp {
    /// Download one file, to --out (default: its name, in the current directory; `-` for
    /// stdout).
    Get {
        /// The file's name in the session.
        name: String,
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
    /// Upload a file, under its own name or --name (a `set_input_files` action or a CDP
    /// client's file input can then take it).
    Put {
        /// The file to upload.
        path: PathBuf,
        /// Its name in the session.
        #[arg(long)]
        name: Option<String>,
    },
    /// Download every file into one zip (stored entries), to --out (default: `<session>.zip`;
    /// `-` for stdout).
    Zip {
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
    /// Delete one file.
    Delete {
        /// The file's name in the session.
        name: String,
    },
}

fn failed(ctx: &Ctx) -> impl Fn(crate::Error) -> CliError + '_ {
    |e: crate::Error| match e {
        crate::Error::Status(s) => ctx.status(s),
        e => CliError::failed(e.to_string()),
    }
}

/// `session recording S [--out F]`.
pub(super) async fn recording(ctx: &Ctx, session: String, out: Option<PathBuf>) -> Result<(), CliError> {
    let out = Out::new(&out.unwrap_or_else(|| PathBuf::from(format!("{session}.webm"))))?;
    let (artifact, content) = ctx.client.get_recording(&session).await.map_err(failed(ctx))?;
    out.write(&content)?;
    saved(ctx, &artifact, &out)
}

/// What a download wrote, and where.
fn saved(ctx: &Ctx, artifact: &pb::Artifact, out: &Out) -> Result<(), CliError> {
    match ctx.json {
        true => ctx.json_line(&json!({"file": artifact_json(artifact), "out": out.name()})),
        false if matches!(out, Out::Stdout) => Ok(()),
        false => ctx.line(&format!(
            "{} ({} bytes, sha256 {}) -> {}",
            artifact.name,
            artifact.size,
            artifact.sha256,
            out.name()
        )),
    }
}

/// `session delete-artifacts S`.
pub(super) async fn delete_artifacts(ctx: &Ctx, session: String) -> Result<(), CliError> {
    let deleted = ctx.client.delete_artifacts(&session).await.map_err(failed(ctx))?;
    match ctx.json {
        true => ctx.json_line(&json!({"session_id": session, "deleted": deleted})),
        false => ctx.line(&format!("deleted {deleted} artifacts of {session}")),
    }
}

pub(super) async fn run(ctx: &Ctx, args: FilesArgs) -> Result<(), CliError> {
    let session = args.session;
    let failed = failed(ctx);
    match args.op {
        None => {
            let files = ctx.client.list_files(&session).await.map_err(failed)?;
            if ctx.json {
                return files.iter().try_for_each(|f| ctx.json_line(&artifact_json(f)));
            }
            if files.is_empty() {
                return ctx.line(&format!("{session} has no files"));
            }
            for f in &files {
                ctx.line(&format!("{}\t{}\t{}\t{}\t{}", f.name, kind(f), f.size, f.mime_type, f.sha256))?;
            }
            Ok(())
        }
        Some(FilesOp::Get { name, out }) => {
            let out = Out::new(out.as_deref().unwrap_or(std::path::Path::new(&name)))?;
            let (artifact, content) = ctx.client.get_file(&session, &name).await.map_err(failed)?;
            out.write(&content)?;
            saved(ctx, &artifact, &out)
        }
        Some(FilesOp::Put { path, name }) => {
            let name = match name {
                Some(name) => name,
                None => path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .ok_or_else(|| CliError::usage(format!("{}: give the file's name with --name", path.display())))?
                    .to_string(),
            };
            let content = std::fs::read(&path).map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
            let artifact = ctx.client.put_file(&session, &name, &content).await.map_err(failed)?;
            match ctx.json {
                true => ctx.json_line(&artifact_json(&artifact)),
                false => ctx
                    .line(&format!("uploaded {} ({} bytes, sha256 {})", artifact.name, artifact.size, artifact.sha256)),
            }
        }
        Some(FilesOp::Zip { out }) => {
            let out = Out::new(&out.unwrap_or_else(|| PathBuf::from(format!("{session}.zip"))))?;
            let files = ctx.client.list_files(&session).await.map_err(&failed)?;
            let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
            let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
            for f in &files {
                let (_, content) = ctx.client.get_file(&session, &f.name).await.map_err(&failed)?;
                let options = options.large_file(content.len() as u64 >= u32::MAX as u64);
                let zipped = zip.start_file(f.name.as_str(), options).map_err(|e| e.to_string());
                zipped
                    .and_then(|()| std::io::Write::write_all(&mut zip, &content).map_err(|e| e.to_string()))
                    .map_err(|e| CliError::failed(format!("zip: {e}")))?;
            }
            let bytes = zip.finish().map_err(|e| CliError::failed(format!("zip: {e}")))?.into_inner();
            out.write(&bytes)?;
            match ctx.json {
                true => ctx.json_line(&json!({"files": files.len(), "bytes": bytes.len(), "out": out.name()})),
                false if matches!(out, Out::Stdout) => Ok(()),
                false => ctx.line(&format!("{} files ({} bytes) -> {}", files.len(), bytes.len(), out.name())),
            }
        }
        Some(FilesOp::Delete { name }) => {
            ctx.client.delete_file(&session, &name).await.map_err(failed)?;
            match ctx.json {
                true => ctx.json_line(&json!({"deleted": name})),
                false => ctx.line(&format!("deleted {name}")),
            }
        }
    }
}

fn kind(f: &pb::Artifact) -> &'static str {
    match pb::ArtifactKind::try_from(f.kind) {
        Ok(pb::ArtifactKind::Download) => "download",
        Ok(pb::ArtifactKind::Upload) => "upload",
        Ok(pb::ArtifactKind::Recording) => "recording",
        _ => "unknown",
    }
}

fn artifact_json(f: &pb::Artifact) -> serde_json::Value {
    json!({"name": f.name, "kind": kind(f), "size": f.size, "mime_type": f.mime_type, "sha256": f.sha256})
}
