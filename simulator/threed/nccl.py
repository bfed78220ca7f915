"""NCCL collective times from published nccl-tests figures: a lookup table or a bus-bandwidth curve.

nccl-tests reports for an all-reduce of S bytes among n ranks its time and its *bus bandwidth*
busbw = algbw · 2(n−1)/n, algbw = S / t (the NCCL performance guide, "PERFORMANCE.md"): busbw is
what each link carries, comparable across n. Two descriptions of one collective:

- ``NcclTable``: the measured (size, time) rows of one n, interpolated linearly in size (the
  vTrain authors' ``AR_GPU{n}_1M_1024M_LUT`` tables for A100 servers); below the first row the
  first row's time (latency-bound), above the last the last row's busbw.
- ``BusBwCurve``: t(S, n) = α + 2(n−1)/n · S / B(S), B(S) = B_max · S / (S + S_half): a latency
  α and a bus bandwidth that saturates with message size (the shape of every nccl-tests busbw
  plot). Fitted to a table it carries the same physics to sizes and n the table lacks.

Other collectives by the same ring's bytes (NCCL ring algorithm): reduce-scatter and all-gather
move (n−1)/n · S per rank, half an all-reduce's 2(n−1)/n · S, so t = α + (n−1)/n · S / B(S);
a point-to-point send of S bytes is one hop: t = α + S / B(S).

Shapes: sizes in bytes, times in seconds; n = ranks in the communicator.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares


@dataclass(frozen=True, eq=False)
class NcclTable:
    """Measured all-reduce times of one communicator size: ``sizes`` (bytes) -> ``times`` (s)."""

    ranks: int
    sizes: np.ndarray
    times: np.ndarray

    def allreduce(self, nbytes: float) -> float:
        """Seconds of one all-reduce of ``nbytes`` (interpolated; extrapolated at the last busbw)."""
        if nbytes <= 0:
            return 0.0
        if nbytes <= self.sizes[-1]:
            return float(np.interp(nbytes, self.sizes, self.times))
        return float(self.times[-1] * nbytes / self.sizes[-1])


def read_lut(path: Path) -> NcclTable:
    """One nccl-tests table (``size(B),count,type,time(ns),busbw(GB/s),...``); out-of-place times."""
    ranks = int(path.name.split("_")[1].removeprefix("GPU"))
    sizes, times = [], []
    with path.open(newline="") as f:
        rows = csv.reader(f)
        header = next(rows)
        if not header or not header[0].startswith("size"):
            raise ValueError(f"{path}: not an nccl-tests table (header {header[:3]})")
        for row in rows:
            sizes.append(float(row[0]))
            times.append(float(row[3]) * 1e-9)
    return NcclTable(ranks, np.array(sizes), np.array(times))


def read_luts(folder: Path) -> dict[int, NcclTable]:
    """Every ``AR_GPU{n}_*`` table in ``folder``, by n."""
    tables = {t.ranks: t for t in (read_lut(p) for p in sorted(folder.glob("AR_GPU*_LUT")))}
    if not tables:
        raise FileNotFoundError(f"{folder}: no AR_GPU*_LUT tables")
    return tables


@dataclass(frozen=True)
class BusBwCurve:
    """t(S, n) = α + k(n) · S / B(S), B(S) = B_max · S / (S + S_half); k = 2(n−1)/n for all-reduce."""

    # Latency of one call, seconds (NCCL's base + per-hop latency, the software launch included).
    alpha_s: float = 25e-6
    # Bus bandwidth reached by large messages, bytes/s.
    busbw_max: float = 200e9
    # Message size at which half of ``busbw_max`` is reached, bytes.
    half_bytes: float = 4e6

    def _wire(self, nbytes: float) -> float:
        return (nbytes + self.half_bytes) / self.busbw_max  # = S / B(S)

    def allreduce(self, nbytes: float, ranks: int) -> float:
        if ranks <= 1 or nbytes <= 0:
            return 0.0
        return self.alpha_s + 2.0 * (ranks - 1) / ranks * self._wire(nbytes)

    def reduce_scatter(self, nbytes: float, ranks: int) -> float:
        """Also the all-gather's time: (n−1)/n · S per rank, half an all-reduce's bytes."""
        if ranks <= 1 or nbytes <= 0:
            return 0.0
        return self.alpha_s + (ranks - 1) / ranks * self._wire(nbytes)

    def send(self, nbytes: float) -> float:
        """One point-to-point transfer of ``nbytes`` between two GPUs."""
        return 0.0 if nbytes <= 0 else self.alpha_s + self._wire(nbytes)


#: NVLink 3 / NVSwitch A100 servers (DGX A100, p4d): B_max and S_half as ``fit_curve`` finds them
#: on the vTrain authors' published A100 all-reduce tables (2-8 GPUs, 1 MiB-1 GiB); the values
#: here are what ``tests/simulator/test_threed_nccl.py`` checks the fit reproduces.
A100_NVSWITCH = BusBwCurve(alpha_s=56e-6, busbw_max=210e9, half_bytes=0.18e6)


def fit_curve(tables: Mapping[int, NcclTable], max_bytes: float = 256 * 2**20) -> BusBwCurve:
    """The ``BusBwCurve`` closest (least squares on log time) to every table's rows up to ``max_bytes``."""
    pts = [
        (n, s, t)
        for n, tab in tables.items()
        if n > 1
        for s, t in zip(tab.sizes, tab.times, strict=True)
        if s <= max_bytes
    ]
    n_arr = np.array([p[0] for p in pts], dtype=float)
    s_arr = np.array([p[1] for p in pts])
    t_arr = np.array([p[2] for p in pts])

    def resid(x: np.ndarray) -> np.ndarray:
        alpha, bmax, half = np.exp(x)
        pred = alpha + 2.0 * (n_arr - 1) / n_arr * (s_arr + half) / bmax
        return np.log(pred / t_arr)

    x0 = np.log([20e-6, 200e9, 4e6])
    sol = least_squares(resid, x0)
    alpha, bmax, half = (float(v) for v in np.exp(sol.x))
    return BusBwCurve(alpha_s=alpha, busbw_max=bmax, half_bytes=half)


