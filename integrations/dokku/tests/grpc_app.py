#!/usr/bin/env python3
"""The drill's gRPC app and its client, with grpcio and no generated code: one unary
method, /drill.Echo/Say, whose request and response are raw bytes.

  grpc_app.py server PORT INSTANCE EVENTS
      serves on 127.0.0.1:PORT; answers "INSTANCE REQUEST"; EVENTS gets one JSON line
      per call with the caller's address (context.peer(): one per HTTP/2 connection)
  grpc_app.py client ADDRESS AUTHORITY CALLS
      CALLS calls, half of them at once, on one insecure channel to ADDRESS with
      AUTHORITY as :authority; prints {"answers": [...], "errors": [...]} as JSON
"""

import json
import sys
import threading
import time
from concurrent import futures

import grpc

METHOD = "/drill.Echo/Say"


def identity(data):
    return data


def server(port, instance, events):
    lock = threading.Lock()
    out = open(events, "a")

    def say(request, context):
        with lock:
            out.write(json.dumps({"t": int(time.time() * 1000), "ev": "call",
                                  "peer": context.peer()}) + "\n")
            out.flush()
        return f"{instance} ".encode() + request

    handler = grpc.method_handlers_generic_handler("drill.Echo", {
        "Say": grpc.unary_unary_rpc_method_handler(say, request_deserializer=identity,
                                                   response_serializer=identity),
    })
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    srv.add_generic_rpc_handlers((handler,))
    srv.add_insecure_port(f"127.0.0.1:{port}")
    srv.start()
    srv.wait_for_termination()


def client(address, authority, calls):
    answers, errors = [], []
    options = [("grpc.default_authority", authority)]
    with grpc.insecure_channel(address, options=options) as channel:
        say = channel.unary_unary(METHOD, request_serializer=identity, response_deserializer=identity)
        try:
            grpc.channel_ready_future(channel).result(timeout=10)
        except grpc.FutureTimeoutError:
            errors.append(f"channel to {address} not ready in 10 s")
        half = calls // 2
        for i in range(half):
            try:
                answers.append(say(f"call {i}".encode(), timeout=10).decode())
            except grpc.RpcError as e:
                errors.append(f"call {i}: {e.code()} {e.details()}")
        pending = [(i, say.future(f"call {i}".encode(), timeout=10)) for i in range(half, calls)]
        for i, f in pending:
            try:
                answers.append(f.result().decode())
            except grpc.RpcError as e:
                errors.append(f"call {i}: {e.code()} {e.details()}")
    print(json.dumps({"answers": answers, "errors": errors}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["server"] and len(sys.argv) == 5:
        server(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    elif sys.argv[1:2] == ["client"] and len(sys.argv) == 5:
        client(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(__doc__)
