//! The action catalog: canonical names, aliases, the access each action needs, and
//! `did_you_mean` suggestions for unknown names. Pure logic, no browser.

use serde_json::Value;

/// What an action needs from the caller's token. The server maps these to scope strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `sessions:read`
    Read,
    /// `sessions:write`
    Write,
    /// `context:export`
    ContextExport,
    /// `context:import`
    ContextImport,
}

/// A canonical action name, resolved from what the client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    /// The canonical name, e.g. `navigate`.
    pub name: &'static str,
    /// The alias the client used, empty when it used the canonical name.
    pub alias_of: String,
}

impl Canonical {
    /// The access this action needs; `cookies` depends on its `op`.
    pub fn access(&self, payload: &Value) -> Access {
        if self.name == "cookies" {
            let op = payload.get("op").and_then(Value::as_str).unwrap_or("get");
            return if op == "get" { Access::ContextExport } else { Access::ContextImport };
        }
        CATALOG.iter().find(|(name, _, _)| *name == self.name).map(|(_, access, _)| *access).unwrap_or(Access::Write)
    }

    /// Whether the driver implements this action yet.
    pub fn implemented(&self) -> bool {
        CATALOG.iter().any(|(name, _, built)| *name == self.name && *built)
    }
}

/// Every canonical action of the v1 contract: name, access, and whether it is built yet.
/// Unbuilt actions are recognised (so they are never "unknown") and answer that they are not
/// available yet.
const CATALOG: &[(&str, Access, bool)] = &[
    ("navigate", Access::Write, true),
    ("back", Access::Write, true),
    ("forward", Access::Write, true),
    ("reload", Access::Write, true),
    ("click", Access::Write, true),
    ("type", Access::Write, true),
    ("fill", Access::Write, true),
    ("press", Access::Write, true),
    ("hover", Access::Write, true),
    ("focus", Access::Write, true),
    ("select", Access::Write, true),
    ("scroll", Access::Write, true),
    ("wait_for", Access::Read, true),
    ("extract", Access::Read, true),
    ("attr", Access::Read, true),
    ("evaluate", Access::Write, true),
    ("screenshot", Access::Read, true),
    ("pdf", Access::Read, true),
    ("set_viewport", Access::Write, true),
    ("load_html", Access::Write, true),
    ("new_tab", Access::Write, true),
    ("switch_tab", Access::Read, true),
    ("close_tab", Access::Write, true),
    ("list_tabs", Access::Read, true),
    ("url", Access::Read, true),
    ("title", Access::Read, true),
    ("cookies", Access::ContextExport, true),
];

/// Alias -> canonical name. Matching is exact: `setContent` is listed in its own spelling.
const ALIASES: &[(&str, &str)] = &[
    ("goto", "navigate"),
    ("open", "navigate"),
    ("visit", "navigate"),
    ("setcontent", "load_html"),
    ("set-content", "load_html"),
    ("setContent", "load_html"),
    ("set_content", "load_html"),
    ("eval", "evaluate"),
    ("js", "evaluate"),
    ("wait", "wait_for"),
    ("text", "extract"),
    ("viewport", "set_viewport"),
];

/// An action name that is neither canonical nor an alias.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAction {
    /// What the client sent.
    pub name: String,
    /// Canonical names and aliases within edit distance 2 (only for inputs of 4+ characters),
    /// closest first, ties alphabetical.
    pub did_you_mean: Vec<String>,
}

/// Resolves a client's action name to its canonical form.
pub fn canonicalize(name: &str) -> Result<Canonical, UnknownAction> {
    if let Some((canonical, _, _)) = CATALOG.iter().find(|(n, _, _)| *n == name) {
        return Ok(Canonical { name: canonical, alias_of: String::new() });
    }
    if let Some((alias, canonical)) = ALIASES.iter().find(|(a, _)| *a == name) {
        let name = CATALOG.iter().find(|(n, _, _)| n == canonical).map(|(n, _, _)| *n);
        if let Some(name) = name {
            return Ok(Canonical { name, alias_of: (*alias).to_string() });
        }
    }
    Err(UnknownAction { name: name.to_string(), did_you_mean: suggestions(name) })
}

