//! One parser per action with arguments: `(selector, payload)` to the typed action. Options
//! objects are read one way for every action: only the keys its [`Reference`] lists, in
//! `snake_case`; any other key is refused, naming it, with a suggestion when it is close to
//! an option (`fullPage` -> `full_page`). Nothing is silently ignored: a selector or payload
//! given to an action that takes none is refused too.

use serde_json::{Map, Value};

use super::reference::{SelectorUse, CLIP_KEYS};
use super::*;

type Parsed<'a> = Result<Action<'a>, ActionFailure>;
type Options = Map<String, Value>;

/// Checks what holds for every action before its own parser runs: a selector only where the
/// action takes one.
pub(super) fn common(kind: ActionKind, selector: &str) -> Result<(), ActionFailure> {
    if kind.reference().selector == SelectorUse::None && !selector.is_empty() {
        return Err(ActionFailure::invalid(format!("selector: {} takes no selector", kind.name())));
    }
    Ok(())
}

/// `null`, `""` and `{}` all say "no payload".
fn absent(payload: &Value) -> bool {
    match payload {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// For actions that read no payload: refuses one.
pub(super) fn nothing(kind: ActionKind, payload: &Value) -> Result<(), ActionFailure> {
    if absent(payload) {
        return Ok(());
    }
    Err(ActionFailure::invalid(format!("payload: {} takes no payload, got {}", kind.name(), shown(payload))))
}

/// A short rendering of a client's value for a message.
fn shown(v: &Value) -> String {
    clipped(&v.to_string())
}

/// `text`, cut after 40 characters: what a client sent is named, never echoed whole.
fn clipped(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// `map` as the options object of `kind`: every key is one of its options.
fn options(kind: ActionKind, map: &Options) -> Result<&Options, ActionFailure> {
    let known: Vec<&str> = kind.reference().options.iter().map(|o| o.name).collect();
    check_keys("payload", &format!("{} has no option", kind.name()), map, &known)?;
    Ok(map)
}

/// Refuses the first key of `map` that is not in `known`, suggesting the near ones.
pub(super) fn check_keys(path: &str, what: &str, map: &Options, known: &[&str]) -> Result<(), ActionFailure> {
    let Some(key) = map.keys().find(|k| !known.contains(&k.as_str())) else {
        return Ok(());
    };
    let near = near_names(key, known);
    let key = clipped(key);
    let message = match near.first() {
        Some(best) => format!("{path}.{key}: {what} `{key}`; did you mean `{best}`?"),
        None => format!("{path}.{key}: {what} `{key}` (it has: {})", known.join(", ")),
    };
    Err(ActionFailure { did_you_mean: near, ..ActionFailure::invalid(message) })
}

/// Options `key` most likely meant: the same letters in another case or separator style
/// (`fullPage`, `full-page`), then anything within edit distance 2 (keys of 3+ characters).
pub(super) fn near_names(key: &str, known: &[&str]) -> Vec<String> {
    let squash =
        |s: &str| -> String { s.chars().filter(|c| !matches!(c, '_' | '-')).flat_map(char::to_lowercase).collect() };
    let squashed = squash(key);
    let long_enough = key.chars().nth(2).is_some();
    let mut scored: Vec<(usize, &str)> = known
        .iter()
        .filter_map(|k| {
            if squash(k) == squashed {
                Some((0, *k))
            } else if long_enough {
                within_two(key, k).map(|d| (d, *k))
            } else {
                None
            }
        })
        .collect();
    scored.sort();
    scored.into_iter().map(|(_, k)| k.to_string()).collect()
}

fn require_selector(kind: ActionKind, selector: &str) -> Result<&str, ActionFailure> {
    if selector.trim().is_empty() {
        return Err(ActionFailure::invalid(format!("selector: {} needs a selector", kind.name())));
    }
    Ok(selector)
}

fn require_text(payload: &Value) -> Result<&str, ActionFailure> {
    payload.as_str().ok_or_else(|| ActionFailure::invalid("payload: a string is required"))
}

fn optional(selector: &str) -> Option<&str> {
    (!selector.is_empty()).then_some(selector)
}

pub(super) fn navigate<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
    let (url, wait_until, fail_on_status) = match payload {
        Value::String(url) => (url.as_str(), "load", false),
        Value::Object(map) => {
            let map = options(ActionKind::Navigate, map)?;
            let url = map
                .get("url")
                .and_then(Value::as_str)
                .ok_or_else(|| ActionFailure::invalid("payload.url: a url string is required"))?;
            let wait = match map.get("wait_until") {
                None | Some(Value::Null) => "load",
                Some(Value::String(s)) => s.as_str(),
                Some(_) => return Err(ActionFailure::invalid("payload.wait_until: a string is required")),
            };
            let fail_on_status = match map.get("fail_on_status") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(ActionFailure::invalid("payload.fail_on_status: true or false is required")),
            };
            (url, wait, fail_on_status)
        }
        _ => {
            return Err(ActionFailure::invalid(
                "payload: a url string or {url, wait_until, fail_on_status} is required",
            ))
        }
    };
    if url::Url::parse(url).is_err() && url != "about:blank" {
        return Err(ActionFailure::invalid(format!("payload.url: {}", crate::policy::not_a_url(url))));
    }
    let wait_until = match wait_until {
        "load" => WaitUntil::Load,
        "domcontentloaded" => WaitUntil::DomContentLoaded,
        "networkidle" => WaitUntil::NetworkIdle,
        "none" => WaitUntil::NoWait,
        other => {
            return Err(ActionFailure::invalid(format!(
                "payload.wait_until: `{other}` is not one of load, domcontentloaded, networkidle, none"
            )))
        }
    };
    Ok(Action::Navigate { url, wait_until, fail_on_status })
}

pub(super) fn click<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    let selector = require_selector(ActionKind::Click, selector)?;
    let map = match payload {
        p if absent(p) => return Ok(Action::Click { selector, button: Button::Left, click_count: 1 }),
        Value::Object(map) => options(ActionKind::Click, map)?,
        _ => return Err(ActionFailure::invalid("payload: expected {button, click_count} or nothing")),
    };
    let button = match map.get("button").map(|b| b.as_str()) {
        None | Some(Some("left")) => Button::Left,
        Some(Some("right")) => Button::Right,
        Some(Some("middle")) => Button::Middle,
        Some(other) => {
            return Err(ActionFailure::invalid(format!("payload.button: {other:?} is not left, right or middle")))
        }
    };
    let click_count = match map.get("click_count") {
        None => 1,
        Some(v) => match v.as_i64() {
            Some(n @ 1..=3) => n,
            _ => return Err(ActionFailure::invalid("payload.click_count: must be 1, 2 or 3")),
        },
    };
    Ok(Action::Click { selector, button, click_count })
}

