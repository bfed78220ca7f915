"""The committed zoo: published parameter counts, Table 2 GPU counts, JSON round trips."""

from __future__ import annotations

import json

import pytest

from simulator import zoo
from simulator.extract.zoo_clusters import zoo_clusters
from simulator.extract.zoo_models import ZOO_MODELS
from simulator.spec import ClusterSpec, ModelSpec, dump_json, parse_spec

# Published #params: AutoSync supplementary Table 1 (12 models), Ada-Grouper Table 1 (4 GPTs),
# with the per-GPU batch size used (AutoSync's bs/gpu; the Transformer's 5K tokens = 80 x 64).
PUBLISHED: dict[str, tuple[float, int]] = {
    "ResNet50": (23e6, 32),
    "ResNet101": (45e6, 32),
    "InceptionV3": (24e6, 32),
    "VGG16": (138e6, 32),
    "DenseNet121": (8e6, 32),
    "Transformer": (62e6, 80),
    "NCF-dense": (122e6, 256),
    "NCF-sparse": (122e6, 256),
    "BERT-3L": (11e6, 32),
    "BERT-6L": (36e6, 32),
    "BERT-base": (110e6, 32),
    "BERT-large": (340e6, 8),
    "GPT-Medium": (350e6, 8),
    "GPT-Large": (760e6, 8),
    "GPT-XL": (1.3e9, 8),
    "GPT-2.7B": (2.7e9, 8),
}

# AutoSync supplementary Table 2 "GPU distribution" (GPUs per node), plus the two added clusters.
GPU_DISTRIBUTION: dict[str, list[int]] = {
    "A1": [1] * 16,
    "A2": [1] * 11,
    "B1": [4] * 2,
    "B2": [4] * 3,
    "B3": [4] * 4,
    "B4": [4] * 1,
    "B5": [4] * 2,
    "B6": [4] * 3,
    "B7": [4] * 4,
    "B8": [4] * 8,
    "B9": [1, 4],
    "B10": [4] * 2,
    "B11": [4] * 4,
    "B12": [1, 4],
    "A100x8": [8],
    "H100-4x8": [8] * 4,
    # Whale's heterogeneous testbeds (V100 + P100) and an A100 + T4 mix (issue 19).
    "V100x8+P100x8": [8, 8],
    "V100x4+P100x4": [4, 4],
    "A100x8+T4x8": [8, 4, 4],
    # GPUs people train on now (issue 42).
    "A100-40GBx8": [8],
    "A100-40GB-2x8": [8, 8],
    "GH200x4": [1] * 4,
    "L4x8": [8],
    "L40Sx8": [8],
    "RTX3090x4": [4],
    "RTX4090x2x4": [4, 4],
    "MI300Xx8": [8],
    # HeterPS's priced pools: one representative server of each type (CPU server first).
    "HeterPS-2GPU": [0, 4, 8],
    "HeterPS-4GPU": [0, 4, 8, 8, 8],
}

# HeterPS Section 6.2: its CTR models and their layer counts, and the CTRDNN variants of Table 2.
CTR_LAYERS: dict[str, int] = {
    "CTRDNN": 16,
    "CTRDNN-8": 8,
    "CTRDNN-12": 12,
    "CTRDNN-20": 20,
    "MATCHNET": 16,
    "2EMB": 10,
    "NCE": 5,
}

# Table 2 "Bandwidth spec": the NICs of the nodes, in node order.
NIC_GBPS: dict[str, list[float]] = {
    "A1": [40] * 16,
    "B1": [25] * 2,
    "B7": [50] * 4,
    "B9": [10, 25],
    "B10": [25, 50],
    "B11": [25, 25, 50, 50],
    "B12": [25, 50],
}


def test_zoo_has_its_models_and_clusters() -> None:
    assert sorted(zoo.model_names()) == sorted([*PUBLISHED, *CTR_LAYERS])
    assert sorted(zoo.cluster_names()) == sorted(GPU_DISTRIBUTION)
    assert [r.name for r in ZOO_MODELS] == [*PUBLISHED, *CTR_LAYERS]


