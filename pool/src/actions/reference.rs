//! The action reference: for every action, what its selector and payload mean, each option
//! with its type, default and bounds, what it returns and the errors it can give. The option
//! names here are the only keys the parsers accept (an unknown key is refused, with a
//! suggestion), so the reference cannot list an option the server ignores or miss one it
//! reads. `docs/actions.md` is [`markdown`]'s output; a test fails when the two differ.

use super::{Access, ActionKind};

/// What an action does with the selector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorUse {
    /// The action takes none; a selector is refused.
    None,
    /// Required; the text says what it selects.
    Required(&'static str),
    /// May be empty; the text says what it changes.
    Optional(&'static str),
}

/// One key of an options object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionDoc {
    pub name: &'static str,
    pub ty: &'static str,
    /// The default, or `required`.
    pub default: &'static str,
    /// Meaning and bounds.
    pub meaning: &'static str,
}

/// The reference entry of one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reference {
    pub summary: &'static str,
    pub selector: SelectorUse,
    /// The payload's accepted forms.
    pub payload: &'static str,
    /// The keys of the options object; empty when the payload is never an object of options.
    pub options: &'static [OptionDoc],
    /// The result: `value` (JSON) or `data` (bytes).
    pub result: &'static str,
    /// Error codes particular to this action, with when they happen (the ones every action can
    /// give are listed once, in [`COMMON_ERRORS`]).
    pub errors: &'static [(&'static str, &'static str)],
}

/// An [`OptionDoc`] literal (a macro, not a `const fn`, so the tables below stay `'static`).
macro_rules! opt {
    ($name:expr, $ty:expr, $default:expr, $meaning:expr $(,)?) => {
        OptionDoc { name: $name, ty: $ty, default: $default, meaning: $meaning }
    };
}

/// Errors any action can return.
pub const COMMON_ERRORS: &[(&str, &str)] = &[
    ("INVALID_ARGUMENT", "the selector or payload does not fit the action: the message names the field (`selector`, `payload.<key>`), an unknown option gets `did_you_mean`"),
    ("UNKNOWN_ACTION", "no action or alias has this name; `did_you_mean` lists the near ones"),
    ("PERMISSION_DENIED", "the token lacks the scope the (canonical) action needs"),
    ("TIMEOUT", "the action did not finish within its `timeout_ms` (or the default of 30000 ms); the message says which"),
    ("DIALOG_OPEN", "a dialog opened, or is open, and blocks the page; `error.dialog` describes it"),
    ("SESSION_CLOSED", "the session was released, expired or killed"),
    ("SESSION_CRASHED", "the session's browser died"),
    ("TAB_CRASHED", "the active tab's page crashed; navigate, reload or close it"),
    ("INTERNAL", "an unexpected browser failure; the server log has the details"),
];

const ELEMENT: (&str, &str) = (
    "ELEMENT_NOT_FOUND",
    "nothing matched the selector within the action's timeout; the message says how long it waited",
);
const NAVIGATION: (&str, &str) = ("NAVIGATION_FAILED", "the page could not be loaded (DNS, TLS, connection refused)");
const POLICY: (&str, &str) =
    ("BLOCKED_BY_POLICY", "the tenant's navigation policy refuses the URL, a redirect hop or its address");

const NO_PAYLOAD: &str = "none";
const CSS: &str = "a selector (CSS, text=, role=, xpath=; see above)";

const NAVIGATE_OPTIONS: &[OptionDoc] = &[
    opt!("url", "string", "required", "an absolute URL, or `about:blank`"),
    opt!(
        "wait_until",
        "string",
        "`load`",
        "`load`, `domcontentloaded`, `networkidle`, or `none` (answer once the navigation commits)"
    ),
    opt!(
        "fail_on_status",
        "bool",
        "false",
        "when true, a main document answered with HTTP 400..599 fails with `NAVIGATION_FAILED` (the page stays loaded)"
    ),
];

const SCREENSHOT_OPTIONS: &[OptionDoc] = &[
    opt!("full_page", "bool", "false", "the whole scrollable page instead of the viewport"),
    opt!("clip", "object", "none", "`{x, y, width, height}` in CSS pixels of the document; x, y >= 0, width, height >= 1; not with a selector or `full_page`"),
    opt!("format", "string", "`png`", "`png` or `jpeg` (`jpg`)"),
    opt!("quality", "integer", "none", "0..100, jpeg only"),
];

