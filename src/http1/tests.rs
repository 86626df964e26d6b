//! The request, response and chunked-body rules, each with the exact bytes.

#![allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use std::mem::MaybeUninit;

use super::chunked::{Chunked, InvalidChunk};
use super::encode::{self, BodyOut, ConnectionOut, Forwarding, PeerText};
use super::head::{HeadScan, Scan};
use super::request::{self, FramingViolation, HeadLimits, HostViolation, Refusal};
use super::response::{self, BadResponse, Early};
use super::{Framing, Version};

const LIMITS: HeadLimits = HeadLimits { max_line_bytes: 8192, max_head_bytes: 32 * 1024 };

/// Parses `head` as a request and hands the result to `check`.
fn with_request<T>(
    head: &[u8],
    check: impl FnOnce(Result<request::Request<'_, '_>, Refusal>) -> T,
) -> T {
    let mut storage = [const { MaybeUninit::uninit() }; 128];
    check(request::parse(head, &mut storage, &LIMITS).map(|r| r.expect("complete")))
}

fn refusal(head: &[u8]) -> Option<Refusal> {
    with_request(head, |r| r.err())
}

fn framing(head: &[u8]) -> Framing {
    with_request(head, |r| r.expect("valid").framing)
}

fn framing_refusal(v: FramingViolation) -> Option<Refusal> {
    Some(Refusal::Framing(v))
}

#[test]
fn content_length_with_transfer_encoding_is_refused_in_either_order() {
    for head in [
        &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        &b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"[..],
    ] {
        let v = FramingViolation::ContentLengthWithTransferEncoding;
        assert_eq!(refusal(head), framing_refusal(v));
    }
}

