//! Dispatch of the command line: `serve` (default), `token issue`, `migrate`, `key rotate`,
//! and the client commands `session` and `admin` (in `browserpool_client::cli`) and `mcp`
//! (the stdio bridge, [`crate::bridge`]), whose
//! failures are a `CliError` carrying the exit code.

use std::future::Future;

use anyhow::Context;

use crate::auth::Keys;
use crate::config::{Cli, Command, KeyCommand, ServeArgs, TokenCommand, TokenIssueArgs};
use crate::model::DEFAULT_TENANT;
use crate::server::{create_data_dir, ensure_default_tenant};
use crate::store::Store;

/// Runs the command `cli` names; `serve` stops when `shutdown` resolves.
pub async fn run(cli: Cli, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
    match cli.command {
        None => crate::run(ServeArgs::from_env()?, shutdown).await,
        Some(Command::Serve(args)) => crate::run(args, shutdown).await,
        Some(Command::Token(TokenCommand::Issue(args))) => {
            // Signed with the key of the server of this data dir, never a new one: a key made
            // here would be one no server knows, and its tokens refused everywhere.
            let keys = Keys::load(&args.store.data_dir)?;
            let store = Store::open(&args.store.database_url()).await?;
            let epoch = tenant_epoch(&store, &args).await;
            store.close().await;
            let (token, _) = keys.issue(&args.tenant, &epoch?, &args.subject, &args.scopes, args.ttl)?;
            println!("{token}");
            Ok(())
        }
        Some(Command::Key(KeyCommand::Rotate(args))) => {
            let (old, new) = Keys::rotate(&args.store.data_dir, args.jwt_alg)?;
            eprintln!(
                "retired key {old}; signing key is now {new} (a server running on this data dir signs with it within a second)"
            );
            Ok(())
        }
        Some(Command::Session(args)) => Ok(args.run().await?),
        Some(Command::Admin(args)) => Ok(args.run().await?),
        Some(Command::Mcp(args)) => Ok(crate::bridge::run(args).await?),
        Some(Command::Migrate(store)) => {
            create_data_dir(&store.data_dir)?;
            let db = Store::open(&store.database_url()).await?;
            db.close().await;
            eprintln!("database is up to date");
            Ok(())
        }
    }
}

/// The epoch `token issue` signs into the token. The tenant must exist, except `default`,
/// which is created as `serve` creates it (from the same environment) when missing.
async fn tenant_epoch(store: &Store, args: &TokenIssueArgs) -> anyhow::Result<String> {
    if args.tenant == DEFAULT_TENANT {
        let serve = ServeArgs { store: args.store.clone(), ..ServeArgs::from_env()? };
        return ensure_default_tenant(store, &serve).await;
    }
    store.tenant_epoch(&args.tenant).await?.with_context(|| {
        format!(
            "tenant {:?} does not exist in this database: create it first (Admin/PutTenant); only {DEFAULT_TENANT:?} is created on its own",
            args.tenant
        )
    })
}
