//! `cookies {op: get|set|clear, cookies}` on this session's browser.

use serde_json::{json, Value};

use super::value;
use crate::actions::CookieOp;
use crate::context::CookieRecord;
use crate::driver::state::Tab;
use crate::driver::Driver;
use crate::outcome::{ActResult, ActionOutput};

impl Driver {
    pub(super) async fn cookies(&self, tab: &Tab, op: CookieOp<'_>) -> ActResult<ActionOutput> {
        match op {
            CookieOp::Get => {
                let list: Vec<Value> = self
                    .all_cookies()
                    .await?
                    .into_iter()
                    .map(|c| {
                        json!({ "name": c.name, "value": c.value, "domain": c.domain, "path": c.path,
                        "expires": c.expires, "http_only": c.http_only, "secure": c.secure, "same_site": c.same_site })
                    })
                    .collect();
                Ok(value(Value::Array(list)))
            }
            CookieOp::Clear => {
                let n = self.all_cookies().await?.len();
                self.replace_cookies(&[]).await?;
                Ok(value(json!({ "cleared": n })))
            }
            CookieOp::Set(list) => {
                // Cookies without a domain or url take the page's origin.
                let page_url = tab.page.url().await.ok().flatten().unwrap_or_default();
                let page_origin = crate::context::normalize_origin(&page_url).ok();
                let mut set = Vec::with_capacity(list.len());
                for (i, c) in list.iter().enumerate() {
                    let (cookie, origin) = crate::context::cookie_from_payload(c, i, page_origin.as_deref())?;
                    crate::context::validate_cookie(&cookie, i)?;
                    // A tenant must not plant cookies where its pages may not go.
                    self.check_field(&format!("cookies[{i}]"), &origin)?;
                    self.check_cookie_domain(&cookie, i)?;
                    set.push((cookie, origin));
                }
                let mut jar: Vec<(CookieRecord, String)> = self
                    .all_cookies()
                    .await?
                    .into_iter()
                    .filter(|old| {
                        !set.iter()
                            .any(|(new, _)| (&new.name, &new.domain, &new.path) == (&old.name, &old.domain, &old.path))
                    })
                    .map(crate::context::anchored_at_domain)
                    .collect();
                let n = set.len();
                jar.extend(set);
                self.replace_cookies(&jar).await?;
                Ok(value(json!({ "set": n })))
            }
        }
    }
}
