// The drills' app (integrations/dokku/tests, integrations/docker/tests): one container of
// an app, a plain Node.js HTTP server (default keepAliveTimeout, 5 s, as most Node apps run).
//
//   PORT=5001 INSTANCE=web.1-3 EVENTS=/tmp/x.jsonl [HEALTHY_AFTER_MS=1500] [DROP_LATE=1] node app.js
//
// - GET /anything: 200 with {"instance", "count"} (this instance's request counter);
//   ?delay=MS answers after MS milliseconds, so requests are in flight at any moment.
// - GET /__health: the platform's checks (Dokku's, Docker's HEALTHCHECK); not counted, not
//   logged as a request. With HEALTHY_AFTER_MS it answers 503 until the process has run
//   that long (an app still warming up), and logs `healthy` at its first 200.
// - A WebSocket upgrade: the RFC 6455 handshake, then every text frame echoed back.
// - SIGTERM: stops accepting, answers what is in flight (with Connection: close), keeps
//   open WebSockets until their clients close them, then exits, as a well-behaved app
//   does; Dokku sends SIGTERM right after the proxy switched to the new containers.
//   With DROP_LATE=1, a request that arrives after SIGTERM on a kept connection is not
//   served: it is logged as `late` and its socket destroyed, as by a server that is gone.
// EVENTS gets one JSON line per event: listen, conn (a TCP connection accepted), req (a
// request's arrival), late, healthy, ws, ws-close, sigterm, exit; each with t,
// milliseconds since epoch.
"use strict";

const http = require("http");
const crypto = require("crypto");
const fs = require("fs");

const port = Number(process.env.PORT);
const instance = process.env.INSTANCE || `pid-${process.pid}`;
const events = fs.openSync(process.env.EVENTS || "/dev/null", "a");
const healthyAfterMs = Number(process.env.HEALTHY_AFTER_MS) || 0;
const dropLate = process.env.DROP_LATE === "1";
const startedAt = Date.now();
let healthy = false;

function log(ev, extra) {
    fs.writeSync(events, JSON.stringify(Object.assign({ t: Date.now(), ev }, extra)) + "\n");
}

let count = 0;
let inFlight = 0;
let closing = false;
const sockets = new Set();

function maybeExit() {
    if (closing && inFlight === 0 && sockets.size === 0) {
        log("exit");
        process.exit(0);
    }
}

const server = http.createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    if (url.pathname === "/__health") {
        if (Date.now() - startedAt < healthyAfterMs) {
            res.statusCode = 503;
            res.end("warming up\n");
            return;
        }
        if (!healthy) {
            healthy = true;
            log("healthy");
        }
        res.end("ok\n");
        return;
    }
    if (closing && dropLate) {
        log("late", { path: url.pathname, remote: req.socket.remotePort });
        req.socket.destroy();
        return;
    }
    log("req", { path: url.pathname, remote: req.socket.remotePort });
    inFlight += 1;
    count += 1;
    const body = JSON.stringify({ instance, count }) + "\n";
    const delay = Math.min(Number(url.searchParams.get("delay")) || 0, 1000);
    setTimeout(() => {
        if (closing) {
            res.setHeader("connection", "close");
        }
        res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
        res.end(body, () => {
            inFlight -= 1;
            maybeExit();
        });
    }, delay);
});

server.on("connection", (socket) => {
    log("conn", { remote: socket.remotePort });
});

// WebSocket: handshake and echo. Frames from a client are masked (RFC 6455 5.3).
server.on("upgrade", (req, socket) => {
    const key = req.headers["sec-websocket-key"];
    if ((req.headers.upgrade || "").toLowerCase() !== "websocket" || !key) {
        socket.end("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        return;
    }
    const accept = crypto.createHash("sha1").update(key + "258EAFA5-E914-47DA-95CA-C5AB0DC11B65").digest("base64");
    socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        `Sec-WebSocket-Accept: ${accept}\r\n\r\n`);
    sockets.add(socket);
    log("ws");
    let buffered = Buffer.alloc(0);
    socket.on("data", (chunk) => {
        buffered = Buffer.concat([buffered, chunk]);
        for (;;) {
            if (buffered.length < 2) return;
            const opcode = buffered[0] & 0x0f;
            let length = buffered[1] & 0x7f;
            let offset = 2;
            if (length === 126) {
                if (buffered.length < 4) return;
                length = buffered.readUInt16BE(2);
                offset = 4;
            } else if (length === 127) {
                if (buffered.length < 10) return;
                length = Number(buffered.readBigUInt64BE(2));
                offset = 10;
            }
            const masked = (buffered[1] & 0x80) !== 0;
            const maskAt = offset;
            if (masked) offset += 4;
            if (buffered.length < offset + length) return;
            const payload = Buffer.from(buffered.subarray(offset, offset + length));
            if (masked) {
                for (let i = 0; i < payload.length; i++) payload[i] ^= buffered[maskAt + (i % 4)];
            }
            buffered = buffered.subarray(offset + length);
            if (opcode === 0x8) {
                socket.end(Buffer.from([0x88, 0]));
                return;
            }
            if (opcode === 0x9) {
                socket.write(frame(0xa, payload));
            } else if (opcode === 0x1) {
                socket.write(frame(0x1, Buffer.from(`${instance} ${payload.toString()}`)));
            }
        }
    });
    const gone = () => {
        if (sockets.delete(socket)) {
            log("ws-close");
            maybeExit();
        }
    };
    socket.on("close", gone);
    socket.on("error", gone);
});

function frame(opcode, payload) {
    const head = payload.length < 126 ? Buffer.from([0x80 | opcode, payload.length])
        : Buffer.from([0x80 | opcode, 126, payload.length >> 8, payload.length & 0xff]);
    return Buffer.concat([head, payload]);
}

process.on("SIGTERM", () => {
    log("sigterm");
    closing = true;
    server.close();
    server.closeIdleConnections();
    maybeExit();
});

server.listen(port, "127.0.0.1", () => log("listen", { port }));
