//! The one rule for the name of a file in a session's files directory, shared by the server's
//! file rpcs and the `set_input_files` action: one plain name in the directory, nothing a
//! shell, a zip reader or a terminal would read as more than that.

/// The longest name a file may have, in bytes (the file system's own limit).
pub const MAX_NAME_BYTES: usize = 255;

/// What is wrong with `name` as a session file's name, if anything.
pub fn name_fault(name: &str) -> Option<&'static str> {
    Some(if name.is_empty() {
        "is empty"
    } else if name.len() > MAX_NAME_BYTES {
        "is longer than 255 bytes"
    } else if name.contains('/') || name.contains('\\') {
        "has a path separator: give the name alone"
    } else if name.starts_with('.') {
        "starts with a dot (the browser's partial and hidden files do)"
    } else if name.chars().any(char::is_control) {
        "has a control character"
    } else if name.ends_with(".crdownload") {
        "is a download still in progress"
    } else {
        return None;
    })
}

/// `name` as an error message shows it: at most 80 characters.
pub fn shown(name: &str) -> String {
    let mut shown: String = name.chars().take(80).collect();
    if shown.len() < name.len() {
        shown.push('…');
    }
    shown
}
