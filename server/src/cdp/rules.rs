//! What the proxy refuses or rewrites of a client's messages, whatever the session: the
//! refused methods, domains and parameters, the parameters that name a host file, and
//! [`judge`].

use serde_json::{json, Value};

/// Methods refused whatever their parameters, and why.
pub const REFUSED: &[(&str, &str)] = &[
    ("Browser.close", "the browser belongs to the pool: release the session instead"),
    ("Browser.crash", "the browser belongs to the pool"),
    ("Browser.crashGpuProcess", "the browser belongs to the pool"),
    ("Browser.executeBrowserCommand", "browser commands act on the host's browser window"),
    ("Target.exposeDevToolsProtocol", "it hands the protocol to the page's own scripts, past this proxy"),
    ("Target.sendMessageToTarget", "messages wrapped in it would pass unchecked: attach with flatten: true"),
    ("Target.setRemoteLocations", "it makes the browser connect to other hosts"),
];

/// Methods refused when they carry one of these parameters (present and not null).
pub const REFUSED_PARAMS: &[(&str, &[&str], &str)] = &[(
    "Target.createBrowserContext",
    &["proxyServer", "proxyBypassList"],
    // A context with its own proxy would bypass the worker's egress proxy, and with it the
    // navigation policy; one without inherits it.
    "a browser context with its own proxy would bypass the session's network policy",
)];

/// Domains refused whole, and why.
pub const REFUSED_DOMAINS: &[(&str, &str)] = &[
    ("Extensions.", "extensions load from the server's file system"),
    ("PWA.", "installing web apps touches the host"),
    ("Cast.", "cast discovery reaches the local network"),
    ("Tethering.", "it opens listening sockets on the browser's host"),
];

/// What the proxy does with a CDP parameter that can name a file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileParam {
    /// A message carrying it (present and not empty) is refused: the browser would read the
    /// host's files with the worker's rights.
    Refused,
    /// It becomes the session's own files directory (where its downloads land).
    SessionDir,
    /// Each entry names a file of the session's files directory: a bare name, or its path
    /// there, becomes that path; any other path (or a bad name) refuses the message.
    SessionFiles,
    /// Its name says path or file, but it names no host file (why, in words).
    NotAHostPath(&'static str),
}

/// Every command parameter of the protocol that can name a host file or directory, as the
/// browser's own protocol description lists them (parameters, and fields of their types, named
/// like a path, file or directory): a test reads `/json/protocol` of the Chromium the suite
/// runs and fails on one missing here. Dotted names are fields of a parameter's object.
pub const FILE_PARAMS: &[(&str, &str, FileParam)] = &[
    ("DOM.setFileInputFiles", "files", FileParam::SessionFiles),
    ("Input.dispatchDragEvent", "data.files", FileParam::Refused),
    ("Extensions.loadUnpacked", "path", FileParam::Refused),
    ("PWA.launchFilesInApp", "files", FileParam::Refused),
    ("Browser.setDownloadBehavior", "downloadPath", FileParam::SessionDir),
    ("Page.setDownloadBehavior", "downloadPath", FileParam::SessionDir),
    ("CacheStorage.requestEntries", "pathFilter", FileParam::NotAHostPath("a cached request's URL path")),
    ("DOM.pushNodeByPathToFrontend", "path", FileParam::NotAHostPath("a node's path in the DOM")),
    (
        "FileSystem.getDirectory",
        "bucketFileSystemLocator",
        FileParam::NotAHostPath("the origin's own bucket file system"),
    ),
    (
        "FileSystem.getDirectory",
        "bucketFileSystemLocator.pathComponents",
        FileParam::NotAHostPath("a path inside the origin's own bucket file system"),
    ),
    ("Network.deleteCookies", "path", FileParam::NotAHostPath("a cookie's URL path")),
    ("Network.setCookie", "path", FileParam::NotAHostPath("a cookie's URL path")),
    ("Network.setCookies", "cookies.path", FileParam::NotAHostPath("a cookie's URL path")),
    ("Storage.setCookies", "cookies.path", FileParam::NotAHostPath("a cookie's URL path")),
    ("Network.enable", "reportDirectSocketTraffic", FileParam::NotAHostPath("a flag")),
    ("Page.enable", "enableFileChooserOpenedEvent", FileParam::NotAHostPath("a flag")),
];

