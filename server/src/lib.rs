//! The browserpool service: config, auth, store, session management, gRPC adapters and the
//! HTTP side listener. See ARCHITECTURE.md for how the pieces fit.

pub mod admission;
pub mod app;
pub mod audit;
pub mod auth;
pub mod bridge;
pub mod browsers;
pub mod cdp;
pub mod cli;
pub mod clock;
pub mod config;
pub mod convert;
pub mod deadlines;
pub mod envelope;
pub mod error;
pub mod files;
pub mod forward;
pub mod grpc;
pub mod grpc_status;
pub mod http;
pub mod jcs;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod objects;
pub mod proxies;
pub mod redact;
pub mod secrets;
pub mod server;
pub mod sessions;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod tenants;
pub mod throttle;
pub mod tls;

pub use server::{bind, bind_with, run, Bound};

/// This build's version and the git revision it was built from (see `build.rs`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const REVISION: &str = env!("BROWSERPOOL_GIT_REV");
/// `--version`: `0.1.0 (rev 1a2b3c4d5e6f)`.
pub const LONG_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (rev ", env!("BROWSERPOOL_GIT_REV"), ")");

/// Resolves on SIGTERM or SIGINT: the shutdown future `main` passes to [`run`]. The handlers
/// are installed when this is called, not when the future is first polled, so a signal that
/// arrives while the server starts (right after it logs `serving`, say) still shuts it down
/// cleanly instead of killing it.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => tokio::select! {
                _ = term.recv() => tracing::info!("sigterm received, shutting down"),
                _ = int.recv() => tracing::info!("sigint received, shutting down"),
            },
            (term, int) => {
                let e = term.err().or(int.err()).map(|e| e.to_string()).unwrap_or_default();
                tracing::error!(error = %e, "cannot listen for signals; waiting for ctrl-c only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// The layers of `server/src`, lowest first. A module may import only from layers below its
/// own (or from itself): leaves -> store -> audit writer -> errors, auth -> sessions ->
/// the application's state -> forwarding -> gRPC adapters and HTTP -> server -> command line.
#[cfg(test)]
const LAYERS: &[&[&str]] = &[
    &[
        "admission",
        "audit::chain",
        "cdp",
        "clock",
        "config",
        "files",
        "grpc_status",
        "jcs",
        "metrics",
        "model",
        "objects",
        "redact",
        "secrets",
        "throttle",
        "tls",
    ],
    &["browsers", "deadlines", "telemetry"],
    &["store"],
    &["audit"],
    &["error"],
    &["auth", "envelope", "proxies"],
    &["sessions"],
    &["app"],
    &["forward", "shutdown", "tenants"],
    &["convert", "grpc", "mcp", "http"],
    &["server"],
    &["bridge", "cli", "run", "bind", "Bound"],
];

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    use super::LAYERS;

    /// The layer of a module path (`audit::chain` is its own, below `audit`).
    fn layer(module: &str) -> Option<usize> {
        let mut best = None;
        for (i, layer) in LAYERS.iter().enumerate() {
            for name in *layer {
                let matches = module == *name || module.starts_with(&format!("{name}::"));
                if matches && best.is_none_or(|(len, _)| name.len() > len) {
                    best = Some((name.len(), i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    /// Every module of the crate whose sources are in `src` (`lib` and `main` left out), with
    /// the module paths it imports.
    fn modules(src: &Path) -> BTreeMap<String, Vec<String>> {
        let mut files = Vec::new();
        let mut dirs = vec![src.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        let mut modules = BTreeMap::new();
        for file in files {
            let rel = file.strip_prefix(src).unwrap().with_extension("");
            let module = rel.to_string_lossy().replace('/', "::").trim_end_matches("::mod").to_string();
            if matches!(module.as_str(), "lib" | "main") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            modules.insert(module.clone(), imports(&module, &text));
        }
        modules
    }

    /// The module paths a file of module `module` names through `crate::` or `super::`, in
    /// its code and its unit tests alike, braces expanded, comments skipped. In the unit tests
    /// (a `mod tests` inside the file), `super` is the file's own module.
    fn imports(module: &str, text: &str) -> Vec<String> {
        let mut found = Vec::new();
        let mut in_tests = false;
        for line in text.lines() {
            let line = line.trim_start();
            if line.starts_with("mod tests") {
                in_tests = true;
            }
            if line.starts_with("//") {
                continue;
            }
            let mut rest = line;
            while let Some(at) = rest.find("crate::").into_iter().chain(rest.find("super::")).min() {
                let before = rest[..at].chars().last();
                let tail = &rest[at..];
                rest = &tail[1..];
                // Part of a longer name or path (`$crate::`, `super::super::`'s second half).
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | ':')) {
                    continue;
                }
                let mut own: Vec<&str> = module.split("::").collect();
                if in_tests {
                    own.push("tests");
                }
                let mut path = tail;
                let mut base: Vec<&str> = Vec::new();
                if let Some(after) = path.strip_prefix("crate::") {
                    path = after;
                } else {
                    base = own;
                    while let Some(after) = path.strip_prefix("super::") {
                        base.pop();
                        path = after;
                    }
                }
                for item in expand(path) {
                    let full: Vec<&str> =
                        base.iter().copied().chain(item.split("::")).filter(|s| !s.is_empty()).collect();
                    found.push(full.join("::"));
                }
            }
        }
        found
    }

    /// `a::{b, c::{d}}` as `a::b` and `a::c::d`; a plain path as itself (to its end).
    fn expand(path: &str) -> Vec<String> {
        let word: String = path.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
        let head = word.trim_end_matches(':');
        if !path[word.len()..].starts_with('{') || !word.ends_with("::") && !word.is_empty() {
            return vec![head.to_string()];
        }
        let inner = &path[word.len() + 1..];
        let (mut depth, mut end) = (0, inner.len());
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    end = i;
                    break;
                }
                '}' => depth -= 1,
                _ => {}
            }
        }
        let (mut items, mut depth, mut from) = (Vec::new(), 0, 0);
        let inner = &inner[..end];
        for (i, c) in inner.char_indices().chain([(inner.len(), ',')]) {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.extend(expand(inner[from..i].trim()).into_iter().map(|t| format!("{word}{t}")));
                    from = i + 1;
                }
                _ => {}
            }
        }
        items
    }

    /// Cycles among a crate's modules (files), each as `a -> b -> a`. An import names the
    /// longest module its path starts with; a module using its parent or its child is no
    /// cycle (`driver::ops::tabs` and `driver`).
    fn cycles(modules: &BTreeMap<String, Vec<String>>) -> Vec<String> {
        let kin = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"));
        let node = |path: &str| {
            modules.keys().filter(|m| path == m.as_str() || path.starts_with(&format!("{m}::"))).max_by_key(|m| m.len())
        };
        let mut edges: BTreeMap<&String, BTreeSet<&String>> = BTreeMap::new();
        for (module, imports) in modules {
            for target in imports.iter().filter_map(|t| node(t)).filter(|t| !kin(module, t)) {
                edges.entry(module).or_default().insert(target);
            }
        }
        let mut found = Vec::new();
        for start in modules.keys() {
            // Depth-first over modules named after `start` only: a path back to it is a cycle,
            // reported once, from its smallest name.
            let mut stack = vec![(start, vec![start.as_str()])];
            let mut seen = BTreeSet::new();
            while let Some((at, path)) = stack.pop() {
                for next in edges.get(at).into_iter().flatten() {
                    if *next == start {
                        found.push(format!("{} -> {start}", path.join(" -> ")));
                    } else if *next > start && seen.insert(*next) {
                        stack.push((next, path.iter().copied().chain([next.as_str()]).collect()));
                    }
                }
            }
        }
        found
    }

    #[test]
    fn no_module_imports_from_a_layer_above_its_own() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut wrong = Vec::new();
        for (module, imports) in modules(&src) {
            let own = layer(&module).unwrap_or_else(|| panic!("{module} is in no layer of LAYERS"));
            for target in imports {
                let Some(theirs) = layer(&target) else { continue };
                if theirs > own {
                    wrong.push(format!("{module} (layer {own}) imports crate::{target} (layer {theirs})"));
                }
            }
        }
        assert!(wrong.is_empty(), "imports against the layer order:\n{}", wrong.join("\n"));
    }

    /// Neither crate's modules import each other in a circle (the pool's have no layer table:
    /// this holds its order).
    #[test]
    fn no_circle_among_the_modules_of_the_server_or_the_pool() {
        for src in ["src", "../pool/src"] {
            let found = cycles(&modules(&Path::new(env!("CARGO_MANIFEST_DIR")).join(src)));
            assert!(found.is_empty(), "import circles in {src}:\n{}", found.join("\n"));
        }
    }

    /// Production lines (above a file's `mod tests`) a file may have, and lines a function
    /// may have.
    const FILE_LINES: usize = 600;
    const FN_LINES: usize = 100;

    /// What is still longer than that, with its length when this list was last cut: each may
    /// shrink (then lower or drop its line here) and none may grow, and nothing else may join.
    /// Split along responsibilities (see ARCHITECTURE.md), or say in a comment above a long
    /// function why it reads better whole.
    const TOO_LONG: &[(&str, usize)] = &[];

    /// Files over [`FILE_LINES`] production lines and functions over [`FN_LINES`] lines in the
    /// crates' sources, as `("path", lines)` and `("path name", lines)`.
    fn too_long() -> Vec<(String, usize)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut found = Vec::new();
        for krate in ["proto", "pool", "server", "client"] {
            let mut dirs = vec![root.join(krate).join("src")];
            while let Some(dir) = dirs.pop() {
                for entry in std::fs::read_dir(dir).unwrap().flatten() {
                    let path = entry.path();
                    if path.is_dir() {
                        dirs.push(path);
                        continue;
                    }
                    // Test modules and test support (`fake.rs`) are all tests.
                    let tests = path.file_name().is_some_and(|n| n == "tests.rs" || n == "fake.rs");
                    if path.extension().is_none_or(|e| e != "rs") || tests {
                        continue;
                    }
                    let name = path.strip_prefix(&root).unwrap().to_string_lossy().to_string();
                    let text = std::fs::read_to_string(&path).unwrap();
                    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
                    let lines: Vec<&str> = code.lines().collect();
                    if lines.len() > FILE_LINES {
                        found.push((name.clone(), lines.len()));
                    }
                    for (at, line) in lines.iter().enumerate() {
                        let body = line.trim_start();
                        let indent = &line[..line.len() - body.len()];
                        let body =
                            body.strip_prefix("pub ").or_else(|| body.strip_prefix("pub(crate) ")).unwrap_or(body);
                        let body = body.strip_prefix("pub(super) ").unwrap_or(body);
                        let body = body.strip_prefix("async ").unwrap_or(body);
                        let Some(rest) = body.strip_prefix("fn ") else { continue };
                        let fn_name: String =
                            rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                        let close = format!("{indent}}}");
                        if let Some(end) = lines[at + 1..].iter().position(|l| *l == close) {
                            if end + 2 > FN_LINES {
                                found.push((format!("{name} {fn_name}"), end + 2));
                            }
                        }
                    }
                }
            }
        }
        found
    }

    /// No file or function grows past its bound, and the list of those still past it only
    /// shrinks.
    #[test]
    fn files_and_functions_stay_short() {
        let found = too_long();
        let mut wrong = Vec::new();
        for (what, lines) in &found {
            match TOO_LONG.iter().find(|(w, _)| w == what) {
                None => wrong.push(format!("{what}: {lines} lines (files: {FILE_LINES}, functions: {FN_LINES})")),
                Some((_, listed)) if lines > listed => {
                    wrong.push(format!("{what}: {lines} lines, more than the {listed} it had (split it)"))
                }
                Some(_) => {}
            }
        }
        for (what, listed) in TOO_LONG {
            let now = found.iter().find(|(w, _)| w == what).map(|(_, n)| *n);
            if now.is_none_or(|n| n < *listed) {
                wrong
                    .push(format!("{what}: listed at {listed} lines, now {now:?}: lower or drop its line in TOO_LONG"));
            }
        }
        assert!(wrong.is_empty(), "too long:\n{}", wrong.join("\n"));
    }

    #[test]
    fn imports_are_read_through_braces_super_and_tests() {
        let text = "use crate::{a::X, b::{c::Y, Z}};\nuse super::d::W;\n// crate::comment\nlet v = crate::e::f();\nmod tests {\n    use super::*;\n    use super::super::g;\n}\n";
        assert_eq!(imports("m::n", text), ["a::X", "b::c::Y", "b::Z", "m::d::W", "e::f", "m::n", "m::g"]);
        let mut graph = BTreeMap::new();
        graph.insert("a".to_string(), vec!["b::x".to_string(), "a::kid::Y".to_string()]);
        graph.insert("a::kid".to_string(), vec!["a::Z".to_string()]);
        graph.insert("b".to_string(), vec!["c::inner::T".to_string()]);
        graph.insert("c".to_string(), vec![]);
        graph.insert("c::inner".to_string(), vec!["a::T".to_string()]);
        graph.insert("d".to_string(), vec!["a".to_string()]);
        assert_eq!(cycles(&graph), ["a -> b -> c::inner -> a"], "a parent and its child are no cycle; the rest is");
    }
}
