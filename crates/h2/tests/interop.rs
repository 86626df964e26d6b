//! Interoperability of the engine (`holdfast_h2::conn`) with real HTTP/2 implementations
//! over real sockets on 127.0.0.1: curl, nghttp, h2load and Node's `http2` as clients
//! of the engine's server role, the h2 crate in both roles, and the engine against
//! itself. Every wait is bounded, and every test asserts exact results: statuses, byte
//! counts, bodies compared byte for byte (or by checksum across a process boundary),
//! trailers, connections.
//!
//! The external tools may be missing on a developer machine: a test that needs one then
//! prints that it skipped, except under `CI=true`, where it fails instead.

mod driver;
/// The fuzzers' reproducible random numbers.
mod support;
mod tool;

use std::collections::BTreeMap;
use std::future::poll_fn;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use driver::client::{self, Exchange, Expect, Outcome};
use driver::origin::{Origin, TRAILERS_BODY_LEN};
use driver::{checksum, field, pattern, within};
use holdfast_h2::conn::Config;
use support::Rng;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tool::{have, have_python_module, path, run_tool, scratch, stdout};

const MIB: usize = 1024 * 1024;

// ---- curl ------------------------------------------------------------------------------

#[tokio::test]
async fn curl_downloads_a_mebibyte() {
    if !have("curl") {
        return;
    }
    let origin = Origin::start(Config::default()).await;
    let body = scratch("curl_downloads_a_mebibyte").join("body");
    let url = origin.url(&format!("/size/{MIB}"));
    let out = run_tool("curl", &[&curl_args(), &["-o", path(&body), &url][..]].concat()).await;
    assert_eq!(stdout(&out), format!("200 2 0 {MIB}\n"));
    assert_same_bytes("curl's download", &std::fs::read(&body).unwrap(), &pattern(MIB));
    assert_clean(&origin).await;
}

#[tokio::test]
async fn curl_posts_three_mebibytes_to_echo_and_gets_them_back() {
    if !have("curl") {
        return;
    }
    let origin = Origin::start(Config::default()).await;
    let dir = scratch("curl_posts_three_mebibytes_to_echo_and_gets_them_back");
    let (upload, echoed) = (dir.join("upload"), dir.join("echoed"));
    let sent = random_bytes(&mut Rng::new(3), 3 * MIB);
    std::fs::write(&upload, &sent).unwrap();
    let data = format!("@{}", path(&upload));
    let url = origin.url("/echo");
    let args = ["--data-binary", &data, "-o", path(&echoed), &url];
    let out = run_tool("curl", &[&curl_args(), &args[..]].concat()).await;
    assert_eq!(stdout(&out), format!("200 2 {} {}\n", 3 * MIB, 3 * MIB));
    assert_same_bytes("curl's echo", &std::fs::read(&echoed).unwrap(), &sent);
    assert_clean(&origin).await;
}

/// curl over HTTP/2 without upgrade, printing status, HTTP version, bytes sent and got.
fn curl_args() -> Vec<&'static str> {
    let write_out = "%{http_code} %{http_version} %{size_upload} %{size_download}\\n";
    vec!["-sS", "--http2-prior-knowledge", "--max-time", "20", "-w", write_out]
}

// ---- nghttp ------------------------------------------------------------------------------

