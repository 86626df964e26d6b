//! Integration tests of the benchmark tools: real sockets on 127.0.0.1, no mocks.

mod binaries; // bench-origin and bench-load end to end, as the harness runs them
mod burst; // many requests in flight on new connections
mod drills; // the slow-reader drills' clients: steady, zero-window HTTP/2, slow readers
mod floor; // the minimal HTTP/1.1 relay: keep-alive, pooling, Connection: close
mod grpc; // gRPC calls, unary and streaming, against the origin's gRPC echo
mod h2_engine_floor; // the minimal h2c relay on holdfast's own HTTP/2 engine
mod h2c; // the origin speaking HTTP/2 with prior knowledge beside HTTP/1.1
mod hold; // many idle connections held open
mod hosts; // fixed rate over many virtual hosts, some idle between bursts
mod mixed; // keep-alive and closing workers side by side
mod origin; // routes, bodies and counters of the benchmark origin
mod rate; // open-loop fixed rate
mod support; // in-process origin (cleartext, TLS or h2c), certificates, raw HTTP client, wait_until
mod tls; // the origin over TLS and new TLS connections per request, full and resumed
