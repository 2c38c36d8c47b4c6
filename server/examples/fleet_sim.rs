//! The control plane at fleet size, simulated: REPLICAS servers (3) in this process on one
//! PostgreSQL database, their sessions leasing in-memory fake browsers (`browsers::fake`, the
//! seam the lifecycle's unit tests use) instead of Chromium, behind a round-robin TCP front.
//! CLIENTS clients (1000) across TENANTS tenants (50), each in a loop: acquire, 20 actions
//! (each taking ACTION_MS, 1000, in the fake browser, as a page or an agent's thinking would),
//! release. Each client (four of a tenant share them) holds two connections through the front,
//! which lands them on two different replicas: a session's acquire and every other action go
//! through one (the owner), the other half through the other, which forwards them.
//!
//! ```text
//! source scripts/lib.sh && ensure_postgres
//! cargo run --release -p browserpool-server --example fleet_sim [-- CLIENTS [TENANTS [REPLICAS [SECONDS [ACTION_MS]]]]]
//! ```
//!
//! For CLIENTS, twice and four times as many, each on a fresh database (the clients' starts
//! spread over a session's length, SECONDS (30) measured once each is a session in), it prints: acquire p50/p99 (every tenant's slots and every replica's
//! capacity above its clients: no queueing), `Act` p50/p99 on the owner and forwarded (what
//! the control plane adds to the time the fake's sleep of ACTION_MS really took, which it
//! reports: a timer fires up to a few ms late), store transactions and WAL bytes
//! per session (PostgreSQL's own counters over the window), this process's CPU per session
//! (replicas, front and clients together), and the audit lag p99 (from an action's answer to
//! its record's write time in the database). Then the fleet idle (heartbeats and sweeps:
//! transactions and WAL bytes per second), and fairness: capacity a fifth of the clients,
//! tenants with 1 to 4 times as many clients as one another, all waiting; Jain's index over
//! the sessions each tenant was served.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use browserpool_proto::v1 as pb;
use browserpool_server::browsers::fake::FakeBrowsers;
use browserpool_server::config::ServeArgs;
use pb::admin_client::AdminClient;
use pb::sessions_client::SessionsClient;
use sqlx::Row;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

mod common;
use common::{copy_signing_keys, cpu_ms, ms, quantile};

/// Actions per session.
const ACTIONS: usize = 20;
/// How long an action takes in the fairness run: short, so each tenant is served many
/// sessions in the window, and long enough that the calls stay within what the host can take.
const FAIR_ACTION_MS: u64 = 100;
/// Warm-up before each measured window.
const WARM_UP: Duration = Duration::from_secs(3);

type Authed = InterceptedService<Channel, Bearer>;

