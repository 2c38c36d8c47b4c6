//! The CDP proxy: a client's WebSocket (Puppeteer, Playwright, any raw CDP client) relayed to
//! its session's browser.
//!
//! Every message the client sends is judged first ([`judge`]): methods that would reach
//! outside the session are refused with a CDP error, download paths are rewritten into the
//! session's own directory, and the URLs a client names are checked against the tenant's
//! policy (the worker's egress proxy still judges every connection the browser opens, so a
//! request the client sets up any other way is refused there); what goes on is the message as
//! judged, written anew (a key given twice cannot read one way here and another in Chromium).
//! Messages from the browser are relayed as they are. Both directions apply backpressure: nothing is buffered beyond a few
//! messages and the socket buffers, each bounded.
//!
//! When the session is one browser context of a browser shared with other sessions of its
//! tenant ([`Conn::context`]), a [`Scope`] keeps the client to that context: its messages are
//! judged by it too (after `judge`), and the browser's are parsed and judged
//! by it: other contexts' targets, sessions and listings never reach the client, and an
//! auto-attach to another session's target is detached by the proxy itself. A client that
//! leaves messages unread for 30 s is then closed, since the proxy reading no further would
//! stop those detaches. Without a context nothing of the browser's is parsed.

mod relay;
mod rules;
pub mod scope;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use browserpool_pool::egress::WorkerNet;
use tokio_util::sync::CancellationToken;

pub use relay::relay;
pub use rules::{judge, FileParam, Verdict, FILE_PARAMS, REFUSED, REFUSED_DOMAINS, REFUSED_PARAMS};
pub use scope::Scope;

/// Paths under it need a verified client certificate while mutual TLS is on (probes and
/// metrics stay open to kubelet and Prometheus).
pub const CDP_PREFIX: &str = "/cdp/";

/// Limits of the proxy (flags `--cdp-*`).
#[derive(Debug, Clone)]
pub struct CdpLimits {
    /// Largest message either way, in bytes.
    pub max_message: usize,
    /// Most CDP connections to one session at once.
    pub per_session: usize,
    /// Most CDP connections to this server at once.
    pub per_server: usize,
}

/// Why a CDP connection is refused before the upgrade; [`CdpError::status`] is the one
/// mapping to HTTP.
#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    #[error("credentials required: an Authorization: Bearer token with sessions:write, or the ticket of the session's cdp_url")]
    NoCredentials,
    #[error("invalid token: {0}")]
    BadToken(String),
    #[error("this token lacks scope sessions:write")]
    Scope,
    #[error("no live session {0} here")]
    NotFound(String),
    #[error("the token that acquired this session was revoked: its cdp_url no longer opens")]
    TicketRevoked,
    #[error("session {0} is served by another replica")]
    OtherReplica(String),
    #[error("session {id} already has {cap} CDP connections (--cdp-max-clients)")]
    SessionFull { id: String, cap: usize },
    #[error("this server already relays {0} CDP connections (--cdp-max-connections)")]
    ServerFull(usize),
    #[error("a WebSocket upgrade is required")]
    NotUpgrade,
    #[error("the audit trail cannot take a record: {0}")]
    Audit(String),
}

impl CdpError {
    pub fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode as S;
        match self {
            CdpError::NoCredentials | CdpError::BadToken(_) | CdpError::TicketRevoked => S::UNAUTHORIZED,
            CdpError::Scope => S::FORBIDDEN,
            // Another tenant's session is answered like an unknown one.
            CdpError::NotFound(_) => S::NOT_FOUND,
            CdpError::OtherReplica(_) => S::CONFLICT,
            CdpError::SessionFull { .. } => S::TOO_MANY_REQUESTS,
            CdpError::ServerFull(_) | CdpError::Audit(_) => S::SERVICE_UNAVAILABLE,
            CdpError::NotUpgrade => S::BAD_REQUEST,
        }
    }
}

