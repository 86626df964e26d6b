// A tiny HTTP app for docker-check/run: the stand-in for the drill's app when checking that
// an image from make-image runs under Docker. Plain `http` module, no dependencies.
//
// Listens on 127.0.0.1:$PORT and answers every request with one line naming the app's
// version ($APP_VERSION) and its pid. With HANDLE_SIGTERM=1 it closes its listener on
// SIGTERM and exits 0; without it, it installs no handler, so as PID 1 in a container
// without --init it ignores SIGTERM (the kernel delivers no default action to PID 1).
"use strict";

const http = require("http");

const port = Number(process.env.PORT);
if (!Number.isInteger(port) || port <= 0) {
    console.error("app.js: PORT must be a port number");
    process.exit(2);
}
const version = process.env.APP_VERSION || "0";

const server = http.createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/plain" });
    res.end(`drill-app version=${version} pid=${process.pid}\n`);
});

server.listen(port, "127.0.0.1", () => {
    console.log(`listening on 127.0.0.1:${port} version=${version} pid=${process.pid}`);
});

if (process.env.HANDLE_SIGTERM === "1") {
    process.on("SIGTERM", () => {
        console.log("SIGTERM: closing the listener");
        server.close(() => process.exit(0));
        // Keep-alive connections would hold close() open; end them.
        server.closeIdleConnections();
        setTimeout(() => process.exit(0), 2000).unref();
    });
}