@pytest.mark.parametrize("name", list(CTR_LAYERS))
def test_ctr_models_have_the_papers_layer_counts_and_sparse_tables(name: str) -> None:
    spec = zoo.model(name)
    assert len(spec.layers) == CTR_LAYERS[name]
    tables = [v for v in spec.variables if v.sparse]
    assert tables and all(v.bytes >= 100e9 for v in tables)  # industrial-scale tables (>= 100 GB)
    assert all(0 < v.density < 1e-3 for v in tables)
    assert spec.layers[0].kind == "embedding"


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_model_parameter_count_matches_published(name: str) -> None:
    published, batch = PUBLISHED[name]
    spec = zoo.model(name)
    assert abs(spec.params - published) / published <= 0.05, f"{name}: {spec.params:,} vs {published:,.0f}"
    assert spec.batch_size == batch
    assert spec.fwd_flops > 0 and all(layer.activation_bytes >= 0 for layer in spec.layers)
    assert spec.source.startswith("simulator.extract.zoo_build")


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_model_round_trips_through_json(name: str) -> None:
    spec = zoo.model(name)
    again = parse_spec(json.loads(dump_json(spec)))
    assert isinstance(again, ModelSpec) and again == spec


def test_sparse_variables_only_where_expected() -> None:
    dense, sparse = zoo.model("NCF-dense"), zoo.model("NCF-sparse")
    assert dense.params == sparse.params
    assert not any(v.sparse for v in dense.variables)
    tables = {v.name: v for v in sparse.variables if v.sparse}
    assert set(tables) == {"embedding_user.weight", "embedding_item.weight"}
    users = tables["embedding_user.weight"]
    assert users.shape == (138_493 * 16, 40)
    assert users.density == pytest.approx(256 / users.shape[0], rel=1e-3)  # 256 lookups per step
    for name in ("BERT-base", "GPT-Medium", "Transformer"):
        model = zoo.model(name)
        tied = model.variables[0]  # the word embedding, tied to the output projection
        assert "embed" in tied.name or "wte" in tied.name
        assert not tied.sparse


def test_gpt_models_are_float16_and_have_tied_heads() -> None:
    for name in ("GPT-Medium", "GPT-Large", "GPT-XL", "GPT-2.7B"):
        spec = zoo.model(name)
        assert {v.dtype for v in spec.variables} == {"float16"}
        assert spec.param_bytes == 2 * spec.params
        assert spec.layers[-1].name == "lm_head" and spec.layers[-1].variables == ()


@pytest.mark.parametrize("name", list(GPU_DISTRIBUTION))
def test_cluster_gpus_match_table_2(name: str) -> None:
    spec = zoo.cluster(name)
    assert [n.gpus for n in spec.nodes] == GPU_DISTRIBUTION[name]
    assert spec.num_gpus == sum(GPU_DISTRIBUTION[name])
    if name in NIC_GBPS:
        assert [n.nic_gbps for n in spec.nodes] == NIC_GBPS[name]
    again = parse_spec(json.loads(dump_json(spec)))
    assert isinstance(again, ClusterSpec) and again == spec


def test_aws_clusters_cap_a_single_flow_at_10_gbps() -> None:
    b7 = zoo.cluster("B7")
    assert b7.single_flow_gbps == 10
    assert b7.link_gbps(0, 1) == 10  # 50 GbE NICs, one flow capped at 10
    assert b7.link_gbps(0, 0) > 10  # inside a node: PCIe
    assert zoo.cluster("A1").link_gbps(0, 1) == 40
    assert {t.name for t in zoo.cluster("B10").device_types} == {"M60-8GB", "T4-16GB"}


def test_committed_clusters_equal_the_generator() -> None:
    for spec in zoo_clusters():
        assert zoo.cluster(spec.name) == spec


def test_committed_plain_torch_models_equal_a_fresh_extraction() -> None:
    # NCF, the WMT Transformer and the CTR models need only torch; the others need the zoo environment.
    from simulator.extract.zoo_models import build

    for recipe in ZOO_MODELS:
        if recipe.name in ("NCF-dense", "NCF-sparse", "Transformer", *CTR_LAYERS):
            assert build(recipe) == zoo.model(recipe.name), recipe.name
