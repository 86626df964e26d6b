//! The origin in h2c mode: HTTP/2 with prior knowledge and HTTP/1.1 on one port, the
//! HTTP/2 counts in its stats, and the stream limit it announces.

use std::time::Duration;

use bytes::Bytes;
use holdfast_bench_tools::origin::H2cOptions;
use http::{Request, Version};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::support::{raw_get, wait_until, TestOrigin};

/// An HTTP/2 client connection (prior knowledge) to `origin`, its driver on a task.
async fn connect_h2(origin: &TestOrigin) -> http2::SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(origin.addr).await.expect("connect");
    let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .expect("HTTP/2 handshake");
    tokio::spawn(connection);
    sender
}

async fn get(
    sender: &mut http2::SendRequest<Empty<Bytes>>,
    origin: &TestOrigin,
    path: &str,
) -> (u16, Bytes) {
    sender.ready().await.expect("connection ready");
    let request = Request::get(origin.url(path))
        .version(Version::HTTP_2)
        .body(Empty::new())
        .expect("request");
    let response = sender.send_request(request).await.expect("response");
    assert_eq!(response.version(), Version::HTTP_2);
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.expect("body").to_bytes();
    (status, body)
}

#[tokio::test]
async fn serves_http2_with_prior_knowledge_and_counts_it() {
    let origin = TestOrigin::start_h2c(H2cOptions::default()).await;
    let mut sender = connect_h2(&origin).await;
    for (path, size) in [("/tiny", 100), ("/50k", 51_200), ("/tiny", 100)] {
        let (status, body) = get(&mut sender, &origin, path).await;
        assert_eq!((status, body.len()), (200, size), "{path}");
    }
    let stats = origin.stats();
    let h2 = stats.h2.expect("h2 counts in h2c mode");
    assert_eq!((stats.connections, stats.requests), (1, 3));
    assert_eq!((h2.connections, h2.open, h2.requests), (1, 1, 3));
    assert_eq!(h2.max_streams, 100);

    drop(sender);
    wait_until("the HTTP/2 connection is counted closed", || {
        let stats = origin.stats();
        stats.open == 0 && stats.h2.is_some_and(|h2| h2.open == 0)
    })
    .await;
}

#[tokio::test]
async fn serves_http1_on_the_same_port_without_counting_it_as_http2() {
    let origin = TestOrigin::start_h2c(H2cOptions::default()).await;
    let response = raw_get(origin.addr, "/tiny").await;
    assert!(response.head.starts_with("HTTP/1.1 200"), "{}", response.head);
    assert_eq!(response.body.len(), 100);

    let stats_response = raw_get(origin.addr, "/__origin/stats").await;
    let json: serde_json::Value = serde_json::from_slice(&stats_response.body).expect("JSON");
    assert_eq!(json["requests"], 1);
    assert_eq!(
        json["h2"],
        serde_json::json!({"connections": 0, "open": 0, "requests": 0, "max_streams": 100})
    );
}

#[tokio::test]
async fn announces_its_stream_limit_and_holds_to_it() {
    let origin = TestOrigin::start_h2c(H2cOptions { max_streams: 2 }).await;
    let mut sender = connect_h2(&origin).await;
    // The first exchange makes sure the origin's SETTINGS arrived.
    get(&mut sender, &origin, "/tiny").await;
    let slow: Vec<_> = (0..3)
        .map(|_| {
            let mut sender = sender.clone();
            let url = origin.url("/slow?ms=300");
            tokio::spawn(async move {
                sender.ready().await.expect("ready");
                let request = Request::get(url).body(Empty::new()).expect("request");
                let started = tokio::time::Instant::now();
                let response = sender.send_request(request).await.expect("response");
                assert_eq!(response.status(), 200);
                started.elapsed()
            })
        })
        .collect();
    let mut waited = Vec::new();
    for task in slow {
        waited.push(task.await.expect("task"));
    }
    waited.sort();
    // Two streams at once: the third waited for one of them.
    assert!(waited[2] >= Duration::from_millis(550), "{waited:?}");
    assert_eq!(origin.stats().h2.expect("h2 counts").max_streams, 2);
}
