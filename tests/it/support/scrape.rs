//! Reading holdfast's admin listener: `/metrics` parsed into series, `/status` as JSON.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::{HttpClient, DEADLINE};

/// One scrape of `/metrics`.
#[derive(Debug)]
pub struct Metrics {
    /// `(name, labels)` -> value, for every sample line.
    series: Vec<(String, BTreeMap<String, String>, f64)>,
    pub text: String,
}

impl Metrics {
    /// Scrapes `http://admin/metrics`.
    pub async fn scrape(admin: SocketAddr) -> Metrics {
        let reply = HttpClient::connect(admin).await.get("/metrics").await;
        assert_eq!(reply.status, 200, "GET /metrics: {}", reply.text());
        let content_type = reply.header("content-type").unwrap_or("");
        assert!(content_type.contains("openmetrics-text"), "content type {content_type}");
        Metrics::parse(reply.text())
    }

    fn parse(text: String) -> Metrics {
        let series = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|line| {
                let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
                let (name, labels) = match series.split_once('{') {
                    Some((name, rest)) => (name, labels(rest.trim_end_matches('}'))),
                    None => (series, BTreeMap::new()),
                };
                let value = value.parse().unwrap_or_else(|_| panic!("bad value in {line:?}"));
                (name.to_string(), labels, value)
            })
            .collect();
        Metrics { series, text }
    }

    /// The sum of every series named `name` whose labels include all of `labels`;
    /// panics if there is none (a misspelt name must not read as zero).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let matching: Vec<f64> = self
            .series
            .iter()
            .filter(|(n, l, _)| {
                n == name && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(v))
            })
            .map(|(_, _, v)| *v)
            .collect();
        assert!(!matching.is_empty(), "no series {name} with {labels:?} in:\n{}", self.text);
        matching.iter().sum()
    }

    /// Every series named `name`: its labels and value.
    pub fn series_named<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a BTreeMap<String, String>, f64)> + 'a {
        self.series.iter().filter(move |(n, _, _)| n == name).map(|(_, l, v)| (l, *v))
    }

    /// Like [`Metrics::sum`], as a count.
    pub fn count(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.sum(name, labels) as u64
    }

    /// Like [`Metrics::count`], but 0 when no series matches: a counter with labels
    /// appears only once it has counted.
    pub fn count_or_zero(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.series_named(name)
            .filter(|(l, _)| labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(v)))
            .map(|(_, v)| v as u64)
            .sum()
    }
}

/// Scrapes `admin` until `name{labels}` counts `want` (see [`Metrics::count_or_zero`]);
/// panics with the last scrape if it does not within [`DEADLINE`].
pub async fn wait_for_count(admin: SocketAddr, name: &str, labels: &[(&str, &str)], want: u64) {
    let start = Instant::now();
    // Bounded by DEADLINE; each round scrapes once and waits 20 ms.
    loop {
        let metrics = Metrics::scrape(admin).await;
        let now = metrics.count_or_zero(name, labels);
        if now == want {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{name}{labels:?} is {now}, expected {want}:\n{}",
            metrics.text
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `a="x",b="y"` (values without escapes, as holdfast's labels are) into a map.
fn labels(text: &str) -> BTreeMap<String, String> {
    text.split("\",")
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("label is key=value");
            (k.to_string(), v.trim_matches('"').to_string())
        })
        .collect()
}

/// `GET path` on the admin listener: status and body.
pub async fn admin_get(admin: SocketAddr, path: &str) -> (u16, String) {
    let reply = HttpClient::connect(admin).await.get(path).await;
    (reply.status.as_u16(), reply.text())
}
