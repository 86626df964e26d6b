//! `holdfast stats` without a running holdfast: parsing, snapshots, quantiles, rendering,
//! and the watch loop against a listener that answers with fixed pages.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use super::scrape::parse;
use super::*;

const BACKEND: &str = "127.0.0.1:8080";

fn key(upstream: &str, server: &str) -> BackendKey {
    BackendKey { upstream: upstream.into(), backend: server.into() }
}

fn buckets(pairs: &[(f64, f64)]) -> Vec<Bucket> {
    pairs.iter().map(|&(le, count)| Bucket { le, count }).collect()
}

fn assert_close(actual: Option<f64>, expected: f64) {
    let actual = actual.expect("a value");
    assert!((actual - expected).abs() < 1e-12, "{actual} != {expected}");
}

/// A metrics page after `step` intervals of steady traffic to one server: per interval
/// 100 responses (2 of them 5xx), 90 reused and 10 new upstream requests, 10 opened
/// connections, header times of 50 requests <= 1 ms and 50 more <= 10 ms.
fn page(step: u32) -> String {
    let k = f64::from(step);
    let labels = format!("upstream=\"default\",backend=\"{BACKEND}\"");
    format!(
        "# HELP holdfast_backend_responses Responses to clients for requests sent to a server.\n\
         # TYPE holdfast_backend_responses counter\n\
         holdfast_backend_responses_total{{{labels},class=\"2xx\"}} {}\n\
         holdfast_backend_responses_total{{{labels},class=\"5xx\"}} {}\n\
         # TYPE holdfast_backend_requests counter\n\
         holdfast_backend_requests_total{{{labels},connection=\"reused\"}} {}\n\
         holdfast_backend_requests_total{{{labels},connection=\"new\"}} {}\n\
         holdfast_backend_connections_opened_total{{{labels}}} {}\n\
         holdfast_backend_connections{{{labels},state=\"idle\"}} 8\n\
         holdfast_backend_connections{{{labels},state=\"active\"}} 2\n\
         # TYPE holdfast_backend_header_duration_seconds histogram\n\
         # UNIT holdfast_backend_header_duration_seconds seconds\n\
         holdfast_backend_header_duration_seconds_sum{{{labels}}} {}\n\
         holdfast_backend_header_duration_seconds_count{{{labels}}} {}\n\
         holdfast_backend_header_duration_seconds_bucket{{le=\"0.001\",{labels}}} {}\n\
         holdfast_backend_header_duration_seconds_bucket{{le=\"0.01\",{labels}}} {}\n\
         holdfast_backend_header_duration_seconds_bucket{{le=\"+Inf\",{labels}}} {}\n\
         holdfast_upstream_responses_total{{upstream=\"default\",class=\"2xx\"}} {}\n\
         holdfast_listener_connections 4\n\
         holdfast_draining 0\n\
         holdfast_build_info{{version=\"0.1.0\"}} 1\n\
         # EOF\n",
        98.0 * k,
        2.0 * k,
        90.0 * k,
        10.0 * k,
        10.0 * k,
        0.3 * k,
        100.0 * k,
        50.0 * k,
        100.0 * k,
        100.0 * k,
        100.0 * k,
    )
}