/// The keys of a screenshot's `clip`.
pub const CLIP_KEYS: &[&str] = &["x", "y", "width", "height"];

const PDF_OPTIONS: &[OptionDoc] = &[
    opt!("landscape", "bool", "false", "landscape orientation"),
    opt!("print_background", "bool", "false", "print background graphics"),
    opt!("scale", "number", "1", "0.1..2"),
    opt!("paper_width", "number", "8.5", "inches, above 0 and below 200"),
    opt!("paper_height", "number", "11", "inches, above 0 and below 200"),
    opt!("page_ranges", "string", "all pages", "e.g. `1-3, 5`"),
    opt!("margin", "number", "Chromium's (0.4)", "all four margins, inches, 0 to below 20"),
];

const VIEWPORT_OPTIONS: &[OptionDoc] = &[
    opt!("width", "integer", "required", "CSS pixels, 1..=16384"),
    opt!("height", "integer", "required", "CSS pixels, 1..=16384"),
    opt!("scale", "number", "1", "device scale factor, 1..3"),
    opt!("mobile", "bool", "false", "emulate a mobile device (meta viewport, touch)"),
];

impl ActionKind {
    /// This action's reference entry.
    pub fn reference(self) -> &'static Reference {
        use ActionKind as K;
        match self {
            K::Navigate | K::Back | K::Forward | K::Reload | K::LoadHtml | K::Url | K::Title => navigation(self),
            K::Click | K::Type | K::Fill | K::Press | K::Hover | K::Focus | K::Select | K::SetInputFiles | K::Scroll => {
                input(self)
            }
            K::WaitFor | K::Extract | K::Attr | K::Evaluate => dom(self),
            K::Screenshot | K::Pdf | K::SetViewport => capture(self),
            K::NewTab | K::SwitchTab | K::CloseTab | K::ListTabs => tabs(self),
            K::Cookies => &Reference {
                summary: "Reads, sets or clears the session's cookies.",
                selector: SelectorUse::None,
                payload: "none (`get`), an op string (`get`, `clear`), or an options object",
                options: &[
                    opt!("op", "string", "`get`", "`get`, `set` or `clear`"),
                    opt!("cookies", "list", "required for `set`", "`[{name, value, domain, path, expires, http_only, secure, same_site}]`, at most 3000; each must belong to the active tab's site and pass the policy"),
                ],
                result: "`get`: the cookies; `set`: `{set}`; `clear`: `{cleared}` (counts)",
                errors: &[POLICY, ("PAYLOAD_TOO_LARGE", "more than 3000 cookies")],
            },
        }
    }
}

/// [`ActionKind::reference`] of the actions of `driver/ops/navigation.rs`.
fn navigation(kind: ActionKind) -> &'static Reference {
    use ActionKind as K;
    match kind {
        K::Navigate => &Reference {
            summary: "Loads a URL in the active tab and waits for it.",
            selector: SelectorUse::None,
            payload: "the URL as a string, or an options object",
            options: NAVIGATE_OPTIONS,
            result: "`{url, status}`: the URL the tab is on, and the main document's HTTP status (`null` when there was no HTTP response: `about:blank`, a same-document navigation)",
            errors: &[NAVIGATION, POLICY, ("NAVIGATION_FAILED", "with `fail_on_status`, also an HTTP status of 400..599")],
        },
        K::Back => &Reference {
            summary: "Goes one page back in the active tab's history and waits for it to load.",
            selector: SelectorUse::None,
            payload: NO_PAYLOAD,
            options: &[],
            result: "`{url}`",
            errors: &[("INVALID_ARGUMENT", "there is no previous page")],
        },
        K::Forward => &Reference {
            summary: "Goes one page forward in the active tab's history and waits for it to load.",
            selector: SelectorUse::None,
            payload: NO_PAYLOAD,
            options: &[],
            result: "`{url}`",
            errors: &[("INVALID_ARGUMENT", "there is no next page")],
        },
        K::Reload => &Reference {
            summary: "Reloads the active tab and waits for `load`.",
            selector: SelectorUse::None,
            payload: NO_PAYLOAD,
            options: &[],
            result: "`{url}`",
            errors: &[],
        },
        K::LoadHtml => &Reference {
            summary: "Replaces the active tab's document with the given HTML (the URL stays).",
            selector: SelectorUse::None,
            payload: "the HTML, a string starting with `<`",
            options: &[],
            result: "`{bytes}`",
            errors: &[("PAYLOAD_TOO_LARGE", "the HTML is larger than the server's `--max-html-bytes`")],
        },
        K::Url => &Reference {
            summary: "The active tab's URL.",
            selector: SelectorUse::None,
            payload: NO_PAYLOAD,
            options: &[],
            result: "the URL, a string",
            errors: &[],
        },
        K::Title => &Reference {
            summary: "The active tab's title.",
            selector: SelectorUse::None,
            payload: NO_PAYLOAD,
            options: &[],
            result: "the title, a string",
            errors: &[],
        },
        _ => unreachable!("{kind:?} is not a navigation action"),
    }
}