#[tokio::test]
async fn nghttp_sends_extra_fields_and_posts_a_body() {
    if !have("nghttp") {
        return;
    }
    let origin = Origin::start(Config::default()).await;
    // A GET with extra fields and a small stream window (2^14 - 1): the answer comes in
    // many windows' worth.
    let url = origin.url("/size/70000");
    let extras = ["-H", "x-interop: nghttp", "-H", "user-agent: holdfast-interop"];
    let out = run_tool("nghttp", &[&["-v", "-w", "14"][..], &extras, &[&url]].concat()).await;
    let log = NghttpLog::parse(&out);
    assert_eq!(log.statuses, ["200"]);
    assert_eq!(log.data_bytes.values().sum::<usize>(), 70_000);
    let request = &origin.requests()[0];
    assert!(request.fields.contains(&("x-interop".into(), "nghttp".into())), "{request:?}");
    assert!(request.fields.contains(&("user-agent".into(), "holdfast-interop".into())));
    // Without -v the body alone is nghttp's output.
    let out = run_tool("nghttp", &[&url]).await;
    assert_same_bytes("nghttp's download", &out.stdout, &pattern(70_000));

    let dir = scratch("nghttp_sends_extra_fields_and_posts_a_body");
    let upload = dir.join("upload");
    let sent = random_bytes(&mut Rng::new(7), 200_000);
    std::fs::write(&upload, &sent).unwrap();
    let url = origin.url("/echo");
    let out = run_tool("nghttp", &["-v", "-d", path(&upload), &url]).await;
    let log = NghttpLog::parse(&out);
    assert_eq!(log.statuses, ["200"]);
    assert_eq!(log.data_bytes.values().sum::<usize>(), sent.len());
    let out = run_tool("nghttp", &["-d", path(&upload), &url]).await;
    assert_same_bytes("nghttp's echo", &out.stdout, &sent);
    assert_eq!(origin.connections(), 4, "one connection per nghttp run");
    assert_clean(&origin).await;
}

#[tokio::test]
async fn nghttp_runs_twenty_concurrent_streams() {
    if !have("nghttp") {
        return;
    }
    let origin = Origin::start(Config::default()).await;
    let url = origin.url("/size/100000");
    let out = run_tool("nghttp", &["-v", "-n", "-m", "20", &url]).await;
    let log = NghttpLog::parse(&out);
    assert_eq!(log.statuses, vec!["200"; 20]);
    assert_eq!(log.data_bytes.len(), 20, "twenty streams carried DATA");
    assert!(log.data_bytes.values().all(|&n| n == 100_000), "{:?}", log.data_bytes);
    assert_eq!(origin.connections(), 1);
    assert_eq!(origin.requests().len(), 20);
    assert_clean(&origin).await;
}

/// What `nghttp -v` printed about the responses.
struct NghttpLog {
    statuses: Vec<String>,
    /// DATA payload bytes received, per stream.
    data_bytes: BTreeMap<usize, usize>,
}

impl NghttpLog {
    fn parse(out: &Output) -> NghttpLog {
        let text = String::from_utf8_lossy(&out.stdout);
        let mut statuses = Vec::new();
        let mut data_bytes = BTreeMap::new();
        for line in text.lines() {
            if let Some((_, status)) = line.split_once(":status: ") {
                statuses.push(status.trim().to_owned());
            }
            if let Some(rest) = line.split_once("recv DATA frame <length=").map(|(_, r)| r) {
                let number = |s: &str| s.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok();
                let len: usize = number(rest).expect("a DATA frame's length");
                let id = rest.split_once("stream_id=").and_then(|(_, s)| number(s)).expect("id");
                *data_bytes.entry(id).or_insert(0) += len;
            }
        }
        NghttpLog { statuses, data_bytes }
    }
}

// ---- h2load ------------------------------------------------------------------------------

#[tokio::test]
async fn h2load_completes_two_thousand_requests_on_four_connections() {
    if !have("h2load") {
        return;
    }
    let origin = Origin::start(Config::default()).await;
    let url = origin.url("/size/1000");
    let out = run_tool("h2load", &["-n", "2000", "-c", "4", "-m", "20", &url]).await;
    let text = stdout(&out);
    let line = text.lines().find(|l| l.starts_with("requests: ")).expect("h2load's requests line");
    assert_eq!(
        line,
        "requests: 2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, 0 errored, \
         0 timeout"
    );
    assert!(text.contains("status codes: 2000 2xx, 0 3xx, 0 4xx, 0 5xx"), "{text}");
    assert!(text.contains("1.91MB (2000000) data"), "{text}");
    assert_eq!(origin.connections(), 4);
    assert_clean(&origin).await;
}

