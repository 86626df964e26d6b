//! Protocol upgrades (WebSocket and others): spliced both ways, never pooled afterwards.

use futures_util::{SinkExt, StreamExt};
use holdfast_pool::CloseReason;
use http::StatusCode;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::support::{config_for, within, Origin, Proxy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_echoes_through_and_its_upstream_connection_is_not_reused() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let tcp = TcpStream::connect(proxy.addr()).await.expect("connect");
    let (mut ws, resp) =
        within("websocket handshake", tokio_tungstenite::client_async("ws://a/upgrade", tcp))
            .await
            .expect("websocket handshake through holdfast");
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    for text in ["hello", "second message"] {
        within("websocket send", ws.send(Message::text(text))).await.expect("send");
        let echoed = within("websocket echo", ws.next()).await.expect("a message").expect("ok");
        assert_eq!(echoed, Message::text(text));
    }
    let blob = vec![7u8; 100_000];
    within("websocket send", ws.send(Message::binary(blob.clone()))).await.expect("send");
    let echoed = within("websocket echo", ws.next()).await.expect("a message").expect("ok");
    assert_eq!(echoed, Message::binary(blob));
    within("websocket close", ws.close(None)).await.expect("close");
    assert_eq!(proxy.pool().closed(CloseReason::Upgraded), 1);
    // The upgraded connection left the pool: a plain request needs a new one.
    let mut client = proxy.client().await;
    assert_eq!(client.get("/plain").await.status, StatusCode::OK);
    assert_eq!(origin.accepted(), 2);
    assert_eq!(origin.paths(), ["/upgrade", "/plain"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_upgrade_carries_bytes_both_ways() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    client
        .send("GET /upgrade HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
        .await;
    let resp = client.response().await;
    assert_eq!(resp.status, 101);
    assert_eq!(resp.header("upgrade"), Some("echo"));
    // Origin to client, unprompted.
    assert_eq!(client.read_exact(18).await, b"hello from origin\n");
    // Client to origin and back.
    for msg in ["ping\n", "a longer line of bytes\n"] {
        client.send(msg).await;
        assert_eq!(client.read_exact(msg.len()).await, msg.as_bytes());
    }
    assert_eq!(proxy.pool().closed(CloseReason::Upgraded), 1);
    let mut plain = proxy.client().await;
    assert_eq!(plain.get("/plain").await.status, StatusCode::OK);
    assert_eq!(origin.accepted(), 2);
    let upgrade = &origin.requests()[0];
    assert_eq!(upgrade.header("upgrade"), Some("echo"));
    assert!(upgrade.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("upgrade")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declined_upgrade_is_an_ordinary_exchange_on_a_reused_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    // The echo route ignores Upgrade and answers 200.
    client
        .send("GET /declined HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
        .await;
    assert_eq!(client.response().await.status, 200);
    client.send("GET /next HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let next = client.response().await;
    assert_eq!((next.status, next.header("x-path")), (200, Some("/next")));
    assert_eq!(origin.accepted(), 1);
    assert_eq!(proxy.pool().closed(CloseReason::Upgraded), 0);
}
