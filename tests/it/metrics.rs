//! The admin listener: `/metrics` counts exactly what the origin saw, `/status` shows
//! each pool, `/healthz` turns 503 while draining, and none of it is on the proxy port.

use std::time::Duration;

use http_body_util::BodyExt;

use crate::support::{
    admin_get, config_with_admin, wait_until, within, ClosedPort, Origin, Proxy, DEADLINE,
};

#[tokio::test]
async fn counters_match_what_the_origin_saw() {
    let origin = Origin::start().await;
    let mut config = config_with_admin(&origin);
    config.upstreams[0].pool.max_requests = 4;
    // Long enough that no pause of a loaded machine between two of the requests below
    // reaches it, so only the last connection idles out.
    config.upstreams[0].pool.idle_timeout = Duration::from_secs(2);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.client().await;
    // Ten requests, four per connection: connections of 4, 4 and 2 requests; the
    // first two close for max_requests.
    for i in 0..10 {
        assert_eq!(client.get(&format!("/a/{i}")).await.status, 200);
    }
    // On the third connection; the origin closes it after answering.
    assert_eq!(client.get("/close").await.status, 200);
    // On a fourth connection, which then idles out.
    assert_eq!(client.get("/status/503").await.status, 503);
    let m = proxy.metrics().await;
    let server = origin.addr().to_string();
    let this = [("upstream", "default"), ("backend", server.as_str())];
    assert_eq!((origin.request_count(), origin.accepted()), (12, 4));
    let requests =
        |class| m.count("holdfast_backend_responses_total", &[this[0], this[1], ("class", class)]);
    assert_eq!((requests("2xx"), requests("5xx"), requests("4xx")), (11, 1, 0));
    let sent = |kind| {
        m.count("holdfast_backend_requests_total", &[this[0], this[1], ("connection", kind)])
    };
    assert_eq!((sent("reused"), sent("new")), (8, 4));
    assert_eq!(m.count("holdfast_backend_connections_opened_total", &this), 4);
    let closed = |reason| {
        m.count(
            "holdfast_backend_connections_closed_total",
            &[this[0], this[1], ("reason", reason)],
        )
    };
    assert_eq!((closed("max_requests"), closed("origin_closed")), (2, 1));
    assert_eq!(m.count("holdfast_backend_connections_closed_total", &this), 3);
    let open =
        |state| m.count("holdfast_backend_connections", &[this[0], this[1], ("state", state)]);
    assert_eq!((open("idle"), open("active")), (1, 0));
    assert_eq!(m.count("holdfast_backend_connect_duration_seconds_count", &this), 4);
    assert_eq!(m.count("holdfast_backend_header_duration_seconds_count", &this), 12);
    assert_eq!(m.count("holdfast_backend_response_duration_seconds_count", &this), 12);
    let all = [("upstream", "default")];
    assert_eq!(m.count("holdfast_upstream_responses_total", &all), 12);
    assert_eq!(m.count("holdfast_upstream_request_duration_seconds_count", &all), 12);
    assert_eq!(m.count("holdfast_backend_retries_total", &this), 0);
    assert_eq!(m.count("holdfast_listener_connections_accepted_total", &[]), 1);
    assert_eq!(m.count("holdfast_backend_queue_depth", &this), 0);

    // The last connection closes for its idle timeout, with nobody asking.
    let admin = proxy.admin();
    let mut idle_closed = 0;
    let start = tokio::time::Instant::now();
    // Bounded by DEADLINE; each round scrapes once and waits 50 ms.
    while idle_closed == 0 && start.elapsed() < DEADLINE {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let m = crate::support::Metrics::scrape(admin).await;
        idle_closed = m.count(
            "holdfast_backend_connections_closed_total",
            &[this[0], this[1], ("reason", "idle_timeout")],
        );
    }
    assert_eq!(idle_closed, 1);
    wait_until("the origin sees every connection closed", DEADLINE, || origin.closed() == 4).await;
    let m = proxy.metrics().await;
    assert_eq!(m.count("holdfast_backend_connections_closed_total", &this), 4);
    assert_eq!(m.count("holdfast_backend_connections", &this), 0);
}

