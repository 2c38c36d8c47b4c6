//! `browserpool admin ...`: the Admin rpcs (every one needs a token with scope `admin`).

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;

use super::render::{self, audit_json, audit_row, drain_json, status_json, status_text, tenant_json, tenants_table};
use super::session::print_sessions;
use super::{millis, CliError, Ctx, StateArg};
use crate::pb;

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Workers, capacity and per-tenant usage of every live replica.
    Status,
    /// Sessions of every tenant, or one.
    Sessions {
        /// Only this tenant's sessions.
        #[arg(long)]
        tenant: Option<String>,
        /// Only sessions in this state.
        #[arg(long, value_enum)]
        state: Option<StateArg>,
    },
    /// End a session now (KILLED) and destroy its browser.
    Kill {
        /// Session id.
        session: String,
        /// Why; recorded in the audit trail and sent to the session's streams.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Start draining (Acquire answers UNAVAILABLE there, /readyz fails, live sessions go on),
    /// or stop with --off; the replica answering, a named one, or all of them.
    Drain {
        /// Stop draining: accept sessions again.
        #[arg(long)]
        off: bool,
        /// Every live replica.
        #[arg(long, conflicts_with = "replica")]
        all: bool,
        /// The replica with this id (`admin status` lists them).
        #[arg(long)]
        replica: Option<String>,
    },
    /// Upstream proxies: list, put, delete (not yet used by sessions).
    #[command(subcommand)]
    Proxies(super::proxies::ProxiesCommand),
    /// Tenants: list (the default), put, delete.
    Tenants {
        #[command(subcommand)]
        command: Option<TenantsCommand>,
    },
    /// Tokens: issue, revoke. The server keeps no list of the tokens it issued; the audit
    /// trail has their jti hashes.
    #[command(subcommand)]
    Tokens(TokensCommand),
    /// Audit records, newest first.
    Audit(AuditArgs),
    /// Recompute the audit hash chain; exit code 1 when it is broken.
    Verify,
}

