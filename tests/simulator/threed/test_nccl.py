"""NCCL figures: nccl-tests tables, the bus-bandwidth curve and its fit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.threed.nccl import (
    A100_NVSWITCH,
    BusBwCurve,
    Collectives,
    NcclTable,
    fit_curve,
    read_lut,
    read_luts,
)

VTRAIN = Path(__file__).resolve().parents[4] / "shared" / "external" / "vtrain-single" / "nccl-allreduce-a100"


def _write(path: Path, rows: list[tuple[int, int]]) -> None:
    lines = ["size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)"]
    lines += [f"{s},{s // 4},float,{t},0,{t},0" for s, t in rows]
    path.write_text("\n".join(lines) + "\n")


def test_table_reads_out_of_place_times_and_interpolates(tmp_path: Path) -> None:
    _write(tmp_path / "AR_GPU4_1M_1024M_LUT", [(1_000_000, 50_000), (2_000_000, 70_000)])
    tab = read_lut(tmp_path / "AR_GPU4_1M_1024M_LUT")
    assert tab.ranks == 4
    assert tab.allreduce(1_500_000) == pytest.approx(60e-6)
    assert tab.allreduce(500_000) == pytest.approx(50e-6)  # below the first row: latency-bound
    assert tab.allreduce(4_000_000) == pytest.approx(140e-6)  # above the last: its bandwidth
    assert read_luts(tmp_path)[4].ranks == 4


def test_not_a_table_is_refused(tmp_path: Path) -> None:
    (tmp_path / "AR_GPU2_x_LUT").write_text("hello,world\n1,2\n")
    with pytest.raises(ValueError, match="not an nccl-tests table"):
        read_lut(tmp_path / "AR_GPU2_x_LUT")


def test_curve_by_hand() -> None:
    c = BusBwCurve(alpha_s=10e-6, busbw_max=100e9, half_bytes=1e6)
    # all-reduce of 9 MB among 4: 10 us + 2·3/4 · (9e6 + 1e6) / 100e9 = 10 + 150 us
    assert c.allreduce(9e6, 4) == pytest.approx(160e-6)
    # reduce-scatter: half the bytes on the wire: 10 + 75 us
    assert c.reduce_scatter(9e6, 4) == pytest.approx(85e-6)
    assert c.send(9e6) == pytest.approx(110e-6)
    assert c.allreduce(9e6, 1) == 0.0


def test_fit_recovers_a_curve() -> None:
    truth = BusBwCurve(alpha_s=30e-6, busbw_max=150e9, half_bytes=2e6)
    sizes = np.arange(1, 65) * 2.0**20
    tables = {n: NcclTable(n, sizes, np.array([truth.allreduce(s, n) for s in sizes])) for n in (2, 4, 8)}
    got = fit_curve(tables)
    assert got.alpha_s == pytest.approx(30e-6, rel=1e-3)
    assert got.busbw_max == pytest.approx(150e9, rel=1e-3)
    assert got.half_bytes == pytest.approx(2e6, rel=1e-2)


def test_collectives_prefer_a_table() -> None:
    tab = NcclTable(8, np.array([1e6, 2e6]), np.array([1e-3, 2e-3]))
    c = Collectives(BusBwCurve(), {8: tab})
    assert c.allreduce(1.5e6, 8) == pytest.approx(1.5e-3)
    assert c.allreduce(1.5e6, 4) == pytest.approx(BusBwCurve().allreduce(1.5e6, 4))


@pytest.mark.skipif(not VTRAIN.is_dir(), reason="the vTrain A100 tables are not next to the checkout")
def test_a100_constant_is_the_fit_of_the_published_tables() -> None:
    got = fit_curve(read_luts(VTRAIN))
    assert got.alpha_s == pytest.approx(A100_NVSWITCH.alpha_s, rel=0.05)
    assert got.busbw_max == pytest.approx(A100_NVSWITCH.busbw_max, rel=0.05)
    assert got.half_bytes == pytest.approx(A100_NVSWITCH.half_bytes, rel=0.1)