/// The value at a dotted `path` of `params`, through arrays (`cookies.path` is every cookie's
/// `path`): whether any is present and not empty.
pub(super) fn carries(params: Option<&Value>, path: &str) -> bool {
    fn walk(value: &Value, keys: &[&str]) -> bool {
        match (value, keys) {
            (Value::Array(items), _) => items.iter().any(|v| walk(v, keys)),
            (_, []) => match value {
                Value::Null => false,
                Value::String(s) => !s.is_empty(),
                Value::Object(o) => !o.is_empty(),
                _ => true,
            },
            (Value::Object(fields), [key, rest @ ..]) => fields.get(*key).is_some_and(|v| walk(v, rest)),
            _ => false,
        }
    }
    let keys: Vec<&str> = path.split('.').collect();
    params.is_some_and(|p| walk(p, &keys))
}

/// What happens to one message a client sends.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Forward,
    /// Forward with these parameters instead.
    Rewrite(Value),
    /// Answer the client with a CDP error saying why; the browser never sees it.
    Refuse(String),
}

/// Judges one client message by its method and parameters. `check_url` says why the
/// session's policy refuses a URL, if it does; `download_dir` is the session's own.
pub fn judge(
    method: &str,
    params: Option<&Value>,
    download_dir: &str,
    check_url: &dyn Fn(&str) -> Result<(), String>,
) -> Verdict {
    if let Some((_, why)) = REFUSED.iter().find(|(m, _)| *m == method) {
        return Verdict::Refuse(why.to_string());
    }
    if let Some((_, why)) = REFUSED_DOMAINS.iter().find(|(d, _)| method.starts_with(d)) {
        return Verdict::Refuse(why.to_string());
    }
    let reads_files =
        FILE_PARAMS.iter().any(|(m, path, how)| *m == method && *how == FileParam::Refused && carries(params, path));
    if reads_files {
        return Verdict::Refuse("it reads files from the server's file system".into());
    }
    let param = |name: &str| params.and_then(|p| p.get(name));
    let carried = REFUSED_PARAMS
        .iter()
        .find(|(m, names, _)| *m == method && names.iter().any(|k| param(k).is_some_and(|v| !v.is_null())));
    if let Some((_, _, why)) = carried {
        return Verdict::Refuse((*why).into());
    }
    match method {
        "Target.createTarget" | "Page.navigate" => match param("url").and_then(Value::as_str) {
            Some(url) => match check_url(url) {
                Ok(()) => Verdict::Forward,
                Err(why) => Verdict::Refuse(format!("blocked by policy: {why}")),
            },
            None => Verdict::Forward,
        },
        "DOM.setFileInputFiles" => match param("files") {
            Some(Value::Array(files)) if !files.is_empty() => match session_files(files, download_dir) {
                Ok(paths) => {
                    let mut rewritten = params.cloned().unwrap_or_else(|| json!({}));
                    rewritten["files"] = paths;
                    Verdict::Rewrite(rewritten)
                }
                Err(why) => Verdict::Refuse(why),
            },
            _ => Verdict::Forward,
        },
        // Kept (Playwright sends its own machine's artifacts dir on every connect), but the
        // files land in the session's directory, never at a path of the server's choosing,
        // under the names their pages give them (`allowAndName`, Playwright's, would name them
        // by a GUID the client keeps to itself), so the files API finds them by those names.
        "Browser.setDownloadBehavior" | "Page.setDownloadBehavior" => {
            let mut rewritten = params.cloned().unwrap_or_else(|| json!({}));
            let allows = matches!(rewritten.get("behavior").and_then(Value::as_str), Some("allow" | "allowAndName"));
            if allows || rewritten.get("downloadPath").is_some() {
                rewritten["downloadPath"] = json!(download_dir);
                if allows {
                    rewritten["behavior"] = json!("allow");
                }
                Verdict::Rewrite(rewritten)
            } else {
                Verdict::Forward
            }
        }
        _ => Verdict::Forward,
    }
}

/// The paths of `DOM.setFileInputFiles` `files` in the session's files directory `dir`: each
/// a bare name (as `set_input_files` takes them) or its path in `dir`; any other is refused.
fn session_files(files: &[Value], dir: &str) -> Result<Value, String> {
    let mut paths = Vec::new();
    for file in files {
        let given = file.as_str().ok_or("files: a list of file names")?;
        let name = given.strip_prefix(dir).and_then(|rest| rest.strip_prefix('/')).unwrap_or(given);
        if let Some(why) = browserpool_pool::filenames::name_fault(name) {
            return Err(format!(
                "files: {:?} {why}; only the session's own files are taken (upload them with PutFile, then name them)",
                browserpool_pool::filenames::shown(given)
            ));
        }
        paths.push(json!(format!("{dir}/{name}")));
    }
    Ok(json!(paths))
}
