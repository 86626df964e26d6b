#!/usr/bin/env node
// Node.js origin for holdfast's benchmarks (bench/run, scenario node-50k).
//
//   node bench/origins/node_origin.js --port 3000 [--host 127.0.0.1]
//
// A plain `http` server with Node's defaults (keepAliveTimeout 5 s), like the app in the
// Dokku report: every path answers 200 with a 51,200-byte body, except
// GET /__origin/stats, which answers the same JSON as bench-origin:
// {"connections": accepted_total, "open": open_now, "requests": total}.
// It prints `listening on HOST:PORT` once bound, and exits on SIGTERM or SIGINT.
"use strict";

const http = require("node:http");

function parseArgs(argv) {
  const args = { host: "127.0.0.1", port: 3000 };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (flag === "--port") args.port = Number(value);
    else if (flag === "--host") args.host = value;
    else {
      console.error(`usage: node_origin.js --port P [--host H]; unknown argument ${flag}`);
      process.exit(2);
    }
  }
  return args;
}

const args = parseArgs(process.argv.slice(2));
const body = Buffer.alloc(51200, "x");
const counters = { connections: 0, open: 0, requests: 0 };

const server = http.createServer((req, res) => {
  counters.requests += 1;
  if (req.url === "/__origin/stats") {
    const json = JSON.stringify(counters);
    res.writeHead(200, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(json),
    });
    res.end(json);
    return;
  }
  res.writeHead(200, {
    "content-type": "application/octet-stream",
    "content-length": body.length,
  });
  res.end(body);
});

server.on("connection", (socket) => {
  counters.connections += 1;
  counters.open += 1;
  socket.on("close", () => {
    counters.open -= 1;
  });
});

server.listen(args.port, args.host, () => {
  const { address, port } = server.address();
  console.log(`listening on ${address}:${port}`);
});

for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => process.exit(0));
}
