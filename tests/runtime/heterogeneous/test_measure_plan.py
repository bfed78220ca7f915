"""Measured HeterPS plans: stages as processes, links shaped, the embedding stage served by a PS.

The loopback tests check the logic without namespaces; the ``netns`` test really measures a small
two-stage plan on the shaped testbed and checks that its namespaces are gone afterwards. No
assertion here depends on how fast the host is (the speed comparison is
``benchmarks/heterogeneous_measured.py``).
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from runtime.heterogeneous import MeasureConfig, measure_plan
from runtime.testbed import netns
from simulator import zoo
from simulator.analytical.heterogeneous import Workload
from simulator.spec import ResourcePlan

MODEL = zoo.model("CTRDNN-8")
CLUSTER = zoo.cluster("HeterPS-2GPU")
CPU, T4 = "c5.24xlarge-core", "g4dn.12xlarge-T4"
WORKLOAD = Workload(1e5, batch_size=MODEL.batch_size)


def two_stage(cpu_units: int = 128, gpu_units: int = 3) -> ResourcePlan:
    return ResourcePlan.from_assignment([CPU] + [T4] * 7, [cpu_units, gpu_units])


def test_loopback_two_stage_plan_reports_every_stage() -> None:
    cfg = MeasureConfig(WORKLOAD, iterations=4, warmup=1, testbed=False, timeout_s=60)
    run = measure_plan(MODEL, CLUSTER, two_stage(), None, config=cfg)
    assert run.status == "ok", run.reason
    assert [(s.resource_type, s.units, s.groups) for s in run.stages] == [(CPU, 128, 2), (T4, 3, 2)]
    assert run.environment["testbed"] == "loopback"
    assert len(run.samples) == 3 and all(x > 0 for x in run.samples)
    # money is Formula 8 with the measured throughput
    assert run.money == pytest.approx(WORKLOAD.samples / run.throughput * run.price_per_hour / 3600)
    # the group replays B * CT_i(k_i): the measured period cannot be shorter than the compute replay
    for s in run.stages:
        assert s.period_s >= 0.95 * s.compute_s
    # the embedding stage's sparse lookups and pushes are timed; the dense-only stage has none
    assert run.stages[0].sparse_s > 0 and run.stages[1].sparse_s == 0


def test_local_tables_move_a_cpu_stages_lookups_into_its_compute() -> None:
    cfg = MeasureConfig(WORKLOAD, iterations=3, warmup=1, testbed=False, local_tables=True, timeout_s=60)
    run = measure_plan(MODEL, CLUSTER, two_stage(), None, config=cfg)
    assert run.ok, run.reason
    cpu = run.stages[0]
    assert cpu.resource_type == CPU and cpu.sparse_s > 0  # still served by the PS, really
    assert cpu.period_s >= 0.95 * cpu.compute_s


def test_provisioning_overrides_the_plans_units() -> None:
    cfg = MeasureConfig(WORKLOAD, iterations=3, warmup=1, testbed=False, max_groups=1, timeout_s=60)
    run = measure_plan(MODEL, CLUSTER, two_stage(), [128, 5], config=cfg)
    assert run.ok, run.reason
    assert [s.units for s in run.stages] == [128, 5] and [s.groups for s in run.stages] == [1, 1]
    assert run.stages[1].compute_s < two_stage_compute(3)


def two_stage_compute(gpu_units: int) -> float:
    cfg = MeasureConfig(WORKLOAD, iterations=2, warmup=1, testbed=False, max_groups=1, timeout_s=60)
    return measure_plan(MODEL, CLUSTER, two_stage(), [128, gpu_units], config=cfg).stages[1].compute_s


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="provisioning"):
        measure_plan(MODEL, CLUSTER, two_stage(), [1, 2, 3], config=MeasureConfig(WORKLOAD, testbed=False))
    with pytest.raises(ValueError, match=r"MeasureConfig\.iterations"):
        MeasureConfig(WORKLOAD, iterations=2, warmup=2)


@pytest.mark.netns
@pytest.mark.skipif(netns.namespaces_usable() is not None, reason="network namespaces unavailable")
def test_two_stage_plan_on_the_shaped_testbed_tears_down() -> None:
    cfg = MeasureConfig(WORKLOAD, iterations=4, warmup=1, timeout_s=90)
    run = measure_plan(MODEL, CLUSTER, two_stage(), None, config=cfg)
    assert run.status == "ok", run.reason
    env = run.environment
    assert env["testbed"] == "netns" and env["shaped"] is True
    rates = env["rates_mbit"]
    assert isinstance(rates, dict)
    assert rates["s1g0"]["data"] > 0 and rates["s0ps0"]["host"] is None  # CPU tables: local, unshaped
    assert rates["s1g0"]["sync"] == pytest.approx(50_000 / (run.scale * run.dilation))  # g4dn NIC
    assert not [n for n in netns.list_namespaces() if str(env["testbed_id"]) in n]
    # every activation / gradient socket paced at its group's data NIC rate, as the kernel reports it
    paced = env["paced_bytes_per_s"]
    assert isinstance(paced, dict) and set(paced) == {"s0g0", "s0g1", "s1g0", "s1g1"}
    for name, caps in paced.items():
        assert len(caps) == 2 and all(c == int(rates[name]["data"] * 1e6 / 8) for c in caps), (name, caps)


@pytest.mark.netns
@pytest.mark.skipif(netns.namespaces_usable() is not None, reason="network namespaces unavailable")
def test_ack_priority_shaper_is_accepted_and_unpaced_sockets_report_no_cap() -> None:
    cfg = MeasureConfig(WORKLOAD, iterations=3, warmup=1, timeout_s=90, ack_priority=True, pace=False)
    run = measure_plan(MODEL, CLUSTER, two_stage(), None, config=cfg)
    assert run.status == "ok", run.reason
    paced = run.environment["paced_bytes_per_s"]
    assert isinstance(paced, dict) and all(c == -1 for caps in paced.values() for c in caps)  # ~0: no cap


def test_one_direction_diagnostic_runs_without_gradients() -> None:
    cfg = MeasureConfig(WORKLOAD, iterations=3, warmup=1, testbed=False, backward=False, timeout_s=60)
    run = measure_plan(MODEL, CLUSTER, two_stage(), None, config=cfg)
    assert run.ok, run.reason
    assert len(run.stages) == 2


CHILD = """
import sys, time
from runtime.testbed.multihomed import HomedNode, MultiHomedTestbed
with MultiHomedTestbed([HomedNode("a", {"data": 50.0, "sync": None}), HomedNode("b", {"data": 50.0})]) as net:
    print(net.id, flush=True)
    time.sleep(60)
"""


@pytest.mark.netns
@pytest.mark.skipif(netns.namespaces_usable() is not None, reason="network namespaces unavailable")
def test_sigterm_tears_the_namespaces_down() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    net_id = child.stdout.readline().strip()
    assert net_id and [n for n in netns.list_namespaces() if net_id in n]
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) != 0
    assert not [n for n in netns.list_namespaces() if net_id in n]