/// [`ActionKind::reference`] of the actions of `driver/ops/input.rs`.
fn input(kind: ActionKind) -> &'static Reference {
    use ActionKind as K;
    match kind {
        K::Click => &Reference {
            summary: "Clicks the element's centre (waiting for it to exist), or answers the open dialog with `dialog::accept` / `dialog::dismiss`.",
            selector: SelectorUse::Required("a selector, or `dialog::accept` / `dialog::dismiss`"),
            payload: "none, or an options object",
            options: &[
                opt!("button", "string", "`left`", "`left`, `right` or `middle`"),
                opt!("click_count", "integer", "1", "1, 2 (double click) or 3"),
            ],
            result: "nothing",
            errors: &[ELEMENT, ("INVALID_ARGUMENT", "a `dialog::` selector while no dialog is open")],
        },
        K::Type => &Reference {
            summary: "Focuses the element and types the text key by key; `dialog::username`, `dialog::password` and `dialog::prompt` fill the open dialog instead.",
            selector: SelectorUse::Required("a selector, or `dialog::username` / `dialog::password` / `dialog::prompt`"),
            payload: "the text, a string",
            options: &[],
            result: "nothing",
            errors: &[ELEMENT],
        },
        K::Fill => &Reference {
            summary: "Replaces the value of an input or textarea with the text (clearing it first).",
            selector: SelectorUse::Required(CSS),
            payload: "the text, a string (may be empty)",
            options: &[],
            result: "nothing",
            errors: &[ELEMENT],
        },
        K::Press => &Reference {
            summary: "Presses a key or chord, on the element when a selector is given, else on whatever has focus.",
            selector: SelectorUse::Optional("the element to focus first"),
            payload: "the key or chord, a string: `Enter`, `Tab`, `Control+A`, `Shift+ArrowLeft`",
            options: &[],
            result: "nothing",
            errors: &[ELEMENT, ("INVALID_ARGUMENT", "an unknown key name")],
        },
        K::Hover => &Reference {
            summary: "Moves the mouse over the element's centre.",
            selector: SelectorUse::Required(CSS),
            payload: NO_PAYLOAD,
            options: &[],
            result: "nothing",
            errors: &[ELEMENT],
        },
        K::Focus => &Reference {
            summary: "Focuses the element.",
            selector: SelectorUse::Required(CSS),
            payload: NO_PAYLOAD,
            options: &[],
            result: "nothing",
            errors: &[ELEMENT],
        },
        K::Select => &Reference {
            summary: "Selects options of a `<select>` by value (and fires `input` and `change`).",
            selector: SelectorUse::Required("a selector of a `<select>`"),
            payload: "a value string, or a list of value strings (several only for a `multiple` select)",
            options: &[],
            result: "the values now selected, a list",
            errors: &[ELEMENT, ("INVALID_ARGUMENT", "not a `<select>`, or no option has one of the values")],
        },
        K::SetInputFiles => &Reference {
            summary: "Sets files of the session (uploaded with `PutFile`, or downloaded by its pages) on a file input, as a user choosing them would (the page sees `input` and `change`).",
            selector: SelectorUse::Required("a selector of an `<input type=file>`"),
            payload: "a file name, or a list of file names (several only for a `multiple` input; an empty list clears it)",
            options: &[],
            result: "the names set, a list",
            errors: &[
                ELEMENT,
                ("INVALID_ARGUMENT", "not a file input, a name with a path or a leading dot, or no such file among the session's files"),
            ],
        },
        K::Scroll => &Reference {
            summary: "Scrolls the element into view, or the window to a point.",
            selector: SelectorUse::Optional("the element to scroll into view (then no payload)"),
            payload: "none (the top), or an options object",
            options: &[
                opt!("x", "number", "0", "CSS pixels from the left"),
                opt!("y", "number", "0", "CSS pixels from the top"),
            ],
            result: "`{x, y}`: where the window is scrolled to",
            errors: &[ELEMENT],
        },
        _ => unreachable!("{kind:?} is not an input action"),
    }
}

