"""One process of a measured heterogeneous plan: a unit group of a stage, a sparse PS or a dense PS.

Run as a plain script (``python runtime/heterogeneous/worker.py '<json>'``), importing only the
standard library and numpy, so a trial's many processes start in well under a second each.

Roles (``spec["role"]``):

- ``group``: ``units`` units of one stage. Every iteration it waits for its share of the previous
  stage's activations (stage > 0), then runs, overlapped (the cost model's ET = max{CT, DT}):
  its compute replay, ``time.sleep(compute_s)`` (the units run in parallel on their B/k samples
  each, so the group takes one unit's time), and, one after another on one thread (a unit's
  communication times add up, as in Formula 3's ODT): sparse lookups from the PS shards, the
  activations to the next stage's groups, the gradients to the previous stage's groups, the sparse
  gradients back to the shards, and the push/pull of its dense weights through the stage's dense PS.
- ``sparse_ps``: holds embedding table shards (real float32 rows); serves LOOKUP (ids -> rows,
  a real gather) and PUSH (ids + rows -> SGD on those rows).
- ``dense_ps``: holds a stage's dense weights (scaled); serves PUSHPULL (gradient in, SGD,
  weights out).

Wire format: a 13-byte header (kind u8, iteration u32, payload bytes u64, big-endian) and the
payload. Every process listens on ``listen`` (host, port) on all its interfaces; a group prints
one JSON line with its timings (``time.monotonic``, one clock for all processes of the machine).
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

HEADER = struct.Struct(">BIQ")
Respond = Callable[[socket.socket, int, int, bytearray], None]  # (connection, kind, iteration, payload)
FWD, BWD, LOOKUP, PUSH, PUSHPULL, ROWS, ACK, WEIGHTS, STOP = range(9)
AHEAD = 2  # iterations of activations a group may hold before its receiver stops reading (backpressure)
LR = 1e-3
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # Linux's value; not in every Python


def recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("peer closed")
        got += k
    return buf


def send_msg(sock: socket.socket, kind: int, it: int, payload: bytes | bytearray | memoryview) -> None:
    sock.sendall(HEADER.pack(kind, it, len(payload)))
    if len(payload):
        sock.sendall(payload)


def recv_msg(sock: socket.socket) -> tuple[int, int, bytearray]:
    kind, it, n = HEADER.unpack(recv_exact(sock, HEADER.size))
    return kind, it, recv_exact(sock, n)


def connect(addr: tuple[str, int], deadline: float, congestion: str | None = None) -> socket.socket:
    while True:
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if congestion:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.encode())
            s.settimeout(5)
            try:
                s.connect(addr)
            except OSError:
                s.close()
                raise
            s.settimeout(None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def listener(addr: tuple[str, int]) -> socket.socket:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(addr)
    srv.listen(64)
    return srv


def serve(srv: socket.socket, respond: Respond) -> None:
    """Accept connections forever, one thread per connection answering its messages (``answer``)."""
    while True:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=answer, args=(conn, respond), daemon=True).start()


def answer(conn: socket.socket, respond: Respond) -> None:
    """The receive loop of every server: ``respond(conn, kind, it, payload)`` per message, until
    STOP or the peer closes the connection."""
    try:
        while True:
            kind, it, payload = recv_msg(conn)
            if kind == STOP:
                return
            respond(conn, kind, it, payload)
    except ConnectionError:
        return


# ----------------------------------------------------------------------------- parameter servers
def run_sparse_ps(spec: dict[str, Any]) -> None:
    rng = np.random.default_rng(spec["seed"])
    tables = [rng.standard_normal((rows, dim), dtype=np.float32) * 0.01 for rows, dim in spec["tables"]]
    lock = threading.Lock()

    def respond(conn: socket.socket, kind: int, it: int, payload: bytearray) -> None:
        table_i, n = struct.unpack(">II", payload[:8])
        table = tables[table_i]
        ids = np.frombuffer(payload, dtype=np.int64, count=n, offset=8) % table.shape[0]
        if kind == LOOKUP:
            send_msg(conn, ROWS, it, table[ids].tobytes())  # the real gather
        elif kind == PUSH:
            grads = np.frombuffer(payload, dtype=np.float32, offset=8 + 8 * n).reshape(n, -1)
            with lock:
                np.subtract.at(table, ids, LR * grads)
            send_msg(conn, ACK, it, b"")

    serve(listener(tuple(spec["listen"])), respond)


def run_dense_ps(spec: dict[str, Any]) -> None:
    weights = np.zeros(spec["floats"], dtype=np.float32)
    lock = threading.Lock()

    def respond(conn: socket.socket, kind: int, it: int, payload: bytearray) -> None:
        grad = np.frombuffer(payload, dtype=np.float32)
        with lock:
            weights[: grad.size] -= LR * grad
            out = weights[: grad.size].tobytes()
        send_msg(conn, WEIGHTS, it, out)

    serve(listener(tuple(spec["listen"])), respond)


# ----------------------------------------------------------------------------- a unit group
class Inbox:
    """Counts the activation messages received per iteration; the reader blocks AHEAD iterations out."""

    def __init__(self, senders: int) -> None:
        self.senders = senders
        self.count: dict[int, int] = {}
        self.consumed = -1
        self.cond = threading.Condition()

    def put(self, it: int) -> None:
        with self.cond:
            while it > self.consumed + AHEAD:
                self.cond.wait()
            self.count[it] = self.count.get(it, 0) + 1
            self.cond.notify_all()

    def take(self, it: int, deadline: float) -> None:
        with self.cond:
            while self.count.get(it, 0) < self.senders:
                if not self.cond.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"iteration {it}: activations from the previous stage did not arrive")
            del self.count[it]
            self.consumed = it
            self.cond.notify_all()


def run_group(spec: dict[str, Any]) -> None:
    deadline = time.monotonic() + spec["timeout_s"]
    inbox = Inbox(spec["expect_fwd"])
    srv = listener(tuple(spec["listen"]))

    bwd = {"n": 0}
    bwd_cond = threading.Condition()

    def respond(conn: socket.socket, kind: int, it: int, payload: bytearray) -> None:
        if kind == FWD:
            inbox.put(it)
        elif kind == BWD:
            with bwd_cond:
                bwd["n"] += 1
                bwd_cond.notify_all()

    threading.Thread(target=serve, args=(srv, respond), daemon=True).start()
    socks: dict[tuple[str, int], socket.socket] = {}

    def sock(addr: list[Any]) -> socket.socket:
        key = (addr[0], addr[1])
        if key not in socks:
            socks[key] = connect(key, deadline, spec.get("tcp_congestion"))
        return socks[key]

    for peer in [*spec["fwd"], *spec["bwd"], *spec["sparse"]] + ([spec["dense"]] if spec["dense"] else []):
        sock(peer["addr"])
    if spec.get("pace_bytes_per_s"):
        # the data NIC cannot send faster than its line rate: cap each activation/gradient socket's
        # pacing there (see measure.py, "Pacing"); the kernel's TCP pacing honours it
        for peer in [*spec["fwd"], *spec["bwd"]]:
            sock(peer["addr"]).setsockopt(
                socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(spec["pace_bytes_per_s"])
            )
    rng = np.random.default_rng(spec["seed"])
    buffers: dict[int, bytes] = {}

    def zeros(n: int) -> bytes:
        if n not in buffers:
            buffers[n] = bytes(n)
        return buffers[n]

    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    start_line = sys.stdin.readline()  # the parent releases every group at once
    if not start_line:
        return

    def lookups(it: int) -> list[tuple[dict[str, Any], np.ndarray, bytearray]]:
        pulled = []
        for ps in spec["sparse"]:
            n = ps["ids"]
            ids = rng.integers(0, 2**62, size=n, dtype=np.int64)
            s = sock(ps["addr"])
            send_msg(s, LOOKUP, it, struct.pack(">II", ps["table"], n) + ids.tobytes())
            _, _, rows = recv_msg(s)
            pulled.append((ps, ids, rows))
        return pulled

    def pushes(it: int, pulled: list[tuple[dict[str, Any], np.ndarray, bytearray]]) -> None:
        for ps, ids, rows in pulled:
            s = sock(ps["addr"])
            send_msg(s, PUSH, it, struct.pack(">II", ps["table"], ids.size) + ids.tobytes() + bytes(rows))
            recv_msg(s)

    local = bool(spec["sparse"]) and spec.get("local_tables", False)
    timed = {"sparse": 0.0}

    def compute_with_tables(it: int) -> None:
        """Local tables: the lookups and pushes are part of the compute replay (see measure.py)."""
        t = time.monotonic()
        pushes(it, lookups(it))
        timed["sparse"] = time.monotonic() - t
        time.sleep(max(0.0, spec["compute_s"] - timed["sparse"]))

    records = []
    for it in range(spec["iterations"]):
        wait0 = time.monotonic()
        if spec["expect_fwd"]:
            inbox.take(it, deadline)
        t0 = time.monotonic()
        if local:
            compute = threading.Thread(target=compute_with_tables, args=(it,))
        else:
            compute = threading.Thread(target=time.sleep, args=(spec["compute_s"],))
        compute.start()
        sparse_s = 0.0
        if not local:
            t_sparse = time.monotonic()
            pulled = lookups(it)
            sparse_s = time.monotonic() - t_sparse
        for peer in spec["fwd"]:
            send_msg(sock(peer["addr"]), FWD, it, zeros(peer["bytes"]))
        for peer in spec["bwd"]:
            send_msg(sock(peer["addr"]), BWD, it, zeros(peer["bytes"]))
        if not local:
            t_push = time.monotonic()
            pushes(it, pulled)
            sparse_s += time.monotonic() - t_push
        if spec["dense"]:
            s = sock(spec["dense"]["addr"])
            send_msg(s, PUSHPULL, it, zeros(spec["dense"]["bytes"]))
            recv_msg(s)
        t_comm = time.monotonic()
        compute.join()
        t1 = time.monotonic()
        if local:
            sparse_s = timed["sparse"]
        elif not spec["sparse"]:
            sparse_s = 0.0  # not the clock's own overhead
        records.append({"wait": t0 - wait0, "start": t0, "comm": t_comm - t0, "sparse": sparse_s, "end": t1})
    with bwd_cond:  # stay up until the next stage's last gradients have arrived
        want = spec["expect_bwd"] * spec["iterations"]
        while bwd["n"] < want:
            if not bwd_cond.wait(timeout=max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"{bwd['n']} of {want} gradient messages from the next stage arrived")
    for s in socks.values():
        send_msg(s, STOP, 0, b"")
    paced = [
        sock(peer["addr"]).getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE)
        for peer in [*spec["fwd"], *spec["bwd"]]
    ]
    sys.stdout.write(json.dumps({"records": records, "paced": paced}) + "\n")
    sys.stdout.flush()


def main() -> None:
    spec = json.loads(sys.argv[1])
    {"group": run_group, "sparse_ps": run_sparse_ps, "dense_ps": run_dense_ps}[spec["role"]](spec)


if __name__ == "__main__":
    main()