pub(super) fn type_text<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    let selector = require_selector(ActionKind::Type, selector)?;
    Ok(Action::Type { selector, text: require_text(payload)? })
}

pub(super) fn fill<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    let selector = require_selector(ActionKind::Fill, selector)?;
    Ok(Action::Fill { selector, text: require_text(payload)? })
}

pub(super) fn press<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    Ok(Action::Press { chord: require_text(payload)?, selector: optional(selector) })
}

pub(super) fn hover<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    nothing(ActionKind::Hover, payload)?;
    Ok(Action::Hover { selector: require_selector(ActionKind::Hover, selector)? })
}

pub(super) fn focus<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    nothing(ActionKind::Focus, payload)?;
    Ok(Action::Focus { selector: require_selector(ActionKind::Focus, selector)? })
}

pub(super) fn select<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    let selector = require_selector(ActionKind::Select, selector)?;
    let values = match payload {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a
            .iter()
            .map(Value::as_str)
            .collect::<Option<_>>()
            .ok_or_else(|| ActionFailure::invalid("payload: a value or a list of value strings"))?,
        _ => return Err(ActionFailure::invalid("payload: a value or a list of value strings")),
    };
    Ok(Action::Select { selector, values })
}

/// One name or a list of names of the session's files (an empty list clears the input).
pub(super) fn set_input_files<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    let selector = require_selector(ActionKind::SetInputFiles, selector)?;
    let bad = || ActionFailure::invalid("payload: a file name or a list of file names");
    let names: Vec<&str> = match payload {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().map(Value::as_str).collect::<Option<_>>().ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    for name in &names {
        if let Some(why) = crate::filenames::name_fault(name) {
            return Err(ActionFailure::invalid(format!(
                "payload: file name {:?} {why}",
                crate::filenames::shown(name)
            )));
        }
    }
    Ok(Action::SetInputFiles { selector, names })
}