/// [`ActionKind::reference`] of the actions of `driver/ops/dom.rs`.
fn dom(kind: ActionKind) -> &'static Reference {
    use ActionKind as K;
    match kind {
        K::WaitFor => &Reference {
            summary:
                "Waits until the element is visible, a time has passed, or the page's text or URL contains a string.",
            selector: SelectorUse::Optional("wait until this element has a visible box (then no payload)"),
            payload: "without a selector, an object with exactly one of its options",
            options: &[
                opt!("ms", "integer", "none", "milliseconds to wait, within the action's timeout"),
                opt!("text", "string", "none", "wait until the page's visible text contains it"),
                opt!("url", "string", "none", "wait until the page's URL contains it"),
            ],
            result: "nothing",
            errors: &[("TIMEOUT", "the condition did not come true in time; the message says how long it waited")],
        },
        K::Extract => &Reference {
            summary: "Reads the element (`body` by default): its text, HTML, form value or an attribute.",
            selector: SelectorUse::Optional("the element to read; `body` when empty"),
            payload: "none (`text`), a format string, or an options object",
            options: &[opt!(
                "format",
                "string",
                "`text`",
                "`text` (innerText), `html` (outerHTML), `value` (form value) or `attr:<name>`",
            )],
            result: "the string read, or `null` (no value, no such attribute)",
            errors: &[ELEMENT],
        },
        K::Attr => &Reference {
            summary: "Reads one attribute of the element.",
            selector: SelectorUse::Required(CSS),
            payload: "the attribute name as a string, or an options object",
            options: &[opt!("name", "string", "required", "the attribute's name")],
            result: "the attribute's value, or `null` when it is absent",
            errors: &[ELEMENT],
        },
        K::Evaluate => &Reference {
            summary: "Runs a JavaScript expression in the page; a promise is awaited.",
            selector: SelectorUse::None,
            payload: "the expression, a non-empty string",
            options: &[],
            result: "the expression's value as JSON (`null` for undefined or what JSON cannot hold)",
            errors: &[("JS_EXCEPTION", "the script threw; the message holds the exception's text")],
        },
        _ => unreachable!("{kind:?} is not a DOM action"),
    }
}

/// [`ActionKind::reference`] of the actions of `driver/ops/capture.rs`.
fn capture(kind: ActionKind) -> &'static Reference {
    use ActionKind as K;
    match kind {
        K::Screenshot => &Reference {
            summary: "Captures the viewport, the whole page, a rectangle or one element as PNG or JPEG.",
            selector: SelectorUse::Optional("crop to this element's box (not with `clip`)"),
            payload: "none, a format string (`png`, `jpeg`), or an options object",
            options: SCREENSHOT_OPTIONS,
            result: "`data`: the image bytes; `mime_type`: `image/png` or `image/jpeg`",
            errors: &[ELEMENT, ("PAYLOAD_TOO_LARGE", "the image would be more than 16384 device pixels on a side")],
        },
        K::Pdf => &Reference {
            summary: "Prints the page to PDF.",
            selector: SelectorUse::None,
            payload: "none, or an options object",
            options: PDF_OPTIONS,
            result: "`data`: the PDF bytes; `mime_type`: `application/pdf`",
            errors: &[],
        },
        K::SetViewport => &Reference {
            summary: "Sets the viewport of every tab of the session (and of tabs opened later); `load_html` content survives it.",
            selector: SelectorUse::None,
            payload: "an options object",
            options: VIEWPORT_OPTIONS,
            result: "`{width, height, scale, mobile}`",
            errors: &[],
        },
        _ => unreachable!("{kind:?} is not a capture action"),
    }
}