// ---- Node's http2 ------------------------------------------------------------------------

/// Ten requests on one session; for each, the script prints `path status length
/// checksum grpc-status` (FNV-1a 32, as `driver::checksum`). POST bodies: byte `i` is
/// `(i * 31 + 7) % 256`.
const NODE_CLIENT: &str = r#"
const http2 = require('http2');
const session = http2.connect(process.argv[1]);
const fnv = (h, chunk) => {
  for (const b of chunk) { h = Math.imul(h ^ b, 0x01000193) >>> 0; }
  return h;
};
const body = (n) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + 7) % 256));
const requests = [
  ['GET', '/size/0'], ['GET', '/size/1'], ['GET', '/size/16384'], ['GET', '/size/65536'],
  ['GET', '/size/300000'], ['POST', '/echo', 0], ['POST', '/echo', 70000],
  ['POST', '/echo', 250000], ['GET', '/trailers'], ['GET', '/missing'],
];
const timer = setTimeout(() => { console.error('timeout'); process.exit(2); }, 15000);
let left = requests.length;
const lines = [];
requests.forEach(([method, path, size], n) => {
  const req = session.request({ ':method': method, ':path': path });
  let status = 0, len = 0, sum = 0x811c9dc5, grpc = '-';
  req.on('response', (h) => { status = h[':status']; });
  req.on('trailers', (t) => { grpc = t['grpc-status']; });
  req.on('data', (c) => { len += c.length; sum = fnv(sum, c); });
  req.on('error', (e) => { console.error(path, e); process.exit(1); });
  req.on('end', () => {
    lines[n] = `${path} ${status} ${len} ${sum} ${grpc}`;
    if (--left === 0) { clearTimeout(timer); console.log(lines.join('\n')); session.close(); }
  });
  req.end(size === undefined ? undefined : body(size));
});
"#;

#[tokio::test]
async fn node_makes_ten_requests_on_one_session() {
    if !have("node") {
        return;
    }
    let origin = Origin::start(Config::default()).await;
    let url = origin.url("");
    let out = run_tool("node", &["-e", NODE_CLIENT, &url]).await;
    let node_body = |n: usize| (0..n).map(|i| ((i * 31 + 7) % 256) as u8).collect::<Vec<_>>();
    let line = |path: &str, status: u16, body: &[u8], grpc: &str| {
        format!("{path} {status} {} {} {grpc}", body.len(), checksum(body))
    };
    let mut expected: Vec<String> = [0, 1, 16_384, 65_536, 300_000]
        .iter()
        .map(|&n| line(&format!("/size/{n}"), 200, &pattern(n), "-"))
        .collect();
    for n in [0, 70_000, 250_000] {
        expected.push(line("/echo", 200, &node_body(n), "-"));
    }
    expected.push(line("/trailers", 200, &pattern(TRAILERS_BODY_LEN), "0"));
    expected.push(line("/missing", 404, b"", "-"));
    let got: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    assert_eq!(got, expected);
    assert_eq!(origin.connections(), 1);
    assert_clean(&origin).await;
}

// ---- Python: the h2 library and grpcio as clients ------------------------------------

/// A client on Python's `h2` library (a state machine like ours, over a plain socket):
/// six streams at once on one connection, then a line per stream: path, status, body
/// length, checksum (the sum of the bytes modulo 2^32) and the `grpc-status` trailer.
const PYTHON_H2_CLIENT: &str = r#"
import socket, sys
import h2.connection, h2.events
host, port = sys.argv[1], int(sys.argv[2])
sock = socket.create_connection((host, port), timeout=20)
conn = h2.connection.H2Connection()
conn.initiate_connection()
conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16384})
asks = [("GET", "/size/0", b""), ("GET", "/size/100000", b""), ("GET", "/trailers", b""),
        ("POST", "/echo", bytes(i % 251 for i in range(90000))), ("GET", "/missing", b""),
        ("POST", "/echo", b"")]
