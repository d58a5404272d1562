"""iceoryx2 request-response round trip of 128 bytes, for the bench harness.

python3 rr.py server MODE NAME       serves until SIGINT
python3 rr.py client MODE NAME CALLS prints one JSON line of round trips (ns)

MODE is poll (both sides spin on receive) or event (each side sleeps on an
event listener that the other notifies after it sends).
"""

import ctypes
import json
import sys
import time

import iceoryx2 as iox2

SIZE = 128
Payload = ctypes.c_uint8 * SIZE


def open_service(node, name):
    return (
        node.service_builder(iox2.ServiceName.new(name + "/rr"))
        .request_response(Payload, Payload)
        .open_or_create()
    )


def events(node, name, mine, theirs):
    def svc(suffix):
        return node.service_builder(iox2.ServiceName.new(name + suffix)).event().open_or_create()
    return svc(mine).listener_builder().create(), svc(theirs).notifier_builder().create()


def serve(mode, name):
    node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
    server = open_service(node, name).server_builder().create()
    listener, notifier = events(node, name, "/to-server", "/to-client") if mode == "event" else (None, None)
    print("ready", flush=True)
    try:
        while True:
            if listener is not None:
                listener.timed_wait(iox2.Duration.from_millis(100))
            req = server.receive()
            if req is None:
                continue
            req.send_copy(req.payload().contents)
            req.delete()
            if notifier is not None:
                notifier.notify()
    except (KeyboardInterrupt, iox2.ListenerWaitError):
        pass  # the node and its ports are dropped on return: iceoryx2 removes their files


def call(mode, name, calls):
    node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
    client = open_service(node, name).client_builder().create()
    listener, notifier = events(node, name, "/to-client", "/to-server") if mode == "event" else (None, None)
    msg = Payload(*range(SIZE))
    rtts = []
    for i in range(calls + calls // 10 + 100):  # the first tenth and 100 warm up
        start = time.perf_counter_ns()
        pending = client.send_copy(msg)
        if notifier is not None:
            notifier.notify()
        while True:
            if listener is not None:
                listener.timed_wait(iox2.Duration.from_millis(100))
            resp = pending.receive()
            if resp is not None:
                break
        if bytes(resp.payload().contents) != bytes(msg):
            raise SystemExit("reply differs")
        resp.delete()
        pending.delete()
        if i >= calls // 10 + 100:
            rtts.append(time.perf_counter_ns() - start)
    print(json.dumps({"rtt_ns": rtts}), flush=True)


if __name__ == "__main__":
    iox2.set_log_level(iox2.LogLevel.Error)
    if sys.argv[1] == "server":
        serve(sys.argv[2], sys.argv[3])
    else:
        call(sys.argv[2], sys.argv[3], int(sys.argv[4]))