#[tokio::test]
async fn status_shows_each_pool_and_its_reuse_ratio() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_with_admin(&origin)).await;
    let mut client = proxy.client().await;
    for _ in 0..4 {
        client.get("/").await;
    }
    let (code, body) = admin_get(proxy.admin(), "/status").await;
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&body).expect("status is JSON");
    assert_eq!(status["state"], "serving");
    let server = &status["upstreams"][0]["servers"][0];
    assert_eq!(status["upstreams"][0]["name"], "default");
    assert_eq!(server["server"], origin.addr().to_string());
    assert_eq!((server["opened"].as_u64(), server["idle"].as_u64()), (Some(1), Some(1)));
    assert_eq!((server["requests"].as_u64(), server["reused"].as_u64()), (Some(4), Some(3)));
    assert_eq!(server["reuse_ratio"].as_f64(), Some(0.75));
    assert_eq!(server["active"].as_u64(), Some(0));
    // The limits the idle budget derives from, read at start, and the budget itself.
    // (Other tests in this process may raise the file limit, so the figures are checked
    // against each other and the port range, not against a later reading.)
    let limits = &status["limits"];
    let open_files = limits["open_files"].as_u64().expect("an open-file limit");
    let ports = holdfast::Resources::read().local_ports.expect("a port range");
    assert_eq!(limits["local_ports"], serde_json::json!([ports.start(), ports.end()]));
    let read = holdfast::Resources { open_files: Some(open_files), local_ports: Some(ports) };
    let budget = read.idle_budget(None) as u64;
    assert_eq!(
        (limits["idle_budget"].as_u64(), limits["idle_now"].as_u64()),
        (Some(budget), Some(1))
    );
}

#[tokio::test]
async fn healthz_turns_503_while_draining_and_the_admin_stays_up_until_the_end() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_with_admin(&origin)).await;
    let admin = proxy.admin();
    assert_eq!(admin_get(admin, "/healthz").await, (200, "ok\n".to_string()));
    let mut client = proxy.client().await;
    // Held at the origin until the checks below are done: draining lasts that long.
    let slow = tokio::spawn(async move { client.get("/hold/slow").await });
    wait_until("the slow request reaches the origin", DEADLINE, || origin.request_count() == 1)
        .await;
    let shutdown = tokio::spawn(proxy.shutdown(Duration::from_secs(5)));
    let mut health = (0, String::new());
    let start = tokio::time::Instant::now();
    // Bounded by DEADLINE; each round asks once.
    while health.0 != 503 && start.elapsed() < DEADLINE {
        health = admin_get(admin, "/healthz").await;
    }
    assert_eq!(health, (503, "draining\n".to_string()));
    let (_, status) = admin_get(admin, "/status").await;
    assert!(status.contains("\"state\":\"draining\""), "{status}");
    let m = crate::support::Metrics::scrape(admin).await;
    assert_eq!(m.count("holdfast_draining", &[]), 1);
    // The request in flight still completes.
    origin.release("slow");
    assert_eq!(within("the slow request", slow).await.unwrap().status, 200);
    within("shutdown", shutdown).await.unwrap();
    assert!(tokio::net::TcpStream::connect(admin).await.is_err(), "admin closed after shutdown");
}

#[tokio::test]
async fn admin_paths_are_not_served_on_the_proxy_port() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_with_admin(&origin)).await;
    let mut client = proxy.client().await;
    let reply = client.get("/metrics").await;
    assert_eq!(reply.header("x-path"), Some("/metrics"), "the origin answered");
    assert_eq!(admin_get(proxy.admin(), "/nope").await.0, 404);
    let empty = http_body_util::Empty::new().map_err(Into::into).boxed();
    let reply = crate::support::HttpClient::connect(proxy.admin())
        .await
        .request(http::Method::POST, "/healthz", empty)
        .await;
    assert_eq!(reply.status, 405);
}