streams = {}
for method, path, body in asks:
    sid = conn.get_next_available_stream_id()
    headers = [(":method", method), (":scheme", "http"), (":path", path),
               (":authority", f"{host}:{port}")]
    conn.send_headers(sid, headers, end_stream=not body)
    streams[sid] = {"path": path, "body": bytearray(), "status": None, "grpc": "-", "up": body}
sock.sendall(conn.data_to_send())
open_ = set(streams)
while open_:
    # Uploads go as the window allows.
    for sid in list(open_):
        s = streams[sid]
        if s["up"]:
            n = min(len(s["up"]), conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            if n > 0:
                chunk, s["up"] = s["up"][:n], s["up"][n:]
                conn.send_data(sid, chunk, end_stream=not s["up"])
    sock.sendall(conn.data_to_send())
    data = sock.recv(65536)
    if not data:
        break
    for event in conn.receive_data(data):
        if isinstance(event, h2.events.ResponseReceived):
            streams[event.stream_id]["status"] = dict(event.headers)[b":status"].decode()
        elif isinstance(event, h2.events.DataReceived):
            streams[event.stream_id]["body"] += event.data
            conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.TrailersReceived):
            streams[event.stream_id]["grpc"] = dict(event.headers).get(b"grpc-status", b"-").decode()
        elif isinstance(event, h2.events.StreamEnded):
            open_.discard(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            print(f"reset {event.stream_id} {event.error_code}")
            open_.discard(event.stream_id)
    sock.sendall(conn.data_to_send())
for sid in sorted(streams):
    s = streams[sid]
    print(s["path"], s["status"], len(s["body"]), sum(s["body"]) % 2**32, s["grpc"])
"#;

#[tokio::test]
async fn python_h2_runs_six_streams_with_uploads_through_small_windows() {
    if !have_python_module("h2", "h2") {
        return;
    }
    let origin = Origin::start(Config::default()).await;
    let port = origin.addr.port().to_string();
    let out = run_tool("python3", &["-c", PYTHON_H2_CLIENT, "127.0.0.1", &port]).await;
    let sum = |body: &[u8]| body.iter().map(|&b| u64::from(b)).sum::<u64>() % (1 << 32);
    let upload: Vec<u8> = (0..90_000u32).map(|i| (i % 251) as u8).collect();
    let trailers_body = pattern(TRAILERS_BODY_LEN);
    let expected = [
        "/size/0 200 0 0 -".to_owned(),
        format!("/size/100000 200 100000 {} -", sum(&pattern(100_000))),
        format!("/trailers 200 {TRAILERS_BODY_LEN} {} 0", sum(&trailers_body)),
        format!("/echo 200 90000 {} -", sum(&upload)),
        "/missing 404 0 0 -".to_owned(),
        "/echo 200 0 0 -".to_owned(),
    ];
    let text = stdout(&out);
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(got, expected);
    assert_eq!(origin.connections(), 1);
    assert_clean(&origin).await;
}

/// A grpcio client of the origin's echo service, with raw bytes for messages (no
/// protobuf): unary calls, then a bidirectional stream; a line per call saying what
/// came back.
const PYTHON_GRPC_CLIENT: &str = r#"
import sys
import grpc
channel = grpc.insecure_channel(sys.argv[1])
unary = channel.unary_unary("/interop.Echo/Unary")
for size in (0, 1, 5000, 300000):
    message = bytes((i * 7) % 256 for i in range(size))
    reply = unary(message, timeout=20)
    print("unary", size, reply == message)
stream = channel.stream_stream("/interop.Echo/Stream")
messages = [bytes([i]) * (i * 100) for i in range(1, 41)]
replies = list(stream(iter(messages), timeout=20))
print("stream", len(replies), replies == messages)
"#;

#[tokio::test]
async fn grpcio_makes_unary_and_streaming_calls() {
    if !have_python_module("grpc", "grpcio") {
        return;
    }
    let origin = Origin::start(Config::default()).await;
    let target = format!("127.0.0.1:{}", origin.addr.port());
    let out = run_tool("python3", &["-c", PYTHON_GRPC_CLIENT, &target]).await;
    let text = stdout(&out);
    let got: Vec<&str> = text.lines().collect();
    let expected =
        ["unary 0 True", "unary 1 True", "unary 5000 True", "unary 300000 True", "stream 40 True"];
    assert_eq!(got, expected);
    let calls = origin.requests().iter().filter(|r| r.path.starts_with("/interop.Echo/")).count();
    assert_eq!(calls, 5, "each call reached the origin once");
    assert_clean(&origin).await;
}

// ---- The h2 crate as client --------------------------------------------------------------

#[tokio::test]
async fn h2_client_echoes_a_hundred_streams_through_small_windows() {
    let origin = Origin::start(Config::default()).await;
    let socket = TcpStream::connect(origin.addr).await.unwrap();
    // Small windows on the client's side: the engine's answers stall on them, so the
    // echo's release-once-sent-back holds the uploads back too. At most 100 streams
    // before the server's SETTINGS (h2 opens any number until then; the engine's
    // limit is 100, and the 101st would be refused: the next test).
    let (client, connection) = h2::client::Builder::new()
        .initial_max_send_streams(100)
        .initial_window_size(8 * 1024)
        .initial_connection_window_size(64 * 1024)
        .handshake::<_, Bytes>(socket)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let mut rng = Rng::new(100);
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let len = rng.below(300_000 + 1);
        let body = random_bytes(&mut rng, len);
        calls.spawn(h2_echo(client.clone(), origin.url("/echo"), body));
    }
    let trailers = tokio::spawn(h2_get_trailers(client.clone(), origin.url("/trailers")));
    let mut echoed = 0;
    while let Some(result) = within("the h2 client's echoes", calls.join_next()).await {
        result.unwrap();
        echoed += 1;
    }
    assert_eq!(echoed, 100);
    within("GET /trailers", trailers).await.unwrap();
    drop(client);
    within("the h2 client's connection", connection).await.unwrap().unwrap();
    assert_eq!(origin.connections(), 1);
    assert_eq!(origin.requests().len(), 101);
    assert_clean(&origin).await;
}

