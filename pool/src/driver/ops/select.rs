//! Selectors people write, besides CSS: Playwright's `text=`, `role=`, `xpath=` (and a bare
//! `//...`), `css=`, and `>>` chaining (each part looked for inside the first match of the
//! one before). A plain CSS selector takes the browser's own path, unchanged; the others are
//! resolved in the page by [`RESOLVE`], and the element found is handed to CDP by a mark
//! set for the moment of the lookup.

use chromiumoxide::{Element, Page};
use serde_json::json;

use crate::outcome::{ActResult, ActionFailure, FailureCode};

/// `(selector) => Element | null`, run in the page. Text is compared whitespace-normalized:
/// `text=Sign in` matches an element whose text contains it, case-insensitively (the
/// innermost such element); `text="Sign in"` one whose text is exactly that. `role=R`
/// matches elements of ARIA role R (explicit, or the usual implicit one of the tag), visible
/// ones only, `role=R[name="N"]` those whose accessible name (aria-label, aria-labelledby, a
/// label, alt, the text, title) contains N case-insensitively, `[name="N" s]` exactly.
pub(super) const RESOLVE: &str = r#"(selector) => {
  const norm = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const fail = (why) => { throw new SyntaxError(`'${selector}' is not a valid selector: ${why}`); };
  const unquote = (s) => /^".*"$/.test(s) ? [JSON.parse(s), true] : [s, false];
  const parts = [];
  let part = '', quoted = false;
  for (let i = 0; i < selector.length; i++) {
    const c = selector[i];
    if (c === '"' && selector[i - 1] !== '\\') quoted = !quoted;
    if (!quoted && selector.startsWith('>>', i)) { parts.push(part.trim()); part = ''; i++; continue; }
    part += c;
  }
  parts.push(part.trim());
  if (parts.some((p) => !p)) fail('an empty part around >>');
  const visible = (e) => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden';
  const implicit = (e) => {
    const t = e.localName, type = (e.getAttribute('type') || 'text').toLowerCase();
    if (t === 'button') return 'button';
    if (t === 'a' || t === 'area') return e.hasAttribute('href') ? 'link' : null;
    if (t === 'input') {
      if (['button', 'submit', 'reset', 'image'].includes(type)) return 'button';
      if (type === 'checkbox' || type === 'radio') return type;
      if (type === 'range') return 'slider';
      if (type === 'number') return 'spinbutton';
      if (type === 'search') return 'searchbox';
      if (['text', 'email', 'tel', 'url', 'password'].includes(type)) return 'textbox';
      return null;
    }
    if (t === 'textarea') return 'textbox';
    if (t === 'select') return e.multiple || e.size > 1 ? 'listbox' : 'combobox';
    if (/^h[1-6]$/.test(t)) return 'heading';
    const roles = { img: 'img', li: 'listitem', ul: 'list', ol: 'list', option: 'option', nav: 'navigation',
      main: 'main', form: 'form', table: 'table', dialog: 'dialog', tr: 'row', td: 'cell', th: 'columnheader',
      article: 'article', aside: 'complementary', header: 'banner', footer: 'contentinfo', progress: 'progressbar' };
    return roles[t] || null;
  };
  const role = (e) => (e.getAttribute('role') || '').trim().split(/\s+/)[0] || implicit(e);
  const name = (e) => {
    const label = e.getAttribute('aria-label');
    if (label && norm(label)) return norm(label);
    const by = e.getAttribute('aria-labelledby');
    if (by) return norm(by.split(/\s+/).map((id) => document.getElementById(id)?.textContent || '').join(' '));
    if (e.labels && e.labels.length) return norm([...e.labels].map((l) => l.textContent).join(' '));
    if (e.localName === 'input' && ['button', 'submit', 'reset'].includes(e.type)) return norm(e.value);
    if (e.localName === 'img') return norm(e.getAttribute('alt'));
    return norm(e.innerText || e.textContent) || norm(e.getAttribute('title')) || norm(e.getAttribute('placeholder'));
  };
  const under = (root) => [...(root.querySelectorAll ? root.querySelectorAll('*') : [])];
  const skip = new Set(['script', 'style', 'head', 'title', 'template', 'noscript']);
  const query = (root, p) => {
    if (p.startsWith('css=')) return [...root.querySelectorAll(p.slice(4))];
    if (p.startsWith('xpath=') || p.startsWith('//') || p.startsWith('..')) {
      const expr = p.startsWith('xpath=') ? p.slice(6) : p;
      const found = document.evaluate(expr, root, null, XPathResult.ORDERED_NODE_SNAPSHOT_TYPE, null);
      return Array.from({ length: found.snapshotLength }, (_, i) => found.snapshotItem(i)).filter((n) => n.nodeType === 1);
    }
    if (p.startsWith('text=')) {
      const [want, exact] = unquote(p.slice(5).trim());
      if (!want) fail('text= needs some text');
      const needle = norm(want), lower = needle.toLowerCase();
      const matches = (e) => {
        const t = norm(e.innerText ?? e.textContent);
        return exact ? t === needle : t.toLowerCase().includes(lower);
      };
      const all = under(root).filter((e) => !skip.has(e.localName) && matches(e));
      return all.filter((e) => !all.some((o) => o !== e && e.contains(o)));
    }
    if (p.startsWith('role=')) {
      const m = /^role=([a-z]+)\s*(?:\[\s*name\s*=\s*("(?:[^"\\]|\\.)*")\s*(s|i)?\s*\])?$/.exec(p);
      if (!m) fail('write role=NAME or role=NAME[name="TEXT"]');
      const [wanted, quotedName, flag] = [m[1], m[2], m[3]];
      const label = quotedName === undefined ? null : norm(JSON.parse(quotedName));
      return under(root).filter((e) => role(e) === wanted && visible(e)
        && (label === null || (flag === 's' ? name(e) === label : name(e).toLowerCase().includes(label.toLowerCase()))));
    }
    return [...root.querySelectorAll(p)];
  };
  let scope = [document];
  for (const p of parts) {
    const next = [];
    for (const root of scope.slice(0, 1)) for (const e of query(root, p)) if (!next.includes(e)) next.push(e);
    scope = next;
    if (!scope.length) return null;
  }
  return scope[0] || null;
}"#;