/// [`ActionKind::reference`] of the actions of `driver/ops/tabs.rs`.
fn tabs(kind: ActionKind) -> &'static Reference {
    use ActionKind as K;
    match kind {
        K::NewTab => &Reference {
            summary: "Opens a tab, makes it the active one and loads the URL in it (`about:blank` by default).",
            selector: SelectorUse::None,
            payload: "none, the URL as a string, or an options object",
            options: &[opt!("url", "string", "`about:blank`", "the page to load")],
            result: "`{tab_index, url}`",
            errors: &[
                NAVIGATION,
                POLICY,
                (
                    "BLOCKED_BY_POLICY",
                    "the session has as many tabs as the server allows (`--max-tabs`, 20 by default)",
                ),
            ],
        },
        K::SwitchTab => &Reference {
            summary: "Makes another tab the active one; later actions run there until the next switch (sticky).",
            selector: SelectorUse::None,
            payload: "a tab index (number), or a string the tab's title or URL contains",
            options: &[],
            result: "`{tab_index, url, title}`",
            errors: &[("INVALID_ARGUMENT", "no such tab")],
        },
        K::CloseTab => &Reference {
            summary: "Closes a tab (the active one by default); the last tab cannot be closed.",
            selector: SelectorUse::None,
            payload: "none, or a tab index (number)",
            options: &[],
            result: "`{closed, tabs, active}`: the index closed, how many are left, the active index",
            errors: &[("INVALID_ARGUMENT", "no such tab, or it is the last one")],
        },
        K::ListTabs => &Reference {
            summary: "Lists the session's tabs.",
            selector: SelectorUse::None,
            payload: NO_PAYLOAD,
            options: &[],
            result: "`[{index, url, title, active}]`",
            errors: &[],
        },
        _ => unreachable!("{kind:?} is not a tab action"),
    }
}

fn scope(kind: ActionKind) -> &'static str {
    match kind {
        ActionKind::Cookies => "`get`: `context:export`; `set`, `clear`: `context:import`",
        _ => match kind.access(&serde_json::Value::Null) {
            Access::Read => "`sessions:read`",
            Access::Write => "`sessions:write`",
            Access::ContextExport => "`context:export`",
            Access::ContextImport => "`context:import`",
        },
    }
}