#[tokio::test]
async fn h2_client_opening_four_hundred_streams_at_once_has_the_excess_refused_not_cut_off() {
    // Until the server's SETTINGS come, the h2 crate opens every stream it is asked for:
    // the engine refuses those past its limit (100) with REFUSED_STREAM, which says
    // they may be sent again, and the connection goes on. (The engine used to count
    // these refusals as the client's errors and end the connection at 256.)
    let origin = Origin::start(Config::default()).await;
    let socket = TcpStream::connect(origin.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(socket).await.unwrap();
    let connection = tokio::spawn(connection);
    let url = origin.url("/size/1000");
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..400 {
        calls.spawn(h2_get(client.clone(), url.clone()));
    }
    let (mut answered, mut refused) = (0, 0);
    while let Some(result) = within("400 GETs from the h2 client", calls.join_next()).await {
        match result.unwrap() {
            Ok(body) => {
                assert_same_bytes("/size/1000", &body, &pattern(1000));
                answered += 1;
            }
            Err(Some(h2::Reason::REFUSED_STREAM)) => {
                refused += 1;
                // Sent again on the same connection: its limit is known now.
                calls.spawn(h2_get(client.clone(), url.clone()));
            }
            Err(other) => panic!("a GET failed: {other:?}"),
        }
    }
    eprintln!("400 GETs: {refused} refused and sent again");
    assert_eq!(answered, 400);
    drop(client);
    within("the h2 client's connection", connection).await.unwrap().unwrap();
    assert_eq!(origin.connections(), 1);
    assert_clean(&origin).await;
}

/// GETs `url` with the h2 crate: the body of a 200, or the reason the stream failed.
async fn h2_get(
    client: h2::client::SendRequest<Bytes>,
    url: String,
) -> Result<Bytes, Option<h2::Reason>> {
    let mut client = client.ready().await.map_err(|e| e.reason())?;
    let request = http::Request::get(url).body(()).unwrap();
    let (response, _) = client.send_request(request, true).map_err(|e| e.reason())?;
    let response = response.await.map_err(|e| e.reason())?;
    assert_eq!(response.status(), 200);
    Ok(read_h2_body(&mut response.into_body()).await)
}

/// POSTs `body` with the h2 crate, reading the response while the body goes, and
/// checks the response is 200 with the same body.
async fn h2_echo(client: h2::client::SendRequest<Bytes>, url: String, body: Bytes) {
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post(url).body(()).unwrap();
    let (response, send) = client.send_request(request, false).unwrap();
    let upload = send_h2_body(send, body.clone(), None);
    let download = async {
        let response = response.await.unwrap();
        assert_eq!(response.status(), 200);
        read_h2_body(&mut response.into_body()).await
    };
    let ((), got) = tokio::join!(upload, download);
    assert_same_bytes("the echo", &got, &body);
}

async fn h2_get_trailers(client: h2::client::SendRequest<Bytes>, url: String) {
    let mut client = client.ready().await.unwrap();
    let request = http::Request::get(url).body(()).unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let got = read_h2_body(&mut body).await;
    assert_same_bytes("/trailers", &got, &pattern(TRAILERS_BODY_LEN));
    let trailers = body.trailers().await.unwrap().expect("trailers");
    assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]));
    assert_eq!(trailers.len(), 1);
}