/// Everything a relay needs about its session.
pub struct Conn {
    /// The browser's own DevTools websocket.
    pub devtools_url: String,
    pub download_dir: String,
    pub net: Arc<WorkerNet>,
    /// Cancelled when the session ends (release, expiry, kill, crash) or the server stops.
    pub stop: CancellationToken,
    /// Why `stop` fired, for the close frame.
    pub stop_reason: Box<dyn Fn() -> String + Send + Sync>,
    /// Called at most once a second while frames flow: CDP traffic is activity.
    pub on_activity: Box<dyn Fn() + Send + Sync>,
    /// Why the credentials the connection was opened with no longer hold (the token revoked,
    /// its tenant gone), if they do not: asked every [`REVOCATION_CHECK`], the connection is
    /// then closed.
    pub withdrawn: Box<dyn Fn() -> Option<String> + Send + Sync>,
    pub limits: CdpLimits,
    pub stats: Arc<CdpStats>,
    /// The session's browserContextId when it is one context of a browser shared with other
    /// sessions of its tenant (isolation mode `context`); `None` when the browser is the
    /// session's alone.
    pub context: Option<String>,
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct CdpStats {
    pub open: AtomicUsize,
    pub frames_in: AtomicU64,
    pub frames_out: AtomicU64,
    pub refused: AtomicU64,
}

/// How one connection went, for its audit record (never payloads).
#[derive(Debug, Default)]
pub struct Summary {
    pub frames_in: u64,
    pub frames_out: u64,
    pub refused: BTreeSet<String>,
    /// The close code and reason the client was sent (or saw).
    pub close: String,
    /// Whether the connection ended for a reason other than a close by either peer or the
    /// session's end.
    pub failed: bool,
}

/// How often a connection asks whether its credentials still hold. With the revocation cache
/// reloaded twice a second, a revoked token's connections close within about a second, as its
/// gRPC calls start failing.
pub const REVOCATION_CHECK: Duration = Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use axum::extract::ws::Message;
    use serde_json::{json, Value};

    use super::relay::*;
    use super::rules::carries;
    use super::*;

    /// The README's list of refused methods is the proxy's: each refused method, domain and
    /// parameter is named there, and the list names nothing else.
    #[test]
    fn the_readme_lists_exactly_the_refused_methods() {
        let readme = include_str!("../../../README.md");
        let start = readme.find("- Refused with a CDP error").expect("the README's list of refused methods");
        let list = &readme[start..];
        let list = &list[..list[2..].find("\n- ").map_or(list.len(), |end| end + 2)];
        let named: Vec<&str> = list.split('`').skip(1).step_by(2).collect();
        for (method, _) in REFUSED {
            assert!(named.contains(method), "README does not name the refused {method}");
        }
        for (domain, _) in REFUSED_DOMAINS {
            assert!(named.contains(&domain.trim_end_matches('.')), "README does not name the refused domain {domain}");
        }
        for (method, params, _) in REFUSED_PARAMS {
            assert!(named.contains(method), "README does not name {method}");
            for param in *params {
                assert!(named.contains(param), "README does not name {method}'s refused {param}");
            }
        }
        for name in named.iter().filter(|n| n.contains('.') && !n.contains(' ')) {
            let known = REFUSED.iter().any(|(m, _)| m == name) || REFUSED_PARAMS.iter().any(|(m, _, _)| m == name);
            assert!(known, "README names {name} as refused, and the proxy does not refuse it");
        }
    }

    fn allow_all(_: &str) -> Result<(), String> {
        Ok(())
    }

    fn no_loopback(url: &str) -> Result<(), String> {
        if url.contains("127.0.0.1") || url.starts_with("file:") {
            Err(format!("{url} is private"))
        } else {
            Ok(())
        }
    }

    #[test]
    fn methods_reaching_outside_the_session_are_refused() {
        for method in ["Browser.close", "Target.sendMessageToTarget", "Extensions.loadUnpacked", "Tethering.bind"] {
            assert!(matches!(judge(method, None, "/d", &allow_all), Verdict::Refuse(_)), "{method}");
        }
        assert_eq!(judge("Runtime.evaluate", Some(&json!({"expression": "1"})), "/d", &allow_all), Verdict::Forward);
        assert_eq!(judge("Browser.getVersion", None, "/d", &allow_all), Verdict::Forward);
    }