/// A selector scrolls its element into view; a point then conflicts with it.
pub(super) fn scroll<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    if !selector.is_empty() {
        if !absent(payload) {
            return Err(ActionFailure::invalid(
                "payload: conflicts with the selector; scroll to an element or to {x, y}",
            ));
        }
        return Ok(Action::Scroll { to: ScrollTo::Element(selector) });
    }
    let (x, y) = match payload {
        Value::Null => (0.0, 0.0),
        Value::Object(m) => {
            let m = options(ActionKind::Scroll, m)?;
            let get = |k: &str| match m.get(k) {
                None | Some(Value::Null) => Ok(0.0),
                Some(v) => v
                    .as_f64()
                    .filter(|f| f.is_finite())
                    .ok_or_else(|| ActionFailure::invalid(format!("payload.{k}: a number"))),
            };
            (get("x")?, get("y")?)
        }
        _ => return Err(ActionFailure::invalid("payload: optional {x, y}")),
    };
    Ok(Action::Scroll { to: ScrollTo::Point { x, y } })
}

/// A selector waits for its element to be visible; a payload then conflicts with it.
pub(super) fn wait_for<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    if !selector.is_empty() {
        if !absent(payload) {
            return Err(ActionFailure::invalid(
                "payload: conflicts with the selector; wait for an element, or for {ms}, {text} or {url}",
            ));
        }
        return Ok(Action::WaitFor { until: Condition::Visible(selector) });
    }
    if let Value::Object(map) = payload {
        options(ActionKind::WaitFor, map)?;
        if map.len() > 1 {
            let keys: Vec<&str> = map.keys().map(String::as_str).collect();
            return Err(ActionFailure::invalid(format!(
                "payload: give one of ms, text, url, not {}",
                keys.join(" and ")
            )));
        }
    }
    let until = match payload {
        Value::Object(map) if map.contains_key("ms") => Condition::Ms(
            map["ms"]
                .as_u64()
                .ok_or_else(|| ActionFailure::invalid("payload.ms: a number of milliseconds is required"))?,
        ),
        Value::Object(map) if map.contains_key("text") => Condition::Text(
            map["text"].as_str().ok_or_else(|| ActionFailure::invalid("payload.text: a string is required"))?,
        ),
        Value::Object(map) if map.contains_key("url") => Condition::Url(
            map["url"].as_str().ok_or_else(|| ActionFailure::invalid("payload.url: a string is required"))?,
        ),
        _ => return Err(ActionFailure::invalid("wait_for needs a selector, or a payload {ms}, {text} or {url}")),
    };
    Ok(Action::WaitFor { until })
}

pub(super) fn extract<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    let format = match payload {
        Value::Null => "text",
        Value::String(s) if s.is_empty() => "text",
        Value::String(s) => s.as_str(),
        Value::Object(map) => match options(ActionKind::Extract, map)?.get("format") {
            None | Some(Value::Null) => "text",
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                return Err(ActionFailure::invalid(format!(
                    "payload.format: {} is not one of text, html, value, attr:<name>",
                    shown(other)
                )))
            }
        },
        _ => {
            return Err(ActionFailure::invalid("payload: a format string (text, html, value, attr:<name>) is expected"))
        }
    };
    let format = match format {
        "text" => ExtractFormat::Text,
        "html" => ExtractFormat::Html,
        "value" => ExtractFormat::Value,
        f if f.starts_with("attr:") && f.len() > 5 => ExtractFormat::Attr(&f[5..]),
        other => {
            return Err(ActionFailure::invalid(format!(
                "payload: format `{other}` is not one of text, html, value, attr:<name>"
            )))
        }
    };
    Ok(Action::Extract { selector: optional(selector), format })
}

