//! Upstream proxies as admin objects: saved, listed, replaced and deleted over gRPC; the
//! password is taken, sealed, and never comes back: not in an answer, an error, the log, the
//! audit trail, `/metrics` or any file of the data dir.

use browserpool_client::pb;

use crate::helpers::BinaryServer;

const SECRET: &str = "s3cr3t-proxy-pass-7d1f";

fn eu(password: &str) -> pb::Proxy {
    pb::Proxy {
        id: "eu-1".into(),
        url: "http://127.0.0.1:3128".into(),
        username: "ci".into(),
        password: password.into(),
        direct_hosts: vec!["*.internal.test".into()],
        tenants: vec!["default".into()],
        has_password: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_are_admin_objects_whose_password_never_comes_back() {
    let mut server = BinaryServer::spawn_env(&[], &[("RUST_LOG", "debug")]).await;
    let admin = server.client().await;
    let put = |p: pb::Proxy| {
        let mut console = admin.admin();
        async move { console.put_proxy(pb::PutProxyRequest { proxy: Some(p) }).await.map(|r| r.into_inner()) }
    };
    let saved = put(eu(SECRET)).await.unwrap();
    let stored = saved.proxy.unwrap();
    assert!(saved.created && stored.has_password && stored.password.is_empty(), "{stored:?}");
    // A put over the listed proxy (no password) keeps the stored one.
    let again = put(eu("")).await.unwrap();
    assert!(!again.created && again.proxy.unwrap().has_password);
    let listed = admin.admin().list_proxies(pb::ListProxiesRequest {}).await.unwrap().into_inner().proxies;
    assert_eq!(listed.len(), 1);
    assert!(listed[0].has_password && listed[0].password.is_empty() && listed[0].direct_hosts == ["*.internal.test"]);

    // Bad input: the field named, the secret never echoed.
    let inline = pb::Proxy { url: format!("http://ci:{SECRET}@127.0.0.1:3128"), ..eu(SECRET) };
    let refused = put(inline).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().starts_with("proxy.url: carries credentials") && !refused.message().contains(SECRET));
    let refused = put(pb::Proxy { url: "ftp://127.0.0.1:21".into(), ..eu(SECRET) }).await.unwrap_err();
    assert!(refused.message().contains("not http, https or socks5"), "{refused:?}");
    // Admin only.
    let reader = server.client().await;
    let token = reader
        .admin()
        .issue_token(pb::IssueTokenRequest {
            tenant: "default".into(),
            subject: "ci".into(),
            scopes: vec!["sessions:write".into()],
            ttl_s: 600,
        })
        .await
        .unwrap()
        .into_inner()
        .token;
    let ci = browserpool_client::Client::connect(format!("http://{}", server.grpc), &token).await.unwrap();
    let denied = ci.admin().list_proxies(pb::ListProxiesRequest {}).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);

    // A tenant with proxies:write manages its own proxies, and nothing else of Admin.
    let team = pb::Tenant { id: "team".into(), max_slots: 1, max_queue: 1, ..Default::default() };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(team.clone()) }).await.unwrap();
    let token = admin
        .admin()
        .issue_token(pb::IssueTokenRequest {
            tenant: "team".into(),
            subject: "lead".into(),
            scopes: vec!["proxies:write".into()],
            ttl_s: 600,
        })
        .await
        .unwrap()
        .into_inner()
        .token;
    let lead = browserpool_client::Client::connect(format!("http://{}", server.grpc), &token).await.unwrap();
    let own = pb::Proxy { id: "team-1".into(), tenants: vec![], ..eu(SECRET) };
    let saved = lead.admin().put_proxy(pb::PutProxyRequest { proxy: Some(own) }).await.unwrap().into_inner();
    assert_eq!(saved.proxy.unwrap().tenants, ["team"], "its own: usable by it alone");
    let listed = lead.admin().list_proxies(pb::ListProxiesRequest {}).await.unwrap().into_inner().proxies;
    assert_eq!(listed.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), ["team-1"]);
    let theirs = lead.admin().delete_proxy(pb::DeleteProxyRequest { id: "eu-1".into() }).await.unwrap_err();
    assert_eq!(theirs.code(), tonic::Code::PermissionDenied);
    assert!(theirs.message().contains("ask an admin"), "{theirs:?}");
    let taken = lead.admin().put_proxy(pb::PutProxyRequest { proxy: Some(eu(SECRET)) }).await.unwrap_err();
    assert_eq!(taken.code(), tonic::Code::PermissionDenied, "{taken:?}");
    let tenant = lead.admin().put_tenant(pb::PutTenantRequest { tenant: Some(team) }).await.unwrap_err();
    assert_eq!(tenant.code(), tonic::Code::PermissionDenied, "no other Admin rpc");
    assert!(
        lead.admin().delete_proxy(pb::DeleteProxyRequest { id: "team-1".into() }).await.unwrap().into_inner().deleted
    );

    // Nowhere in the audit trail (written behind the calls: read once the puts are in) or the
    // metrics.
    let records = crate::helpers::eventually("the puts' audit records", std::time::Duration::from_secs(10), || async {
        let query = pb::QueryAuditRequest { limit: 10_000, ..Default::default() };
        let mut stream = admin.admin().query_audit(query).await.unwrap().into_inner();
        let mut records = Vec::new();
        while let Some(record) = stream.message().await.unwrap() {
            records.push(format!("{record:?}"));
        }
        let puts = records.iter().filter(|r| r.contains("PutProxy")).count();
        (puts >= 4).then_some(records)
    })
    .await;
    assert!(records.iter().all(|r| !r.contains(SECRET)));
    let metrics = crate::lifecycle::http_get(&format!("http://{}/metrics", server.http)).await;
    assert!(!metrics.contains(SECRET));

    let deleted = admin.admin().delete_proxy(pb::DeleteProxyRequest { id: "eu-1".into() }).await.unwrap();
    assert!(deleted.into_inner().deleted);
    let again = admin.admin().delete_proxy(pb::DeleteProxyRequest { id: "eu-1".into() }).await.unwrap();
    assert!(!again.into_inner().deleted, "idempotent");

    // Nowhere in the log (at debug) or any file of the data dir, the database included.
    let (status, lines) = server.terminate();
    assert!(status.success());
    for line in &lines {
        assert!(!line.contains(SECRET), "the password in the log: {line}");
    }
    let mut files = vec![server.dir.path().to_path_buf()];
    let mut read = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().flatten().map(|e| e.path()));
        } else if let Ok(file) = std::fs::File::open(&path) {
            read += 1;
            assert!(!holds(file, SECRET.as_bytes()), "the password in {}", path.display());
        }
    }
    assert!(read >= 2, "the data dir's files were read ({read})");
}

/// Whether `file` holds `needle`, read a window at a time (a profile's files can be large).
pub(crate) fn holds(mut file: std::fs::File, needle: &[u8]) -> bool {
    use std::io::Read;
    let mut window = vec![0u8; 64 << 10];
    let mut kept = 0;
    loop {
        let n = match file.read(&mut window[kept..]) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        let filled = kept + n;
        if window[..filled].windows(needle.len()).any(|w| w == needle) {
            return true;
        }
        // Keep the tail a match could start in.
        kept = (needle.len() - 1).min(filled);
        window.copy_within(filled - kept..filled, 0);
    }
}
