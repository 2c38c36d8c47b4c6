//! What the page looks like: `screenshot`, `pdf`, and `set_viewport`, the emulated screen
//! both are taken on.

use base64::Engine;
use chromiumoxide::cdp::browser_protocol::page::{
    CaptureScreenshotFormat, CaptureScreenshotParams, GetLayoutMetricsParams, PrintToPdfParams, Viewport as Clip,
};
use serde_json::json;
use tokio::time::Instant;

use super::{element, json_result, value};
use crate::actions::{ImageFormat, PdfOptions, Region};
use crate::driver::state::Tab;
use crate::driver::{apply_viewport, Driver};
use crate::outcome::Deadline;
use crate::outcome::{ActResult, ActionFailure, ActionOutput, FailureCode, Viewport, MAX_SIDE};
use crate::sync::lock;

impl Driver {
    pub(super) async fn set_viewport_action(&self, tab: &Tab, v: Viewport, until: Deadline) -> ActResult<ActionOutput> {
        // Force a re-apply even if equal: cheap, and the caller asked for it.
        self.set_viewport(v, until.at.saturating_duration_since(Instant::now())).await?;
        apply_viewport(&tab.page, v).await?;
        // State recreated by the emulation change must not lose load_html content.
        let kept = lock(&self.shared.loaded_html).get(&tab.target).cloned();
        if let Some((html, marker, loaded_over)) = kept {
            // A link click (or any navigation) since load_html replaced the document: forget it.
            let now = tab.page.url().await.ok().flatten().unwrap_or_default();
            if now != loaded_over {
                lock(&self.shared.loaded_html).remove(&tab.target);
                return Ok(value(
                    json!({ "width": v.width, "height": v.height, "scale": v.scale, "mobile": v.mobile }),
                ));
            }
            let present = tab
                .page
                .evaluate_expression(format!("window.__browserpool_html === {}", json!(marker)))
                .await
                .ok()
                .and_then(|r| r.value().cloned())
                == Some(json!(true));
            if !present {
                self.set_document(tab, &html, &marker).await?;
            }
        }
        Ok(value(json!({ "width": v.width, "height": v.height, "scale": v.scale, "mobile": v.mobile })))
    }

    /// The options were checked by the parser; the size in device pixels needs the viewport.
    pub(super) async fn screenshot(
        &self,
        tab: &Tab,
        format: ImageFormat,
        quality: Option<i64>,
        region: Region<'_>,
        until: Deadline,
    ) -> ActResult<ActionOutput> {
        let page = &tab.page;
        let format = match format {
            ImageFormat::Png => CaptureScreenshotFormat::Png,
            ImageFormat::Jpeg => CaptureScreenshotFormat::Jpeg,
        };
        let scale = self.current_viewport().scale;
        let clip = match region {
            Region::Viewport => None,
            Region::Clip(r) => Some(Clip { x: r.x, y: r.y, width: r.width, height: r.height, scale: 1.0 }),
            Region::Element(selector) => {
                let el = element(page, selector, until).await?;
                el.scroll_into_view().await.map_err(ActionFailure::cdp)?;
                let rect = el
                    .call_js_fn(
                        "function() { const r = this.getBoundingClientRect(); \
                         return JSON.stringify([r.x + window.scrollX, r.y + window.scrollY, r.width, r.height]); }",
                        false,
                    )
                    .await
                    .map_err(ActionFailure::cdp)?;
                let r: Vec<f64> =
                    json_result(rect.result.value).and_then(|v| serde_json::from_value(v).ok()).unwrap_or_default();
                if r.len() != 4 || r[2] < 1.0 || r[3] < 1.0 {
                    return Err(ActionFailure::new(
                        FailureCode::ElementNotFound,
                        format!("{selector} has no visible box"),
                    ));
                }
                Some(Clip { x: r[0], y: r[1], width: r[2], height: r[3], scale: 1.0 })
            }
            Region::FullPage => {
                let metrics = page.execute(GetLayoutMetricsParams::default()).await.map_err(ActionFailure::cdp)?;
                let size = &metrics.result.css_content_size;
                Some(Clip { x: 0.0, y: 0.0, width: size.width.ceil(), height: size.height.ceil(), scale: 1.0 })
            }
        };
        if let Some(c) = &clip {
            let (w, h) = ((c.width * scale).ceil(), (c.height * scale).ceil());
            if w > MAX_SIDE as f64 || h > MAX_SIDE as f64 {
                return Err(ActionFailure::new(
                    FailureCode::PayloadTooLarge,
                    format!("screenshot of {w}x{h} px exceeds {MAX_SIDE} px a side"),
                ));
            }
        }
        let mut params = CaptureScreenshotParams::builder().format(format.clone()).build();
        params.quality = quality;
        if let Some(c) = clip {
            params.clip = Some(c);
            params.capture_beyond_viewport = Some(true);
        }
        // On chromiumoxide's session, whose emulated screen the capture must use (emulation is
        // per DevTools session); so capped at its 30 s, far past any real capture.
        let shot = page.execute(params).await.map_err(ActionFailure::cdp)?;
        let data = base64::engine::general_purpose::STANDARD
            .decode(AsRef::<str>::as_ref(&shot.result.data))
            .map_err(|e| ActionFailure::new(FailureCode::Internal, format!("screenshot data: {e}")))?;
        let mime = if format == CaptureScreenshotFormat::Jpeg { "image/jpeg" } else { "image/png" };
        Ok(ActionOutput { data, mime_type: mime.into(), ..Default::default() })
    }

    pub(super) async fn pdf(&self, tab: &Tab, options: PdfOptions<'_>) -> ActResult<ActionOutput> {
        let margin = options.margin;
        let params = PrintToPdfParams {
            landscape: options.landscape,
            print_background: options.print_background,
            scale: options.scale,
            paper_width: options.paper_width,
            paper_height: options.paper_height,
            page_ranges: options.page_ranges.map(str::to_string),
            margin_top: margin,
            margin_bottom: margin,
            margin_left: margin,
            margin_right: margin,
            ..PrintToPdfParams::default()
        };
        // Like screenshots, on chromiumoxide's session and its emulation (capped at 30 s).
        let data = tab.page.pdf(params).await.map_err(ActionFailure::cdp)?;
        Ok(ActionOutput { data, mime_type: "application/pdf".into(), ..Default::default() })
    }
}
