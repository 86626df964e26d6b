//! `h2-engine-floor`, the minimal h2c relay on holdfast's own HTTP/2 engine, end to end as
//! the harness runs it: in front of the benchmark origin in h2c mode, many streams at once
//! on one client connection, bodies whole, every request reaching the origin once.

use std::net::SocketAddr;

use bytes::Bytes;
use holdfast_bench_tools::origin::H2cOptions;
use http::{Request, Version};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::support::{spawn_listening, TestOrigin};

#[tokio::test]
async fn relays_concurrent_streams_with_their_bodies_to_the_h2c_origin() {
    let origin = TestOrigin::start_h2c(H2cOptions::default()).await;
    let upstream = origin.addr.to_string();
    let args = ["--listen", "127.0.0.1:0", "--upstream", &upstream];
    let (_relay, addr) = spawn_listening(env!("CARGO_BIN_EXE_h2-engine-floor"), &args);
    let addr: SocketAddr = addr.parse().expect("an address");

    let stream = TcpStream::connect(addr).await.expect("connect");
    let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .expect("HTTP/2 handshake through the relay");
    tokio::spawn(connection);
    // 60 streams at once, small and large bodies mixed: the large ones are bigger than
    // the client's default stream window, so flow control runs both ways.
    let mut streams = Vec::new();
    for i in 0..60 {
        let mut sender = sender.clone();
        let path = if i % 3 == 0 { "/50k" } else { "/tiny" };
        streams.push(tokio::spawn(async move {
            sender.ready().await.expect("connection ready");
            let request = Request::get(format!("http://{addr}{path}"))
                .version(Version::HTTP_2)
                .body(Empty::<Bytes>::new())
                .expect("request");
            let response = sender.send_request(request).await.expect("response");
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.expect("body").to_bytes();
            (path, status, body.len())
        }));
    }
    for stream in streams {
        let (path, status, len) = stream.await.expect("the stream's task");
        let size = if path == "/50k" { 51_200 } else { 100 };
        assert_eq!((status, len), (200, size), "{path}");
    }
    let h2 = origin.stats().h2.expect("h2 counts in h2c mode");
    assert_eq!(h2.requests, 60, "every request reached the origin once");
    assert_eq!(h2.connections, 1, "one origin connection for the client connection");
}
