//! The README's Rust snippet: acquire, load a page, read it, screenshot, release.
//!
//! `cargo run -p browserpool-client --example quickstart -- http://127.0.0.1:50051 .browserpool/admin.token`

use std::time::Duration;

use browserpool_client::{Client, Error};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let server = args.next().unwrap_or_else(|| "http://127.0.0.1:50051".into());
    let token = std::fs::read_to_string(args.next().unwrap_or_else(|| ".browserpool/admin.token".into()))?;
    let client = Client::connect(server, &token).await?;
    let session = client.session().wait(Duration::from_secs(10)).await?; // released on drop too
    session.load_html("<title>hi</title><h1>hello from rust</h1>").await?;
    println!("{}", session.extract("h1").await?.unwrap_or_default());
    std::fs::write("shot.png", session.screenshot().await?)?;
    session.release().await?;
    Ok(())
}