fn ok_response(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\n\
         content-type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Answers one connection per entry of `responses`, in order, then stops.
fn serve(responses: Vec<String>) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("bound address");
    let handle = std::thread::spawn(move || {
        for response in responses {
            let (mut stream, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
            let mut line = String::new();
            while reader.read_line(&mut line).expect("read request") > 2 {
                line.clear();
            }
            stream.write_all(response.as_bytes()).expect("write response");
        }
    });
    (addr, handle)
}

fn snapshot(text: &str) -> Snapshot {
    Snapshot::from_samples(&parse(text).expect("valid metrics"))
}

#[test]
fn parse_reads_labels_with_escapes_in_any_order() {
    let text = "# HELP holdfast_backend_responses Responses.\n\
                # TYPE holdfast_backend_responses counter\n\
                holdfast_backend_responses_total{upstream=\"a\\\"b\\\\c\\nd\",backend=\"10.0.0.1:80\",class=\"2xx\"} 12\n\
                h_bucket{le=\"0.005\",upstream=\"x\",backend=\"s\"} 3\n\
                h_bucket{upstream=\"x\",backend=\"s\",le=\"+Inf\"} 7 1700000000\n\
                holdfast_draining 1\n\
                # EOF\n";
    let samples = parse(text).expect("valid metrics");
    assert_eq!(samples.len(), 4);
    assert_eq!(samples[0].name, "holdfast_backend_responses_total");
    assert_eq!(samples[0].labels["upstream"], "a\"b\\c\nd");
    assert_eq!(samples[0].labels["backend"], "10.0.0.1:80");
    assert_eq!(samples[0].value, 12.0);
    assert_eq!(samples[1].labels["le"], "0.005");
    assert_eq!(samples[1].labels["upstream"], "x");
    assert_eq!(samples[2].labels["le"], "+Inf");
    assert_eq!(samples[2].value, 7.0);
    assert!(samples[3].labels.is_empty());
    assert_eq!(samples[3].value, 1.0);
}

#[test]
fn parse_keeps_unknown_metrics_and_special_values() {
    let samples = parse("something_else{a=\"1\"} NaN\nother +Inf\nmore -Inf\n").expect("valid");
    assert!(samples[0].value.is_nan());
    assert_eq!(samples[1].value, f64::INFINITY);
    assert_eq!(samples[2].value, f64::NEG_INFINITY);
    // Unknown metrics do not disturb the snapshot.
    assert_eq!(Snapshot::from_samples(&samples), Snapshot::default());
}

#[test]
fn parse_names_the_line_of_a_malformed_sample() {
    let err = parse("# TYPE x counter\nx_total 1\nx_total{a=\"1} 2\n").expect_err("malformed");
    assert_eq!(err.line, 3);
    assert!(err.message.contains("closing quote"), "{err}");
    let err = parse("x_total{a=\"1\"} many\n").expect_err("not a number");
    assert!(err.to_string().starts_with("line 1: \"many\""), "{err}");
}

#[test]
fn snapshot_sorts_histogram_buckets_whatever_the_le_position() {
    let text = "holdfast_backend_connect_duration_seconds_bucket{upstream=\"u\",backend=\"s\",le=\"+Inf\"} 4\n\
                holdfast_backend_connect_duration_seconds_bucket{le=\"0.01\",upstream=\"u\",backend=\"s\"} 3\n\
                holdfast_backend_connect_duration_seconds_bucket{upstream=\"u\",le=\"0.001\",backend=\"s\"} 1\n";
    let snapshot = snapshot(text);
    let connect = &snapshot.backends[&key("u", "s")].connect;
    assert_eq!(connect.buckets, buckets(&[(0.001, 1.0), (0.01, 3.0), (f64::INFINITY, 4.0)]));
}

#[test]
fn quantile_interpolates_inside_the_bucket() {
    let b = buckets(&[(0.001, 10.0), (0.005, 30.0), (0.01, 40.0), (f64::INFINITY, 40.0)]);
    // rank 20 lies halfway between counts 10 and 30: halfway from 1 ms to 5 ms.
    assert_close(quantile(0.5, &b), 0.003);
    // rank 39.6: 9.6 of the 10 observations in (5 ms, 10 ms].
    assert_close(quantile(0.99, &b), 0.0098);
    // rank 4 in the first bucket, whose lower edge is 0.
    assert_close(quantile(0.1, &b), 0.0004);
}

#[test]
fn quantile_in_the_inf_bucket_is_the_highest_finite_bound() {
    let b = buckets(&[(0.001, 1.0), (0.01, 2.0), (f64::INFINITY, 10.0)]);
    assert_close(quantile(0.5, &b), 0.01);
}

#[test]
fn quantile_without_observations_is_none() {
    assert_eq!(quantile(0.5, &buckets(&[(0.001, 0.0), (f64::INFINITY, 0.0)])), None);
    assert_eq!(quantile(0.5, &[]), None);
    // Without a +Inf bucket the total is unknown.
    assert_eq!(quantile(0.5, &buckets(&[(0.001, 3.0)])), None);
}

#[test]
fn reuse_and_rates_cover_the_interval_between_two_scrapes() {
    let before = snapshot(&page(3));
    let now = snapshot(&page(5));
    let rows = rows(&before, &now, Duration::from_secs(2));
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!((row.upstream.as_str(), row.backend.as_str()), ("default", BACKEND));
    // Two intervals of 100 responses over 2 s.
    assert_close(Some(row.requests_per_sec), 100.0);
    assert_close(Some(row.responses_5xx_per_sec), 2.0);
    assert_close(Some(row.opened_per_sec), 10.0);
    assert_close(row.reuse_percent, 90.0);
    assert_eq!((row.idle, row.active), (8.0, 2.0));
    let header = row.header.expect("header observations");
    assert_close(Some(header.p50), 0.001);
    // rank 198 of 200: 98 of the 100 observations in (1 ms, 10 ms].
    assert_close(Some(header.p99), 0.001 + 0.009 * 98.0 / 100.0);
    assert_eq!(row.connect, None);
    let frame = Frame::new(DEFAULT_ADMIN_ADDR, SystemTime::now(), secs(2), &before, &now);
    assert_close(Some(frame.requests_per_sec), 100.0);
}

#[test]
fn counters_that_went_down_count_from_zero_after_a_restart() {
    let before = snapshot(&page(50));
    let now = snapshot(&page(1));
    let row = &rows(&before, &now, secs(1))[0];
    assert_close(Some(row.requests_per_sec), 100.0);
    assert_close(row.reuse_percent, 90.0);
    assert_close(Some(row.header.expect("observations").p50), 0.001);
}

#[test]
fn server_new_since_the_last_scrape_counts_from_zero() {
    let row = &rows(&Snapshot::default(), &snapshot(&page(1)), secs(1))[0];
    assert_close(Some(row.requests_per_sec), 100.0);
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn rendered(frame: &Frame) -> String {
    let mut out = Vec::new();
    render(&mut out, frame).expect("render to a Vec");
    String::from_utf8(out).expect("UTF-8")
}

#[test]
fn render_shows_a_row_per_server() {
    let frame = Frame::new(
        DEFAULT_ADMIN_ADDR,
        SystemTime::UNIX_EPOCH,
        secs(1),
        &snapshot(&page(1)),
        &snapshot(&page(2)),
    );
    let text = rendered(&frame);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("holdfast 127.0.0.1:9901  1970-01-01T00:00:00Z  over 1.000s"));
    assert!(lines[0].contains("100.0 req/s") && lines[0].ends_with("serving"), "{text}");
    let header: Vec<&str> = lines[1].split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    assert_eq!(header, COLUMNS);
    let row: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        row,
        ["default", BACKEND, "100.0", "90.0", "8", "2", "10.0", "-", "1.00/9.82ms", "2.0"],
        "{text}"
    );
}

