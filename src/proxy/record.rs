//! What one request did on its way through holdfast (which server, whether the
//! connection was reused, how long each step took, what status came back), reported
//! once, when the response to the client ends: to the metrics, and to the access log
//! when there is one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::http1::request::Request;
use crate::http1::Version;
use crate::net::TlsFacts;
use crate::telemetry::access_log::{AccessEntry, AccessLog};
use crate::upstream::{Backend, BackendMetrics, Upstream};

/// The record of one request, filled in along the proxy path.
pub struct Record {
    started: Instant,
    /// The server that got the request last.
    backend: Option<Arc<Backend>>,
    upstream_started: Option<Instant>,
    connect: Option<Duration>,
    header: Option<Duration>,
    upstream_status: Option<u16>,
    reused: Option<bool>,
    retried: bool,
    error: Option<&'static str>,
    /// What only the access log needs; not collected when it is off.
    log: Option<Box<LogFields>>,
}

/// The request's own fields, copied for the access log line.
struct LogFields {
    sink: AccessLog,
    time: SystemTime,
    client: SocketAddr,
    method: String,
    target: String,
    version: http::Version,
    host: Option<String>,
    referer: Option<String>,
    user_agent: Option<String>,
    /// The client's TLS session (`None`: cleartext).
    tls: Option<TlsFacts>,
}

/// How a response to the client ended.
#[derive(Debug, Clone, Copy)]
pub struct Delivery {
    /// The status the client got.
    pub status: u16,
    /// Response body bytes handed to the client.
    pub bytes: u64,
    /// When the last byte went out; `None` when the response did not end (the client
    /// left, or the upstream body failed).
    pub ended: Option<Instant>,
}

impl Record {
    /// Starts the record of `req`, which has just arrived from `client`.
    pub fn begin(
        req: &Request<'_, '_>,
        client: SocketAddr,
        tls: Option<TlsFacts>,
        log: Option<&AccessLog>,
    ) -> Record {
        let log = log.map(|sink| {
            let text =
                |value: Option<&[u8]>| value.map(|v| String::from_utf8_lossy(v).into_owned());
            Box::new(LogFields {
                sink: sink.clone(),
                time: SystemTime::now(),
                client,
                method: req.method.to_owned(),
                target: req.target.to_owned(),
                version: match req.version {
                    Version::Http10 => http::Version::HTTP_10,
                    Version::Http11 => http::Version::HTTP_11,
                    Version::Http2 => http::Version::HTTP_2,
                },
                host: text(req.host),
                referer: text(req.header("referer")),
                user_agent: text(req.header("user-agent")),
                tls,
            })
        });
        Record::start(log)
    }

    /// The request came on an HTTP/2 stream (its head was read as HTTP/1.1).
    pub fn over_http2(&mut self) {
        if let Some(log) = self.log.as_mut() {
            log.version = http::Version::HTTP_2;
        }
    }

    /// Starts the record of a request that could not even be parsed.
    pub fn refused(client: SocketAddr, log: Option<&AccessLog>) -> Record {
        let log = log.map(|sink| {
            Box::new(LogFields {
                sink: sink.clone(),
                time: SystemTime::now(),
                client,
                method: "-".into(),
                target: "-".into(),
                version: http::Version::HTTP_11,
                host: None,
                referer: None,
                user_agent: None,
                tls: None,
            })
        });
        Record::start(log)
    }

    fn start(log: Option<Box<LogFields>>) -> Record {
        Record {
            started: Instant::now(),
            backend: None,
            upstream_started: None,
            connect: None,
            header: None,
            upstream_status: None,
            reused: None,
            retried: false,
            error: None,
            log,
        }
    }

    /// The request goes to `backend` (again after a failover: the last one counts).
    pub fn chose(&mut self, backend: &Arc<Backend>) {
        self.backend = Some(Arc::clone(backend));
    }

    /// When the request head arrived.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The upstream clock starts at `at`: a connection is asked for.
    pub fn asking(&mut self, at: Instant) {
        self.upstream_started = Some(at);
    }

    /// A connection is ready for the request after `waited` (queue, connect); a retry
    /// adds the wait for its new connection.
    pub fn connected(&mut self, waited: Duration) {
        let connect = self.connect.get_or_insert(Duration::ZERO);
        *connect = connect.saturating_add(waited);
    }

