//! Dispatch of the command line: `serve` (default), `token issue`, `migrate`.

use std::future::Future;

use crate::auth::Keys;
use crate::config::{Cli, Command, KeyCommand, ServeArgs, TokenCommand};
use crate::store::Store;

/// Runs the command `cli` names; `serve` stops when `shutdown` resolves.
pub async fn run(cli: Cli, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
    match cli.command {
        None => crate::run(ServeArgs::from_env(), shutdown).await,
        Some(Command::Serve(args)) => crate::run(args, shutdown).await,
        Some(Command::Token(TokenCommand::Issue(args))) => {
            let keys = Keys::load_or_create(&args.store.data_dir, args.jwt_alg)?;
            let (token, _) = keys.issue(&args.tenant, &args.subject, &args.scopes, args.ttl)?;
            println!("{token}");
            Ok(())
        }
        Some(Command::Key(KeyCommand::Rotate(args))) => {
            let (old, new) = Keys::rotate(&args.store.data_dir, args.jwt_alg)?;
            eprintln!("retired key {old}; signing key is now {new} (restart the server to sign with it)");
            Ok(())
        }
        Some(Command::Migrate(store)) => {
            std::fs::create_dir_all(&store.data_dir)?;
            let db = Store::open(&store.database_url()).await?;
            db.close().await;
            eprintln!("database is up to date");
            Ok(())
        }
    }
}
