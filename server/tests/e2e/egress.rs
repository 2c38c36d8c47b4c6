//! The SSRF corpus: every way a page can open a connection, aimed at loopback listeners that
//! count what reaches them. A tenant without private networks must reach nothing; no tenant
//! may reach a port of the workers' DevTools range or the server's own listeners. A control
//! run under a tenant allowed private networks proves each way really opens a connection.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use browserpool_client::{action, pb, Client};
use serde_json::json;
use tokio::io::AsyncReadExt;

use crate::helpers::{act, err_code, ok, TestServer};

/// A loopback TCP and UDP listener pair on one port that records every connection (its first
/// request line) and every datagram.
struct Trap {
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
    datagrams: Arc<Mutex<usize>>,
}

impl Trap {
    async fn start() -> Trap {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = tcp.local_addr().unwrap().port();
        let udp = tokio::net::UdpSocket::bind(("127.0.0.1", port)).await.unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let datagrams = Arc::new(Mutex::new(0));
        let seen = lines.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = tcp.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 2048];
                    let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf))
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .unwrap_or(0);
                    let first = String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or("").to_string();
                    seen.lock().unwrap().push(if first.is_empty() { "<connection>".into() } else { first });
                });
            }
        });
        let count = datagrams.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 2048];
            while udp.recv_from(&mut buf).await.is_ok() {
                *count.lock().unwrap() += 1;
            }
        });
        Trap { port, lines, datagrams }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn datagrams(&self) -> usize {
        *self.datagrams.lock().unwrap()
    }

    /// The labels (`/label` request paths) seen so far.
    fn labels(&self) -> BTreeSet<String> {
        self.lines()
            .iter()
            .filter_map(|l| l.split_whitespace().nth(1))
            .map(|p| p.trim_start_matches('/').split(['?', '/']).next().unwrap_or("").to_string())
            .collect()
    }
}

/// Ways a page opens a connection, each to `ip` (an address) or `name` (a host name resolving
/// to it), labelled by request path.
const LABELS: &[&str] = &[
    "popup-link",
    "popup-name",
    "iframe",
    "img-name",
    "fetch",
    "xhr",
    "ws",
    "ws-name",
    "worker",
    "beacon",
    "css-import",
];

fn vector_page(ip: &str, name: &str, popup: &str) -> String {
    format!(
        r#"<!doctype html><title>corpus</title>
<style>@import url("http://{ip}/css-import");</style>
<link rel="preconnect" href="http://{ip}/"><link rel="dns-prefetch" href="//{name}/">
<link rel="prefetch" href="http://{ip}/prefetch">
<a id="popup-link" target="_blank" href="http://{ip}/popup-link">a</a>
<a id="popup-name" target="_blank" href="http://{name}/popup-name">b</a>
<button id="window-open" onclick='window.open({popup:?})'>c</button>
<iframe src="http://{ip}/iframe"></iframe>
<img src="http://{name}/img-name">
<script>
  const go = (f) => {{ try {{ f(); }} catch (e) {{ }} }};
  go(() => fetch("http://{ip}/fetch", {{ mode: "no-cors" }}).catch(() => {{}}));
  go(() => {{ const x = new XMLHttpRequest(); x.open("GET", "http://{ip}/xhr"); x.send(); }});
  go(() => new WebSocket("ws://{ip}/ws"));
  go(() => new WebSocket("ws://{name}/ws-name"));
  go(() => new Worker(URL.createObjectURL(new Blob(['fetch("http://{ip}/worker").catch(() => {{}})']))));
  go(() => navigator.sendBeacon("http://{ip}/beacon", "x"));
  go(() => {{
    const pc = new RTCPeerConnection({{ iceServers: [
      {{ urls: "stun:{ip}" }},
      {{ urls: "turn:{ip}?transport=udp", username: "u", credential: "p" }},
      {{ urls: "turn:{ip}?transport=tcp", username: "u", credential: "p" }},
    ] }});
    pc.createDataChannel("d");
    pc.createOffer().then(o => pc.setLocalDescription(o));
  }});
</script>"#
    )
}

