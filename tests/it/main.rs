//! Integration tests: real holdfast, real origins, real sockets.

// Test origin, holdfast in-process and as a child process, clients, bounded waits.
mod support;

// Upstream reuse across requests, clients and client connection styles.
mod keepalive;
// Around HTTPS: redirect_https, HSTS, the HTTPS example config.
mod https;
// HTTP/1.0 clients, pipelining, HEAD/204/304, Expect: 100-continue.
mod http1;
// Chunked uploads, trailers, and 100 MB streamed each way through the binary.
mod bodies;
// Hop-by-hop stripping both ways, X-Forwarded-*, Host.
mod headers;
// Smuggling attempts and request head limits, refused before the origin.
mod framing;
// Origins that misframe or send stray bytes: clients and the pool stay in step.
mod poisoning;
// Request body limits: client_max_body (413) and the pace a client must keep a body at.
mod body_limits;
// Random and mutated requests through holdfast, checked against a reference parser.
mod differential;
// WebSocket and other upgrades, and what happens to their upstream connection.
mod upgrade;
// Response buffering: slow readers release the upstream connection; what must stream does not.
mod buffering;
// Per-client fairness: one address cannot take a crowded backend's last connections.
mod fairness;
// Upstream failures: 502 and 504 naming the backend, stalled bodies.
mod errors;
// Pool limits: idle timeout, max lifetime, max requests per connection.
mod limits;
// Connections bounded by need: closing clients, the wait queue, Keep-Alive limits.
mod demand;
// The field report's scale: 500 and 1,000 clients, and 500 in 1,000 local ports.
#[cfg(target_os = "linux")]
mod concurrency;
// Origins closing pooled connections unannounced: safe retries, refused unsafe ones.
mod stale;
// Origins that close after some responses, unannounced: HEAD without a length, learned rules.
mod unannounced;
// Source addresses, and a namespace with few ports: reuse holds, no reuse runs out.
#[cfg(target_os = "linux")]
mod ports;
// Stopping: requests in flight finish, idle upstream connections close.
mod shutdown;
// The binary: check, quick mode, --config.
mod cli;
// The source layout: who imports whom among src/'s modules, and no cycles.
mod layout;
// The admin listener: /metrics matches the origin, /status, /healthz while draining.
mod metrics;
// Routing by host and path prefix, the default group, 404.
mod routing;
// Balancing policies: even spread, slow servers, idle-connection ties, pools per server.
mod balance;
// Passive and active health: killed servers, 5xx bursts, checks, all servers down.
mod health;
// Hot reload: warm pools kept, removed servers drained, invalid files rejected.
mod reload;
// Config sets: included app files reloaded whole; routes' own listeners, redirect,
// HSTS, timeouts, access log; certificates served by SNI.
mod include;
// Server names re-resolved: a hosts file in a mount namespace changes under holdfast.
#[cfg(target_os = "linux")]
mod discovery;
// Access log lines (JSON, text, reopened on SIGUSR1) and the `holdfast stats` view.
mod access_log;
// holdfast's own log: plain values, colour only on a terminal, JSON, outages as counts.
mod logs;
// HTTPS listeners with rustls, curl and openssl: SNI, resumption, certificate reloads, failures.
mod tls_listener;
// TLS to origins: reuse, resumption, verification, server_name, client certificates.
mod tls_origin;
// HTTP/2: h2c and TLS clients (h2 crate, curl, nghttp, h2load), HTTP/1.1 and HTTP/2
// origins, GOAWAY and REFUSED_STREAM retried, trailers, config keys, SIGTERM's GOAWAY.
mod h2;
// Streams an HTTP/2 origin refused, sent again wherever their body was; the GOAWAY drill.
mod refused;
// HTTP/1.1 clients to HTTP/2 origins in full duplex: echoes while the upload streams, early 413.
mod duplex;
// Bodies an HTTP/1.1 client sent, kept or buffered or streamed, sent again whole after a refusal.
mod refused_bodies;
// RFC 9113 and RFC 7541 as a server must enforce them: raw frames over TCP, holdfast's
// answer checked (GOAWAY, RST_STREAM or the origin's response), by section.
mod h2_conformance;
// RFC 9113 and RFC 7541 as a client must enforce them on its origins: a scripted raw-frame
// origin behind holdfast, what holdfast sent it and what the client got, by section.
mod h2_origin_conformance;
// HTTP/2 abuse: rapid reset, CONTINUATION floods, oversized header lists, too many streams.
mod h2_floods;
// gRPC end to end with Python's grpcio, over h2c and over TLS.
mod grpc;
// Trailers both ways in every pairing of HTTP/1.1 and HTTP/2 client and origin, gRPC's too.
mod trailers;
// WebSockets over HTTP/2 (extended CONNECT) to HTTP/1.1 and HTTP/2 origins, Python's h2 too.
mod h2_websocket;