/// Sends `body` on an h2 stream as its window allows, then `trailers` if any.
async fn send_h2_body(
    mut send: h2::SendStream<Bytes>,
    mut body: Bytes,
    trailers: Option<http::HeaderMap>,
) {
    if body.is_empty() && trailers.is_none() {
        send.send_data(Bytes::new(), true).unwrap();
    }
    while !body.is_empty() {
        send.reserve_capacity(body.len());
        let room = poll_fn(|cx| send.poll_capacity(cx)).await.expect("stream open").unwrap();
        let chunk = body.split_to(room.min(body.len()));
        if !chunk.is_empty() {
            send.send_data(chunk, body.is_empty() && trailers.is_none()).unwrap();
        }
    }
    if let Some(trailers) = trailers {
        send.send_trailers(trailers).unwrap();
    }
}

/// Reads an h2 body to its end, giving its window back as it goes.
async fn read_h2_body(body: &mut h2::RecvStream) -> Bytes {
    let mut got = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        got.extend_from_slice(&chunk);
    }
    got.freeze()
}

// ---- The h2 crate as server --------------------------------------------------------------

#[tokio::test]
async fn engine_client_retries_what_an_h2_server_refused_until_all_fifty_complete() {
    let server = H2Server::start().await;
    let mut rng = Rng::new(50);
    let exchanges: Vec<Exchange> = (0..50)
        .map(|i| {
            let len = rng.below(100_000 + 1);
            let mut exchange = Exchange::echo(&format!("/h2/{i}"), random_bytes(&mut rng, len));
            exchange.fields.push(field("x-request", &i.to_string()));
            exchange
        })
        .collect();
    let mut answered = vec![0; exchanges.len()];
    let mut todo: Vec<usize> = (0..exchanges.len()).collect();
    let mut refused = 0;
    let mut reports = Vec::new();
    while !todo.is_empty() {
        assert!(
            reports.len() < 10,
            "still {} to send after {} connections",
            todo.len(),
            reports.len()
        );
        let batch: Vec<Exchange> = todo.iter().map(|&i| exchanges[i].clone()).collect();
        let what = "an engine client's connection to the h2 server";
        let report =
            within(what, client::exchange(server.addr, Config::default(), batch, 100)).await;
        assert_eq!(report.end.error, None, "{report:?}");
        let mut retry = Vec::new();
        for (&i, outcome) in todo.iter().zip(&report.outcomes) {
            match outcome {
                Outcome::Answered(r) => {
                    assert_eq!(r.status, 200, "exchange {i}: {r:?}");
                    assert!(r.body_ok(), "exchange {i}: {r:?}");
                    let sum = checksum(&exchanges[i].body).to_string();
                    assert_eq!(r.trailers, [("x-checksum".to_owned(), sum)], "exchange {i}");
                    answered[i] += 1;
                }
                o if o.is_retryable() => {
                    refused += usize::from(matches!(o, Outcome::Refused));
                    retry.push(i);
                }
                other => panic!("exchange {i}: {other:?}"),
            }
        }
        let done = todo.len() - retry.len();
        let go_aways = &report.go_aways;
        let n = reports.len() + 1;
        let again = retry.len();
        eprintln!("connection {n}: {done} answered, {again} to send again, GOAWAY {go_aways:?}");
        reports.push(report);
        todo = retry;
    }
    assert!(answered.iter().all(|&n| n == 1), "answered: {answered:?}");
    let mut processed = server.processed();
    processed.sort_unstable();
    assert_eq!(processed, (0..50).collect::<Vec<_>>(), "each processed exactly once");
    // The first connection's GOAWAY named stream 0: every stream refused by it. Later
    // ones refused what went past their limit of 10 streams with RST_STREAM.
    assert_eq!(reports[0].go_aways, [0]);
    assert!(reports[0].outcomes.iter().all(|o| matches!(o, Outcome::Refused)));
    assert!(refused > 50, "refused {refused}: by GOAWAY and by RST_STREAM");
    assert!(reports[1..].iter().any(|r| r.go_aways.len() == 2), "a graceful GOAWAY (two frames)");
    assert_eq!(server.connections(), reports.len());
}