/// The attribute that names the element found for the moment CDP takes it.
const MARK: &str = "data-browserpool-pick";

/// Whether `selector` is plain CSS (no engine prefix, no `>>`): the browser reads it itself.
pub(super) fn is_css(selector: &str) -> bool {
    let engine = ["text=", "role=", "xpath=", "css=", "//", ".."].iter().any(|p| selector.trim_start().starts_with(p));
    !engine && !selector.contains(">>")
}

/// A script that is true when `selector` matches now (and throws on a bad one).
pub(super) fn matches(selector: &str) -> String {
    match is_css(selector) {
        true => format!("document.querySelector({}) !== null", json!(selector)),
        false => format!("({RESOLVE})({}) !== null", json!(selector)),
    }
}

/// A script whose value is the element `selector` matches now, or null.
pub(super) fn first(selector: &str) -> String {
    match is_css(selector) {
        true => format!("document.querySelector({})", json!(selector)),
        false => format!("({RESOLVE})({})", json!(selector)),
    }
}

/// The element `selector` matches, as CDP's handle.
pub(super) async fn handle(page: &Page, selector: &str) -> ActResult<Element> {
    let not_found = |e: String| ActionFailure::new(FailureCode::ElementNotFound, format!("{selector}: {e}"));
    if is_css(selector) {
        return page.find_element(selector).await.map_err(|e| not_found(e.to_string()));
    }
    let nonce = format!("{:016x}", rand_u64());
    let mark = format!(
        "(() => {{ const e = ({RESOLVE})({}); if (!e) return false; e.setAttribute({}, {}); return true; }})()",
        json!(selector),
        json!(MARK),
        json!(nonce)
    );
    let marked = page.evaluate_expression(mark).await.map_err(|e| not_found(e.to_string()))?;
    if marked.value() != Some(&json!(true)) {
        return Err(not_found("no element matches it now".into()));
    }
    let found = page.find_element(format!("[{MARK}=\"{nonce}\"]")).await;
    let unmark = format!("document.querySelector('[{MARK}=\"{nonce}\"]')?.removeAttribute({})", json!(MARK));
    let _ = page.evaluate_expression(unmark).await;
    found.map_err(|e| not_found(e.to_string()))
}

/// A random number for the mark (not a secret: it keeps two lookups apart).
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_css_stays_with_the_browser_and_the_rest_is_resolved_in_the_page() {
        for css in ["#go", "button.primary", "a[href^='/x'] > span", "input[name=q]"] {
            assert!(is_css(css), "{css}");
            assert!(matches(css).starts_with("document.querySelector("), "{css}");
        }
        for other in ["text=Sign in", "role=button[name=\"Go\"]", "xpath=//a", "//a", "css=#go", "#form >> text=Go"] {
            assert!(!is_css(other), "{other}");
            assert!(first(other).starts_with("((selector) =>"), "{other}");
        }
    }
}
