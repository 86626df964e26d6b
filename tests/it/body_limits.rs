//! Request body limits: `client_max_body` refuses what is too large (413), and a client
//! that moves a body too slowly, sending or reading, is cut off after its head start,
//! however often it sends a byte.

use std::time::Duration;

use holdfast::ClientLimits;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::{config_for, wait_until, within_for, Origin, Proxy, DEADLINE};

fn limited(origin: &Origin, max_body: u64) -> holdfast::Config {
    let mut config = config_for(origin);
    config.client_limits = ClientLimits { max_body: Some(max_body), ..config.client_limits };
    config
}

/// A client gets half a second of waiting in hand, refilled at 1000 bytes/s.
fn paced(origin: &Origin) -> holdfast::Config {
    let mut config = config_for(origin);
    config.timeouts.client_body = Duration::from_millis(500);
    config.client_limits.body_min_bytes_per_second = 1000;
    config
}

/// Waits until holdfast has given up on the upload's upstream connection, and checks
/// the origin never got the whole request.
async fn assert_upload_cut(origin: &Origin) {
    wait_until("the upstream connection is closed", DEADLINE, || origin.closed() == 1).await;
    assert!(origin.completed().is_empty(), "{:?}", origin.completed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_client_max_body_gets_413_before_the_origin_sees_it() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(limited(&origin, 10)).await;
    let mut client = proxy.raw().await;
    client.send("POST /small HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789").await;
    assert_eq!(client.response().await.status, 200);
    client.send("POST /large HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n0123456789a").await;
    let resp = client.response_then_close().await.expect("a 413");
    assert_eq!(resp.status, 413, "{}", resp.body_text());
    assert!(resp.body_text().contains("client_max_body (10 bytes)"), "{}", resp.body_text());
    assert_eq!(origin.paths(), ["/small"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_body_growing_past_client_max_body_gets_413_and_never_completes() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(limited(&origin, 10)).await;
    let mut client = proxy.raw().await;
    client
        .send(
            "POST /chunked-large HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
             6\r\n012345\r\n6\r\n6789ab\r\n0\r\n\r\n",
        )
        .await;
    let resp = client.response_then_close().await.expect("a 413");
    assert_eq!(resp.status, 413, "{}", resp.body_text());
    // The head went up before the body grew too large; the body never completed.
    assert_upload_cut(&origin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_or_listener_sets_its_own_body_limit() {
    let origin = Origin::start().await;
    let text = format!(
        "[limits]\nclient_max_body = \"1MB\"\n\n\
         [[listener]]\naddress = \"127.0.0.1:0\"\nupstream = \"app\"\nclient_max_body = 8\n\n\
         [[route]]\npath = \"/uploads\"\nupstream = \"app\"\nclient_max_body = \"1k\"\n\n\
         [upstream.app]\nservers = [\"{}\"]\n",
        origin.addr()
    );
    let config = holdfast::Config::parse(&text, std::path::Path::new("limits.toml")).unwrap();
    let proxy = Proxy::start(config).await;
    let body = "x".repeat(100);
    for (path, status) in [("/uploads/a", 200), ("/other", 413)] {
        let mut client = proxy.raw().await;
        client
            .send(format!("POST {path} HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{body}"))
            .await;
        assert_eq!(client.response().await.status, status, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_upload_is_cut_after_its_head_start_with_408() {
    // Regression: timeouts applied per read, so a byte every 59 s held a client connection and
    // an upstream connection forever.
    let origin = Origin::start().await;
    let proxy = Proxy::start(paced(&origin)).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    stream
        .write_all(b"POST /trickle HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n")
        .await
        .unwrap();
    // A byte every 100 ms, never long enough apart for a per-read timeout: 10 B/s, for
    // 20 s unless holdfast cuts it: after the 0.5 s head start, and the 5 s it lingers
    // reading what the client still sends so that the 408 is not lost to a reset.
    let trickle = async {
        for _ in 0..200 {
            if stream.write_all(b"x").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    within_for("the trickle is cut", Duration::from_secs(10), trickle).await;
    let mut client = crate::support::RawClient::from_stream(stream);
    let resp = client.response_then_close().await.expect("a 408");
    assert_eq!(resp.status, 408, "{}", resp.body_text());
    assert_upload_cut(&origin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_its_response_is_cut_after_its_head_start() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(paced(&origin)).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    // 64 MB: far more than the socket buffers hold, so holdfast has to wait on the
    // client, which never reads.
    stream.write_all(b"GET /bytes/67108864 HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    wait_until("holdfast gives up on the client and closes upstream", DEADLINE, || {
        origin.closed() == 1
    })
    .await;
    drop(stream);
}
