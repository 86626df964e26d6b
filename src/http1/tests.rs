use std::mem::MaybeUninit;

use super::chunked::{Chunked, InvalidChunk};
use super::encode::{self, BodyOut, ConnectionOut, Forwarding};
use super::request::{self, FramingViolation, Refusal};
use super::response::{self, BadResponse};
use super::{Framing, Version};

const MAX_HEAD: usize = 32 * 1024;

/// Parses `head` as a request and hands the result to `check`.
fn with_request<T>(
    head: &[u8],
    check: impl FnOnce(Result<Option<request::Request<'_, '_>>, Refusal>) -> T,
) -> T {
    let mut storage = [const { MaybeUninit::uninit() }; 64];
    check(request::parse(head, &mut storage, MAX_HEAD))
}

fn refusal(head: &[u8]) -> Option<Refusal> {
    with_request(head, |r| r.err())
}

fn framing(head: &[u8]) -> Framing {
    with_request(head, |r| r.expect("valid").expect("complete").framing)
}

#[test]
fn content_length_with_transfer_encoding_is_refused_in_either_order() {
    for head in [
        &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        &b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"[..],
    ] {
        let refused = Refusal::Framing(FramingViolation::ContentLengthWithTransferEncoding);
        assert_eq!(refusal(head), Some(refused));
    }
}

#[test]
fn conflicting_or_invalid_content_length_is_refused() {
    let conflicting = b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n";
    assert_eq!(
        refusal(conflicting),
        Some(Refusal::Framing(FramingViolation::ConflictingContentLength))
    );
    for value in ["-1", "1,1", "0x10", "", "99999999999999999999"] {
        let head = format!("POST / HTTP/1.1\r\nContent-Length: {value}\r\n\r\n");
        assert_eq!(
            refusal(head.as_bytes()),
            Some(Refusal::Framing(FramingViolation::InvalidContentLength)),
            "{value:?}"
        );
    }
    // Repeating the same value is allowed (RFC 9110, 8.6).
    let same = b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n";
    assert_eq!(framing(same), Framing::Length(3));
}

#[test]
fn transfer_encoding_must_end_in_chunked() {
    let gzip = b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n";
    assert_eq!(refusal(gzip), Some(Refusal::Framing(FramingViolation::TransferEncodingNotChunked)));
    let chunked_then_gzip =
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n";
    assert!(refusal(chunked_then_gzip).is_some());
    let gzip_chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n";
    assert_eq!(framing(gzip_chunked), Framing::Chunked);
}

#[test]
fn incomplete_heads_wait_and_oversized_heads_are_refused() {
    assert!(with_request(b"GET / HTTP/1.1\r\nHost: a\r\n", |r| r.expect("valid").is_none()));
    let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD));
    assert_eq!(refusal(long.as_bytes()), Some(Refusal::HeadTooLarge));
    let many: String = (0..65).map(|i| format!("x-{i}: 1\r\n")).collect();
    let head = format!("GET / HTTP/1.1\r\n{many}\r\n");
    assert_eq!(refusal(head.as_bytes()), Some(Refusal::TooManyHeaders));
    assert_eq!(refusal(b"GET / HTTP/1.1\r\nBad Header: 1\r\n\r\n"), Some(Refusal::Malformed));
    assert_eq!(refusal(b"CONNECT a:443 HTTP/1.1\r\n\r\n"), Some(Refusal::Connect));
}

