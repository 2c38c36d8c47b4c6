//! `browserpool admin proxies`: the upstream proxies sessions may leave through (not yet used
//! by sessions). A password is read from a file or stdin, never from the command line.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;

use super::render::Table;
use super::{read_file, CliError, Ctx};
use crate::pb;

/// `admin proxies ...`.
#[derive(Debug, Subcommand)]
pub enum ProxiesCommand {
    /// Every proxy (passwords never shown).
    List,
    /// Create or replace a proxy.
    Put(PutArgs),
    /// Delete a proxy.
    Delete { id: String },
}

#[derive(Debug, Args)]
pub struct PutArgs {
    /// Its id: 1-63 characters of a-z, 0-9, '-', '_', '.'.
    id: String,
    /// http://, https:// or socks5://HOST:PORT.
    #[arg(long)]
    url: String,
    /// User name at the upstream.
    #[arg(long, default_value = "")]
    username: String,
    /// A file holding the password (- for stdin); without it the stored password is kept.
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// A host (or *.suffix) that goes direct (repeat for more).
    #[arg(long = "direct-host")]
    direct_hosts: Vec<String>,
    /// A tenant that may use it (repeat for more).
    #[arg(long = "tenant")]
    tenants: Vec<String>,
}

pub(super) async fn run(ctx: &Ctx, command: ProxiesCommand) -> Result<(), CliError> {
    let mut admin = ctx.client.admin();
    match command {
        ProxiesCommand::List => {
            let r = admin.list_proxies(pb::ListProxiesRequest {}).await.map_err(|s| ctx.status(s))?.into_inner();
            if ctx.json {
                return r.proxies.iter().try_for_each(|p| ctx.json_line(&proxy_json(p)));
            }
            ctx.print(&table(&r.proxies))
        }
        ProxiesCommand::Put(args) => {
            let password = match &args.password_file {
                Some(path) => {
                    let bytes = read_file(path, "--password-file")?;
                    let text = String::from_utf8(bytes).map_err(|_| CliError::usage("--password-file: not UTF-8"))?;
                    text.trim_end_matches(['\r', '\n']).to_string()
                }
                None => String::new(),
            };
            let proxy = pb::Proxy {
                id: args.id,
                url: args.url,
                username: args.username,
                password,
                direct_hosts: args.direct_hosts,
                tenants: args.tenants,
                has_password: false,
            };
            let r = admin.put_proxy(pb::PutProxyRequest { proxy: Some(proxy) }).await.map_err(|s| ctx.status(s))?;
            let r = r.into_inner();
            let stored = r.proxy.unwrap_or_default();
            if ctx.json {
                return ctx.json_line(&json!({"created": r.created, "proxy": proxy_json(&stored)}));
            }
            let verb = if r.created { "created" } else { "updated" };
            ctx.print(&format!("{verb} proxy {}\n{}", stored.id, table(std::slice::from_ref(&stored))))
        }
        ProxiesCommand::Delete { id } => {
            let req = pb::DeleteProxyRequest { id: id.clone() };
            let deleted = admin.delete_proxy(req).await.map_err(|s| ctx.status(s))?.into_inner().deleted;
            if ctx.json {
                return ctx.json_line(&json!({"id": id, "deleted": deleted}));
            }
            ctx.line(&if deleted { format!("deleted proxy {id}") } else { format!("no proxy {id}") })
        }
    }
}

fn proxy_json(p: &pb::Proxy) -> serde_json::Value {
    json!({
        "id": p.id,
        "url": p.url,
        "username": p.username,
        "has_password": p.has_password,
        "direct_hosts": p.direct_hosts,
        "tenants": p.tenants,
    })
}

fn table(proxies: &[pb::Proxy]) -> String {
    let mut table = Table::new(["PROXY", "URL", "USERNAME", "PASSWORD", "DIRECT", "TENANTS"]);
    for p in proxies {
        table.row([
            p.id.clone(),
            p.url.clone(),
            p.username.clone(),
            if p.has_password { "stored".into() } else { "-".into() },
            p.direct_hosts.join(","),
            p.tenants.join(","),
        ]);
    }
    table.render()
}