    /// The request goes out (again, after a retry) on a reused or a new connection.
    pub fn sending(&mut self, reused: bool) {
        if self.reused.is_some() {
            self.retried = true;
        }
        self.reused = Some(reused);
        if let Some(b) = self.backend_metrics() {
            b.count_sent(reused);
        }
    }

    /// The upstream's response head arrived: returns the time now.
    pub fn response_head(&mut self, status: u16) -> Instant {
        let now = Instant::now();
        self.header = self.upstream_started.map(|t| now.saturating_duration_since(t));
        self.upstream_status = Some(status);
        now
    }

    /// What the origin took to answer, the balancer's latency sample: the time to the
    /// response head less the waits for connections (the pool's queue, connects).
    /// Those are not the origin's speed, and a connect is paid once per connection:
    /// counted, they would hold off a backend whose pool is cold (new, restarted) for
    /// as long as its one slow sample lasts.
    pub fn origin_time(&self) -> Option<Duration> {
        let header = self.header?;
        Some(header.saturating_sub(self.connect.unwrap_or_default()))
    }

    /// holdfast answers by itself, for `reason`; counted against the chosen server.
    pub fn failed(&mut self, reason: &'static str) {
        self.error = Some(reason);
        if let Some(b) = self.backend_metrics() {
            b.errors.record(reason);
        }
    }

    fn backend_metrics(&self) -> Option<&BackendMetrics> {
        self.backend.as_ref().map(|b| &b.metrics)
    }

    /// Records the finished request: in the metrics of `upstream` (the group it was
    /// routed to, if any) and of its backend, and in the access log if any.
    pub fn finish(self, upstream: Option<&Upstream>, delivery: Delivery) {
        let Delivery { status, bytes, ended } = delivery;
        // The response ended when its last byte went out; the caller reports at once,
        // so only a response that did not end needs the clock read again.
        let now = ended.unwrap_or_else(Instant::now);
        let request_time = now.saturating_duration_since(self.started);
        let response_time = match (self.upstream_started, self.upstream_status) {
            (Some(start), Some(_)) => Some(now.saturating_duration_since(start)),
            _ => None,
        };
        if let Some(group) = upstream {
            group.metrics.requests.record(status);
            group.metrics.duration.observe(request_time);
        }
        if let Some(b) = self.backend_metrics() {
            b.responses.record(status);
            if let Some(header) = self.header {
                b.header.observe(header);
            }
            if let Some(response) = response_time {
                b.response.observe(response);
            }
        }
        let Some(log) = &self.log else { return };
        let entry = AccessEntry {
            time: log.time,
            client: log.client,
            method: &log.method,
            target: &log.target,
            version: log.version,
            host: log.host.as_deref(),
            status,
            bytes,
            referer: log.referer.as_deref(),
            user_agent: log.user_agent.as_deref(),
            upstream: upstream.map(|u| &*u.name),
            upstream_addr: self.backend.as_ref().map(|b| b.addr),
            upstream_status: self.upstream_status,
            reused: self.reused,
            retried: self.retried,
            upstream_connect_time: self.connect,
            upstream_header_time: self.header,
            upstream_response_time: response_time,
            request_time,
            completed: ended.is_some(),
            error: self.error,
            tls_version: log.tls.map(|t| t.version),
            alpn: log.tls.map(|t| t.alpn),
        };
        log.sink.log(&entry);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::Record;

    #[tokio::test(start_paused = true)]
    async fn the_origins_time_leaves_out_the_waits_for_connections() {
        let mut record = Record::refused("127.0.0.1:1".parse().expect("address"), None);
        record.asking(Instant::now());
        // A connect that took 30 ms, a failed attempt, then 10 ms for a new one.
        record.connected(Duration::from_millis(30));
        record.connected(Duration::from_millis(10));
        tokio::time::advance(Duration::from_millis(45)).await;
        record.response_head(200);
        assert_eq!(record.origin_time(), Some(Duration::from_millis(5)));
        assert_eq!(record.header, Some(Duration::from_millis(45)), "the log keeps it all");
    }

    #[test]
    fn no_response_head_no_sample() {
        let record = Record::refused("127.0.0.1:1".parse().expect("address"), None);
        assert_eq!(record.origin_time(), None);
    }
}
