//! Per-client fairness: while a backend is crowded, a client address (or an HTTP/2
//! client connection) that holds more than its share of the backend's connections comes
//! second: its further requests wait in a queue of their own, behind everyone else's,
//! and never take the last quarter of the connections, which stays for the others.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use tokio::net::TcpSocket;

use crate::support::{group_config, wait_until, within, Origin, Proxy, RawClient, DEADLINE};

/// A raw client connection to `proxy` from the loopback address `from`.
async fn client_from(from: Ipv4Addr, proxy: SocketAddr) -> RawClient {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0)).expect("bind a loopback address");
    RawClient::from_stream(socket.connect(proxy).await.expect("connect to holdfast"))
}

const GREEDY: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const OTHER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

fn config(origin: &Origin) -> holdfast::Config {
    group_config(
        &[origin.addr()],
        "[upstream.app.pool]\nmax_connections_per_server = 8\nqueue_size = 8\nqueue_timeout = \"5s\"\n",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_client_cannot_take_every_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config(&origin)).await;
    // One address sends as many held requests as the backend has connections.
    let mut greedy = Vec::new();
    for _ in 0..8 {
        let mut client = client_from(GREEDY, proxy.addr()).await;
        client.send("GET /hold/greedy HTTP/1.1\r\nHost: t\r\n\r\n").await;
        greedy.push(client);
    }
    // Six reach the origin (the backend is crowded from three quarters of its eight
    // connections on); the other two wait in the greedy address's own queue.
    wait_until("six held requests at the origin", DEADLINE, || origin.count_path("/hold") == 6)
        .await;
    // Another client is served meanwhile, not queued behind the greedy one.
    let mut other = client_from(OTHER, proxy.addr()).await;
    other.send("GET /bytes/10 HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let reply = within("the other client's answer", other.response()).await;
    assert_eq!(reply.status, 200, "{}", reply.body_text());
    assert_eq!(origin.count_path("/hold"), 6, "the greedy ones still wait for their turn");
    // Once the held requests end, the greedy client's waiting ones go too.
    origin.release("greedy");
    for client in &mut greedy {
        let reply = within("a greedy request's answer", client.response()).await;
        assert_eq!(reply.status, 200, "{}", reply.body_text());
    }
    assert_eq!(origin.count_path("/hold"), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_alone_may_use_most_of_a_backend() {
    // Nobody else wants it: a single address gets three quarters of the connections,
    // and its further requests wait (then time out) in the second class's queue, which
    // takes no more than half the queue.
    let origin = Origin::start().await;
    let proxy = Proxy::start(group_config(
        &[origin.addr()],
        "[upstream.app.pool]\nmax_connections_per_server = 8\nqueue_size = 8\nqueue_timeout = \"1s\"\n",
    ))
    .await;
    // One after another, so that the seventh is the one over the share.
    let mut clients = Vec::new();
    for i in 1..=6 {
        let mut client = client_from(GREEDY, proxy.addr()).await;
        client.send("GET /hold/all HTTP/1.1\r\nHost: t\r\n\r\n").await;
        wait_until("it reaches the origin", DEADLINE, || origin.count_path("/hold") == i).await;
        clients.push(client);
    }
    let mut seventh = client_from(GREEDY, proxy.addr()).await;
    seventh.send("GET /hold/all HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let reply = within("the seventh's answer", seventh.response()).await;
    assert_eq!(reply.status, 503, "{}", reply.body_text());
    assert!(reply.body_text().contains("stayed busy"), "{}", reply.body_text());
    origin.release("all");
    for client in &mut clients {
        assert_eq!(within("an answer", client.response()).await.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_client_left_stops_waiting_for_a_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(crate::support::http2::h2_config(
        "h2c = true",
        &[origin.addr().to_string()],
        "[upstream.app.pool]\nmax_connections_per_server = 1\nqueue_timeout = \"30s\"\n",
        "",
    ))
    .await;
    let mut busy = RawClient::connect(proxy.addr()).await;
    busy.send("GET /hold/busy HTTP/1.1\r\nHost: t\r\n\r\n").await;
    wait_until("the connection is busy", DEADLINE, || origin.count_path("/hold") == 1).await;
    // An HTTP/1.1 client that leaves while queued.
    let mut gone = RawClient::connect(proxy.addr()).await;
    gone.send("GET /gone HTTP/1.1\r\nHost: t\r\n\r\n").await;
    wait_until("it waits", DEADLINE, || proxy.pool().waiting == 1).await;
    drop(gone);
    wait_until("it no longer waits", DEADLINE, || proxy.pool().waiting == 0).await;
    // An HTTP/2 client that resets its stream while queued.
    let h2 = crate::support::http2::H2Client::connect(proxy.addr()).await;
    let (response, stream) = h2.start_post("/reset").await;
    wait_until("the stream waits", DEADLINE, || proxy.pool().waiting == 1).await;
    drop((response, stream));
    wait_until("the stream no longer waits", DEADLINE, || proxy.pool().waiting == 0).await;
    origin.release("busy");
    assert_eq!(within("the held answer", busy.response()).await.status, 200);
    let reply = proxy.client().await.get("/after").await;
    assert_eq!(reply.status, 200);
    assert_eq!(origin.count_path("/gone") + origin.count_path("/reset"), 0, "nobody's requests");
}