#[test]
fn render_shows_dashes_without_traffic() {
    let frame = Frame::new(
        DEFAULT_ADMIN_ADDR,
        SystemTime::UNIX_EPOCH,
        secs(1),
        &snapshot(&page(2)),
        &snapshot(&page(2)),
    );
    let text = rendered(&frame);
    let row: Vec<&str> = text.lines().nth(2).expect("a row").split_whitespace().collect();
    assert_eq!(row, ["default", BACKEND, "0.0", "-", "8", "2", "0.0", "-", "-", "0.0"], "{text}");
}

#[test]
fn render_says_when_no_backend_has_metrics() {
    let draining = Snapshot { is_draining: true, ..Snapshot::default() };
    let frame =
        Frame::new(DEFAULT_ADMIN_ADDR, SystemTime::now(), secs(1), &Snapshot::default(), &draining);
    let text = rendered(&frame);
    assert!(text.lines().next().expect("header").ends_with("DRAINING"), "{text}");
    assert!(text.contains("no backend has metrics yet"), "{text}");
}

#[test]
fn interval_must_be_at_least_100ms() {
    assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
    assert!(parse_interval("50ms").expect_err("too short").contains("at least 100ms"));
    assert!(parse_interval("soon").is_err());
}

#[tokio::test]
async fn watch_prints_count_frames_from_the_admin_listener() {
    let (admin, origin) = serve((1..=3).map(|step| ok_response(&page(step))).collect());
    let args = StatsArgs { admin, interval: Duration::from_millis(100), count: Some(2) };
    let mut out = Vec::new();
    watch(&args, &mut out, FrameStyle::Append).await.expect("two frames");
    origin.join().expect("served three scrapes");
    let text = String::from_utf8(out).expect("UTF-8");
    let frames: Vec<&str> = text.split("\n\n").collect();
    assert_eq!(frames.len(), 2, "{text}");
    for frame in frames {
        assert!(frame.starts_with(&format!("holdfast {admin}  ")), "{frame}");
        let row = frame.lines().find(|l| l.starts_with("default")).expect("a row");
        assert!(row.contains(" 90.0 ") && row.contains("1.00/9.82ms"), "{row}");
    }
    assert!(!text.contains('\x1b'), "no terminal control codes when appending");
}

