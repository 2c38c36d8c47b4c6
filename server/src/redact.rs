//! What a record or a log line may keep of a URL or an origin, a leaf: never userinfo, query
//! or fragment (each may carry secrets).

/// Removes the userinfo, query and fragment of a URL (each may carry secrets).
pub fn url_target(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            // Fails only for URLs without a host, which have no userinfo either.
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => origin_target(url),
    }
}

/// An origin as a client wrote it (it may not be canonical), without userinfo, query or
/// fragment; unlike [`url_target`] it adds no trailing `/`.
pub fn origin_target(origin: &str) -> String {
    without_userinfo(origin.split(['?', '#']).next().unwrap_or_default())
}

/// Drops everything up to the last `@` of the authority, for text no URL parser accepts: the
/// authority is what follows `scheme:` and any slashes, up to the next `/`, `\`, `?` or `#`.
fn without_userinfo(text: &str) -> String {
    let Some(colon) = text.find(':') else { return text.to_string() };
    let rest = &text[colon + 1..];
    let slashes = rest.len() - rest.trim_start_matches(['/', '\\']).len();
    let authority = &rest[slashes..];
    let end = authority.find(['/', '\\', '?', '#']).unwrap_or(authority.len());
    match authority[..end].rfind('@') {
        Some(at) => format!("{}{}", &text[..colon + 1 + slashes], &authority[at + 1..]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_query_and_fragment() {
        assert_eq!(url_target("https://a.test/p?token=secret#x"), "https://a.test/p");
        assert_eq!(url_target("not a url?x=1"), "not a url");
    }

    #[test]
    fn urls_and_origins_lose_userinfo() {
        assert_eq!(url_target("http://user:secret@127.0.0.1:8080/p?q=1"), "http://127.0.0.1:8080/p");
        assert_eq!(url_target("https://user@a.test/"), "https://a.test/");
        // Unparseable (a bad port), yet the credentials still go.
        assert_eq!(url_target("http://user:secret@a.test:99999/x"), "http://a.test:99999/x");
        assert_eq!(origin_target("http://user:secret@127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(origin_target("http:user:secret@a.test?x"), "http:a.test");
        assert_eq!(origin_target("https://a.test"), "https://a.test");
    }
}