pub(super) fn attr<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    let selector = require_selector(ActionKind::Attr, selector)?;
    let name = match payload {
        Value::String(s) if !s.is_empty() => s.as_str(),
        Value::Object(m) if options(ActionKind::Attr, m)?.get("name").is_some_and(Value::is_string) => {
            m["name"].as_str().unwrap_or_default()
        }
        _ => return Err(ActionFailure::invalid("payload: an attribute name string is required")),
    };
    Ok(Action::Attr { selector, name })
}

pub(super) fn evaluate<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
    match payload {
        Value::String(s) if !s.trim().is_empty() => Ok(Action::Evaluate { expression: s }),
        _ => Err(ActionFailure::invalid("payload: a JavaScript expression string is required")),
    }
}

/// Everything but the size in device pixels, which needs the current viewport's scale.
pub(super) fn screenshot<'a>(selector: &'a str, payload: &'a Value) -> Parsed<'a> {
    let format_only;
    let empty = Map::new();
    let opts = match payload {
        Value::Null => &empty,
        Value::Object(m) => m,
        Value::String(_) => {
            format_only = Map::from_iter([("format".to_string(), payload.clone())]);
            &format_only
        }
        _ => return Err(ActionFailure::invalid("payload: screenshot options {full_page, clip, format, quality}")),
    };
    let opts = options(ActionKind::Screenshot, opts)?;
    let format = match opts.get("format") {
        None | Some(Value::Null) => "png",
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(ActionFailure::invalid(format!("payload.format: {} is not png or jpeg", shown(other))))
        }
    };
    let format = match format {
        "png" => ImageFormat::Png,
        "jpeg" | "jpg" => ImageFormat::Jpeg,
        other => return Err(ActionFailure::invalid(format!("payload.format: `{other}` is not png or jpeg"))),
    };
    let quality = match opts.get("quality") {
        None | Some(Value::Null) => None,
        Some(q) => match q.as_i64() {
            Some(q @ 0..=100) if format == ImageFormat::Jpeg => Some(q),
            Some(0..=100) => return Err(ActionFailure::invalid("payload.quality: only applies to jpeg")),
            _ => return Err(ActionFailure::invalid(format!("payload.quality: {q} is not 0..100"))),
        },
    };
    let full_page = match opts.get("full_page") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ActionFailure::invalid("payload.full_page: true or false is required")),
    };
    let clip = opts.get("clip").filter(|c| !c.is_null());
    if let Some(c) = clip {
        let c = c
            .as_object()
            .ok_or_else(|| ActionFailure::invalid("payload.clip: an object {x, y, width, height} is required"))?;
        check_keys("payload.clip", "a clip has no field", c, CLIP_KEYS)?;
    }
    if clip.is_some() && !selector.is_empty() {
        return Err(ActionFailure::invalid(
            "payload.clip: conflicts with a selector (element crop); give one or the other",
        ));
    }
    if full_page && !selector.is_empty() {
        return Err(ActionFailure::invalid(
            "payload.full_page: conflicts with a selector (element crop); give one or the other",
        ));
    }
    if clip.is_some() && full_page {
        return Err(ActionFailure::invalid("payload.clip: conflicts with full_page"));
    }
    let region = if let Some(c) = clip {
        let num = |k: &str| {
            c.get(k)
                .and_then(Value::as_f64)
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| ActionFailure::invalid(format!("payload.clip.{k}: a non-negative number is required")))
        };
        let (x, y, width, height) = (num("x")?, num("y")?, num("width")?, num("height")?);
        if width < 1.0 || height < 1.0 {
            return Err(ActionFailure::invalid("payload.clip: width and height must be at least 1"));
        }
        Region::Clip(Rect { x, y, width, height })
    } else if !selector.is_empty() {
        Region::Element(selector)
    } else if full_page {
        Region::FullPage
    } else {
        Region::Viewport
    };
    Ok(Action::Screenshot { format, quality, region })
}