/// Loads the corpus page in a session, clicks its popup links and its `window.open` button
/// (`popup`: a URL that redirects); returns once the page had time to try everything.
async fn run_corpus(client: &Client, id: &str, ip: &str, name: &str, popup: &str) {
    ok(&act(client, id, action("load_html", "", vector_page(ip, name, popup))).await);
    for button in ["#popup-link", "#popup-name", "#window-open"] {
        // A click right after load_html can meet a stale DOM node id ("Could not find node
        // with given id") while the page's frames settle; one more try is enough.
        let mut clicked = act(client, id, action("click", button, json!(null))).await;
        if !clicked.ok && clicked.error.as_ref().is_some_and(|e| e.message.contains("Could not find node")) {
            clicked = act(client, id, action("click", button, json!(null))).await;
        }
        ok(&clicked);
        ok(&act(client, id, action("switch_tab", "", json!(0))).await);
    }
    ok(&act(client, id, action("wait_for", "", json!({"ms": 2500}))).await);
}

/// Registers a service worker and starts a shared worker, each fetching `to` + its label.
const WORKERS: &str = r#"<!doctype html><title>workers</title><script>
  const q = new URLSearchParams(location.search), to = q.get('to');
  navigator.serviceWorker.register('/worker.js?n=' + q.get('n') + '&to=' + encodeURIComponent(to + 'service-worker'))
    .then(() => console.log('service worker registered'), e => console.log('service worker failed: ' + e));
  new SharedWorker('/worker.js?to=' + encodeURIComponent(to + 'shared-worker'));
</script>"#;

/// A fixture site: `/redirect?to=<url>` answers a 307 to that URL (hits counted), `/workers`
/// and `/worker.js` start workers that fetch where they are told.
async fn redirector() -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new()
        .route(
            "/redirect",
            axum::routing::get(move |uri: axum::http::Uri| async move {
                counter.fetch_add(1, Ordering::SeqCst);
                let to = uri.query().and_then(|q| q.strip_prefix("to=")).unwrap_or("/").to_string();
                axum::response::Redirect::temporary(&to)
            }),
        )
        .route("/workers", axum::routing::get(|| async { axum::response::Html(WORKERS) }))
        .route(
            "/worker.js",
            axum::routing::get(|| async {
                (
                    [("content-type", "text/javascript")],
                    // A service worker keeps its install alive until the fetch settles.
                    "const to = new URLSearchParams(self.location.search).get('to'); \
                     const go = () => fetch(to).catch(() => {}); \
                     if (self.registration) self.addEventListener('install', e => e.waitUntil(go())); else go();",
                )
            }),
        );
    let addr = crate::helpers::serve_loopback(app).await;
    (addr, hits)
}

