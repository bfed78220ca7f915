"""Cluster calibration from the user's own nccl-tests output (issue 15, part 3).

Input: the text ``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``,
``broadcast_perf``, ``reduce_perf`` or ``sendrecv_perf`` of NVIDIA's nccl-tests print: '#' header
lines (parameters; "#  Rank  r Group g Pid p on HOST device d [bus] NAME" per rank; the column
header "size count type redop root time algbw busbw #wrong time algbw busbw #wrong" for the
out-of-place then the in-place run, units B, elements, us, GB/s), one row per message size, and
'#' footer lines ("# Avg bus bandwidth : ...").

Which collective a file holds: its file name (``all_reduce``, ``allreduce``, ``all_gather``, ...),
else the ratio busbw / algbw of its rows, which nccl-tests sets to the collective's bus factor
for n ranks: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, the others 1
(nccl-tests' PERFORMANCE.md).

Scope: a file whose ranks all run on one host measures the intra-node links; ranks on two or more
hosts, the inter-node network.

Fit, per (scope, collective) over its files and both runs (out-of-place and in-place):

    time_us = α + factor · size / β        (β: bus bandwidth, GB/s = 1e3 B/us)

factor · size is the bytes that cross the busiest link (the bus-bandwidth correction). Non-negative
least squares on rows divided by the measured time (relative error: the small sizes fix α, the
large ones β). Collectives are fitted apart: a 2-rank sendrecv uses one GPU's NIC while a 2x8
all-reduce spreads over every NIC of the node, so their β differ on the same network.

The calibrated cluster (``calibrated_cluster``) keeps the cluster and sets what the cost model
reads, from each scope's preferred fit (``PREFERENCE``: all-reduce first, the cost model's
collective): intra-node β as every multi-GPU node's ``intra_gbps``, inter-node β as every node's
``nic_gbps`` (and no single-flow cap: the measurement is what a collective gets), inter-node α as
every node's ``latency_us``; every fit is written into ``description``.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from simulator.spec import ClusterSpec

Scope = Literal["intra", "inter"]
Collective = Literal["allreduce", "allgather", "reducescatter", "broadcast", "reduce", "sendrecv"]

_NAME_HINTS: tuple[tuple[str, Collective], ...] = (
    ("all_reduce", "allreduce"),
    ("allreduce", "allreduce"),
    ("all_gather", "allgather"),
    ("allgather", "allgather"),
    ("reduce_scatter", "reducescatter"),
    ("reducescatter", "reducescatter"),
    ("sendrecv", "sendrecv"),
    ("broadcast", "broadcast"),
    ("reduce", "reduce"),
)
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")
_REQUIRED = ("size", "time", "algbw", "busbw")


class NcclParseError(ValueError):
    """A file that is not nccl-tests output; the message names the file and the line."""


@dataclass(frozen=True)
class NcclRow:
    """One message size of one run: bytes, microseconds, algorithm and bus bandwidth (GB/s)."""

    size: int
    time_us: float
    algbw: float
    busbw: float
    line: int


@dataclass(frozen=True)
class NcclResult:
    """One parsed nccl-tests file."""

    path: str
    collective: Collective
    ranks: int
    hosts: tuple[str, ...]
    rows: tuple[NcclRow, ...]  # out-of-place and in-place rows, in file order

    @property
    def scope(self) -> Scope:
        return "intra" if len(self.hosts) <= 1 else "inter"

    @property
    def factor(self) -> float:
        """Bytes crossing the busiest link per byte of message (nccl-tests' bus factor)."""
        return bus_factor(self.collective, self.ranks)


@dataclass(frozen=True)
class LinkFit:
    """Fitted latency and bus bandwidth of one scope and collective, and how well they fit the rows."""

    scope: Scope
    collective: Collective
    alpha_us: float
    beta_gbs: float
    rows: int
    rms_rel_error: float
    files: tuple[str, ...]


def bus_factor(collective: Collective, n: int) -> float:
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("allgather", "reducescatter"):
        return (n - 1) / n
    return 1.0


def parse_nccl_tests(text: str, path: str = "<text>") -> NcclResult:
    """Parse one nccl-tests output; NcclParseError names ``path`` and the line of any problem."""
    ranks: dict[int, str] = {}
    columns: list[str] | None = None
    rows: list[NcclRow] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            m = _RANK_LINE.match(line)
            if m:
                ranks[int(m.group(1))] = m.group(2)
            tokens = line.lstrip("#").split()
            if columns is None and tokens[:2] == ["size", "count"]:
                columns = tokens
            continue
        if columns is None:
            raise NcclParseError(
                f"{path}: line {number}: data before the column header '# size count type ...'"
            )
        rows.extend(_row(line, columns, path, number))
    if columns is None:
        raise NcclParseError(f"{path}: no column header '# size count type ...': not nccl-tests output")
    if not rows:
        raise NcclParseError(f"{path}: no result rows under the column header")
    if not ranks:
        raise NcclParseError(
            f"{path}: no '#  Rank N Group G Pid P on HOST device ...' lines: cannot tell intra- from inter-node"
        )
    n = len(ranks)
    collective = _collective(path, rows, n)
    return NcclResult(path, collective, n, tuple(sorted(set(ranks.values()))), tuple(rows))


def _row(line: str, columns: list[str], path: str, number: int) -> list[NcclRow]:
    """The out-of-place and in-place rows of one data line (the second set of time/algbw/busbw)."""
    tokens = line.split()
    if len(tokens) != len(columns):
        raise NcclParseError(
            f"{path}: line {number}: {len(tokens)} fields, the header has {len(columns)} ({' '.join(columns)})"
        )
    for name in _REQUIRED:
        if name not in columns:
            raise NcclParseError(f"{path}: the column header has no {name!r} column")
    first = {name: columns.index(name) for name in _REQUIRED}
    runs = [(first["time"], first["algbw"], first["busbw"])]
    second = [_second_index(columns, name) for name in ("time", "algbw", "busbw")]
    if second[0] is not None and second[1] is not None and second[2] is not None:
        runs.append((second[0], second[1], second[2]))  # the in-place run
    out = []
    size = _number(tokens[first["size"]], "size", path, number)
    if size < 0 or size != int(size):
        raise NcclParseError(f"{path}: line {number}: size: {tokens[first['size']]!r} is not a byte count")
    for i_time, i_alg, i_bus in runs:
        t = _number(tokens[i_time], "time", path, number)
        alg = _number(tokens[i_alg], "algbw", path, number)
        bus = _number(tokens[i_bus], "busbw", path, number)
        if not t > 0:
            raise NcclParseError(f"{path}: line {number}: time: must be > 0 us, got {tokens[i_time]!r}")
        out.append(NcclRow(int(size), t, alg, bus, number))
    return out


def _second_index(columns: list[str], name: str) -> int | None:
    hits = [i for i, c in enumerate(columns) if c == name]
    return hits[1] if len(hits) > 1 else None


def _number(token: str, field: str, path: str, number: int) -> float:
    try:
        v = float(token)
    except ValueError:
        raise NcclParseError(f"{path}: line {number}: {field}: {token!r} is not a number") from None
    if not math.isfinite(v):
        raise NcclParseError(f"{path}: line {number}: {field}: {token!r} is not finite")
    return v


def _collective(path: str, rows: Sequence[NcclRow], n: int) -> Collective:
    stem = Path(path).name.lower()
    for hint, kind in _NAME_HINTS:
        if hint in stem:
            return kind
    ratios = [r.busbw / r.algbw for r in rows if r.algbw >= 0.01]
    if ratios and n > 1:
        ratio = statistics.median(ratios)
        candidates: tuple[Collective, ...] = ("allreduce", "allgather", "sendrecv")
        for kind in candidates:
            if abs(ratio - bus_factor(kind, n)) < 0.02 * bus_factor(kind, n):
                return kind
    raise NcclParseError(
        f"{path}: cannot tell which collective this is: name the file after the test "
        "(all_reduce_perf, all_gather_perf, sendrecv_perf, ...)"
    )


def load_nccl_tests(path: str | Path) -> NcclResult:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise NcclParseError(f"{p}: {e.strerror or e}") from None
    return parse_nccl_tests(text, str(p))


def fit_link(results: Sequence[NcclResult]) -> LinkFit:
    """(α, β) of one scope and collective over ``results`` by relative non-negative least squares."""
    from scipy.optimize import nnls

    x = np.array([row.size * r.factor for r in results for row in r.rows], dtype=float)
    y = np.array([row.time_us for r in results for row in r.rows], dtype=float)
    # time_us = α·1 + (1/β)·x/1e3, each row divided by its measured time.
    a = np.stack([np.ones_like(x), x / 1e3], axis=1) / y[:, None]
    coef, _ = nnls(a, np.ones_like(y))
    alpha, inv_beta = float(coef[0]), float(coef[1])
    names = tuple(r.path for r in results)
    if inv_beta <= 0:
        raise NcclParseError(f"{', '.join(names)}: times do not grow with size: no bandwidth to fit")
    pred = alpha + x / 1e3 * inv_beta
    rms = float(np.sqrt(np.mean(((pred - y) / y) ** 2)))
    return LinkFit(results[0].scope, results[0].collective, alpha, 1.0 / inv_beta, len(y), rms, names)


def fit_links(results: Sequence[NcclResult]) -> dict[tuple[Scope, Collective], LinkFit]:
    """One ``fit_link`` per (scope, collective) present in ``results``."""
    groups: dict[tuple[Scope, Collective], list[NcclResult]] = {}
    for r in results:
        groups.setdefault((r.scope, r.collective), []).append(r)
    return {key: fit_link(rs) for key, rs in sorted(groups.items())}


#: Which collective's fit stands for a scope's links in the cluster spec, best first: the cost
#: model's collectives are all-reduce and all-gather; point-to-point (sendrecv) is the fallback.
PREFERENCE: tuple[Collective, ...] = (
    "allreduce",
    "allgather",
    "reducescatter",
    "broadcast",
    "reduce",
    "sendrecv",
)


def link_for(fits: dict[tuple[Scope, Collective], LinkFit], scope: Scope) -> LinkFit | None:
    for c in PREFERENCE:
        if (scope, c) in fits:
            return fits[(scope, c)]
    return None


def calibrated_cluster(
    cluster: ClusterSpec, fits: dict[tuple[Scope, Collective], LinkFit], name: str | None = None
) -> ClusterSpec:
    """``cluster`` with the fitted links (``link_for`` each scope; see the module docstring)."""
    nodes = list(cluster.nodes)
    notes = []
    intra = link_for(fits, "intra")
    if intra is not None:
        nodes = [n.model_copy(update={"intra_gbps": intra.beta_gbs * 8}) if n.gpus > 1 else n for n in nodes]
        notes.append(f"intra-node {intra.collective} α {intra.alpha_us:.2f} us, β {intra.beta_gbs:.2f} GB/s")
    inter = link_for(fits, "inter")
    update: dict[str, object] = {}
    if inter is not None:
        nodes = [
            n.model_copy(update={"nic_gbps": inter.beta_gbs * 8, "latency_us": inter.alpha_us}) for n in nodes
        ]
        update["single_flow_gbps"] = None
        notes.append(f"inter-node {inter.collective} α {inter.alpha_us:.2f} us, β {inter.beta_gbs:.2f} GB/s")
    files = sorted({f for fit in fits.values() for f in fit.files})
    desc = f"{cluster.description} [calibrated from nccl-tests ({', '.join(Path(f).name for f in files)}): {'; '.join(notes)}]"
    update.update(nodes=tuple(nodes), name=name or f"{cluster.name}-calibrated", description=desc.strip())
    data = cluster.model_dump()
    data.update(update)
    return ClusterSpec.model_validate(data)