/// Adds a client's token to each call.
#[derive(Clone)]
struct Bearer(tonic::metadata::MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

fn bearer(token: &str) -> anyhow::Result<Bearer> {
    Ok(Bearer(format!("Bearer {}", token.trim()).parse()?))
}

/// One replica serving in this process.
struct Replica {
    grpc: SocketAddr,
    id: String,
    dir: tempfile::TempDir,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// REPLICAS servers on one fresh database, each with `capacity` fake browsers, and a
/// round-robin front.
struct Fleet {
    replicas: Vec<Replica>,
    db: sqlx::PgPool,
    front: SocketAddr,
    /// Connections the front handed to each replica.
    landed: Arc<Vec<AtomicUsize>>,
    admin_token: String,
}

impl Fleet {
    async fn start(admin_url: &str, replicas: usize, capacity: usize) -> anyhow::Result<Fleet> {
        let url = browserpool_server::store::scratch_postgres(admin_url).await?;
        let mut started: Vec<Replica> = Vec::new();
        for n in 0..replicas {
            let dir = tempfile::tempdir()?;
            if let Some(first) = started.first() {
                copy_signing_keys(first.dir.path(), dir.path())?;
            }
            let mut args = ServeArgs::for_tests(dir.path());
            args.warm = 0;
            args.max_workers = capacity;
            args.store.database_url = Some(url.clone());
            let fake = Arc::new(FakeBrowsers::named(capacity, &format!("r{n}")));
            let bound = browserpool_server::bind_with(args, Some(fake)).await?;
            let grpc = bound.grpc_addr;
            let id = bound.sessions().replica_id().to_string();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(bound.serve(async move {
                let _ = stopped.await;
            }));
            started.push(Replica { grpc, id, dir, stop, task });
        }
        let admin_token = std::fs::read_to_string(started[0].dir.path().join("admin.token"))?;
        let (front, landed) = front(started.iter().map(|r| r.grpc).collect()).await?;
        let db = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&url).await?;
        Ok(Fleet { replicas: started, db, front, landed, admin_token })
    }

    async fn admin(&self) -> anyhow::Result<AdminClient<Authed>> {
        let channel = Endpoint::from_shared(format!("http://{}", self.replicas[0].grpc))?.connect().await?;
        Ok(AdminClient::with_interceptor(channel, bearer(&self.admin_token)?))
    }

    /// Tenants `t0..tN` with `slots` each and room to queue `queue`; a client token of each.
    async fn tenants(&self, n: usize, slots: u32, queue: u32) -> anyhow::Result<Vec<String>> {
        let mut admin = self.admin().await?;
        let mut tokens = Vec::with_capacity(n);
        for t in 0..n {
            let tenant = pb::Tenant { id: format!("t{t}"), max_slots: slots, max_queue: queue, ..Default::default() };
            admin.put_tenant(pb::PutTenantRequest { tenant: Some(tenant) }).await?;
            let req = pb::IssueTokenRequest {
                tenant: format!("t{t}"),
                subject: "sim".into(),
                scopes: vec!["sessions:read".into(), "sessions:write".into()],
                ttl_s: 3600,
            };
            tokens.push(admin.issue_token(req).await?.into_inner().token);
        }
        // Each replica reads new tenants from the database within a second: wait for that, so
        // the clients' first calls are not refused as tokens of tenants it does not know.
        let last = tokens.last().cloned().unwrap_or_default();
        for r in &self.replicas {
            let channel = Endpoint::from_shared(format!("http://{}", r.grpc))?.connect().await?;
            let mut sessions = SessionsClient::with_interceptor(channel, bearer(&last)?);
            let deadline = Instant::now() + Duration::from_secs(10);
            while let Err(e) = sessions.list(pb::ListSessionsRequest::default()).await {
                anyhow::ensure!(Instant::now() < deadline, "replica {} refuses the new tenants' tokens: {e}", r.id);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(tokens)
    }

    /// Two connections of one client through the front, one after the other: the front hands
    /// them to different replicas.
    async fn connect(&self, token: &str) -> anyhow::Result<[SessionsClient<Authed>; 2]> {
        let one = || async {
            let channel = Endpoint::from_shared(format!("http://{}", self.front))?.connect().await?;
            anyhow::Ok(SessionsClient::with_interceptor(channel, bearer(token)?))
        };
        Ok([one().await?, one().await?])
    }

    /// PostgreSQL's transactions (committed and rolled back) and WAL position now.
    async fn counters(&self) -> anyhow::Result<(i64, i64)> {
        // The statistics of this backend's own transactions are flushed within a second.
        sqlx::query("SELECT pg_stat_clear_snapshot()").execute(&self.db).await?;
        let row = sqlx::query(
            "SELECT (xact_commit + xact_rollback)::BIGINT AS x, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::BIGINT AS w \
             FROM pg_stat_database WHERE datname = current_database()",
        )
        .fetch_one(&self.db)
        .await?;
        Ok((row.get("x"), row.get("w")))
    }

    async fn stop(self) -> anyhow::Result<()> {
        for r in self.replicas {
            let _ = r.stop.send(());
            r.task.await??;
        }
        Ok(())
    }
}

/// Accepts on 127.0.0.1:0 and relays the k-th connection to `backends[k % n]`.
async fn front(backends: Vec<SocketAddr>) -> anyhow::Result<(SocketAddr, Arc<Vec<AtomicUsize>>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let landed: Arc<Vec<AtomicUsize>> = Arc::new(backends.iter().map(|_| AtomicUsize::new(0)).collect());
    let counts = landed.clone();
    tokio::spawn(async move {
        let mut next = 0usize;
        while let Ok((mut inbound, _)) = listener.accept().await {
            let n = next % backends.len();
            next += 1;
            let backend = backends[n];
            counts[n].fetch_add(1, Ordering::SeqCst);
            let _ = inbound.set_nodelay(true);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(backend).await {
                    let _ = outbound.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    Ok((addr, landed))
}

/// What the clients measured in the window.
#[derive(Default)]
struct Tally {
    acquire: Vec<Duration>,
    owner: Vec<Duration>,
    forwarded: Vec<Duration>,
    /// Sessions released in the window, per tenant.
    served: HashMap<usize, u64>,
    /// (session, action's selector) -> when its answer came, ms since the epoch.
    calls: HashMap<(String, String), i64>,
    /// Actions through a connection whose replica was not known yet (not timed).
    unplaced: u64,
    failures: Vec<String>,
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Two connections through the front, shared by up to [`CLIENTS_PER_PAIR`] clients of one
/// tenant (HTTP/2 multiplexes their calls), and the replica each reaches once known.
struct Pair {
    conns: [SessionsClient<Authed>; 2],
    reaches: Mutex<[Option<String>; 2]>,
}

/// Clients sharing one pair of connections: four sockets each per connection here (client,
/// the front's two, the replica's) keep 4000 clients within the host's open files limit.
const CLIENTS_PER_PAIR: usize = 4;

/// One client's loop until `stop`: sessions of `tenant`, recorded while `recording`. Its
/// sessions are acquired through either connection in turn, which tells which replica each
/// connection reaches (the session's `replica`); an action through the other connection is
/// forwarded when that replica is not the owner.
async fn client(
    pair: Arc<Pair>,
    tenant: usize,
    action_ms: u64,
    start_after: Duration,
    recording: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
) {
    // Clients start spread over one session's length, so sessions end at a steady rate.
    tokio::time::sleep(start_after).await;
    let mut conns = pair.conns.clone();
    let mut turn = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let (mine, other) = (turn % 2, (turn + 1) % 2);
        turn += 1;
        let started = Instant::now();
        let req = pb::AcquireRequest { wait_ms: 60_000, ..Default::default() };
        let session = match conns[mine].acquire(req).await {
            Ok(s) => s.into_inner(),
            Err(e) => {
                tally.lock().unwrap().failures.push(format!("acquire: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acquired = started.elapsed();
        pair.reaches.lock().unwrap()[mine] = Some(session.replica.clone());
        if recording.load(Ordering::Relaxed) {
            tally.lock().unwrap().acquire.push(acquired);
        }
        for k in 0..ACTIONS {
            let selector = format!("#s{k}");
            // The fake browser takes `action_ms` over it, as a page would.
            let action = pb::Action {
                action: "click".into(),
                selector: selector.clone(),
                payload: Some(browserpool_proto::json::from_json(&serde_json::json!({ "sleep_ms": action_ms }))),
                timeout_ms: 60_000,
                ..Default::default()
            };
            let req = pb::ActRequest { session_id: session.session_id.clone(), action: Some(action) };
            let through = if k % 2 == 0 { mine } else { other };
            let began = Instant::now();
            let answer = conns[through].act(req).await;
            let (at, took) = (now_ms(), began.elapsed());
            // What the fake browser's sleep really took (its timer fires late by up to a few
            // ms), else the time asked of it.
            let slept = answer
                .as_ref()
                .ok()
                .and_then(|r| r.get_ref().value.as_ref())
                .and_then(|v| browserpool_proto::json::to_json(v)["slept_us"].as_u64())
                .map_or(Duration::from_millis(action_ms), Duration::from_micros);
            // What the control plane added to the browser's own time.
            let took = took.saturating_sub(slept);
            let failed = match answer {
                Ok(r) if r.get_ref().ok => None,
                Ok(r) => Some(format!("act: {:?}", r.into_inner().error)),
                Err(e) => Some(format!("act: {e}")),
            };
            if let Some(failure) = failed {
                // As a client told to retry in a moment would.
                tally.lock().unwrap().failures.push(failure);
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            let mut t = tally.lock().unwrap();
            if !recording.load(Ordering::Relaxed) {
                continue;
            }
            let reaches = pair.reaches.lock().unwrap()[through].clone();
            match &reaches {
                Some(r) if *r == session.replica => t.owner.push(took),
                Some(_) => t.forwarded.push(took),
                None => t.unplaced += 1,
            }
            t.calls.insert((session.session_id.clone(), selector), at);
        }
        let req = pb::ReleaseRequest { session_id: session.session_id.clone(), failed: false };
        match conns[mine].release(req).await {
            Err(e) => tally.lock().unwrap().failures.push(format!("release: {e}")),
            Ok(_) if recording.load(Ordering::Relaxed) => *tally.lock().unwrap().served.entry(tenant).or_default() += 1,
            Ok(_) => {}
        }
    }
}

/// A measured run: `clients` over `tenants` tenants (tenant `t` given `weight(t)` shares of
/// the clients) for `window`.
struct Run {
    tally: Tally,
    window: Duration,
    transactions: i64,
    wal_bytes: i64,
    /// This process's CPU time in the window, ms.
    cpu_ms: f64,
    audit_lags: Vec<i64>,
    landed: Vec<usize>,
}

async fn run(
    fleet: &Fleet,
    tokens: &[String],
    clients: usize,
    weight: fn(usize) -> usize,
    action_ms: u64,
    window: Duration,
) -> anyhow::Result<Run> {
    let shares: Vec<usize> = (0..tokens.len()).flat_map(|t| std::iter::repeat_n(t, weight(t))).collect();
    let (recording, stop) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let span = Duration::from_millis(action_ms * ACTIONS as u64);
    let mut tasks = Vec::with_capacity(clients);
    let mut pairs: HashMap<usize, (Arc<Pair>, usize)> = HashMap::new();
    for i in 0..clients {
        let tenant = shares[i % shares.len()];
        // Connections made one after another, so the front's order is the clients'.
        let pair = match pairs.get(&tenant) {
            Some((pair, n)) if *n < CLIENTS_PER_PAIR => pair.clone(),
            _ => {
                let conns = fleet.connect(&tokens[tenant]).await?;
                Arc::new(Pair { conns, reaches: Mutex::default() })
            }
        };
        let used = pairs.get(&tenant).filter(|(p, _)| Arc::ptr_eq(p, &pair)).map_or(0, |(_, n)| *n);
        pairs.insert(tenant, (pair.clone(), used + 1));
        let (recording, stop, tally) = (recording.clone(), stop.clone(), tally.clone());
        let start_after = span.mul_f64(i as f64 / clients as f64);
        tasks.push(tokio::spawn(client(pair, tenant, action_ms, start_after, recording, stop, tally)));
    }
    // Every client started, and each a session in: a steady state.
    tokio::time::sleep(span + WARM_UP).await;
    let (x0, w0) = fleet.counters().await?;
    let cpu0 = cpu_ms().0;
    recording.store(true, Ordering::SeqCst);
    tokio::time::sleep(window).await;
    recording.store(false, Ordering::SeqCst);
    let cpu = cpu_ms().0 - cpu0;
    // The statistics of the replicas' transactions reach pg_stat_database within a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (x1, w1) = fleet.counters().await?;
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await?;
    }
    let tally = Arc::try_unwrap(tally).map_err(|_| anyhow::anyhow!("clients ended"))?.into_inner().unwrap();
    // The audit trail's write time of each measured action, from the database.
    let rows =
        sqlx::query("SELECT session_id, target, at_ms FROM audit WHERE rpc LIKE '%/Act'").fetch_all(&fleet.db).await?;
    let mut audit_lags = Vec::with_capacity(tally.calls.len());
    for row in rows {
        let key: (String, String) = (row.get("session_id"), row.get("target"));
        if let Some(at) = tally.calls.get(&key) {
            audit_lags.push(row.get::<i64, _>("at_ms") - at);
        }
    }
    let landed = fleet.landed.iter().map(|n| n.load(Ordering::SeqCst)).collect();
    Ok(Run { tally, window, transactions: x1 - x0, wal_bytes: w1 - w0, cpu_ms: cpu, audit_lags, landed })
}

/// Jain's fairness index over `x`: 1 when all are equal, 1/n when one has everything.
fn jain(x: &[f64]) -> f64 {
    let (sum, squares) = x.iter().fold((0.0, 0.0), |(s, q), v| (s + v, q + v * v));
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let arg = |n: usize, default: usize| -> anyhow::Result<usize> {
        Ok(std::env::args().nth(n).map(|s| s.parse()).transpose()?.unwrap_or(default))
    };
    let (clients, tenants, replicas, seconds) = (arg(1, 1000)?, arg(2, 50)?, arg(3, 3)?, arg(4, 30)?);
    let action_ms = arg(5, 1000)? as u64;
    anyhow::ensure!(clients >= tenants && tenants > 0 && replicas > 0, "CLIENTS >= TENANTS > 0 and REPLICAS > 0");
    let admin_url = std::env::var("BROWSERPOOL_TEST_POSTGRES").ok().filter(|u| !u.is_empty()).ok_or_else(|| {
        anyhow::anyhow!("set BROWSERPOOL_TEST_POSTGRES to a PostgreSQL URL whose role may create databases (source scripts/lib.sh && ensure_postgres)")
    })?;
    let window = Duration::from_secs(seconds as u64);
    println!(
        "fleet_sim: {replicas} replicas on one PostgreSQL, fake browsers, a round-robin front; {tenants} tenants; \
         acquire -> {ACTIONS} actions of {action_ms} ms each (half through a non-owner) -> release; {seconds} s measured once every client is a session in; \
         Act: what the control plane added to the time the fake browser's {action_ms} ms sleep really took"
    );
    println!("{:>88}", "per session");
    println!(
        "{:>7} {:>8} {:>6} | {:>15} | {:>15} | {:>15} | {:>6} {:>9} {:>8} | {:>9}",
        "clients",
        "sessions",
        "per s",
        "acquire p50/p99",
        "Act owner",
        "Act forwarded",
        "xact",
        "WAL B",
        "CPU ms",
        "audit p99"
    );
    let mut per_session = Vec::new();
    for scale in [1, 2, 4] {
        let m = clients * scale;
        // Room for every client: no queueing in these runs.
        let fleet = Fleet::start(&admin_url, replicas, m).await?;
        let tokens = fleet.tenants(tenants, m as u32, m as u32).await?;
        let r = run(&fleet, &tokens, m, |_| 1, action_ms, window).await?;
        let t = &r.tally;
        let sessions: u64 = t.served.values().sum();
        let per = |v: f64| v / sessions.max(1) as f64;
        println!(
            "{:>7} {:>8} {:>6.0} | {:>6.2} {:>7.2} ms | {:>6.2} {:>7.2} ms | {:>6.2} {:>7.2} ms | {:>6.1} {:>9.0} {:>8.2} | {:>6} ms",
            m,
            sessions,
            sessions as f64 / r.window.as_secs_f64(),
            ms(quantile(&t.acquire, 0.5)),
            ms(quantile(&t.acquire, 0.99)),
            ms(quantile(&t.owner, 0.5)),
            ms(quantile(&t.owner, 0.99)),
            ms(quantile(&t.forwarded, 0.5)),
            ms(quantile(&t.forwarded, 0.99)),
            per(r.transactions as f64),
            per(r.wal_bytes as f64),
            per(r.cpu_ms),
            quantile(&r.audit_lags, 0.99),
        );
        if t.unplaced > 0 || !t.failures.is_empty() || r.audit_lags.len() < t.calls.len() {
            println!(
                "        note: {} actions through a connection not yet placed; {} failed calls{}; {} of {} actions' audit records found",
                t.unplaced,
                t.failures.len(),
                t.failures.first().map(|f| format!(" (first: {f})")).unwrap_or_default(),
                r.audit_lags.len(),
                t.calls.len()
            );
        }
        println!("        connections per replica: {:?}", r.landed);
        per_session.push((m, per(r.transactions as f64), per(r.wal_bytes as f64), per(r.cpu_ms)));
        if scale == 1 {
            // The fleet idle: what heartbeats and sweeps cost with nobody calling.
            let (x0, w0) = fleet.counters().await?;
            let idle = Duration::from_secs(10);
            let cpu0 = cpu_ms().0;
            tokio::time::sleep(idle).await;
            let cpu = cpu_ms().0 - cpu0;
            let (x1, w1) = fleet.counters().await?;
            let secs = idle.as_secs_f64();
            println!(
                "        idle fleet: {:.1} transactions/s, {:.0} WAL bytes/s, {:.1} ms CPU/s ({replicas} replicas' heartbeats and sweeps)",
                (x1 - x0) as f64 / secs,
                (w1 - w0) as f64 / secs,
                cpu / secs
            );
        }
        fleet.stop().await?;
    }
    // How a session's cost at 2x and 4x compares with 1x: the goal is no growth past 1.2x
    // (costs that fall with load are the idle fleet's heartbeats and the audit writer's
    // batches spread over more sessions).
    let against_1x = |cost: fn(&(usize, f64, f64, f64)) -> f64| {
        let base = cost(&per_session[0]);
        per_session[1..].iter().map(|p| format!("{:.2}x", cost(p) / base)).collect::<Vec<_>>().join(" ")
    };
    println!(
        "per session at 2x and 4x the clients, against 1x: transactions {}, WAL bytes {}, CPU {}",
        against_1x(|p| p.1),
        against_1x(|p| p.2),
        against_1x(|p| p.3)
    );

    // Fairness: capacity for a fifth of the clients; tenant t has 1 + t % 4 shares of them, so
    // every tenant wants more than an equal share of the capacity.
    let capacity = (clients / 5).max(replicas) / replicas;
    let fleet = Fleet::start(&admin_url, replicas, capacity).await?;
    let tokens = fleet.tenants(tenants, clients as u32, clients as u32).await?;
    let r = run(&fleet, &tokens, clients, |t| 1 + t % 4, FAIR_ACTION_MS, window).await?;
    let served: Vec<f64> = (0..tenants).map(|t| *r.tally.served.get(&t).unwrap_or(&0) as f64).collect();
    let (lo, hi) = served.iter().fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    println!(
        "fairness: {clients} clients (1-4 shares per tenant), actions of {FAIR_ACTION_MS} ms, {} browsers in all: {} sessions served, per tenant {lo:.0}..{hi:.0}, Jain's index {:.3}; acquire p50 {:.0} ms (queued)",
        capacity * replicas,
        served.iter().sum::<f64>(),
        jain(&served),
        ms(quantile(&r.tally.acquire, 0.5)),
    );
    fleet.stop().await?;
    Ok(())
}
