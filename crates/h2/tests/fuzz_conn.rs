//! Fuzzes the connection engine, both roles, with mutated byte streams (seeds: what
//! real peers send: a client's preface, SETTINGS, requests with bodies, CONTINUATIONs,
//! resets, pings, window updates; a server's responses, trailers and GOAWAY). Each
//! stream is fed in pieces of random size while the engine's output is drained and
//! the application acts on its events (answering requests, sending and releasing
//! data, resetting now and then). Nothing may panic, and in debug builds the engine's
//! own check that it writes only frames the frame layer accepts runs on every frame.
//!
//! Bounded: a few seconds and an iteration cap by default; `H2_FUZZ_BUDGET_SECS=N`
//! runs for N seconds with no cap (in release: `cargo test -p holdfast-h2 --release
//! --test fuzz_conn`); `H2_FUZZ_SEED` replays a run.

mod support;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use holdfast_h2::conn::{Config, Connection, Event};
use holdfast_h2::error::ErrorCode;
use holdfast_h2::frame::{self, Settings, PREFACE};
use holdfast_h2::hpack::{Encoder, Field, FieldRef};

const DEFAULT_BUDGET: Duration = Duration::from_secs(4);
const DEFAULT_ITERATIONS: u64 = 20_000;
const MAX_INPUT_LEN: usize = 20_000;

fn budget() -> (Duration, u64) {
    match std::env::var("H2_FUZZ_BUDGET_SECS").ok().and_then(|secs| secs.parse().ok()) {
        Some(secs) => (Duration::from_secs(secs), u64::MAX),
        None => (DEFAULT_BUDGET, DEFAULT_ITERATIONS),
    }
}

#[test]
fn a_server_engine_never_panics_whatever_the_client_sends() {
    let (budget, iterations) = budget();
    let seeds = client_seeds();
    let done = support::run("conn-server", &seeds, iterations, budget, MAX_INPUT_LEN, |input| {
        drive(Connection::server(small_config()), input, false);
    });
    eprintln!("fuzz conn-server: {done} mutated streams");
}

#[test]
fn a_client_engine_never_panics_whatever_the_server_sends() {
    let (budget, iterations) = budget();
    let seeds = server_seeds();
    let done = support::run("conn-client", &seeds, iterations, budget, MAX_INPUT_LEN, |input| {
        let mut conn = Connection::client(small_config());
        // Streams 1, 3 and 5 open, one with a body still to send.
        for end in [true, false, true] {
            let _ = conn.open(&request(), end, false);
        }
        drive(conn, input, true);
    });
    eprintln!("fuzz conn-client: {done} mutated streams");
}

/// Small windows and limits, so the fuzzer reaches their edges.
fn small_config() -> Config {
    Config {
        max_concurrent_streams: 4,
        stream_window: 1_000,
        connection_window: 70_000,
        max_header_list_size: 2_000,
        connect_protocol: true,
        send_buffer: 500,
        ..Config::default()
    }
}

/// The seeds themselves are conversations the engine goes through to their end: the
/// mutations start deep in the protocol, not at a refused preface.
#[test]
fn the_seeds_run_to_their_end_without_an_error() {
    for seed in client_seeds() {
        let (failed, events) = drive(Connection::server(small_config()), &seed, false);
        assert!(!failed && events >= 6, "server: failed {failed}, {events} events");
    }
    for seed in server_seeds() {
        let mut conn = Connection::client(small_config());
        for end in [true, false, true] {
            conn.open(&request(), end, false).unwrap();
        }
        let (failed, events) = drive(conn, &seed, true);
        assert!(!failed && events >= 5, "client: failed {failed}, {events} events");
    }
}

/// Feeds `input` in pieces (sizes taken from its own bytes, so a run replays),
/// acting on every event as an application would: whether a connection error ended
/// it, and how many events came.
fn drive(mut conn: Connection, input: &[u8], client: bool) -> (bool, usize) {
    let mut buf = BytesMut::new();
    let mut rest = input;
    let mut turn = 0usize;
    while !rest.is_empty() {
        let size = 1 + usize::from(rest[0]) * 7 % 1_500;
        let (piece, after) = rest.split_at(size.min(rest.len()));
        rest = after;
        buf.extend_from_slice(piece);
        let failed = conn.receive(&mut buf).is_err();
        act(&mut conn, &mut turn, client);
        while conn.next_output().is_some() {}
        if failed {
            assert!(conn.is_closed(), "a connection error closes the connection");
            assert!(conn.receive(&mut buf).is_err(), "nothing is read after it");
            return (true, turn);
        }
    }
    (false, turn)
}

fn act(conn: &mut Connection, turn: &mut usize, client: bool) {
    while let Some(event) = conn.next_event() {
        *turn += 1;
        match event {
            Event::Head { stream, end_stream, .. } | Event::TooLarge { stream, end_stream } => {
                if !client {
                    let _ = conn.send_head(stream, &[status()], end_stream && *turn % 3 == 0);
                    let room = conn.capacity(stream);
                    let body = Bytes::from(vec![b'x'; room.min(700)]);
                    let _ = conn.send_data(stream, body, *turn % 2 == 0);
                }
            }
            Event::Data { stream, data, end_stream } => {
                conn.release(stream, data.len());
                if *turn % 5 == 0 {
                    conn.reset(stream, ErrorCode::Cancel);
                } else if end_stream && !client {
                    let _ = conn.send_trailers(stream, vec![status()]);
                }
            }
            Event::Writable { stream } => {
                let room = conn.capacity(stream);
                let _ = conn.send_data(stream, Bytes::from(vec![b'y'; room.min(300)]), false);
            }
            Event::Trailers { .. } | Event::Reset { .. } | Event::GoAway { .. } | Event::Ready => {}
        }
        if *turn % 17 == 0 {
            conn.go_away();
        }
    }
}

