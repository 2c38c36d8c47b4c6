//! `session acquire`'s emulation flags: how the browser presents itself, and which upstream
//! proxy its pages leave through.

use clap::Args;

use crate::pb;

/// How the session's browser presents itself; unset: Chromium's own.
#[derive(Debug, Args, Default)]
pub struct EmulationArgs {
    /// The upstream proxy its pages leave through (an id from `admin proxies list`); unset:
    /// the tenant's default_proxy, if any.
    #[arg(long)]
    proxy: Option<String>,
    /// Language of the pages (navigator.language, Intl, Accept-Language), a BCP 47 tag: de-DE.
    #[arg(long)]
    locale: Option<String>,
    /// Time zone of the pages, an IANA id: Europe/Berlin.
    #[arg(long)]
    timezone: Option<String>,
    /// User agent of every request and navigator.userAgent.
    #[arg(long)]
    user_agent: Option<String>,
    /// Where the Geolocation API says the pages are: LAT,LON or LAT,LON,ACCURACY_METRES.
    #[arg(long, value_parser = parse_geolocation)]
    geolocation: Option<pb::Geolocation>,
    /// prefers-color-scheme: light or dark.
    #[arg(long, value_enum)]
    color_scheme: Option<SchemeArg>,
    /// A header sent on every request, NAME=VALUE (repeat for more).
    #[arg(long = "header", value_parser = super::session::parse_label)]
    headers: Vec<(String, String)>,
    /// Every request fails as with no network.
    #[arg(long)]
    offline: bool,
    /// Latency added to every request (e.g. 300ms).
    #[arg(long, value_parser = humantime::parse_duration)]
    latency: Option<std::time::Duration>,
    /// Download throughput cap, bytes a second.
    #[arg(long)]
    download_bps: Option<u64>,
    /// Upload throughput cap, bytes a second.
    #[arg(long)]
    upload_bps: Option<u64>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SchemeArg {
    Light,
    Dark,
}

impl EmulationArgs {
    /// `req` with these fields set.
    pub(super) fn onto(self, req: pb::AcquireRequest) -> pb::AcquireRequest {
        pb::AcquireRequest {
            proxy_id: self.proxy.unwrap_or_default(),
            locale: self.locale.unwrap_or_default(),
            timezone: self.timezone.unwrap_or_default(),
            user_agent: self.user_agent.unwrap_or_default(),
            geolocation: self.geolocation,
            color_scheme: match self.color_scheme {
                None => pb::ColorScheme::Unspecified,
                Some(SchemeArg::Light) => pb::ColorScheme::Light,
                Some(SchemeArg::Dark) => pb::ColorScheme::Dark,
            } as i32,
            extra_headers: self.headers.into_iter().collect(),
            offline: self.offline,
            network: (self.latency.is_some() || self.download_bps.is_some() || self.upload_bps.is_some()).then(|| {
                pb::NetworkConditions {
                    latency_ms: self.latency.map_or(0, |d| d.as_millis().min(u32::MAX as u128) as u32),
                    download_bytes_per_s: self.download_bps.unwrap_or(0),
                    upload_bytes_per_s: self.upload_bps.unwrap_or(0),
                }
            }),
            ..req
        }
    }
}

fn parse_geolocation(s: &str) -> Result<pb::Geolocation, String> {
    let parts: Vec<f64> = s
        .split(',')
        .map(|p| p.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{s:?} is not LAT,LON or LAT,LON,ACCURACY (degrees and metres)"))?;
    match parts[..] {
        [latitude, longitude] => Ok(pb::Geolocation { latitude, longitude, accuracy: 0.0 }),
        [latitude, longitude, accuracy] => Ok(pb::Geolocation { latitude, longitude, accuracy }),
        _ => Err(format!("{s:?} is not LAT,LON or LAT,LON,ACCURACY (degrees and metres)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geolocation_reads_two_or_three_numbers() {
        let g = parse_geolocation("52.52, 13.405").unwrap();
        assert_eq!((g.latitude, g.longitude, g.accuracy), (52.52, 13.405, 0.0));
        assert_eq!(parse_geolocation("1,2,30").unwrap().accuracy, 30.0);
        for bad in ["52.5", "a,b", "1,2,3,4", ""] {
            assert!(parse_geolocation(bad).unwrap_err().contains("LAT,LON"), "{bad}");
        }
    }
}