/// An h2 crate server answering `POST` with its body echoed and `x-checksum` trailers,
/// at most 10 streams at a time. Its first connection goes away at once (GOAWAY with
/// last stream 0); the others go away gracefully after 8 streams.
struct H2Server {
    addr: std::net::SocketAddr,
    /// The `x-request` of every request it accepted.
    processed: Arc<Mutex<Vec<usize>>>,
    connections: Arc<Mutex<usize>>,
    accept: tokio::task::JoinHandle<()>,
}

impl H2Server {
    async fn start() -> H2Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let processed = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let (seen, count) = (Arc::clone(&processed), Arc::clone(&connections));
        let accept = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let n = {
                    let mut count = count.lock().unwrap();
                    *count += 1;
                    *count
                };
                tokio::spawn(serve_h2(socket, n == 1, Arc::clone(&seen)));
            }
        });
        H2Server { addr, processed, connections, accept }
    }

    fn processed(&self) -> Vec<usize> {
        self.processed.lock().unwrap().clone()
    }

    fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }
}

impl Drop for H2Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Serves one connection; the socket is only lent to h2, and read to its end after, so
/// that closing it does not reset what the client still has to read.
async fn serve_h2(mut socket: TcpStream, go_away_at_once: bool, processed: Arc<Mutex<Vec<usize>>>) {
    let mut builder = h2::server::Builder::new();
    builder.max_concurrent_streams(10);
    let mut connection = builder.handshake::<_, Bytes>(&mut socket).await.unwrap();
    if go_away_at_once {
        connection.abrupt_shutdown(h2::Reason::NO_ERROR);
    }
    let mut accepted = 0;
    while let Some(request) = connection.accept().await {
        let (request, respond) = request.unwrap();
        let id = request.headers()["x-request"].to_str().unwrap().parse().unwrap();
        processed.lock().unwrap().push(id);
        accepted += 1;
        if accepted == 8 {
            connection.graceful_shutdown();
        }
        tokio::spawn(answer_h2(request, respond));
    }
    let _ = poll_fn(|cx| connection.poll_closed(cx)).await;
    drop(connection);
    let mut sink = vec![0u8; 64 * 1024];
    while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
}