pub(super) fn pdf<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
    let opts = match payload {
        Value::Null => None,
        Value::Object(m) => Some(m),
        _ => return Err(ActionFailure::invalid("payload: optional print options object")),
    };
    let mut pdf = PdfOptions::default();
    if let Some(opts) = opts {
        options(ActionKind::Pdf, opts)?;
    }
    for (k, v) in opts.into_iter().flatten() {
        let bad = || ActionFailure::invalid(format!("payload.{k}: {v} is not valid"));
        match k.as_str() {
            "landscape" => pdf.landscape = Some(v.as_bool().ok_or_else(bad)?),
            "print_background" => pdf.print_background = Some(v.as_bool().ok_or_else(bad)?),
            "scale" => pdf.scale = Some(v.as_f64().filter(|s| (0.1..=2.0).contains(s)).ok_or_else(bad)?),
            "paper_width" => pdf.paper_width = Some(v.as_f64().filter(|s| *s > 0.0 && *s < 200.0).ok_or_else(bad)?),
            "paper_height" => pdf.paper_height = Some(v.as_f64().filter(|s| *s > 0.0 && *s < 200.0).ok_or_else(bad)?),
            "page_ranges" => pdf.page_ranges = Some(v.as_str().ok_or_else(bad)?),
            "margin" => pdf.margin = Some(v.as_f64().filter(|s| *s >= 0.0 && *s < 20.0).ok_or_else(bad)?),
            _ => unreachable!("options() admits only the listed keys"),
        }
    }
    Ok(Action::Pdf { options: pdf })
}

pub(super) fn set_viewport<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
    Ok(Action::SetViewport { viewport: parse_viewport(payload)? })
}

pub(super) fn load_html<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
    let html = payload.as_str().ok_or_else(|| ActionFailure::invalid("payload: an html string is required"))?;
    Ok(Action::LoadHtml { html })
}

pub(super) fn new_tab<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
    let url = match payload {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.as_str()),
        Value::Object(m) if options(ActionKind::NewTab, m)?.get("url").is_some_and(Value::is_string) => {
            m["url"].as_str()
        }
        _ => return Err(ActionFailure::invalid("payload: an optional url string")),
    };
    Ok(Action::NewTab { url })
}

pub(super) fn switch_tab<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
    let tab =
        match payload {
            Value::Number(n) => TabRef::Index(n.as_u64().ok_or_else(|| {
                ActionFailure::invalid(format!("payload: tab index {n} is not a non-negative integer"))
            })?),
            Value::String(needle) if !needle.is_empty() => TabRef::Matching(needle),
            _ => return Err(ActionFailure::invalid("payload: a tab index (number) or a title/url substring (string)")),
        };
    Ok(Action::SwitchTab { tab })
}

pub(super) fn close_tab<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
    let index = match payload {
        Value::Null => None,
        Value::Number(n) => {
            Some(n.as_u64().map(|i| i as usize).ok_or_else(|| ActionFailure::invalid("payload: a tab index"))?)
        }
        _ => return Err(ActionFailure::invalid("payload: an optional tab index (number)")),
    };
    Ok(Action::CloseTab { index })
}

pub(super) fn cookies<'a>(_: &'a str, payload: &'a Value) -> Parsed<'a> {
    let op = match payload {
        Value::Null => "get",
        Value::String(op) => op.as_str(),
        Value::Object(m) => match options(ActionKind::Cookies, m)?.get("op") {
            None | Some(Value::Null) => "get",
            Some(Value::String(op)) => op.as_str(),
            Some(other) => {
                return Err(ActionFailure::invalid(format!("payload.op: {} is not get, set or clear", shown(other))))
            }
        },
        _ => return Err(ActionFailure::invalid("payload: {op: get|set|clear, cookies: [...]}")),
    };
    let op = match op {
        "get" => CookieOp::Get,
        "clear" => CookieOp::Clear,
        "set" => {
            let list = payload
                .get("cookies")
                .and_then(Value::as_array)
                .ok_or_else(|| ActionFailure::invalid("payload.cookies: a list is required"))?;
            if list.len() > crate::context::MAX_COOKIES {
                return Err(ActionFailure::new(
                    FailureCode::PayloadTooLarge,
                    format!(
                        "payload.cookies: {} cookies exceed the limit of {}",
                        list.len(),
                        crate::context::MAX_COOKIES
                    ),
                ));
            }
            CookieOp::Set(list)
        }
        other => return Err(ActionFailure::invalid(format!("payload.op: `{other}` is not get, set or clear"))),
    };
    Ok(Action::Cookies { op })
}