fn status() -> Field {
    Field {
        name: Bytes::from_static(b":status"),
        value: Bytes::from_static(b"200"),
        sensitive: false,
    }
}

fn request() -> Vec<Field> {
    [(":method", "POST"), (":scheme", "https"), (":path", "/"), (":authority", "a")]
        .iter()
        .map(|(n, v)| Field {
            name: Bytes::from_static(n.as_bytes()),
            value: Bytes::from_static(v.as_bytes()),
            sensitive: false,
        })
        .collect()
}

fn block(encoder: &mut Encoder, fields: &[(&str, &str)]) -> BytesMut {
    let mut block = BytesMut::new();
    encoder
        .encode(fields.iter().map(|(n, v)| FieldRef::new(n.as_bytes(), v.as_bytes())), &mut block);
    block
}

/// Byte streams a client sends.
fn client_seeds() -> Vec<Vec<u8>> {
    let get = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/a"),
        (":authority", "a"),
        ("x-a", "1"),
    ];
    let post = [
        (":method", "POST"),
        (":scheme", "https"),
        (":path", "/b"),
        (":authority", "a"),
        ("content-length", "5"),
    ];
    let mut seeds = Vec::new();
    for variant in 0..4 {
        let mut enc = Encoder::new();
        let mut w = BytesMut::from(&PREFACE[..]);
        let settings =
            Settings { initial_window_size: Some(100 + variant * 1_000), ..Settings::default() };
        frame::write_settings(&mut w, &settings).unwrap();
        frame::write_settings_ack(&mut w);
        let b = block(&mut enc, &get);
        frame::write_headers(&mut w, 1, &b, true, 16_384).unwrap();
        let b = block(&mut enc, &post);
        if variant % 2 == 0 {
            frame::write_headers(&mut w, 3, &b, false, 16_384).unwrap();
        } else {
            // The same block cut into a HEADERS and two CONTINUATIONs.
            let (first, rest) = b.split_at(b.len() / 2);
            let (second, third) = rest.split_at(rest.len() / 2);
            w.extend_from_slice(&(first.len() as u32).to_be_bytes()[1..]);
            w.extend_from_slice(&[0x1, 0x0, 0, 0, 0, 3]);
            w.extend_from_slice(first);
            for (part, flags) in [(second, 0u8), (third, frame::END_HEADERS)] {
                w.extend_from_slice(&(part.len() as u32).to_be_bytes()[1..]);
                w.extend_from_slice(&[0x9, flags, 0, 0, 0, 3]);
                w.extend_from_slice(part);
            }
        }
        frame::write_data_header(&mut w, 3, 2, false).unwrap();
        w.extend_from_slice(b"he");
        frame::write_window_update(&mut w, 0, 5_000).unwrap();
        frame::write_window_update(&mut w, 1, 100).unwrap();
        frame::write_ping(&mut w, [7; 8]);
        frame::write_data_header(&mut w, 3, 3, true).unwrap();
        w.extend_from_slice(b"llo");
        let b = block(&mut enc, &get);
        frame::write_headers(&mut w, 5, &b, false, 16_384).unwrap();
        frame::write_rst_stream(&mut w, 5, ErrorCode::Cancel).unwrap();
        if variant == 3 {
            frame::write_goaway(&mut w, 0, ErrorCode::NoError, b"bye").unwrap();
        }
        seeds.push(w.to_vec());
    }
    seeds
}

/// Byte streams a server sends to a client that opened streams 1, 3 and 5.
fn server_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for variant in 0..3u32 {
        let mut enc = Encoder::new();
        let mut w = BytesMut::new();
        let settings =
            Settings { max_concurrent_streams: Some(10 + variant), ..Settings::default() };
        frame::write_settings(&mut w, &settings).unwrap();
        frame::write_settings_ack(&mut w);
        let b = block(&mut enc, &[(":status", "103"), ("link", "</s>")]);
        frame::write_headers(&mut w, 1, &b, false, 16_384).unwrap();
        let b = block(&mut enc, &[(":status", "200"), ("content-length", "4")]);
        frame::write_headers(&mut w, 1, &b, false, 16_384).unwrap();
        frame::write_data_header(&mut w, 1, 4, true).unwrap();
        w.extend_from_slice(b"body");
        let b = block(&mut enc, &[(":status", "200"), ("content-type", "application/grpc")]);
        frame::write_headers(&mut w, 3, &b, false, 16_384).unwrap();
        frame::write_window_update(&mut w, 3, 1_000).unwrap();
        frame::write_data_header(&mut w, 3, 1, false).unwrap();
        w.extend_from_slice(b"z");
        let b = block(&mut enc, &[("grpc-status", "0")]);
        frame::write_headers(&mut w, 3, &b, true, 16_384).unwrap();
        frame::write_goaway(&mut w, 3 - variant.min(2), ErrorCode::NoError, b"").unwrap();
        seeds.push(w.to_vec());
    }
    seeds
}