#[tokio::test]
async fn watch_reports_a_later_failed_scrape_and_keeps_going() {
    let failure = "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n".to_string();
    let responses = vec![ok_response(&page(1)), failure, ok_response(&page(2))];
    let (admin, origin) = serve(responses);
    let args = StatsArgs { admin, interval: Duration::from_millis(100), count: Some(1) };
    let mut out = Vec::new();
    watch(&args, &mut out, FrameStyle::Redraw).await.expect("one frame");
    origin.join().expect("served three scrapes");
    let text = String::from_utf8(out).expect("UTF-8");
    let failed = format!("GET /metrics from the admin listener at {admin} answered 500");
    assert!(text.contains(&failed), "{text}");
    assert!(text.contains("expected 200; retrying\n"), "{text}");
    assert!(text.contains("\x1b[2J\x1b[H"), "redraw clears the screen: {text:?}");
    assert!(text.contains(" 90.0 "), "{text}");
}

#[tokio::test]
async fn first_scrape_failure_names_the_admin_listener_and_what_to_check() {
    let admin = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a port");
    // The listener is gone: connecting is refused.
    let args = StatsArgs { admin, interval: Duration::from_millis(100), count: Some(1) };
    let err = watch(&args, &mut Vec::new(), FrameStyle::Append).await.expect_err("refused");
    let message = format!("{err:#}");
    let expected = format!("GET /metrics to the admin listener at {admin} failed: ");
    assert!(message.starts_with(&expected), "{message}");
    assert!(message.contains("holdfast may not be running"), "{message}");
    assert!(message.contains("--admin ADDR"), "{message}");
}

#[tokio::test]
async fn a_page_that_is_not_metrics_is_an_error_naming_the_line() {
    let (admin, origin) = serve(vec![ok_response(
        "not metrics
",
    )]);
    let args = StatsArgs { admin, interval: Duration::from_millis(100), count: Some(1) };
    let err = watch(&args, &mut Vec::new(), FrameStyle::Append).await.expect_err("malformed");
    origin.join().expect("served one scrape");
    let message = format!("{err:#}");
    let expected =
        format!("the metrics page of the admin listener at {admin} is malformed, line 1: ");
    assert!(message.starts_with(&expected), "{message}");
}

#[test]
fn a_container_shows_by_name_beside_its_address() {
    let labels = format!("upstream=\"default\",backend=\"{BACKEND}\"");
    let info = format!(
        "holdfast_backend_container_info{{{labels},container=\"web-2\",container_id=\"0123456789ab\"}} 1\n"
    );
    let now = snapshot(&format!("{}{info}", page(1)));
    let row = &rows(&Snapshot::default(), &now, secs(1))[0];
    assert_eq!(row.backend, format!("{BACKEND} (web-2)"));
}