class Collectives:
    """All-reduce times from measured tables where one exists for n, else from the curve.

    ``slowdown``: in-training time / published time of a collective (1.0: nccl-tests' figures,
    measured on idle GPUs; a training step's collectives share the GPUs' SMs and memory with
    compute, and a calibration may find them slower).
    """

    def __init__(
        self, curve: BusBwCurve, tables: Mapping[int, NcclTable] | None = None, slowdown: float = 1.0
    ) -> None:
        if slowdown <= 0:
            raise ValueError(f"slowdown: must be > 0, got {slowdown}")
        self.curve = curve
        self.tables = dict(tables or {})
        self.slowdown = slowdown

    def with_slowdown(self, slowdown: float) -> Collectives:
        return Collectives(self.curve, self.tables, slowdown)

    def allreduce(self, nbytes: float, ranks: int) -> float:
        if ranks <= 1 or nbytes <= 0:
            return 0.0
        table = self.tables.get(ranks)
        t = table.allreduce(nbytes) if table is not None else self.curve.allreduce(nbytes, ranks)
        return t * self.slowdown

    def reduce_scatter(self, nbytes: float, ranks: int) -> float:
        return self.curve.reduce_scatter(nbytes, ranks) * self.slowdown

    def send(self, nbytes: float) -> float:
        return self.curve.send(nbytes) * self.slowdown


#: Share of a link's per-direction bandwidth NCCL's ring reaches as bus bandwidth for large
#: messages: 210 GB/s of NVLink 3's 300 GB/s on the vTrain A100 tables (``A100_NVSWITCH``).
RING_EFFICIENCY = 0.7


def curve_for_link(gbps: float, alpha_s: float = A100_NVSWITCH.alpha_s) -> BusBwCurve:
    """A ``BusBwCurve`` for a link of ``gbps`` Gbit/s per direction where nothing was measured:
    the A100 curve's latency and saturation size, B_max = ``RING_EFFICIENCY`` x the link."""
    return BusBwCurve(
        alpha_s=alpha_s, busbw_max=RING_EFFICIENCY * gbps / 8 * 1e9, half_bytes=A100_NVSWITCH.half_bytes
    )