    #[test]
    fn parameters_naming_host_files_are_refused_when_they_name_one() {
        let files = |f: Value| json!({"files": f, "nodeId": 4});
        let drag = |f: Value| json!({"type": "drop", "x": 1, "y": 1, "data": {"items": [], "files": f, "dragOperationsMask": 1}});
        for (method, params) in [
            ("DOM.setFileInputFiles", files(json!(["/etc/passwd"]))),
            ("DOM.setFileInputFiles", files(json!(["/d/../etc/passwd"]))),
            ("Input.dispatchDragEvent", drag(json!(["/var/lib/browserpool/jwt-hs256.key"]))),
        ] {
            match judge(method, Some(&params), "/d", &allow_all) {
                Verdict::Refuse(why) => assert!(why.contains("file"), "{method}: {why}"),
                other => panic!("{method}: {other:?}"),
            }
        }
        // Without files, the same methods read nothing: a drag of text, a cleared file input.
        let text_drag = json!({"type": "dragEnter", "x": 1, "y": 1, "data": {"items": [{"mimeType": "text/plain", "data": "hi"}], "dragOperationsMask": 1}});
        assert_eq!(judge("Input.dispatchDragEvent", Some(&text_drag), "/d", &allow_all), Verdict::Forward);
        assert_eq!(judge("Input.dispatchDragEvent", Some(&drag(json!([]))), "/d", &allow_all), Verdict::Forward);
        assert_eq!(judge("DOM.setFileInputFiles", Some(&files(json!([]))), "/d", &allow_all), Verdict::Forward);
        // A cookie's path is a URL path, nothing on disk.
        let cookies = json!({"cookies": [{"name": "a", "value": "b", "path": "/etc"}]});
        assert_eq!(judge("Network.setCookies", Some(&cookies), "/d", &allow_all), Verdict::Forward);
        assert!(carries(Some(&cookies), "cookies.path") && !carries(Some(&cookies), "cookies.domain"));
    }