/// Reads the request body, then sends it back with its checksum in trailers.
async fn answer_h2(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let body = read_h2_body(&mut request.into_body()).await;
    let send = respond.send_response(http::Response::new(()), false).unwrap();
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-checksum", checksum(&body).to_string().parse().unwrap());
    send_h2_body(send, body, Some(trailers)).await;
}

// ---- The engine against itself -----------------------------------------------------------

#[tokio::test]
async fn engine_client_and_server_carry_a_thousand_streams_on_one_connection() {
    let origin = Origin::start(Config::default()).await;
    let mut rng = Rng::new(1000);
    let mut exchanges: Vec<Exchange> = (0..1000)
        .map(|i| {
            // Mostly small bodies, some large ones, a few of exactly 1 MB and of 0.
            let len = match i % 50 {
                0 => MIB,
                1 => 0,
                _ => rng.below(MIB + 1) >> rng.below(8),
            };
            match i % 2 {
                0 => Exchange::echo("/echo", random_bytes(&mut rng, len)),
                _ => Exchange::get(&format!("/size/{len}"), Expect::Pattern(len)),
            }
        })
        .collect();
    // A head over the server's header list limit (64 KiB) is answered 431.
    let mut too_large = Exchange::get("/size/10", Expect::Bytes(Bytes::new()));
    too_large.fields.push(field("x-large", &"a".repeat(70_000)));
    exchanges.push(too_large);
    // A 404 answered before the request's 1 MB body is sent (RFC 9113 section 8.1):
    // the client cancels the rest.
    let mut early = Exchange::echo("/missing", random_bytes(&mut rng, MIB));
    early.expect = Expect::Bytes(Bytes::new());
    exchanges.push(early);
    let status = |i: usize| match i {
        1000 => 431,
        1001 => 404,
        _ => 200,
    };
    let total: usize = exchanges.iter().map(|e| e.body.len() + expected_len(&e.expect)).sum();
    eprintln!("{} streams, {} MB of bodies", exchanges.len(), total / MIB);
    let what = "1,002 streams between the engine's client and server";
    let report = within(
        what,
        client::exchange(origin.addr, Config::default(), exchanges.clone(), usize::MAX),
    )
    .await;
    assert_eq!(report.end.error, None);
    for (i, outcome) in report.outcomes.iter().enumerate() {
        let Outcome::Answered(r) = outcome else { panic!("exchange {i}: {outcome:?}") };
        assert_eq!(r.status, status(i), "exchange {i}");
        assert!(r.body_ok(), "exchange {i}: {r:?}");
        if let Expect::Pattern(len) = exchanges[i].expect {
            assert_eq!(r.fields, [("content-length".to_owned(), len.to_string())]);
        }
    }
    assert_eq!(origin.connections(), 1);
    assert_clean(&origin).await;
}

fn expected_len(expect: &Expect) -> usize {
    match expect {
        Expect::Bytes(b) => b.len(),
        Expect::Pattern(n) => *n,
    }
}

// ---- Checks -----------------------------------------------------------

/// Waits until every connection of `origin` has ended, and checks none ended in an I/O
/// error or a connection error.
async fn assert_clean(origin: &Origin) {
    within("the origin's connections to end", async {
        while origin.ended() < origin.connections() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(origin.failures(), Vec::<String>::new());
}

/// `got` is `expected`, byte for byte; a failure names the first difference.
#[track_caller]
fn assert_same_bytes(what: &str, got: &[u8], expected: &[u8]) {
    if got != expected {
        let at = got
            .iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(expected.len()));
        panic!(
            "{what}: {} bytes (checksum {:#x}), expected {} (checksum {:#x}); first \
             difference at {at}",
            got.len(),
            checksum(got),
            expected.len(),
            checksum(expected)
        );
    }
}

/// `len` random bytes, for request bodies.
fn random_bytes(rng: &mut Rng, len: usize) -> Bytes {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len);
    Bytes::from(out)
}