#[derive(Debug, Subcommand)]
pub enum TenantsCommand {
    /// Every tenant, with its quotas and navigation policy.
    List,
    /// Create a tenant, or change one: flags not given keep its current values (a new tenant
    /// needs --max-slots; its other values default to what the flags say).
    Put(PutTenantArgs),
    /// Delete a tenant; refused while it has live sessions unless --force (they are killed).
    /// Its tokens stop working at once.
    Delete {
        /// Tenant id.
        id: String,
        /// Kill its live sessions instead of refusing.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Args)]
pub struct PutTenantArgs {
    /// Tenant id: 1-63 characters of a-z, 0-9, '-', '_', '.'.
    id: String,
    /// Most sessions READY at once, across all replicas.
    #[arg(long)]
    max_slots: Option<u32>,
    /// Most Acquire calls waiting in its queue (new tenant: 100).
    #[arg(long)]
    max_queue: Option<u32>,
    /// Longest session life, e.g. 30m (new tenant: 0, the server's --max-session-ttl).
    #[arg(long, value_parser = humantime::parse_duration)]
    max_session_ttl: Option<Duration>,
    /// Idle timeout of a session that asks for none (new tenant: 0, the server's).
    #[arg(long, value_parser = humantime::parse_duration)]
    idle_timeout: Option<Duration>,
    /// Hosts its pages may reach, HOST or *.SUFFIX, comma-separated; replaces the list, and
    /// "" clears it (any public host; the new tenant's default).
    #[arg(long, value_delimiter = ',')]
    allow_hosts: Option<Vec<String>>,
    /// Let its pages reach loopback, private and link-local addresses: true or false (new
    /// tenant: false).
    #[arg(long)]
    allow_private_networks: Option<bool>,
    /// How its sessions are kept apart from each other: `process` (a Chromium each; the new
    /// tenant's default) or `context` (a browser context each, in a Chromium only this
    /// tenant's sessions share: faster, lighter, one process among them).
    #[arg(long, value_parser = ["process", "context"])]
    isolation: Option<String>,
    /// Memory limit of each of its browsers in MiB, 256-65536, or 0 for the server's
    /// --worker-memory-mb (new tenant: 0). A page past it is killed, its action failing with
    /// "memory limit". Enforced where the server manages cgroups.
    #[arg(long)]
    max_memory_mb: Option<u32>,
    /// Whether its sessions are recorded when `acquire` does not say: on, off or on-failure
    /// (new tenant: off).
    #[arg(long, value_enum)]
    default_record: Option<super::session::RecordArg>,
    /// Largest upload in MiB, up to 1024; 0 for 100 (new tenant: 0).
    #[arg(long)]
    max_file_mb: Option<u32>,
    /// Most MiB of artifacts (kept files and recordings) it may hold on a replica; past it,
    /// what an ending session leaves is not kept; 0 for no cap (new tenant: 0).
    #[arg(long)]
    max_artifact_mb: Option<u32>,
    /// How long what its sessions leave is kept, e.g. 2h; 0s for the server's --artifact-ttl,
    /// which also caps it (new tenant: 0s).
    #[arg(long, value_parser = humantime::parse_duration)]
    artifact_ttl: Option<Duration>,
    /// The upstream proxy its sessions leave through when `acquire` names none (an id from
    /// `admin proxies list`); "" for none (new tenant: none).
    #[arg(long)]
    default_proxy: Option<String>,
    /// Most bytes one of its sessions may send and receive over the network together; past
    /// it, its pages' requests fail saying so; 0 for no cap (new tenant: 0).
    #[arg(long)]
    max_session_bytes: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Mint a token; it is shown once (the server does not keep it).
    Issue {
        /// Tenant the token acts for; it must exist.
        #[arg(long)]
        tenant: String,
        /// Subject (a CI job, a user).
        #[arg(long)]
        subject: String,
        /// Comma-separated scopes: sessions:read, sessions:write, sessions:shared,
        /// context:export, context:import, admin.
        #[arg(long, value_delimiter = ',', required = true)]
        scopes: Vec<String>,
        /// Lifetime, e.g. 30m, 1h, 7d (at most the server's --max-token-ttl).
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
        ttl: Duration,
        /// Print only the token.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Revoke a token by its jti; calls with it then get UNAUTHENTICATED (idempotent).
    Revoke {
        /// The token's jti (`tokens issue` prints it).
        jti: String,
    },
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// Only this session.
    #[arg(long)]
    session: Option<String>,
    /// Only this canonical action (navigate, click...).
    #[arg(long)]
    action: Option<String>,
    /// Only records at or after this: an RFC 3339 time (2026-01-02T15:04:05Z) or a duration
    /// ago (15m, 2h).
    #[arg(long, value_parser = parse_since)]
    since: Option<prost_types::Timestamp>,
    /// Most records; 0 = the server's default.
    #[arg(long, default_value_t = 100)]
    limit: u32,
}

/// An RFC 3339 time, or a duration before now.
fn parse_since(s: &str) -> Result<prost_types::Timestamp, String> {
    if let Ok(t) = s.parse::<prost_types::Timestamp>() {
        return Ok(t);
    }
    let ago = humantime::parse_duration(s)
        .map_err(|_| format!("{s:?} is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a duration (15m)"))?;
    let at = std::time::SystemTime::now().checked_sub(ago).ok_or_else(|| format!("{s:?} reaches before 1970"))?;
    Ok(at.into())
}

pub(super) async fn run(ctx: &Ctx, command: AdminCommand) -> Result<(), CliError> {
    let mut admin = ctx.client.admin();
    match command {
        AdminCommand::Status => {
            let status = admin.pool_status(pb::PoolStatusRequest {}).await.map_err(|s| ctx.status(s))?.into_inner();
            if ctx.json {
                return ctx.json_line(&status_json(&status));
            }
            ctx.print(&status_text(&status))
        }
        AdminCommand::Sessions { tenant, state } => {
            let mut sessions = Vec::new();
            let mut page_token = String::new();
            loop {
                let req = pb::AdminListSessionsRequest {
                    tenant: tenant.clone().unwrap_or_default(),
                    state: StateArg::wire(state),
                    page_size: 0,
                    page_token,
                };
                let page = admin.list_sessions(req).await.map_err(|s| ctx.status(s))?.into_inner();
                sessions.extend(page.sessions);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            print_sessions(ctx, &sessions)
        }
        AdminCommand::Kill { session, reason } => {
            let req = pb::KillSessionRequest { session_id: session.clone(), reason };
            let r = admin.kill_session(req).await.map_err(|s| ctx.status(s))?.into_inner();
            let state = render::session_state(r.state);
            if ctx.json {
                return ctx.json_line(&json!({"session_id": session, "killed": r.killed, "state": state}));
            }
            let state = render::short(&state, "SESSION_STATE_");
            match r.killed {
                true => ctx.line(&format!("killed {session} ({state})")),
                false => ctx.line(&format!("{session} had already ended ({state})")),
            }
        }
        AdminCommand::Drain { off, all, replica } => {
            let req = pb::DrainRequest { drain: !off, all_replicas: all, replica: replica.unwrap_or_default() };
            let r = admin.drain(req).await.map_err(|s| ctx.status(s))?.into_inner();
            if ctx.json {
                return ctx.json_line(&drain_json(&r));
            }
            let head = format!("draining {}, {} sessions still leased\n\n", render::yes_no(r.draining), r.leased);
            ctx.print(&(head + &render::replicas_table(&r.replicas)))
        }
        AdminCommand::Tenants { command } => tenants(ctx, command.unwrap_or(TenantsCommand::List)).await,
        AdminCommand::Tokens(command) => tokens(ctx, command).await,
        AdminCommand::Proxies(command) => super::proxies::run(ctx, command).await,
        AdminCommand::Audit(args) => audit(ctx, args).await,
        AdminCommand::Verify => verify(ctx).await,
    }
}

/// `admin tokens issue` and `admin tokens revoke`.
async fn tokens(ctx: &Ctx, command: TokensCommand) -> Result<(), CliError> {
    let mut admin = ctx.client.admin();
    match command {
        TokensCommand::Issue { tenant, subject, scopes, ttl, quiet } => {
            let ttl_s = u32::try_from(ttl.as_secs()).unwrap_or(u32::MAX).max(1);
            let req = pb::IssueTokenRequest { tenant, subject, scopes, ttl_s };
            let r = admin.issue_token(req).await.map_err(|s| ctx.status(s))?.into_inner();
            if ctx.json {
                return ctx.json_line(&json!({
                    "token": r.token,
                    "jti": r.jti,
                    "expires_at": render::time_json(&r.expires_at),
                }));
            }
            if quiet {
                return ctx.line(&r.token);
            }
            ctx.print(&render::fields(&[
                ("token", r.token),
                ("jti", r.jti),
                ("expires", render::time_text(&r.expires_at)),
            ]))
        }
        TokensCommand::Revoke { jti } => {
            let r = admin.revoke_token(pb::RevokeTokenRequest { jti: jti.clone() }).await.map_err(|s| ctx.status(s))?;
            let revoked = r.into_inner().revoked;
            if ctx.json {
                return ctx.json_line(&json!({"jti": jti, "revoked": revoked}));
            }
            match revoked {
                true => ctx.line(&format!("revoked {jti}")),
                false => ctx.line(&format!("{jti} was already revoked")),
            }
        }
    }
}

/// `admin audit`: the records streamed, as a table or one JSON line each.
async fn audit(ctx: &Ctx, args: AuditArgs) -> Result<(), CliError> {
    let mut admin = ctx.client.admin();
    let req = pb::QueryAuditRequest {
        tenant: args.tenant.unwrap_or_default(),
        session_id: args.session.unwrap_or_default(),
        action: args.action.unwrap_or_default(),
        since: args.since,
        limit: args.limit,
    };
    let mut stream = admin.query_audit(req).await.map_err(|s| ctx.status(s))?.into_inner();
    let mut table = render::audit_table();
    while let Some(record) = stream.message().await.map_err(|s| ctx.status(s))? {
        if ctx.json {
            ctx.json_line(&audit_json(&record))?;
        } else {
            audit_row(&mut table, &record);
        }
    }
    if ctx.json {
        return Ok(());
    }
    ctx.print(&table.render())
}

/// `admin verify`: fails (exit code) when the chain is broken.
async fn verify(ctx: &Ctx) -> Result<(), CliError> {
    let mut admin = ctx.client.admin();
    let r = admin.verify_audit(pb::VerifyAuditRequest {}).await.map_err(|s| ctx.status(s))?.into_inner();
    if ctx.json {
        ctx.json_line(&json!({
            "ok": r.ok,
            "records_checked": r.records_checked,
            "first_bad_seq": r.first_bad_seq,
            "message": r.message,
        }))?;
    } else if r.ok {
        ctx.line(&format!("audit chain ok: {} records checked", r.records_checked))?;
    }
    if r.ok {
        Ok(())
    } else {
        Err(CliError::failed(format!(
            "audit chain broken at seq {} ({} records checked): {}",
            r.first_bad_seq, r.records_checked, r.message
        )))
    }
}

async fn tenants(ctx: &Ctx, command: TenantsCommand) -> Result<(), CliError> {
    let mut admin = ctx.client.admin();
    match command {
        TenantsCommand::List => {
            let r = admin.list_tenants(pb::ListTenantsRequest {}).await.map_err(|s| ctx.status(s))?.into_inner();
            if ctx.json {
                return r.tenants.iter().try_for_each(|t| ctx.json_line(&tenant_json(t)));
            }
            ctx.print(&tenants_table(&r.tenants))
        }
        TenantsCommand::Put(args) => {
            // PutTenant replaces the whole tenant: start from the stored one so flags not
            // given keep their values.
            let list = admin.list_tenants(pb::ListTenantsRequest {}).await.map_err(|s| ctx.status(s))?.into_inner();
            let current = list.tenants.into_iter().find(|t| t.id == args.id);
            let tenant = merge_tenant(current, args)?;
            let r = admin
                .put_tenant(pb::PutTenantRequest { tenant: Some(tenant) })
                .await
                .map_err(|s| ctx.status(s))?
                .into_inner();
            let stored = r.tenant.unwrap_or_default();
            if ctx.json {
                return ctx.json_line(&json!({"created": r.created, "tenant": tenant_json(&stored)}));
            }
            let verb = if r.created { "created" } else { "updated" };
            ctx.print(&format!("{verb} tenant {}\n{}", stored.id, tenants_table(std::slice::from_ref(&stored))))
        }
        TenantsCommand::Delete { id, force } => {
            let req = pb::DeleteTenantRequest { id: id.clone(), force };
            let deleted = admin.delete_tenant(req).await.map_err(|s| ctx.status(s))?.into_inner().deleted;
            if ctx.json {
                return ctx.json_line(&json!({"id": id, "deleted": deleted}));
            }
            match deleted {
                true => ctx.line(&format!("deleted tenant {id}")),
                false => ctx.line(&format!("no tenant {id}")),
            }
        }
    }
}

/// The tenant `put` sends: the flags over the stored tenant, or over a new one's defaults.
fn merge_tenant(current: Option<pb::Tenant>, args: PutTenantArgs) -> Result<pb::Tenant, CliError> {
    let mut t = match current {
        Some(t) => t,
        None => pb::Tenant {
            id: args.id.clone(),
            max_slots: args.max_slots.ok_or_else(|| {
                CliError::usage(format!("tenant {:?} does not exist: creating it needs --max-slots", args.id))
            })?,
            max_queue: 100,
            ..Default::default()
        },
    };
    if let Some(n) = args.max_slots {
        t.max_slots = n;
    }
    if let Some(n) = args.max_queue {
        t.max_queue = n;
    }
    if let Some(d) = args.max_session_ttl {
        t.max_session_ttl_ms = millis(d);
    }
    if let Some(d) = args.idle_timeout {
        t.idle_timeout_ms = millis(d);
    }
    if let Some(hosts) = args.allow_hosts {
        t.allow_hosts = hosts.into_iter().map(|h| h.trim().to_string()).filter(|h| !h.is_empty()).collect();
    }
    if let Some(b) = args.allow_private_networks {
        t.allow_private_networks = b;
    }
    if let Some(mb) = args.max_memory_mb {
        t.max_memory_mb = mb;
    }
    if let Some(record) = args.default_record {
        t.default_record = super::session::RecordArg::wire(Some(record));
    }
    if let Some(mb) = args.max_file_mb {
        t.max_file_mb = mb;
    }
    if let Some(mb) = args.max_artifact_mb {
        t.max_artifact_mb = mb;
    }
    if let Some(d) = args.artifact_ttl {
        t.artifact_ttl_s = d.as_secs().min(u32::MAX as u64) as u32;
    }
    if let Some(proxy) = args.default_proxy {
        t.default_proxy = proxy;
    }
    if let Some(n) = args.max_session_bytes {
        t.max_session_bytes = n;
    }
    if let Some(isolation) = args.isolation {
        t.isolation = match isolation.as_str() {
            "context" => pb::Isolation::Context,
            _ => pb::Isolation::Process,
        } as i32;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Put {
        #[command(flatten)]
        args: PutTenantArgs,
    }

    fn put(argv: &[&str]) -> PutTenantArgs {
        Put::try_parse_from(std::iter::once("put").chain(argv.iter().copied())).unwrap().args
    }

    #[test]
    fn put_keeps_what_the_flags_do_not_name() {
        let stored = pb::Tenant {
            id: "ci".into(),
            max_slots: 4,
            max_queue: 10,
            max_session_ttl_ms: 60_000,
            idle_timeout_ms: 5_000,
            allow_hosts: vec!["example.com".into()],
            allow_private_networks: true,
            isolation: pb::Isolation::Process as i32,
            max_memory_mb: 0,
            default_record: pb::Record::Unspecified as i32,
            max_file_mb: 0,
            max_artifact_mb: 0,
            artifact_ttl_s: 0,
            default_proxy: String::new(),
            max_session_bytes: 0,
        };
        let t = merge_tenant(Some(stored.clone()), put(&["ci", "--max-slots", "8"])).unwrap();
        assert_eq!(t, pb::Tenant { max_slots: 8, ..stored.clone() });
        let t = merge_tenant(Some(stored.clone()), put(&["ci", "--max-memory-mb", "512"])).unwrap();
        assert_eq!(t, pb::Tenant { max_memory_mb: 512, ..stored.clone() });
        let network = ["ci", "--default-proxy", "eu-1", "--max-session-bytes", "1000000"];
        let t = merge_tenant(Some(stored.clone()), put(&network)).unwrap();
        assert_eq!(t, pb::Tenant { default_proxy: "eu-1".into(), max_session_bytes: 1_000_000, ..stored.clone() });
        let artifacts = ["ci", "--default-record", "on-failure", "--max-file-mb", "5", "--max-artifact-mb", "50"];
        let t = merge_tenant(Some(stored.clone()), put(&[&artifacts[..], &["--artifact-ttl", "2h"]].concat())).unwrap();
        let want = pb::Tenant {
            default_record: pb::Record::RetainOnFailure as i32,
            max_file_mb: 5,
            max_artifact_mb: 50,
            artifact_ttl_s: 7200,
            ..stored.clone()
        };
        assert_eq!(t, want);
        let t = merge_tenant(
            Some(stored.clone()),
            put(&["ci", "--allow-hosts", "", "--allow-private-networks", "false", "--idle-timeout", "1m"]),
        )
        .unwrap();
        assert!(t.allow_hosts.is_empty() && !t.allow_private_networks);
        assert_eq!(t.idle_timeout_ms, 60_000);
        let t = merge_tenant(Some(stored.clone()), put(&["ci", "--allow-hosts", "a.com,*.b.org"])).unwrap();
        assert_eq!(t.allow_hosts, ["a.com", "*.b.org"]);
        let t = merge_tenant(Some(stored), put(&["ci", "--isolation", "context"])).unwrap();
        assert_eq!(t.isolation, pb::Isolation::Context as i32);
        assert!(Put::try_parse_from(["put", "ci", "--isolation", "thread"]).is_err());
    }

    #[test]
    fn a_new_tenant_needs_its_slots() {
        let e = merge_tenant(None, put(&["new"])).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let t = merge_tenant(None, put(&["new", "--max-slots", "2"])).unwrap();
        assert_eq!((t.id.as_str(), t.max_slots, t.max_queue, t.allow_private_networks), ("new", 2, 100, false));
    }

    #[test]
    fn since_is_a_time_or_a_duration_ago() {
        let t = parse_since("2026-01-02T15:04:05Z").unwrap();
        assert_eq!(t.to_string(), "2026-01-02T15:04:05Z");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let ago = parse_since("1h").unwrap();
        assert!((now - 3600 - ago.seconds).abs() <= 2, "{ago}");
        assert!(parse_since("yesterday").is_err());
    }
}
