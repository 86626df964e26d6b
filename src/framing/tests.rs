use std::sync::Arc;

use super::{FramingState, FramingViolation, Phase, Scanner};

fn scan(chunks: &[&[u8]]) -> (Scanner, Arc<FramingState>) {
    let state = Arc::new(FramingState::new());
    let mut scanner = Scanner::new(Arc::clone(&state), 32 * 1024);
    for c in chunks {
        scanner.feed(c);
    }
    (scanner, state)
}

/// The verdicts for the first `n` requests, as the proxy would ask for them.
fn verdicts(state: &FramingState, n: usize) -> Vec<Option<FramingViolation>> {
    (0..n).map(|_| state.rejection()).collect()
}

#[test]
fn content_length_with_transfer_encoding_is_refused_in_either_order() {
    for head in [
        &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        &b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"[..],
    ] {
        let (_, state) = scan(&[head]);
        let refused = Some(FramingViolation::ContentLengthWithTransferEncoding);
        assert_eq!(verdicts(&state, 2), vec![refused, refused]);
    }
}

#[test]
fn requests_before_the_bad_one_pass() {
    let (_, state) = scan(&[
        b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n",
        b"POST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
        b"POST /c HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
    ]);
    let conflicting = Some(FramingViolation::ConflictingContentLength);
    assert_eq!(verdicts(&state, 3), vec![None, None, conflicting]);
}

#[test]
fn chunked_body_is_followed_across_split_reads() {
    let stream: &[u8] = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
        5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: 1\r\n\r\n\
        GET /next HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
    // Byte by byte: every state must survive a split anywhere.
    let chunks: Vec<&[u8]> = stream.chunks(1).collect();
    let (scanner, state) = scan(&chunks);
    assert_eq!(scanner.phase, Phase::Off);
    let refused = Some(FramingViolation::ContentLengthWithTransferEncoding);
    assert_eq!(verdicts(&state, 2), vec![None, refused]);
}

#[test]
fn content_length_body_is_skipped_to_the_next_head() {
    let (scanner, state) = scan(&[
        b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n01234",
        b"56789GET / HTTP/1.1\r\n\r\n",
    ]);
    assert_eq!(scanner.phase, Phase::Head);
    assert_eq!(scanner.heads, 2);
    assert_eq!(verdicts(&state, 2), vec![None, None]);
}

#[test]
fn bad_chunk_size_poisons_the_following_request() {
    let (_, state) = scan(&[b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"]);
    assert_eq!(verdicts(&state, 2), vec![None, Some(FramingViolation::InvalidChunk)]);
}

#[test]
fn missing_crlf_after_chunk_data_is_invalid() {
    let (_, state) = scan(&[b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX"]);
    assert_eq!(verdicts(&state, 2), vec![None, Some(FramingViolation::InvalidChunk)]);
}

#[test]
fn transfer_encoding_must_end_in_chunked() {
    let (_, state) = scan(&[b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"]);
    assert_eq!(verdicts(&state, 1), vec![Some(FramingViolation::TransferEncodingNotChunked)]);
}

#[test]
fn invalid_content_length_is_refused() {
    for value in ["-1", "1e3", "+5", "", "99999999999999999999"] {
        let head = format!("POST / HTTP/1.1\r\nContent-Length: {value}\r\n\r\n");
        let (_, state) = scan(&[head.as_bytes()]);
        assert_eq!(
            verdicts(&state, 1),
            vec![Some(FramingViolation::InvalidContentLength)],
            "{value:?}"
        );
    }
}

#[test]
fn upgrade_stops_scanning() {
    let (scanner, state) = scan(&[
        b"GET /ws HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
        b"\x81\x05hello not http at all",
    ]);
    assert_eq!(scanner.phase, Phase::Off);
    assert_eq!(verdicts(&state, 1), vec![None]);
}

#[test]
fn oversized_head_stops_scanning_without_poisoning() {
    let state = Arc::new(FramingState::new());
    let mut scanner = Scanner::new(Arc::clone(&state), 1024);
    scanner.feed(b"GET / HTTP/1.1\r\n");
    scanner.feed(&[b'a'; 2048]);
    assert_eq!(scanner.phase, Phase::Off);
    assert_eq!(state.rejection(), None);
}