async fn wait_for_labels(trap: &Trap, want: &[&str]) -> BTreeSet<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let seen = trap.labels();
        if want.iter().all(|l| seen.contains(*l)) || std::time::Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_page_reaches_a_private_address_or_a_devtools_port() {
    // `open` is an ordinary loopback service; `devtools` sits inside the workers' CDP port
    // range (workers skip a port already bound), standing in for another worker's DevTools.
    let open = Trap::start().await;
    let (redirect, redirects) = redirector().await;
    // The CDP range starts at `devtools` and spans 40 ports: the other fixtures' ephemeral
    // ports must not fall inside it (they would be refused as DevTools ports).
    let devtools = loop {
        let trap = Trap::start().await;
        let range = trap.port..=trap.port.saturating_add(40);
        if !range.contains(&open.port) && !range.contains(&redirect.port()) {
            break trap;
        }
    };
    let server = TestServer::start_with(|a| {
        a.port_range = browserpool_pool::PortRange { start: devtools.port, end: devtools.port.saturating_add(40) };
        a.resolve = vec![
            ("evil.test".into(), "127.0.0.1".parse().unwrap()),
            ("fixture.test".into(), "127.0.0.1".parse().unwrap()),
        ];
    })
    .await;
    let admin = server.admin().await;
    let mut console = admin.admin();
    let tenant = |id: &str, private: bool, hosts: &[&str]| pb::Tenant {
        id: id.into(),
        max_slots: 1,
        max_queue: 1,
        max_session_ttl_ms: 600_000,
        idle_timeout_ms: 60_000,
        allow_private_networks: private,
        allow_hosts: hosts.iter().map(|h| h.to_string()).collect(),
        ..Default::default()
    };
    console.put_tenant(pb::PutTenantRequest { tenant: Some(tenant("locked", false, &[])) }).await.unwrap();
    console
        .put_tenant(pb::PutTenantRequest { tenant: Some(tenant("listed", true, &["fixture.test", "127.0.0.1"])) })
        .await
        .unwrap();
    let scopes = ["sessions:read", "sessions:write"];
    let locked = server.client(&server.token("locked", "job", &scopes).await).await;
    let listed = server.client(&server.token("listed", "job", &scopes).await).await;

    // 1. A tenant without private networks: the address forms and names typed into navigate
    // are refused, and nothing a page does reaches the loopback listener.
    let id = locked.acquire(30_000).await.unwrap().session_id;
    let p = open.port;
    for url in [
        format!("http://127.0.0.1:{p}/"),
        format!("http://evil.test:{p}/"),
        format!("http://EVIL.test.:{p}/"),
        format!("http://2130706433:{p}/"),
        format!("http://0x7f.0.0.1:{p}/"),
        format!("http://127.1:{p}/"),
        format!("http://[::ffff:127.0.0.1]:{p}/"),
        format!("http://[::1]:{p}/"),
        format!("http://0.0.0.0:{p}/"),
        format!("ws://127.0.0.1:{p}/"),
    ] {
        let r = act(&locked, &id, action("navigate", "", url.clone())).await;
        assert_eq!(err_code(&r), pb::ErrorCode::BlockedByPolicy, "{url}");
        // It names the tenant setting that would allow it, and who sets it how.
        let said = &r.error.as_ref().unwrap().message;
        assert!(said.contains("allow_private_networks") && said.contains("browserpool admin tenants put"), "{said}");
    }
    run_corpus(&locked, &id, &format!("127.0.0.1:{p}"), &format!("evil.test:{p}"), &format!("http://evil.test:{p}/w"))
        .await;
    locked.release(&id).await.unwrap();
    assert_eq!(open.lines(), Vec::<String>::new(), "a locked tenant's page reached a loopback listener");
    assert_eq!(open.datagrams(), 0, "a locked tenant's page sent UDP (WebRTC) to loopback");

    // 2. A tenant allowed private networks (the embedded default): nothing reaches a port of
    // the workers' DevTools range, whichever way the page tries, redirects included.
    let d = devtools.port;
    let id = admin.acquire(30_000).await.unwrap().session_id;
    let r = act(&admin, &id, action("navigate", "", format!("http://127.0.0.1:{d}/json/list"))).await;
    assert_eq!(err_code(&r), pb::ErrorCode::BlockedByPolicy);
    let r = act(&admin, &id, action("navigate", "", format!("http://{}/healthz", server.http))).await;
    assert_eq!(err_code(&r), pb::ErrorCode::BlockedByPolicy, "the server's own listener");
    let to = format!("http://evil.test:{d}/json/list");
    run_corpus(
        &admin,
        &id,
        &format!("127.0.0.1:{d}"),
        &format!("evil.test:{d}"),
        &format!("http://{redirect}/redirect?to={to}"),
    )
    .await;
    assert_eq!(devtools.lines(), Vec::<String>::new(), "a page reached a port of the DevTools range");
    // A real worker's DevTools endpoint: a page learns nothing from it.
    let workers = console.pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner().workers;
    let cdp = workers.iter().map(|w| w.cdp_port).find(|p| *p != 0).expect("a worker with a cdp port");
    let probe =
        format!("fetch('http://127.0.0.1:{cdp}/json/list').then(r => r.text()).catch(e => 'refused: ' + e.message)");
    let body = ok(&act(&admin, &id, action("evaluate", "", probe)).await);
    let body = body.as_str().unwrap_or_default().to_string();
    assert!(body.starts_with("refused") && !body.contains("webSocketDebuggerUrl"), "{body}");
    admin.release(&id).await.unwrap();

    // 3. The control: the same page under the default tenant, aimed at the ordinary listener,
    // reaches it every way (so each way above really opens a connection when allowed).
    let id = admin.acquire(30_000).await.unwrap().session_id;
    let to = format!("http://evil.test:{p}/redirect-target");
    run_corpus(
        &admin,
        &id,
        &format!("127.0.0.1:{p}"),
        &format!("evil.test:{p}"),
        &format!("http://{redirect}/redirect?to={to}"),
    )
    .await;
    // Service and shared workers of a page served over http (a secure context on 127.0.0.1).
    // A service worker's install fails now and then (the registration is left with no worker,
    // even after three scripts): its connection is reported, not required. Dedicated and
    // shared workers are required.
    let workers = |n: u32| format!("http://{redirect}/workers?n={n}&to=http://evil.test:{p}/");
    let mut want = LABELS.to_vec();
    want.extend(["redirect-target", "shared-worker"]);
    let mut service_worker = false;
    for n in 0..3 {
        ok(&act(&admin, &id, action("navigate", "", workers(n))).await);
        service_worker =
            wait_for_labels(&open, &[want.as_slice(), &["service-worker"]].concat()).await.contains("service-worker");
        if service_worker {
            break;
        }
    }
    eprintln!("control: the service worker's fetch {}", if service_worker { "arrived" } else { "never ran" });
    let seen = open.labels();
    let missing: Vec<_> = want.iter().filter(|l| !seen.contains(**l)).collect();
    assert!(missing.is_empty(), "the control did not see {missing:?}; saw {:?}", open.lines());
    // WebRTC never uses non-proxied UDP, for any tenant. (In a worker's own network namespace
    // it finds no network to gather on at all; without one, TURN over TCP goes through the
    // proxy and is judged like any connection.)
    assert_eq!(open.datagrams(), 0, "WebRTC sent UDP");
    admin.release(&id).await.unwrap();

    // 4. allow_hosts holds for a redirect inside a popup and for workers: the listed names
    // lead to an unlisted one, which never sees a request.
    let before = open.lines().len();
    let hops = redirects.load(Ordering::SeqCst);
    let id = listed.acquire(30_000).await.unwrap().session_id;
    let to = format!("http://evil.test:{p}/listed-redirect");
    let popup = format!("http://fixture.test:{}/redirect?to={to}", redirect.port());
    ok(&act(&listed, &id, action("load_html", "", format!("<button onclick='window.open({popup:?})'>go</button>")))
        .await);
    ok(&act(&listed, &id, action("click", "button", json!(null))).await);
    ok(&act(&listed, &id, action("switch_tab", "", json!(0))).await);
    ok(&act(&listed, &id, action("navigate", "", workers(0))).await);
    ok(&act(&listed, &id, action("wait_for", "", json!({"ms": 2000}))).await);
    listed.release(&id).await.unwrap();
    assert!(redirects.load(Ordering::SeqCst) > hops, "the listed host's redirect was reached");
    assert_eq!(
        open.lines()[before..],
        [] as [String; 0],
        "an unlisted host was reached through a redirect or a worker"
    );
    server.stop().await;
}

