//! What forwarding between replicas adds to a call: `Act("url")` on a session held by
//! replica A, sent to A itself and to replica B (which forwards it to A), alternately.
//!
//! `cargo run --release -p browserpool-server --example forward_bench [-- ROUNDS]`
//!
//! Two servers in this process on 127.0.0.1:0 share one SQLite file and signing key, as
//! replicas behind a Service do. Prints p50 and p99 of each path and their difference.

use std::time::Instant;

use browserpool_client::{action, Client};

mod common;
use common::{ms, quantile, InProcess};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(2000);
    let a = InProcess::start(1, 1).await?;
    let b = InProcess::replica_of(&a, 0, 1).await?;
    let owner = Client::connect(a.endpoint.clone(), &a.token).await?;
    let forwarder = Client::connect(b.endpoint.clone(), &a.token).await?;
    let session = owner.acquire(30_000).await?.session_id;
    let url = || action("url", "", serde_json::Value::Null);
    // Warm both paths (connections, caches) before measuring.
    for _ in 0..50 {
        owner.act(&session, url()).await?;
        forwarder.act(&session, url()).await?;
    }
    let (mut direct, mut forwarded) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let t = Instant::now();
        anyhow::ensure!(owner.act(&session, url()).await?.ok, "url failed on the owner");
        direct.push(t.elapsed());
        let t = Instant::now();
        anyhow::ensure!(forwarder.act(&session, url()).await?.ok, "url failed through the other replica");
        forwarded.push(t.elapsed());
    }
    owner.release(&session).await?;
    let (d50, d99) = (quantile(&direct, 0.50), quantile(&direct, 0.99));
    let (f50, f99) = (quantile(&forwarded, 0.50), quantile(&forwarded, 0.99));
    println!("Act(\"url\") x {rounds}, each path, alternating");
    println!("  to the owner:              p50 {:>7.3} ms  p99 {:>7.3} ms", ms(d50), ms(d99));
    println!("  through another replica:   p50 {:>7.3} ms  p99 {:>7.3} ms", ms(f50), ms(f99));
    println!("  forwarding adds:           p50 {:>7.3} ms  p99 {:>7.3} ms", ms(f50) - ms(d50), ms(f99) - ms(d99));
    b.stop().await?;
    a.stop().await?;
    Ok(())
}