/// Every response holdfast makes itself is counted under a reason, so the reasons add
/// up to exactly the errors clients received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_holdfast_makes_itself_is_counted_with_its_reason() {
    let origin = Origin::start().await;
    // Held bound and not listening: connects to it are refused.
    let closed = ClosedPort::new();
    let refused = closed.addr();
    let text = format!(
        r#"
[admin]
address = "127.0.0.1:0"

[[listener]]
address = "127.0.0.1:0"

[[route]]
host = "refused.test"
upstream = "refused"

[[route]]
host = "nowhere.test"
upstream = "nowhere"

[[route]]
host = "slow.test"
upstream = "slow"

[[route]]
host = "narrow.test"
upstream = "narrow"

[timeouts]
response_header = "300ms"

[upstream.refused]
servers = ["{refused}"]

[upstream.nowhere]
servers = ["no-such-host.invalid:80"]

[upstream.slow]
servers = ["{origin}"]

[upstream.narrow]
servers = ["{origin}"]

[upstream.narrow.pool]
max_connections_per_server = 1
queue_size = 0
"#,
        origin = origin.addr()
    );
    let config = holdfast::Config::parse(&text, std::path::Path::new("answers.toml")).expect("ok");
    let proxy = Proxy::start(config).await;
    let get = |host: &'static str, path: &'static str| {
        let addr = proxy.addr();
        async move {
            let mut client = crate::support::RawClient::connect(addr).await;
            client.send(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n")).await;
            client.response().await.status
        }
    };
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(get("refused.test", "/").await);
        statuses.push(get("nowhere.test", "/").await);
        // Never answered: only the response header timeout ends it.
        statuses.push(get("slow.test", "/hold/never").await);
        statuses.push(get("unknown.test", "/").await);
        statuses.push(get("slow.test", "/").await);
    }
    // Two at once through a group allowed one connection and no queue: the first is held
    // at the origin until the second has been refused.
    let first = tokio::spawn(get("narrow.test", "/hold/narrow"));
    wait_until("the first reaches the origin", DEADLINE, || origin.count_path("/hold/narrow") == 1)
        .await;
    let second = get("narrow.test", "/").await;
    origin.release("narrow");
    statuses.extend([within("the first", first).await.expect("first request"), second]);
    // A request refused before routing.
    let mut bad = crate::support::RawClient::connect(proxy.addr()).await;
    bad.send("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").await;
    statuses.push(bad.response().await.status);

    let count = |status: u16| statuses.iter().filter(|&&s| s == status).count() as u64;
    assert_eq!((count(200), count(502), count(504), count(404)), (4, 6, 3, 3), "{statuses:?}");
    assert_eq!((count(503), count(400)), (1, 1), "{statuses:?}");
    let metrics = proxy.metrics().await;
    let errors = |labels: &[(&str, &str)]| metrics.count("holdfast_errors_total", labels);
    assert_eq!(
        errors(&[("upstream", "refused"), ("reason", "connect_refused"), ("status", "502")]),
        3
    );
    assert_eq!(errors(&[("upstream", "nowhere"), ("reason", "no_healthy_server")]), 3);
    assert_eq!(
        errors(&[("upstream", "slow"), ("reason", "response_timeout"), ("status", "504")]),
        3
    );
    assert_eq!(errors(&[("upstream", "narrow"), ("reason", "queue_full"), ("status", "503")]), 1);
    assert_eq!(errors(&[("reason", "no_route"), ("status", "404")]), 3);
    assert_eq!(errors(&[("upstream", "-"), ("reason", "bad_request"), ("status", "400")]), 1);
    assert_eq!(metrics.count("holdfast_refused_requests_total", &[("rule", "bad_framing")]), 1);
    // The sum over every reason is every error a client got.
    let received = statuses.iter().filter(|&&s| s >= 400).count() as u64;
    assert_eq!(errors(&[]), received);
    for class in ["4", "5"] {
        let by_status: u64 = metrics
            .series_named("holdfast_errors_total")
            .filter(|(labels, _)| labels.get("status").is_some_and(|s| s.starts_with(class)))
            .map(|(_, v)| v as u64)
            .sum();
        let got = statuses.iter().filter(|s| s.to_string().starts_with(class)).count() as u64;
        assert_eq!(by_status, got, "{class}xx");
    }
}