#[test]
fn conflicting_or_invalid_content_length_is_refused() {
    let conflicting =
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n";
    assert_eq!(refusal(conflicting), framing_refusal(FramingViolation::InvalidContentLength));
    for value in ["-1", "+1", "1,1", "0x10", "", "1 1", "99999999999999999999"] {
        let head = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {value}\r\n\r\n");
        let refused = refusal(head.as_bytes());
        assert_eq!(refused, framing_refusal(FramingViolation::InvalidContentLength), "{value:?}");
    }
    // Repeating the same value is allowed (RFC 9112, 6.3); it goes on once.
    let same = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n";
    assert_eq!(framing(same), Framing::Length(3));
    assert_eq!(
        framing(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"),
        Framing::Length(0)
    );
    assert_eq!(framing(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), Framing::Empty);
}

#[test]
fn transfer_encoding_is_one_final_chunked_or_refused() {
    let te = |lines: &str| format!("POST / HTTP/1.1\r\nHost: a\r\n{lines}\r\n");
    // Accepted, and written again as plain `chunked`; case does not matter.
    for ok in [
        "Transfer-Encoding: chunked\r\n",
        "Transfer-Encoding: Chunked\r\n",
        "Transfer-Encoding:\tchunked\t\r\n",
    ] {
        assert_eq!(framing(te(ok).as_bytes()), Framing::Chunked, "{ok:?}");
    }
    // RFC 9112, 6.1: a coding holdfast does not know, before a final chunked: 501.
    for unknown in [
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n",
    ] {
        assert_eq!(refusal(te(unknown).as_bytes()), Some(Refusal::UnknownCoding), "{unknown:?}");
    }
    // Chunked not final, twice, or a list that is not a list of tokens: 400. Empty
    // elements too: parsers differ on them, so the framing field does not have them.
    for bad in [
        "Transfer-Encoding: chunked, \r\n",
        "Transfer-Encoding: ,chunked\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: \r\n",
        "Transfer-Encoding: chunked, gzip\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
        "Transfer-Encoding: chunked, chunked\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: gzip\r\n",
        "Transfer-Encoding: xchunked\r\n",
        "Transfer-Encoding: \"chunked\"\r\n",
        "Transfer-Encoding: chunked;q=1\r\n",
        "Transfer-Encoding: chu nked\r\n",
        "Transfer-Encoding: \r\n",
        "Transfer-Encoding: ,\r\n",
    ] {
        let refused = refusal(te(bad).as_bytes());
        assert_eq!(
            refused,
            framing_refusal(FramingViolation::MalformedTransferEncoding),
            "{bad:?}"
        );
    }
    assert_eq!(refusal(te("Transfer-Encoding: chunked\r\n").as_bytes()), None);
}

#[test]
fn transfer_encoding_in_http10_is_refused() {
    let head = b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(refusal(head), framing_refusal(FramingViolation::TransferEncodingInHttp10));
}

#[test]
fn connection_may_not_name_framing_or_host() {
    for named in ["Content-Length", "transfer-encoding", "HOST", "close, host"] {
        let head = format!(
            "POST / HTTP/1.1\r\nHost: a\r\nConnection: {named}\r\nContent-Length: 1\r\n\r\nx"
        );
        assert_eq!(refusal(head.as_bytes()), Some(Refusal::NominatedField), "{named}");
    }
    let odd = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: \"close\"\r\n\r\n";
    assert_eq!(refusal(odd), Some(Refusal::Malformed));
}

#[test]
fn host_is_exactly_one_valid_host_in_http11() {
    let missing = b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n";
    assert_eq!(refusal(missing), Some(Refusal::Host(HostViolation::Missing)));
    let two = b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n";
    assert_eq!(refusal(two), Some(Refusal::Host(HostViolation::Duplicate)));
    for bad in ["a b", "a/b", "user@h", "h:8o", "[::1", "[zz]", "h\"x"] {
        let head = format!("GET / HTTP/1.1\r\nHost: {bad}\r\n\r\n");
        assert_eq!(refusal(head.as_bytes()), Some(Refusal::Host(HostViolation::Invalid)), "{bad}");
    }
    for bad in ["", ":80"] {
        let head = format!("GET / HTTP/1.1\r\nHost: {bad}\r\n\r\n");
        assert_eq!(
            refusal(head.as_bytes()),
            Some(Refusal::Host(HostViolation::Invalid)),
            "{bad:?}"
        );
    }
    for good in ["a", "a.example:8080", "[::1]:80", "10.0.0.1", "xn--d1a.test", "a_b", "a:"] {
        let head = format!("GET / HTTP/1.1\r\nHost: {good}\r\n\r\n");
        assert_eq!(refusal(head.as_bytes()), None, "{good}");
    }
    // HTTP/1.0 may go without.
    assert_eq!(refusal(b"GET / HTTP/1.0\r\n\r\n"), None);
}

#[test]
fn only_100_continue_is_an_expectation() {
    let expect = |value: &str, version: &str| {
        let head =
            format!("PUT / {version}\r\nHost: a\r\nExpect: {value}\r\nContent-Length: 1\r\n\r\n");
        with_request(head.as_bytes(), |r| r.map(|r| r.expect_continue))
    };
    assert_eq!(expect("100-continue", "HTTP/1.1"), Ok(true));
    assert_eq!(expect("100-Continue", "HTTP/1.1"), Ok(true));
    // RFC 9110, 10.1.1: ignored in HTTP/1.0.
    assert_eq!(expect("100-continue", "HTTP/1.0"), Ok(false));
    for other in ["200-ok", "100-continue, x", ""] {
        assert_eq!(expect(other, "HTTP/1.1"), Err(Refusal::Expectation), "{other:?}");
    }
}

#[test]
fn targets_are_origin_form_absolute_form_or_asterisk_for_options() {
    let target = |line: &str| {
        let head = format!("{line}\r\nHost: inner.test\r\n\r\n");
        with_request(head.as_bytes(), |r| {
            r.map(|r| {
                let mut path = if r.path.slash { b"/".to_vec() } else { Vec::new() };
                path.extend_from_slice(r.path.rest);
                let host = r.host.map(|h| String::from_utf8_lossy(h).into_owned());
                (String::from_utf8(path).unwrap(), host)
            })
        })
    };
    let ok = |path: &str, host: &str| Ok((path.to_string(), Some(host.to_string())));
    assert_eq!(target("GET /a?b HTTP/1.1"), ok("/a?b", "inner.test"));
    // RFC 9112, 3.2.2: the authority of an absolute-form target replaces Host.
    assert_eq!(target("GET http://public.test/p HTTP/1.1"), ok("/p", "public.test"));
    assert_eq!(target("GET HTTPS://public.test:8443 HTTP/1.1"), ok("/", "public.test:8443"));
    assert_eq!(target("GET http://public.test?q=1 HTTP/1.1"), ok("/?q=1", "public.test"));
    assert_eq!(target("OPTIONS * HTTP/1.1"), ok("*", "inner.test"));
    let json = "/q?f={a:[1,2]}|x^y&p=%22%7B!$'()*+;=@~";
    assert_eq!(target(&format!("GET {json} HTTP/1.1")), ok(json, "inner.test"));
    for bad in [
        "GET * HTTP/1.1",
        "GET public.test/p HTTP/1.1",
        "GET ftp://public.test/ HTTP/1.1",
        "GET http://user@public.test/ HTTP/1.1",
        "GET http:///p HTTP/1.1",
        "GET /a#frag HTTP/1.1",
        "GET /?\" HTTP/1.1",
        "GET /<script> HTTP/1.1",
        "GET /a\\b HTTP/1.1",
        "GET /a`b HTTP/1.1",
    ] {
        assert_eq!(target(bad), Err(Refusal::InvalidTarget), "{bad}");
    }
    // Bytes past ASCII in the target are refused, and never panic.
    let utf8 = "GET /aaaaaé HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_eq!(refusal(utf8.as_bytes()), Some(Refusal::InvalidTarget));
    let long_utf8 = format!("GET http://h/{} HTTP/1.1\r\nHost: a\r\n\r\n", "é".repeat(50));
    assert_eq!(refusal(long_utf8.as_bytes()), Some(Refusal::InvalidTarget));
}

#[test]
fn heads_over_their_limits_are_refused() {
    let line = format!("GET /{} HTTP/1.1\r\n", "a".repeat(100));
    let limits = HeadLimits { max_line_bytes: 64, max_head_bytes: 1024 };
    let first = line.find('\n').map(|i| i + 1);
    assert_eq!(
        request::check_partial(line.as_bytes(), first, &limits),
        Err(Refusal::RequestLineTooLong)
    );
    // Refused before the line has ended, once it is past the limit.
    assert_eq!(
        request::check_partial(&line.as_bytes()[..70], None, &limits),
        Err(Refusal::RequestLineTooLong)
    );
    assert_eq!(request::check_partial(&line.as_bytes()[..60], None, &limits), Ok(()));
    // A complete head's request line is checked too.
    let mut storage = [const { MaybeUninit::uninit() }; 64];
    let whole = format!("{line}Host: a\r\n\r\n");
    let parsed = request::parse(whole.as_bytes(), &mut storage, &limits);
    assert_eq!(parsed.err(), Some(Refusal::RequestLineTooLong));
    let many: String = (0..65).map(|i| format!("x-{i}: 1\r\n")).collect();
    let head = format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n");
    let mut storage = [const { MaybeUninit::uninit() }; 64];
    let parsed = request::parse(head.as_bytes(), &mut storage, &LIMITS);
    assert_eq!(parsed.err(), Some(Refusal::TooManyHeaders));
    let big = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "b".repeat(2000));
    let parsed = request::parse(big.as_bytes(), &mut storage, &limits);
    assert_eq!(parsed.err(), Some(Refusal::HeadTooLarge));
    assert_eq!(refusal(b"GET / HTTP/1.1\r\nBad Header: 1\r\n\r\n"), Some(Refusal::Malformed));
    assert_eq!(refusal(b"GET / HTTP/1.1\r\nHost: a\r\n fold\r\n\r\n"), Some(Refusal::Malformed));
    assert_eq!(refusal(b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n"), Some(Refusal::Connect));
}

#[test]
fn head_scan_finds_the_end_across_splits_looking_at_each_byte_once() {
    let heads: [&[u8]; 3] = [
        b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\r\nrest",
        b"GET / HTTP/1.1\nHost: a\n\nrest",
        b"GET / HTTP/1.1\r\nHost: a\n\r\nrest",
    ];
    for head in heads {
        let len = head.len() - 4;
        for split in 1..head.len() {
            let mut scan = HeadScan::default();
            let mut found = None;
            let mut upto = 0;
            while upto < head.len() && found.is_none() {
                upto = (upto + split).min(head.len());
                if let Scan::Complete(n) = scan.scan(&head[..upto]) {
                    found = Some(n);
                }
            }
            assert_eq!(found, Some(len), "{:?} split every {split}", String::from_utf8_lossy(head));
        }
    }
    // A head arriving a byte at a time is looked at a bounded number of times per byte.
    let big = format!("GET / HTTP/1.1\r\n{}\r\n", "X-Header: value\r\n".repeat(2000));
    let mut scan = HeadScan::default();
    let mut looked = 0;
    for upto in 1..=big.len() {
        let before = scan.scanned().saturating_sub(2);
        let result = scan.scan(&big.as_bytes()[..upto]);
        looked += upto - before.min(upto);
        if upto < big.len() {
            assert_eq!(result, Scan::Partial);
        } else {
            assert_eq!(result, Scan::Complete(big.len()));
        }
    }
    // Each call resumes two bytes back (an empty line may straddle reads).
    assert!(looked <= 4 * big.len(), "looked at {looked} bytes for a head of {}", big.len());
    assert_eq!(scan.first_line(), Some("GET / HTTP/1.1\r\n".len()));
}

#[test]
fn only_whole_empty_lines_before_a_request_line_are_skipped() {
    use super::head::leading_empty_lines;
    assert_eq!(leading_empty_lines(b"\r\n\nGET"), 3);
    assert_eq!(leading_empty_lines(b"GET"), 0);
    // A lone CR is not an empty line: it stays, and the parser refuses it.
    assert_eq!(leading_empty_lines(b"\rO / HTTP/1.1"), 0);
    assert_eq!(leading_empty_lines(b"\r\n\rX"), 2);
    assert_eq!(leading_empty_lines(b"\r"), 0);
}

#[test]
fn keep_alive_follows_version_and_connection_tokens() {
    let keep = |head: &[u8]| with_request(head, |r| r.unwrap().keep_alive());
    assert!(keep(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
    assert!(!keep(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n"));
    assert!(!keep(b"GET / HTTP/1.0\r\n\r\n"));
    assert!(keep(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
}

/// Decodes `stream` in pieces of `split` bytes: the payload, the kept trailers, and the
/// bytes the body took.
fn decode(
    stream: &[u8],
    split: usize,
    max_trailer: usize,
) -> Result<(Vec<u8>, Vec<u8>, usize), InvalidChunk> {
    let mut chunked = Chunked::new(max_trailer);
    let mut payload = Vec::new();
    let mut used = 0;
    for piece in stream.chunks(split) {
        let mut piece = piece.to_vec();
        let d = chunked.decode_in_place(&mut piece)?;
        payload.extend_from_slice(&piece[..d.payload]);
        used += d.used;
        if d.done {
            return Ok((payload, chunked.trailers().to_vec(), used));
        }
    }
    Err(InvalidChunk)
}

#[test]
fn chunked_body_is_decoded_across_splits_anywhere() {
    let body: &[u8] =
        b"5;ext=1\r\nhello\r\n1A ; a = \"q\\\"x\" ;b\r\nabcdefghijklmnopqrstuvwxyz\r\n\
                        0\r\nX-Sum: 1\r\nContent-Length: 99\r\nhost: evil\r\n\r\n";
    let next = b"GET /next HTTP/1.1\r\n\r\n";
    let stream = [body, next].concat();
    for split in 1..stream.len() {
        let (payload, trailers, used) = decode(&stream, split, 1024).expect("valid chunked body");
        assert_eq!(payload, b"helloabcdefghijklmnopqrstuvwxyz", "split every {split}");
        // Forbidden trailer fields (framing, routing) are dropped, the rest kept.
        assert_eq!(trailers, b"X-Sum: 1\r\n", "split every {split}");
        assert_eq!(used, body.len(), "split every {split}");
    }
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
        b"0x5\r\n",                  // not hex digits only
        b"5 \r\n",                   // whitespace not followed by an extension
        b"5;\r\n",                   // an extension without a name
        b"5;=b\r\n",
        b"5;a=\r\n",
        b"5;a\x01=b\r\n", // a control byte in an extension
        b"5;a=b\x7f\r\n",
        b"5;a=\"b\x00\"\r\n",
        b"5;a=\"unterminated\r\n",
        b"5\r\nhello\r\n0\r\nno colon\r\n\r\n", // a trailer line without a colon
        b"5\r\nhello\r\n0\r\n: empty\r\n\r\n",
        b"5\r\nhello\r\n0\r\nX: 1\r\n folded\r\n\r\n",
        b"5\r\nhello\r\n0\r\nX: a\x01b\r\n\r\n",
    ] {
        assert_eq!(
            decode(bad, bad.len(), 1024),
            Err(InvalidChunk),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let huge_trailer = [&b"0\r\nx: "[..], &[b'a'; 100], b"\r\n\r\n"].concat();
    assert_eq!(decode(&huge_trailer, huge_trailer.len(), 64), Err(InvalidChunk));
    let long_ext = [&b"5;a="[..], &[b'b'; 5000], b"\r\nhello\r\n0\r\n\r\n"].concat();
    assert_eq!(decode(&long_ext, long_ext.len(), 64), Err(InvalidChunk));
}

/// The head `req` becomes upstream, from a peer that is or is not a trusted proxy.
fn upstream_head_from(req: &[u8], trusted: bool) -> String {
    with_request(req, |r| {
        let req = r.expect("valid");
        let peer = PeerText::new("127.0.0.9".parse().unwrap(), false);
        let fwd = Forwarding {
            peer: &peer,
            trusted,
            real_ip: if trusted { b"203.0.113.5" } else { b"127.0.0.9" },
            backend: "10.1.2.3:8080".parse().unwrap(),
        };
        let mut out = Vec::new();
        encode::upstream_request(&req, &fwd, &mut out);
        String::from_utf8(out).expect("text")
    })
}

fn upstream_head(req: &[u8]) -> String {
    upstream_head_from(req, false)
}

const FORWARDED: &str =
    "x-forwarded-for: 127.0.0.9\r\nx-forwarded-proto: http\r\nx-real-ip: 127.0.0.9\r\n";

#[test]
fn upstream_head_drops_hop_by_hop_and_connection_named_headers() {
    let head = upstream_head(
        b"GET /a HTTP/1.1\r\nHost: example.test\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\n\
          Keep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Connection: keep-alive\r\n\
          Upgrade: websocket\r\nExpect: 100-continue\r\nAccept: */*\r\n\r\n",
    );
    assert_eq!(
        head,
        format!(
            "GET /a HTTP/1.1\r\nAccept: */*\r\nhost: example.test\r\n{FORWARDED}\
             x-forwarded-host: example.test\r\nforwarded: for=127.0.0.9;host=\"example.test\";proto=http\r\n\r\n"
        )
    );
}

#[test]
fn upstream_head_carries_framing_and_host_written_by_holdfast() {
    let cl = upstream_head(
        b"POST /p HTTP/1.1\r\nContent-Length: 5\r\nHOST: a.test\r\ncontent-length:5\r\nX: y\r\n\r\n",
    );
    assert!(
        cl.starts_with("POST /p HTTP/1.1\r\nX: y\r\nhost: a.test\r\ncontent-length: 5\r\n"),
        "{cl}"
    );
    assert_eq!(cl.matches("ontent-length").count(), 1, "{cl}");
    for te in ["chunked", " Chunked ", "CHUNKED"] {
        let head = format!("POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {te}\r\n\r\n");
        let up = upstream_head(head.as_bytes());
        assert!(
            up.contains("\r\nhost: a\r\ntransfer-encoding: chunked\r\nx-forwarded-for"),
            "{up}"
        );
        assert_eq!(up.to_ascii_lowercase().matches("transfer-encoding").count(), 1, "{up}");
    }
    let empty = upstream_head(b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
    assert!(empty.contains("content-length: 0\r\n"), "{empty}");
    let none = upstream_head(b"GET /p HTTP/1.1\r\nHost: a\r\n\r\n");
    assert!(!none.contains("content-length") && !none.contains("transfer-encoding"), "{none}");
}

#[test]
fn upstream_head_replaces_forwarding_headers_from_an_untrusted_peer() {
    let req =
        b"GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\n\
          X-Forwarded-Proto: https\r\nX-Forwarded-Host: forged\r\nForwarded: for=1.1.1.1\r\n\
          X-Real-IP: 6.6.6.6\r\n\r\n";
    let head = upstream_head(req);
    assert!(head.contains("x-forwarded-for: 127.0.0.9\r\n"), "{head}");
    assert!(head.contains("x-forwarded-proto: http\r\n") && !head.contains("https"), "{head}");
    assert!(head.contains("x-forwarded-host: h\r\n") && !head.contains("forged"), "{head}");
    assert!(head.contains("forwarded: for=127.0.0.9;host=\"h\";proto=http\r\n"), "{head}");
    assert!(head.contains("x-real-ip: 127.0.0.9\r\n") && !head.contains("6.6.6.6"), "{head}");
    assert!(!head.contains("10.0.0.1") && !head.contains("1.1.1.1"), "{head}");
    // From a trusted proxy, the lists grow and its proto and host stay.
    let trusted = upstream_head_from(req, true);
    assert!(trusted.contains("x-forwarded-for: 10.0.0.1, 10.0.0.2, 127.0.0.9\r\n"), "{trusted}");
    assert!(trusted.contains("x-forwarded-proto: https\r\n"), "{trusted}");
    assert!(trusted.contains("x-forwarded-host: forged\r\n"), "{trusted}");
    assert!(
        trusted.contains("forwarded: for=1.1.1.1, for=127.0.0.9;host=\"h\";proto=http\r\n"),
        "{trusted}"
    );
    assert!(trusted.contains("x-real-ip: 203.0.113.5\r\n"), "{trusted}");
}

#[test]
fn peer_text_brackets_ipv6_and_unmaps_ipv4() {
    let v6 = PeerText::new("2001:db8::1".parse().unwrap(), false);
    assert_eq!(v6.ip(), b"2001:db8::1");
    let head = with_request(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", |r| {
        let req = r.unwrap();
        let fwd = Forwarding {
            peer: &v6,
            trusted: false,
            real_ip: v6.ip(),
            backend: "10.0.0.1:80".parse().unwrap(),
        };
        let mut out = Vec::new();
        encode::upstream_request(&req, &fwd, &mut out);
        String::from_utf8(out).unwrap()
    });
    assert!(head.contains("forwarded: for=\"[2001:db8::1]\";host=\"h\";proto=http\r\n"), "{head}");
    assert_eq!(PeerText::new("::ffff:10.0.0.7".parse().unwrap(), false).ip(), b"10.0.0.7");
}

#[test]
fn peer_text_writes_ipv4_as_std_does() {
    for ip in ["0.0.0.0", "1.2.3.4", "9.10.99.100", "127.0.0.1", "255.255.255.255", "10.200.7.65"] {
        assert_eq!(PeerText::new(ip.parse().unwrap(), false).ip(), ip.as_bytes());
    }
    let longest = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255";
    let v6: std::net::IpAddr = longest.parse().unwrap();
    assert_eq!(PeerText::new(v6, false).ip(), v6.to_string().as_bytes());
}

#[test]
fn upstream_head_is_origin_form_http11_with_one_host() {
    let abs =
        upstream_head(b"GET http://public.test/abs?q=1 HTTP/1.1\r\nHost: internal.test\r\n\r\n");
    assert!(abs.starts_with("GET /abs?q=1 HTTP/1.1\r\nhost: public.test\r\n"), "{abs}");
    assert!(!abs.contains("internal.test"), "{abs}");
    let query = upstream_head(b"GET http://public.test?q=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(query.starts_with("GET /?q=1 HTTP/1.1\r\nhost: public.test\r\n"), "{query}");
    let old = upstream_head(b"GET /ten HTTP/1.0\r\n\r\n");
    assert!(old.starts_with("GET /ten HTTP/1.1\r\nhost: 10.1.2.3:8080\r\n"), "{old}");
    let bare = upstream_head(b"OPTIONS http://example.test HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(bare.starts_with("OPTIONS / HTTP/1.1\r\n"), "{bare}");
    let v6 = upstream_head(b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n");
    assert!(v6.contains("host: [::1]:80\r\n"), "{v6}");
}

#[test]
fn upstream_head_carries_upgrade_only_when_asked_for() {
    let ws = upstream_head(
        b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
    );
    assert!(ws.ends_with("connection: upgrade\r\nupgrade: websocket\r\n\r\n"), "{ws}");
    // Upgrade without `Connection: upgrade` is not an upgrade.
    let half = upstream_head(b"GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n");
    assert!(!half.to_ascii_lowercase().contains("upgrade"), "{half}");
}

#[test]
fn heads_with_bare_lf_line_ends_go_on_with_crlf() {
    let head =
        upstream_head(b"GET /lf HTTP/1.1\nHost: h\nAccept: */*\nConnection: x-gone\nX-Gone: 1\n\n");
    assert!(head.starts_with("GET /lf HTTP/1.1\r\nAccept: */*\r\nhost: h\r\n"), "{head}");
    assert!(!head.contains("X-Gone") && !head.replace("\r\n", "").contains('\n'), "{head}");
}

#[test]
fn header_lines_past_the_64th_are_tracked_too() {
    let many: String = (0..70).map(|i| format!("x-{i}: {i}\r\n")).collect();
    let req = format!("GET / HTTP/1.1\r\nHost: h\r\n{many}Connection: x-68\r\n\r\n");
    let head = upstream_head(req.as_bytes());
    assert!(head.contains("x-67: 67\r\nx-69: 69\r\n"), "x-68 is named by Connection: {head}");
    assert!(!head.to_ascii_lowercase().contains("connection"), "{head}");
}

/// Parses `head` as a response to a GET (or HEAD).
fn with_response<T>(
    head: &[u8],
    head_request: bool,
    check: impl FnOnce(Result<response::Response<'_, '_>, BadResponse>) -> T,
) -> T {
    let mut storage = [const { MaybeUninit::uninit() }; 32];
    check(response::parse(head, &mut storage, head_request).map(|r| r.expect("complete")))
}

/// The client's head for the origin's `resp`, and the origin's framing.
fn client_head(resp: &[u8], head_request: bool, version: Version) -> (Framing, String) {
    with_response(resp, head_request, |r| {
        let resp = r.expect("valid");
        let body = BodyOut::choose(resp.framing, version);
        let mut out = Vec::new();
        encode::client_response(&resp, body, ConnectionOut::KeepAlive, b"", &mut out);
        (resp.framing, String::from_utf8(out).expect("text"))
    })
}

const DATE: &str = "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n";

#[test]
fn response_framing_follows_rfc_9112() {
    let f =
        |head: String, head_request| client_head(head.as_bytes(), head_request, Version::Http11).0;
    let ok = |rest: &str| format!("HTTP/1.1 200 OK\r\n{DATE}{rest}\r\n");
    assert_eq!(f(ok("Content-Length: 5\r\n"), false), Framing::Length(5));
    assert_eq!(f(ok("Content-Length: 5\r\n"), true), Framing::Empty);
    assert_eq!(f(format!("HTTP/1.1 204 No Content\r\n{DATE}\r\n"), false), Framing::Empty);
    assert_eq!(
        f(format!("HTTP/1.1 304 Not Modified\r\n{DATE}Content-Length: 9\r\n\r\n"), false),
        Framing::Empty
    );
    assert_eq!(f(ok("Transfer-Encoding: chunked\r\n"), false), Framing::Chunked);
    assert_eq!(f(ok("Transfer-Encoding: gzip\r\n"), false), Framing::UntilClose);
    assert_eq!(f(ok(""), false), Framing::UntilClose);
    let bad = |head: &[u8]| with_response(head, false, |r| r.err());
    let both = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(bad(both), Some(BadResponse::AmbiguousLength));
    let old = b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(bad(old), Some(BadResponse::TransferEncodingInHttp10));
    let twice = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n";
    assert_eq!(bad(twice), Some(BadResponse::InvalidTransferEncoding));
    let cl = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n";
    assert_eq!(bad(cl), Some(BadResponse::InvalidContentLength));
}

#[test]
fn client_head_carries_framing_written_by_holdfast() {
    // The origin's framing lines are never copied, whatever its Connection says.
    let (_, head) = client_head(
        b"HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 2\r\nContent-length: 2\r\n\r\n",
        false,
        Version::Http11,
    );
    assert!(head.starts_with("HTTP/1.1 200 OK\r\ncontent-length: 2\r\ndate: "), "{head}");
    // 204: no Content-Length (RFC 9110, 8.6), even if the origin sent one.
    let (_, no_content) = client_head(
        format!("HTTP/1.1 204 No Content\r\n{DATE}Content-Length: 7\r\n\r\n").as_bytes(),
        false,
        Version::Http11,
    );
    assert!(!no_content.to_ascii_lowercase().contains("content-length"), "{no_content}");
    // HEAD and 304: the origin's Content-Length describes the representation.
    let (_, head_resp) = client_head(
        format!("HTTP/1.1 200 OK\r\n{DATE}Content-Length: 7\r\nTransfer-Encoding: x\r\n\r\n")
            .as_bytes(),
        true,
        Version::Http11,
    );
    assert!(
        head_resp.contains("content-length: 7\r\n") && !head_resp.contains("ransfer"),
        "{head_resp}"
    );
    let (_, gzip) = client_head(
        format!(
            "HTTP/1.1 200 OK\r\n{DATE}Transfer-Encoding: gzip,  chunked\r\nTrailer: X-Sum\r\n\r\n"
        )
        .as_bytes(),
        false,
        Version::Http11,
    );
    assert!(gzip.contains("Trailer: X-Sum\r\ntransfer-encoding: gzip, chunked\r\n"), "{gzip}");
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
        head.starts_with("HTTP/1.1 200 OK\r\nX-Kept: yes\r\ncontent-length: 2\r\ndate: "),
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
    assert!(passed.contains("Trailer: X-Sum\r\ntransfer-encoding: chunked\r\n"), "{passed}");
    let (_, decoded) = client_head(te, false, Version::Http10);
    assert!(!decoded.contains("chunked") && !decoded.contains("Trailer"), "{decoded}");
}

#[test]
fn early_responses_tell_interim_from_final() {
    let mut scan = HeadScan::default();
    assert_eq!(response::early(&mut scan, b"HTTP/1.1 1"), Ok(Early::Unknown));
    assert_eq!(
        response::early(&mut scan, b"HTTP/1.1 103 Early Hints\r\nLink: </a>"),
        Ok(Early::Unknown)
    );
    let hints = b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n";
    assert_eq!(response::early(&mut scan, hints), Ok(Early::Interim(hints.len() - 17)));
    let mut scan = HeadScan::default();
    assert_eq!(
        response::early(&mut scan, b"HTTP/1.1 100 Continue\r\n\r\n"),
        Ok(Early::Interim(25))
    );
    for final_ in [&b"HTTP/1.1 101 Switching"[..], b"HTTP/1.1 200 OK\r\n", b"garbage and more"] {
        let mut scan = HeadScan::default();
        assert_eq!(response::early(&mut scan, final_), Ok(Early::Final));
    }
}

#[test]
fn a_switch_of_protocols_is_never_reusable() {
    let upgraded =
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n";
    assert!(!with_response(upgraded, false, |r| r.unwrap().is_reusable()));
}

/// RFC 9112, 6.3 and RFC 9110, 9.3.2: a response to HEAD without `Content-Length` or
/// `Transfer-Encoding` describes a GET response delimited by the close, so the origin
/// closes after it; one with either header, or a status without a body, leaves the
/// connection reusable.
#[test]
fn a_head_response_without_a_length_ends_reuse() {
    let reusable = |head: &str| with_response(head.as_bytes(), true, |r| r.unwrap().is_reusable());
    assert!(!reusable("HTTP/1.1 200 OK\r\n\r\n"));
    assert!(!reusable("HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n\r\n"));
    assert!(!reusable("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"));
    assert!(reusable("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n"));
    assert!(reusable("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"));
    assert!(reusable("HTTP/1.1 204 No Content\r\n\r\n"));
    assert!(reusable("HTTP/1.1 304 Not Modified\r\n\r\n"));
    // The same heads answering GET: only the one without a length ends reuse.
    let for_get = |head: &str| with_response(head.as_bytes(), false, |r| r.unwrap().is_reusable());
    assert!(!for_get("HTTP/1.1 200 OK\r\n\r\n"));
    assert!(for_get("HTTP/1.1 204 No Content\r\n\r\n"));
    let declares =
        |head: &str| with_response(head.as_bytes(), true, |r| r.unwrap().declares_length);
    assert!(!declares("HTTP/1.1 200 OK\r\n\r\n"));
    assert!(declares("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
    assert!(declares("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"));
}

#[test]
fn local_response_and_chunk_lines_are_well_formed() {
    let mut out = Vec::new();
    encode::local_response(502, "holdfast: down\n", ConnectionOut::Close, &mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 15\r\ndate: "), "{text}");
    assert!(text.ends_with("connection: close\r\n\r\nholdfast: down\n"), "{text}");
    for (len, line) in
        [(0, "0\r\n"), (10, "a\r\n"), (0x1f2e, "1f2e\r\n"), (usize::MAX, "ffffffffffffffff\r\n")]
    {
        let mut buf = [0; 18];
        assert_eq!(encode::chunk_size_line(len, &mut buf), line.as_bytes());
    }
}

/// What a relay writes for `input` arriving in pieces of `split` bytes.
fn relayed(input: &[u8], framing: Framing, chunked_out: bool, split: usize) -> Vec<u8> {
    use super::body::{Parts, Relay};
    let mut relay = Relay::new(framing, chunked_out, 1024);
    let mut out = Vec::new();
    for piece in input.chunks(split) {
        let mut buf = piece.to_vec();
        let decoded = relay.decode(&mut buf).expect("valid body");
        let mut size_line = [0; 18];
        let mut parts = Parts::new();
        relay.frame(&buf[..decoded.payload], decoded.done, &mut size_line, &mut parts);
        out.extend(parts.as_slice().concat());
        if relay.is_done() {
            break;
        }
    }
    out
}

#[test]
fn a_chunked_body_is_chunked_again_by_holdfast() {
    let input = b"5;name=value\r\nhello\r\n3\r\nabc\r\n0\r\nX-Sum: 1\r\nHost: evil\r\n\r\n";
    let whole = relayed(input, Framing::Chunked, true, input.len());
    // What one read held becomes one chunk.
    assert_eq!(whole, b"8\r\nhelloabc\r\n0\r\nX-Sum: 1\r\n\r\n");
    for split in 1..input.len() {
        let out = relayed(input, Framing::Chunked, true, split);
        // Chunk sizes follow the reads; the payload and the trailers that pass do not.
        let (payload, trailers, used) =
            decode(&out, out.len(), 1024).expect("holdfast's own chunking is valid");
        assert_eq!(
            (payload.as_slice(), trailers.as_slice(), used),
            (&b"helloabc"[..], &b"X-Sum: 1\r\n"[..], out.len()),
            "split {split}"
        );
    }
    // An HTTP/1.0 client gets the payload alone.
    assert_eq!(relayed(input, Framing::Chunked, false, 7), b"helloabc");
}

#[test]
fn a_length_body_goes_on_as_it_is_and_stops_at_its_end() {
    let out = relayed(b"hello, and then the next request", Framing::Length(5), false, 3);
    assert_eq!(out, b"hello");
    let rechunked = relayed(b"abc", Framing::UntilClose, true, 2);
    assert_eq!(rechunked, b"2\r\nab\r\n1\r\nc\r\n");
}