    #[test]
    fn a_file_input_takes_the_session_s_own_files_only() {
        let files = |f: Value| json!({"files": f, "backendNodeId": 7});
        let dir = "/srv/files/w-1";
        for given in [json!(["a.pdf", "b c.txt"]), json!(["/srv/files/w-1/a.pdf", "b c.txt"])] {
            match judge("DOM.setFileInputFiles", Some(&files(given.clone())), dir, &allow_all) {
                Verdict::Rewrite(p) => {
                    assert_eq!(
                        p,
                        json!({"files": ["/srv/files/w-1/a.pdf", "/srv/files/w-1/b c.txt"], "backendNodeId": 7})
                    )
                }
                other => panic!("{given}: {other:?}"),
            }
        }
        for given in [
            json!(["/etc/passwd"]),
            json!(["../w-2/a.pdf"]),
            json!(["/srv/files/w-1/../../key"]),
            json!(["/srv/files/w-10/a.pdf"]),
            json!([".hidden"]),
            json!(["ok.txt", 5]),
        ] {
            match judge("DOM.setFileInputFiles", Some(&files(given.clone())), dir, &allow_all) {
                Verdict::Refuse(why) => assert!(why.starts_with("files: "), "{given}: {why}"),
                other => panic!("{given}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_context_with_its_own_proxy_is_refused_one_without_is_not() {
        let with = json!({"proxyServer": "http://10.0.0.1:3128"});
        assert!(matches!(judge("Target.createBrowserContext", Some(&with), "/d", &allow_all), Verdict::Refuse(_)));
        let bypass = json!({"proxyBypassList": "<-loopback>"});
        assert!(matches!(judge("Target.createBrowserContext", Some(&bypass), "/d", &allow_all), Verdict::Refuse(_)));
        let plain = json!({"disposeOnDetach": true});
        assert_eq!(judge("Target.createBrowserContext", Some(&plain), "/d", &allow_all), Verdict::Forward);
    }

    #[test]
    fn urls_a_client_names_meet_the_policy() {
        let blocked = json!({"url": "http://127.0.0.1:8080/"});
        for method in ["Target.createTarget", "Page.navigate"] {
            match judge(method, Some(&blocked), "/d", &no_loopback) {
                Verdict::Refuse(why) => assert!(why.contains("blocked by policy"), "{why}"),
                other => panic!("{method}: {other:?}"),
            }
        }
        let file = json!({"url": "file:///etc/passwd"});
        assert!(matches!(judge("Page.navigate", Some(&file), "/d", &no_loopback), Verdict::Refuse(_)));
        let fine = json!({"url": "https://example.com/"});
        assert_eq!(judge("Page.navigate", Some(&fine), "/d", &no_loopback), Verdict::Forward);
    }

    #[test]
    fn download_paths_land_in_the_session_dir() {
        let asked = json!({"behavior": "allow", "downloadPath": "/home/ci/artifacts", "eventsEnabled": true});
        match judge("Browser.setDownloadBehavior", Some(&asked), "/srv/s1/downloads", &allow_all) {
            Verdict::Rewrite(p) => {
                assert_eq!(p["downloadPath"], "/srv/s1/downloads");
                assert_eq!(p["eventsEnabled"], true, "other parameters kept");
            }
            other => panic!("{other:?}"),
        }
        let no_path = json!({"behavior": "allowAndName"});
        match judge("Page.setDownloadBehavior", Some(&no_path), "/d", &allow_all) {
            Verdict::Rewrite(p) => {
                assert_eq!(p, json!({"behavior": "allow", "downloadPath": "/d"}), "named by the page")
            }
            other => panic!("{other:?}"),
        }
        let deny = json!({"behavior": "deny"});
        assert_eq!(judge("Browser.setDownloadBehavior", Some(&deny), "/d", &allow_all), Verdict::Forward);
    }

    /// Messages a scope would refuse or rewrite, each with its text as a client wrote it.
    fn scoped_away() -> Vec<&'static str> {
        vec![
            r#"{"id":1,"method":"Target.createBrowserContext","params":{}}"#,
            r#"{"id":2,"method":"Target.attachToTarget","params":{"targetId":"SOMEONE-ELSES","flatten":true}}"#,
            r#"{"id":3,"sessionId":"SOMEONE-ELSES","method":"Runtime.evaluate","params":{"expression":"1"}}"#,
            r#"{"id":4,  "method":"Target.createTarget","params":{"url":"https://example.com/"}}"#,
            r#"{"id":5,"method":"Fetch.enable"}"#,
            r#"{"id":2000000001,"method":"Browser.getVersion"}"#,
        ]
    }

    #[test]
    fn without_a_context_every_message_passes_as_today() {
        for text in scoped_away() {
            let Upstream::Send(sent) = upstream(text, "/d", &allow_all, None) else { panic!("{text} refused") };
            assert_eq!(serde_json::from_str::<Value>(&sent).unwrap(), serde_json::from_str::<Value>(text).unwrap());
        }
        // A key given twice is sent once, as judged.
        let twice =
            r#"{"id":9,"method":"Target.createBrowserContext","params":{"proxyServer":"http://x","proxyServer":null}}"#;
        let Upstream::Send(sent) = upstream(twice, "/d", &allow_all, None) else { panic!("refused") };
        assert_eq!(sent.matches("proxyServer").count(), 1, "{sent}");
        assert_eq!(serde_json::from_str::<Value>(&sent).unwrap()["params"]["proxyServer"], Value::Null);
        // judge's own refusals and rewrites are unchanged.
        let close = r#"{"id":7,"sessionId":"S","method":"Browser.close"}"#;
        match upstream(close, "/d", &allow_all, None) {
            Upstream::Refuse { method, reply, .. } => {
                assert_eq!(method, "Browser.close");
                let reply: Value = serde_json::from_str(&reply).unwrap();
                assert_eq!(reply["id"], 7);
                assert_eq!(reply["sessionId"], "S");
                assert!(reply["error"]["message"].as_str().unwrap().starts_with("browserpool refuses Browser.close: "));
            }
            other => panic!("{other:?}"),
        }
        let download =
            r#"{"id":8,"method":"Browser.setDownloadBehavior","params":{"behavior":"allow","downloadPath":"/x"}}"#;
        let Upstream::Send(out) = upstream(download, "/srv/d", &allow_all, None) else { panic!("sent") };
        let out: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(out["params"], json!({"behavior": "allow", "downloadPath": "/srv/d"}), "no context put in");
        assert_eq!(upstream("{", "/d", &allow_all, None), Upstream::NotJson);
        // The browser's messages go through unread, whatever they say.
        let foreign = r#"{"method":"Target.attachedToTarget","params":{"sessionId":"X","targetInfo":{"targetId":"F","browserContextId":"OTHER"},"waitingForDebugger":true}}"#;
        for msg in [Message::Text(foreign.into()), Message::Text("not json".into()), Message::Binary(vec![1, 2].into())]
        {
            assert_eq!(downstream(msg.clone(), None), Downstream::Send(msg));
        }
    }

    #[test]
    fn in_a_context_the_scope_judges_after_judge() {
        let mut scope = Scope::new("CTX");
        for text in scoped_away() {
            let step = upstream(text, "/d", &allow_all, Some(&mut scope));
            match step {
                // The one rewrite: the new page lands in the session's context.
                Upstream::Send(out) if text.contains("createTarget") => {
                    let out: Value = serde_json::from_str(&out).unwrap();
                    assert_eq!(
                        out,
                        json!({"id": 4, "method": "Target.createTarget",
                        "params": {"url": "https://example.com/", "browserContextId": "CTX"}})
                    );
                }
                Upstream::Refuse { reply, .. } if !text.contains("createTarget") => {
                    let reply: Value = serde_json::from_str(&reply).unwrap();
                    assert_eq!(reply["id"], serde_json::from_str::<Value>(text).unwrap()["id"], "{text}");
                    assert!(reply["error"]["message"].as_str().unwrap().starts_with("browserpool refuses "), "{reply}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        // The policy still judges the URLs a client names.
        let blocked = r#"{"id":9,"method":"Target.createTarget","params":{"url":"http://127.0.0.1:8080/"}}"#;
        match upstream(blocked, "/d", &no_loopback, Some(&mut scope)) {
            Upstream::Refuse { why, .. } => assert!(why.contains("blocked by policy"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// A key given twice is read one way by serde (the last) and maybe another by the browser:
    /// in a context, the message sent is the one judged, written anew.
    #[test]
    fn in_a_context_what_was_judged_is_what_is_sent() {
        let mut scope = Scope::new("CTX");
        let listing =
            r#"{"id":1,"result":{"targetInfos":[{"targetId":"MINE","browserContextId":"CTX","type":"page"}]}}"#;
        assert!(matches!(downstream(Message::Text(listing.into()), Some(&mut scope)), Downstream::Send(_)));
        let twice = r#"{"id":2,"method":"Target.attachToTarget","params":{"targetId":"THEIRS","targetId":"MINE"}}"#;
        let Upstream::Send(out) = upstream(twice, "/d", &allow_all, Some(&mut scope)) else { panic!("sent") };
        assert!(!out.contains("THEIRS"), "{out}");
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap(),
            json!({"id": 2, "method": "Target.attachToTarget", "params": {"targetId": "MINE"}})
        );
    }

    #[test]
    fn in_a_context_the_browser_messages_are_judged() {
        let mut scope = Scope::new("CTX");
        let foreign = r#"{"method":"Target.attachedToTarget","params":{"sessionId":"X","targetInfo":{"targetId":"F","browserContextId":"OTHER"},"waitingForDebugger":false}}"#;
        match downstream(Message::Text(foreign.into()), Some(&mut scope)) {
            Downstream::Inject(out) => {
                assert_eq!(out.len(), 1);
                let detach: Value = serde_json::from_str(&out[0]).unwrap();
                assert_eq!(detach["method"], "Target.detachFromTarget");
                assert_eq!(detach["params"]["sessionId"], "X");
            }
            other => panic!("{other:?}"),
        }
        let own =
            r#"{"method":"Target.targetCreated","params":{"targetInfo":{"targetId":"P","browserContextId":"CTX"}}}"#;
        let msg = Message::Text(own.into());
        assert_eq!(downstream(msg.clone(), Some(&mut scope)), Downstream::Send(msg), "forwarded as it came");
        let contexts = r#"{"id":3,"result":{"browserContextIds":["OTHER","CTX"]}}"#;
        let Downstream::Send(Message::Text(out)) = downstream(Message::Text(contexts.into()), Some(&mut scope)) else {
            panic!("sent")
        };
        assert_eq!(
            serde_json::from_str::<Value>(out.as_str()).unwrap(),
            json!({"id": 3, "result": {"browserContextIds": ["CTX"]}})
        );
        // Nothing unreadable passes unread.
        for msg in [Message::Text("not json".into()), Message::Binary(vec![b'{', b'}'].into())] {
            assert_eq!(downstream(msg, Some(&mut scope)), Downstream::Drop);
        }
    }

    #[test]
    fn refused_names_are_bounded_in_number_and_length() {
        let mut refused = BTreeSet::new();
        assert_eq!(note_refused(&mut refused, "Browser.close"), "Browser.close");
        let long = format!("Extensions.{}", "x".repeat(1 << 20));
        let noted = note_refused(&mut refused, &long);
        assert_eq!(noted.chars().count(), NAME_CHARS + 3);
        assert!(refused.contains(&noted));
        for i in 0..1000 {
            note_refused(&mut refused, &format!("Made.up{i}"));
        }
        assert_eq!(refused.len(), REFUSED_NAMES + 1);
        assert!(refused.contains("(more)") && refused.contains("Browser.close"));
        note_refused(&mut refused, "Browser.close");
        assert_eq!(refused.len(), REFUSED_NAMES + 1, "a name already noted is not more");
    }

    #[test]
    fn close_reasons_fit_a_frame() {
        let Message::Close(Some(frame)) = close(1001, &"x".repeat(300)) else { panic!("a close frame") };
        assert_eq!(frame.reason.len(), 123);
    }
}
