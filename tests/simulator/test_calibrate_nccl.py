"""strategist calibrate: nccl-tests output parsed, α/β recovered, the calibrated cluster used, errors named."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app
from simulator.analytical import formulas as f
from simulator.calibrate import (
    NcclParseError,
    bus_factor,
    calibrated_cluster,
    fit_links,
    load_nccl_tests,
    parse_nccl_tests,
)
from simulator.calibrate.testing import nccl_text
from simulator.spec import ClusterSpec, load_spec
from simulator.zoo import cluster as zoo_cluster

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"


def _synthetic(collective: str, hosts: list[str], alpha: float, beta: float, seed: int = 0) -> str:
    """Exactly time = α + factor·size/β (β in GB/s), with ±1% noise."""
    rng = random.Random(seed)
    factor = bus_factor(collective, len(hosts))  # type: ignore[arg-type]
    return nccl_text(
        collective,
        hosts,
        "NVIDIA A100-SXM4-80GB",
        lambda s: (alpha + factor * s / (beta * 1e3)) * rng.uniform(0.99, 1.01),
        8,
        1 << 30,
    )


@pytest.mark.parametrize(
    ("collective", "hosts", "alpha", "beta"),
    [
        ("allreduce", ["n0"] * 8, 11.0, 230.0),
        ("allgather", ["n0"] * 4 + ["n1"] * 4, 30.0, 45.0),
        ("sendrecv", ["n0", "n1"], 6.5, 23.0),
    ],
)
def test_known_alpha_beta_are_recovered(collective: str, hosts: list[str], alpha: float, beta: float) -> None:
    r = parse_nccl_tests(_synthetic(collective, hosts, alpha, beta), f"{collective}.txt")
    assert r.collective == collective and r.ranks == len(hosts)
    assert r.scope == ("intra" if len(set(hosts)) == 1 else "inter")
    assert len(r.rows) == 2 * 28  # 8 B .. 1 GiB, out-of-place and in-place
    (fit,) = fit_links([r]).values()
    assert fit.alpha_us == pytest.approx(alpha, rel=0.03)
    assert fit.beta_gbs == pytest.approx(beta, rel=0.02)
    assert fit.rms_rel_error < 0.02


def test_collective_from_the_bus_factor_when_the_name_does_not_say() -> None:
    text = _synthetic("allgather", ["a"] * 8, 10.0, 200.0)
    assert parse_nccl_tests(text, "results-1.log").collective == "allgather"
    assert (
        parse_nccl_tests(_synthetic("allreduce", ["a"] * 8, 10.0, 200.0), "x.log").collective == "allreduce"
    )


def test_realistic_files_give_plausible_links() -> None:
    # Fixtures written in nccl-tests' format from curves with a protocol ramp and ±3% noise
    # (see nccl_text.py); their asymptotic bus bandwidths and latencies are the ones below.
    results = [load_nccl_tests(p) for p in sorted(FIXTURES.glob("*.txt"))]
    assert {(r.scope, r.collective, r.ranks) for r in results} == {
        ("intra", "allreduce", 8),
        ("intra", "allgather", 8),
        ("inter", "allreduce", 16),
        ("inter", "sendrecv", 2),
    }
    fits = fit_links(results)
    truth = {
        ("intra", "allreduce"): (11.5, 232.0),
        ("intra", "allgather"): (9.8, 226.0),
        ("inter", "allreduce"): (38.0, 96.0),
        ("inter", "sendrecv"): (21.0, 47.5),
    }
    for key, (alpha, beta) in truth.items():
        assert fits[key].beta_gbs == pytest.approx(beta, rel=0.15), key
        assert fits[key].alpha_us == pytest.approx(alpha, rel=0.25), key


def test_the_calibrated_cluster_is_what_the_cost_model_uses(tmp_path: Path) -> None:
    base = zoo_cluster("H100-4x8")
    fits = fit_links(
        [
            parse_nccl_tests(_synthetic("allreduce", ["n0"] * 8, 12.0, 200.0), "all_reduce_intra.txt"),
            parse_nccl_tests(
                _synthetic("allreduce", ["n0"] * 8 + ["n1"] * 8, 40.0, 50.0), "all_reduce_inter.txt"
            ),
            parse_nccl_tests(_synthetic("sendrecv", ["n0", "n1"], 20.0, 20.0), "sendrecv_inter.txt"),
        ]
    )
    cal = calibrated_cluster(base, fits)
    assert cal.name == "H100-4x8-calibrated" and cal.single_flow_gbps is None
    beta_inter = fits[("inter", "allreduce")].beta_gbs  # all-reduce wins over sendrecv
    for n in cal.nodes:
        assert n.nic_gbps == pytest.approx(beta_inter * 8)
        assert n.intra_gbps == pytest.approx(fits[("intra", "allreduce")].beta_gbs * 8)
        assert n.latency_us == pytest.approx(fits[("inter", "allreduce")].alpha_us)
    # Eq. 3's ring runs at the slowest link: now the calibrated inter-node bus bandwidth.
    assert f.ring_bandwidth_gbps(cal) == pytest.approx(beta_inter * 8)
    assert f.ring_bandwidth_gbps(cal) != pytest.approx(f.ring_bandwidth_gbps(base))
    assert "calibrated from nccl-tests" in cal.description


def test_cli_writes_a_cluster_and_names_bad_lines(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cal.json"
    files = [str(p) for p in sorted(FIXTURES.glob("*.txt"))]
    args = ["calibrate", "--cluster", "H100-4x8", "-o", str(out), "--json"]
    for p in files:
        args += ["--nccl-tests", p]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    spec = load_spec(out)
    assert isinstance(spec, ClusterSpec) and spec.name == "H100-4x8-calibrated"
    bad = tmp_path / "all_reduce_perf.txt"
    good = _synthetic("allreduce", ["n0"] * 8, 10.0, 200.0).splitlines()
    first_row = next(i for i, line in enumerate(good) if line and not line.startswith("#"))
    good[first_row + 2] = good[first_row + 2].replace("float", "float extra")
    bad.write_text("\n".join(good))
    r = runner.invoke(app, ["calibrate", "--cluster", "B1", "--nccl-tests", str(bad)])
    assert r.exit_code == 2
    assert f"{bad}: line {first_row + 3}: 14 fields, the header has 13" in r.output


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda t: t.replace("   0.00    0.00      0", "   nan     0.00      0", 1),
            "line {row}: algbw: 'nan' is not finite",
        ),
        (
            lambda t: t.replace("#       size         count", "#      bytes         count"),
            "line {row}: data before the column header",
        ),
        (
            lambda t: "\n".join(x for x in t.splitlines() if "Rank" not in x),
            "cannot tell intra- from inter-node",
        ),
        (lambda t: "\n".join(x for x in t.splitlines() if x.startswith("#")), "no result rows"),
    ],
)
def test_parse_errors_name_the_file_and_line(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    text = _synthetic("allreduce", ["n0"] * 4, 10.0, 100.0)
    row = next(i for i, line in enumerate(text.splitlines(), 1) if line and not line.startswith("#"))
    with pytest.raises(NcclParseError) as e:
        parse_nccl_tests(mutate(text), "all_reduce_perf.txt")
    assert str(e.value).startswith("all_reduce_perf.txt: ")
    assert message.format(row=row) in str(e.value)


def test_bus_factors_match_nccl_tests() -> None:
    assert bus_factor("allreduce", 8) == pytest.approx(1.75)
    assert bus_factor("allgather", 8) == pytest.approx(0.875)
    assert bus_factor("sendrecv", 2) == 1.0
    assert not math.isnan(bus_factor("reducescatter", 1))
