"""nccl-tests output text in the exact format nccl-tests prints (src/common.cu), for tests and fixtures.

Header: the parameter line, '#  Rank r Group 0 Pid p on HOST device d [0xbb] NAME' per rank, the
two column-header lines and the units line; one row per size with the out-of-place and in-place
time (us), algbw and busbw (GB/s) and #wrong; the footer with the average bus bandwidth.
"""

from __future__ import annotations

from collections.abc import Callable

FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}
REDOP = {"allreduce": "sum", "allgather": "none", "reducescatter": "sum", "sendrecv": "sum"}


def nccl_text(
    collective: str,
    hosts: list[str],
    device: str,
    time_us: Callable[[int], float],
    min_bytes: int,
    max_bytes: int,
    wrong: str = "0",
) -> str:
    """The output of ``<collective>_perf -b min -e max -f 2`` whose rows take ``time_us(size)``."""
    n = len(hosts)
    factor = FACTORS[collective](n)
    lines = [
        f"# nThread 1 nGpus 1 minBytes {min_bytes} maxBytes {max_bytes} step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for r, host in enumerate(hosts):
        local = sum(1 for h in hosts[:r] if h == host)
        lines.append(
            f"#  Rank {r:2d} Group  0 Pid {4100 + r:6d} on {host:>10s} device {local:2d} [0x{16 * local + 7:02x}] {device}"
        )
    lines += [
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    busbws = []
    size = min_bytes
    while size <= max_bytes:
        count = size // 4
        cells = []
        for _ in range(2):
            t = time_us(size)
            algbw = size / t / 1e3
            busbw = algbw * factor
            busbws.append(busbw)
            cells.append(f"{t:8.2f} {algbw:7.2f} {busbw:7.2f} {wrong:>6s}")
        lines.append(f"{size:12d}  {count:12d}     float {REDOP[collective]:>7s}      -1 " + " ".join(cells))
        size *= 2
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.4f} ",
        "#",
        "",
    ]
    return "\n".join(lines)
