"""Baseline families tuned by measurement: members, lossiness, schedule (search/baselines.py)."""

from __future__ import annotations

import pytest

from runtime.executor.reference import tiny_model, two_by_two
from search.baselines import (
    baseline_families,
    baseline_names,
    baseline_schedule,
    baseline_strategy,
    family_of,
    is_lossy_baseline,
)
from search.space import space_of
from simulator import zoo
from simulator.spec import CollectiveSync, PSSync


def test_lossless_search_measures_only_lossless_families() -> None:
    assert [f.name for f in baseline_families()] == ["horovod", "ps"]
    assert [f.name for f in baseline_families("fp16")] == ["horovod", "ps", "horovod-fp16"]
    assert [f.name for f in baseline_families("powersgd")] == ["horovod", "ps", "ddp-powersgd"]
    assert len(baseline_names("all")) == 4 + 4 + 4 + 3
    assert baseline_names()[:2] == ("horovod@64MiB", "ps-naive")  # untuned members first


@pytest.mark.parametrize("domain", [("NCF-dense", "B9"), ("BERT-3L", "B5")])
def test_every_member_is_valid_and_in_its_space(domain: tuple[str, str]) -> None:
    model, cluster = zoo.model(domain[0]), zoo.cluster(domain[1])
    for name in baseline_names("all"):
        s = baseline_strategy(name, model, cluster)
        s.check(model, cluster)
        assert s.name == name
        assert space_of(s) == ("lossy" if is_lossy_baseline(name) else "lossless"), name
        kinds = {x.compressor.kind for vs in s.variables for x in vs.shards if isinstance(x, CollectiveSync)}
        if family_of(name) == "horovod-fp16":
            assert kinds == {"fp16"}
        if family_of(name) == "ddp-powersgd":
            ranks = {
                x.compressor.rank for vs in s.variables for x in vs.shards if isinstance(x, CollectiveSync)
            }
            assert "powersgd" in kinds and int(name[-1]) in ranks


def test_fusion_grid_and_ps_variants_differ_where_the_model_allows() -> None:
    model, cluster = tiny_model(), two_by_two()

    def groups(name: str) -> int:
        s = baseline_strategy(name, model, cluster)
        return len({x.group for vs in s.variables for x in vs.shards if isinstance(x, CollectiveSync)})

    # tiny's variables are a few KiB each: every threshold above them fuses all into one bucket
    assert groups("horovod@64MiB") == groups("horovod@1MiB") == 1
    big = zoo.model("BERT-3L")
    hv = {n: baseline_strategy(n, big, zoo.cluster("B5")) for n in ("horovod@64MiB", "horovod@1MiB")}
    assert hv["horovod@64MiB"].variables != hv["horovod@1MiB"].variables
    naive = baseline_strategy("ps-naive", model, cluster)
    servers = {x.server for vs in naive.variables for x in vs.shards if isinstance(x, PSSync)}
    assert servers == {"n0"}
    balanced = baseline_strategy("ps@balanced", model, cluster)
    assert {x.server for vs in balanced.variables for x in vs.shards if isinstance(x, PSSync)} == {"n0", "n1"}


def test_schedule_interleaves_members_with_rounds() -> None:
    names = baseline_names()
    plan = baseline_schedule(names, 3)
    assert plan["horovod@64MiB"] == plan["ps-naive"] == 1
    assert sorted(set(plan.values())) == [1, 2, 3]
    assert baseline_schedule(names, 1) == dict.fromkeys(names, 1)


def test_unknown_member_is_named() -> None:
    with pytest.raises(ValueError, match="horovod@lots"):
        baseline_strategy("horovod@lots", tiny_model(), two_by_two())
    assert family_of("ps") == "ps" and family_of("horovod") == "horovod"  # legacy names