/// `docs/actions.md`, written from the table above and the catalog.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Action reference\n\n\
         <!-- Generated from pool/src/actions/reference.rs; do not edit. After changing the table, run\n     \
         BROWSERPOOL_BLESS=1 cargo test -p browserpool-pool --lib reference -->\n\n\
         Every action is sent the same way, as an `Action` message (in `Act`, `Batch` or `Drive`):\n\n\
         - `action`: the canonical name or an alias;\n\
         - `selector`: for the actions that take one, the dialog grammar or a selector: CSS \
         (`#go`, `form button.primary`), or as Playwright writes them: `text=Sign in` (the \
         innermost element whose text contains it, case-insensitively, whitespace collapsed), \
         `text=\"Sign in\"` (text exactly that), `role=button[name=\"Sign in\"]` (ARIA role, explicit \
         or the tag's own, visible elements only; the accessible name from aria-label, \
         aria-labelledby, a label, alt or the text contains the name case-insensitively; \
         `[name=\"Sign in\" s]`: exactly), `xpath=//form//button` (or a bare `//...`), `css=...`, and \
         `#login >> text=Sign in` (each part looked for inside the first match of the one before). \
         The first match is taken. A selector that cannot be read is `INVALID_ARGUMENT` naming it;\n\
         - `payload`: any JSON value, described per action below;\n\
         - `timeout_ms`: how long the action may take, 0 for the default of 30000 ms, at most 300000;\n\
         - `tab_index` (optional): switch to this tab first, as `switch_tab` does;\n\
         - `id`: copied into the result.\n\n\
         The result (`ActionResult`) has `ok`, the JSON `value` or the bytes `data` with their\n\
         `mime_type`, and when `ok` is false an `error` with its `code` and `message`.\n\n\
         ## How options are read\n\n\
         - An options object accepts only the keys listed for its action, spelled in `snake_case`.\n  \
         Any other key is refused with `INVALID_ARGUMENT`, naming the key; when it is close to an\n  \
         option (`fullPage`, `clickCount`, `wait_untill`) the error's `did_you_mean` names it.\n  \
         Nothing is ever silently ignored.\n\
         - A selector given to an action that takes none, or a payload given to an action that takes\n  \
         none, is refused the same way. An absent payload may be sent as `null`, `\"\"` or `{}`.\n\
         - A bare string means the natural thing: the URL of `navigate`, the format of `extract`,\n  \
         the name of `attr`, the op of `cookies`.\n\n\
         ## Errors every action can return\n\n\
         | code | when |\n|---|---|\n",
    );
    for (code, when) in COMMON_ERRORS {
        out.push_str(&format!("| `{code}` | {when} |\n"));
    }
    out.push_str("\n## Actions\n\n| action | aliases | scope |\n|---|---|---|\n");
    for kind in ActionKind::ALL {
        let aliases: Vec<String> = kind.aliases().iter().map(|a| format!("`{a}`")).collect();
        out.push_str(&format!(
            "| [`{}`](#{}) | {} | {} |\n",
            kind.name(),
            kind.name(),
            if aliases.is_empty() { "-".to_string() } else { aliases.join(", ") },
            scope(*kind)
        ));
    }
    for kind in ActionKind::ALL {
        let r = kind.reference();
        out.push_str(&format!("\n### {}\n\n{}\n\n", kind.name(), r.summary));
        if !kind.aliases().is_empty() {
            let aliases: Vec<String> = kind.aliases().iter().map(|a| format!("`{a}`")).collect();
            out.push_str(&format!("- aliases: {}\n", aliases.join(", ")));
        }
        out.push_str(&format!("- scope: {}\n", scope(*kind)));
        let selector = match r.selector {
            SelectorUse::None => "none".to_string(),
            SelectorUse::Required(what) => format!("required: {what}"),
            SelectorUse::Optional(what) => format!("optional: {what}"),
        };
        out.push_str(&format!("- selector: {selector}\n- payload: {}\n- result: {}\n", r.payload, r.result));
        if !r.options.is_empty() {
            out.push_str("\n| option | type | default | meaning |\n|---|---|---|---|\n");
            for o in r.options {
                out.push_str(&format!("| `{}` | {} | {} | {} |\n", o.name, o.ty, o.default, o.meaning));
            }
        }
        if !r.errors.is_empty() {
            out.push_str("\nErrors besides the common ones:\n\n");
            for (code, when) in r.errors {
                out.push_str(&format!("- `{code}`: {when}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn doc_path() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/actions.md")
    }

    /// `docs/actions.md` is what the table renders; `BROWSERPOOL_BLESS=1` rewrites it.
    #[test]
    fn reference_doc_matches_the_catalog() {
        let want = markdown();
        if std::env::var_os("BROWSERPOOL_BLESS").is_some() {
            std::fs::write(doc_path(), &want).unwrap();
        }
        let have = std::fs::read_to_string(doc_path()).unwrap_or_default();
        assert!(
            have == want,
            "docs/actions.md is stale: run `BROWSERPOOL_BLESS=1 cargo test -p browserpool-pool --lib reference` and commit it"
        );
    }

    #[test]
    fn reference_entries_are_whole() {
        for kind in ActionKind::ALL {
            let r = kind.reference();
            assert!(!r.summary.is_empty() && !r.payload.is_empty() && !r.result.is_empty(), "{kind:?}");
            let mut names: Vec<_> = r.options.iter().map(|o| o.name).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), r.options.len(), "{kind:?} lists an option twice");
            for o in r.options {
                assert!(o.name.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{} is not snake_case", o.name);
            }
        }
    }
}