fn suggestions(name: &str) -> Vec<String> {
    if name.chars().count() < 4 {
        return Vec::new();
    }
    let mut scored: Vec<(usize, &str)> = CATALOG
        .iter()
        .map(|(n, _, _)| *n)
        .chain(ALIASES.iter().map(|(a, _)| *a))
        .map(|candidate| (levenshtein(name, candidate), candidate))
        .filter(|(d, _)| *d <= 2)
        .collect();
    scored.sort();
    scored.dedup();
    scored.into_iter().map(|(_, c)| c.to_string()).collect()
}

/// Edit distance (insertions, deletions, substitutions) over Unicode scalar values.
pub fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_names_resolve_to_themselves() {
        let c = canonicalize("navigate").unwrap();
        assert_eq!(c.name, "navigate");
        assert_eq!(c.alias_of, "");
    }

    #[test]
    fn every_alias_of_the_contract_resolves() {
        for (alias, canonical) in [
            ("goto", "navigate"),
            ("open", "navigate"),
            ("visit", "navigate"),
            ("setcontent", "load_html"),
            ("set-content", "load_html"),
            ("setContent", "load_html"),
            ("set_content", "load_html"),
            ("eval", "evaluate"),
            ("js", "evaluate"),
            ("wait", "wait_for"),
            ("text", "extract"),
            ("viewport", "set_viewport"),
        ] {
            let c = canonicalize(alias).unwrap();
            assert_eq!((c.name, c.alias_of.as_str()), (canonical, alias));
        }
    }

    #[test]
    fn alias_never_widens_access() {
        // `text` is read-only like `extract`; `js` needs write like `evaluate`.
        assert_eq!(canonicalize("text").unwrap().access(&Value::Null), Access::Read);
        assert_eq!(canonicalize("js").unwrap().access(&Value::Null), Access::Write);
        assert_eq!(canonicalize("wait").unwrap().access(&Value::Null), Access::Read);
    }

    #[test]
    fn cookies_access_depends_on_op() {
        let c = canonicalize("cookies").unwrap();
        assert_eq!(c.access(&json!({"op": "get"})), Access::ContextExport);
        assert_eq!(c.access(&json!({"op": "set"})), Access::ContextImport);
        assert_eq!(c.access(&json!({"op": "clear"})), Access::ContextImport);
    }

    #[test]
    fn unknown_action_suggests_close_names_sorted() {
        // closest first: "click" is 1 away, "back" 2 away.
        let e = canonicalize("clck").unwrap_err();
        assert_eq!(e.did_you_mean, vec!["click", "back"]);
        let e = canonicalize("naviagte").unwrap_err();
        assert_eq!(e.did_you_mean, vec!["navigate"]);
        // ties at one distance are alphabetical: "type" and "title"... "tipe" is 1 from "type"
        // and 2 from "title", "text", "wait", "pdf"? only names within 2 are listed.
        let e = canonicalize("tipe").unwrap_err();
        assert_eq!(e.did_you_mean[0], "type");
        let rest = e.did_you_mean[1..].to_vec();
        let mut sorted = rest.clone();
        sorted.sort();
        assert_eq!(rest, sorted, "equal distances must be alphabetical");
        assert!(rest.iter().all(|n| levenshtein("tipe", n) == 2), "{rest:?}");
    }

    #[test]
    fn short_inputs_get_no_suggestions() {
        assert!(canonicalize("clk").unwrap_err().did_you_mean.is_empty());
        assert!(canonicalize("").unwrap_err().did_you_mean.is_empty());
    }

    #[test]
    fn levenshtein_basics() {
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("same", "same"), 0);
        assert_eq!(levenshtein("é", "e"), 1);
    }
}