/// Inodes of the TCP sockets listening in this process's network namespace, with their ports.
fn listening_sockets() -> Vec<(u64, u16)> {
    let mut out = Vec::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address is HEXIP:HEXPORT; state 0A is LISTEN; field 9 is the inode.
            if f.len() > 9 && f[3] == "0A" {
                let port = f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
                if let (Some(port), Ok(inode)) = (port, f[9].parse()) {
                    out.push((inode, port));
                }
            }
        }
    }
    out
}

/// What process `pid`'s open descriptors are (`socket:[123]`, `anon_inode:[pidfd]`, a path).
fn fd_targets(pid: u32) -> Vec<String> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    fds.flatten().filter_map(|fd| std::fs::read_link(fd.path()).ok()).map(|t| t.to_string_lossy().to_string()).collect()
}

/// Socket inodes held open by process `pid`.
fn socket_inodes(pid: u32) -> Vec<u64> {
    fd_targets(pid)
        .iter()
        .filter_map(|t| t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')).and_then(|n| n.parse().ok()))
        .collect()
}

/// Whatever a plain HTTP GET of `path` on 127.0.0.1:`port` answers (empty when refused).
async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let Ok(Ok(mut conn)) =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(("127.0.0.1", port))).await
    else {
        return String::new();
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if conn.write_all(req.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), conn.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_process_cannot_reach_a_workers_devtools() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        crate::helpers::skip(
            "egress::a_local_process_cannot_reach_a_workers_devtools",
            "workers get their own network namespace from a root server only (fences::a_server_that_is_not_root_* covers the rest)",
        );
        return;
    }
    // A server process of its own, so the listeners probed below are only its own.
    let mut server = crate::helpers::BinaryServer::spawn().await;
    let admin = server.client().await;
    let id = admin.acquire(30_000).await.unwrap().session_id;
    ok(&act(&admin, &id, action("evaluate", "", "1")).await);
    // The leased worker and the spare booted after it, spawned while the server held the
    // leased one's pidfd open (see the pidfd check below).
    let workers = crate::helpers::eventually("a leased and a warm worker", Duration::from_secs(60), || async {
        let workers = admin.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner().workers;
        let warm = workers.iter().filter(|w| w.state == pb::WorkerState::Warm as i32).count();
        (warm >= 1).then_some(workers)
    })
    .await;
    let host = listening_sockets();
    for w in &workers {
        // Chromium's DevTools port is not open in the host's namespace...
        assert!(http_get(w.cdp_port as u16, "/json/version").await.is_empty(), "port {} answered", w.cdp_port);
        // ...and no process of the worker listens there at all.
        let mut inodes = socket_inodes(w.pid);
        let mut members = vec![w.pid];
        for task in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = task.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let pgrp = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(2)?.parse::<u32>().ok());
            if pgrp == Some(w.pid) && pid != w.pid {
                inodes.extend(socket_inodes(pid));
                members.push(pid);
            }
        }
        let listening: Vec<_> = host.iter().filter(|(inode, _)| inodes.contains(inode)).collect();
        assert!(listening.is_empty(), "worker {} listens on the host: {listening:?}", w.worker_id);
        // The server watches every worker's exit through a pidfd; none reaches a worker (with
        // one, a page's exploit could wait on, or signal, a browser that is not its own).
        assert!(members.len() > 1, "the worker's group has its browser and its children: {members:?}");
        for pid in members {
            let pidfds = fd_targets(pid).into_iter().filter(|t| t.contains("pidfd")).count();
            assert_eq!(pidfds, 0, "worker {} process {pid} holds {pidfds} pidfd(s)", w.worker_id);
        }
    }
    // The server's own listeners (gRPC, HTTP, the gates into each worker's DevTools) tell a
    // local process nothing: no target list, no version, no browser endpoint for a guess.
    let ours = socket_inodes(server.pid());
    let probed = host.iter().filter(|(inode, _)| ours.contains(inode)).count();
    assert!(probed >= 3, "grpc, http and at least one gate: {probed}");
    for (_, port) in host.iter().filter(|(inode, _)| ours.contains(inode)) {
        for path in ["/json/version", "/json/list", "/json", "/devtools/browser/00000000-0000-0000-0000-000000000000"] {
            let answer = http_get(*port, path).await;
            assert!(
                !answer.contains("webSocketDebuggerUrl") && !answer.contains("devtools/browser"),
                "port {port} {path}: {answer}"
            );
        }
    }
    admin.release(&id).await.unwrap();
    let (status, _) = server.terminate();
    assert!(status.success());
}