#[test]
fn keep_alive_follows_version_and_connection_tokens() {
    let keep = |head: &[u8]| with_request(head, |r| r.unwrap().unwrap().keep_alive());
    assert!(keep(b"GET / HTTP/1.1\r\n\r\n"));
    assert!(!keep(b"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n"));
    assert!(!keep(b"GET / HTTP/1.0\r\n\r\n"));
    assert!(keep(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
}

#[test]
fn chunked_body_is_followed_across_splits_anywhere() {
    let body: &[u8] =
        b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: 1\r\n\r\n";
    let next = b"GET /next HTTP/1.1\r\n\r\n";
    let stream = [body, next].concat();
    for split in 1..stream.len() {
        let mut chunked = Chunked::new(1024);
        let mut used = 0;
        for piece in stream.chunks(split) {
            let (n, done) = chunked.scan(piece).expect("valid chunked body");
            used += n;
            if done {
                break;
            }
        }
        assert_eq!(used, body.len(), "split every {split} bytes");
        assert!(chunked.is_done());
    }
}

#[test]
fn chunked_payload_is_decoded_from_its_framing() {
    let body: &[u8] = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    let mut chunked = Chunked::new(1024);
    let mut payload = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let step = chunked.step(rest).expect("valid");
        payload.extend_from_slice(&rest[step.data.clone()]);
        rest = &rest[step.used..];
        if step.done {
            break;
        }
    }
    assert_eq!(payload, b"hello world");
    assert!(chunked.is_done() && rest.is_empty());
}

#[test]
fn malformed_chunks_are_refused() {
    for bad in [
        &b"zz\r\n"[..],
        b"5\nhello\r\n",             // bare LF after the size
        b"5\r\nhelloXY",             // no CRLF after the data
        b"5\r\nhello\r\n0\r\nbad\n", // bare LF in a trailer
        b"1234567890abcdef0\r\n",    // more hex digits than fit
        b"\r\n",                     // no size at all
    ] {
        assert_eq!(
            Chunked::new(1024).scan(bad),
            Err(InvalidChunk),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let huge_trailer = [&b"0\r\nx: "[..], &[b'a'; 100], b"\r\n\r\n"].concat();
    assert_eq!(Chunked::new(64).scan(&huge_trailer), Err(InvalidChunk));
}

/// The head `req` becomes upstream.
fn upstream_head(req: &[u8]) -> String {
    with_request(req, |r| {
        let req = r.expect("valid").expect("complete");
        let fwd = Forwarding { client_ip: "127.0.0.9", backend: "10.1.2.3:8080".parse().unwrap() };
        let mut out = Vec::new();
        encode::upstream_request(&req, &fwd, &mut out);
        String::from_utf8(out).expect("text")
    })
}

#[test]
fn upstream_head_drops_hop_by_hop_and_connection_named_headers() {
    let head = upstream_head(
        b"GET /a HTTP/1.1\r\nHost: example.test\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\n\
          Keep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Connection: keep-alive\r\n\
          Upgrade: websocket\r\nExpect: 100-continue\r\nAccept: */*\r\n\r\n",
    );
    assert_eq!(
        head,
        "GET /a HTTP/1.1\r\nHost: example.test\r\nAccept: */*\r\nx-forwarded-for: 127.0.0.9\r\n\
         x-forwarded-proto: http\r\nx-forwarded-host: example.test\r\n\r\n"
    );
}

#[test]
fn upstream_head_appends_to_forwarded_for_and_replaces_proto_and_host() {
    let head = upstream_head(
        b"GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\n\
          X-Forwarded-Proto: https\r\nX-Forwarded-Host: forged\r\n\r\n",
    );
    assert!(head.contains("x-forwarded-for: 10.0.0.1, 10.0.0.2, 127.0.0.9\r\n"), "{head}");
    assert!(head.contains("x-forwarded-proto: http\r\n") && !head.contains("https"), "{head}");
    assert!(head.contains("x-forwarded-host: h\r\n") && !head.contains("forged"), "{head}");
}

#[test]
fn upstream_head_is_origin_form_http11_with_a_host() {
    let abs = upstream_head(b"GET http://example.test/abs?q=1 HTTP/1.1\r\n\r\n");
    assert!(abs.starts_with("GET /abs?q=1 HTTP/1.1\r\nhost: example.test\r\n"), "{abs}");
    let old = upstream_head(b"GET /ten HTTP/1.0\r\n\r\n");
    assert!(old.starts_with("GET /ten HTTP/1.1\r\nhost: 10.1.2.3:8080\r\n"), "{old}");
    let bare = upstream_head(b"OPTIONS http://example.test HTTP/1.1\r\n\r\n");
    assert!(bare.starts_with("OPTIONS / HTTP/1.1\r\n"), "{bare}");
}

#[test]
fn upstream_head_keeps_chunked_framing_and_upgrade() {
    let chunked =
        upstream_head(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
    assert!(chunked.contains("Transfer-Encoding: gzip, chunked\r\n"), "{chunked}");
    let ws = upstream_head(
        b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
    );
    assert!(ws.ends_with("connection: upgrade\r\nupgrade: websocket\r\n\r\n"), "{ws}");
    // Upgrade without `Connection: upgrade` is not an upgrade.
    let half = upstream_head(b"GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n");
    assert!(!half.to_ascii_lowercase().contains("upgrade"), "{half}");
}

/// Parses `head` as a response to a GET (or HEAD) and writes the client's head.
fn client_head(resp: &[u8], head_request: bool, version: Version) -> (Framing, String) {
    let mut storage = [const { MaybeUninit::uninit() }; 32];
    let resp = response::parse(resp, &mut storage, head_request).expect("valid").expect("complete");
    let body = BodyOut::choose(resp.framing, version);
    let mut out = Vec::new();
    encode::client_response(&resp, body, ConnectionOut::KeepAlive, &mut out);
    (resp.framing, String::from_utf8(out).expect("text"))
}

#[test]
fn response_framing_follows_rfc_9112() {
    let date = "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n";
    let f =
        |head: String, head_request| client_head(head.as_bytes(), head_request, Version::Http11).0;
    assert_eq!(
        f(format!("HTTP/1.1 200 OK\r\n{date}Content-Length: 5\r\n\r\n"), false),
        Framing::Length(5)
    );
    assert_eq!(
        f(format!("HTTP/1.1 200 OK\r\n{date}Content-Length: 5\r\n\r\n"), true),
        Framing::Empty
    );
    assert_eq!(f(format!("HTTP/1.1 204 No Content\r\n{date}\r\n"), false), Framing::Empty);
    assert_eq!(
        f(format!("HTTP/1.1 304 Not Modified\r\n{date}Content-Length: 9\r\n\r\n"), false),
        Framing::Empty
    );
    assert_eq!(
        f(format!("HTTP/1.1 200 OK\r\n{date}Transfer-Encoding: chunked\r\n\r\n"), false),
        Framing::Chunked
    );
    assert_eq!(f(format!("HTTP/1.1 200 OK\r\n{date}\r\n"), false), Framing::UntilClose);
    let mut storage = [const { MaybeUninit::uninit() }; 8];
    let both = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(
        response::parse(both, &mut storage, false).err(),
        Some(BadResponse::AmbiguousLength)
    );
}

#[test]
fn client_head_drops_hop_by_hop_and_adds_a_date_when_missing() {
    let (_, head) = client_head(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n\
          Keep-Alive: timeout=5\r\nX-Kept: yes\r\n\r\n",
        false,
        Version::Http11,
    );
    assert!(
        head.starts_with("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Kept: yes\r\ndate: "),
        "{head}"
    );
    assert!(head.ends_with(" GMT\r\n\r\n"), "{head}");
}

#[test]
fn close_delimited_body_is_rechunked_for_http11_and_left_raw_for_http10() {
    let resp = b"HTTP/1.1 200 OK\r\nDate: x\r\n\r\n";
    let (_, chunked) = client_head(resp, false, Version::Http11);
    assert!(chunked.contains("transfer-encoding: chunked\r\n"), "{chunked}");
    assert_eq!(BodyOut::choose(Framing::Chunked, Version::Http10), BodyOut::CloseDelimited);
    let te = b"HTTP/1.1 200 OK\r\nDate: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n";
    let (_, passed) = client_head(te, false, Version::Http11);
    assert!(passed.contains("Transfer-Encoding: chunked\r\nTrailer: X-Sum\r\n"), "{passed}");
    let (_, decoded) = client_head(te, false, Version::Http10);
    assert!(!decoded.contains("chunked") && !decoded.contains("Trailer"), "{decoded}");
}

#[test]
fn local_response_and_chunk_lines_are_well_formed() {
    let mut out = Vec::new();
    encode::local_response(502, "holdfast: down\n", ConnectionOut::Close, &mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 15\r\ndate: "), "{text}");
    assert!(text.ends_with("connection: close\r\n\r\nholdfast: down\n"), "{text}");
    for (len, line) in [(0, "0\r\n"), (10, "a\r\n"), (0x1f2e, "1f2e\r\n")] {
        let mut out = Vec::new();
        encode::chunk_size_line(len, &mut out);
        assert_eq!(out, line.as_bytes());
    }
}

#[test]
fn heads_with_bare_lf_line_ends_go_on_with_crlf() {
    let head =
        upstream_head(b"GET /lf HTTP/1.1\nHost: h\nAccept: */*\nConnection: x-gone\nX-Gone: 1\n\n");
    assert_eq!(
        head,
        "GET /lf HTTP/1.1\r\nHost: h\r\nAccept: */*\r\nx-forwarded-for: 127.0.0.9\r\n\
         x-forwarded-proto: http\r\nx-forwarded-host: h\r\n\r\n"
    );
}

#[test]
fn header_lines_past_the_64th_are_tracked_too() {
    let many: String = (0..70).map(|i| format!("x-{i}: {i}\r\n")).collect();
    let req = format!("GET / HTTP/1.1\r\nHost: h\r\n{many}Connection: x-68\r\n\r\n");
    let mut storage = [const { MaybeUninit::uninit() }; 128];
    let parsed = request::parse(req.as_bytes(), &mut storage, MAX_HEAD).unwrap().unwrap();
    let fwd = Forwarding { client_ip: "127.0.0.9", backend: "10.1.2.3:8080".parse().unwrap() };
    let mut out = Vec::new();
    encode::upstream_request(&parsed, &fwd, &mut out);
    let head = String::from_utf8(out).unwrap();
    assert!(head.contains("x-67: 67\r\nx-69: 69\r\n"), "x-68 is named by Connection: {head}");
    assert!(!head.to_ascii_lowercase().contains("connection"), "{head}");
}
