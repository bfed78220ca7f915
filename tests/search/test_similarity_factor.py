"""FactorSimilarity's compiled pieces (search.similarity.kernels) against plain numpy references:
the codes from choice arrays, and the per-column ids behind the similarity rows of selection."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

from search import ArraySampler, Space, SpaceConfig
from search.samplers.arrays import ChoiceArrays
from search.selection import select_diverse, select_embedded, select_rows
from search.similarity import FactorSimilarity, HiddenSimilarity
from search.similarity.factor import FactorRows
from simulator import zoo
from simulator.spec import ClusterSpec, ModelSpec

P = np.uint64(0x9E3779B97F4A7C15)


def reference_codes(arrays: ChoiceArrays, variables: int) -> np.ndarray:
    """The numpy formula (the implementation before the kernel): per (strategy, variable) segment,
    code 0 = axis x 65536 + shards, codes 1-6 = sum of (value + 1) x P^(shard + 1) mod 2^64."""
    pos = np.asarray(arrays.shard_index).astype(np.int64)
    starts = np.flatnonzero(pos == 0)
    weight = np.cumprod(np.full(int(pos.max()) + 1, P, dtype=np.uint64))[pos]
    ps = np.asarray(arrays.is_ps, dtype=bool)
    cc = ~ps

    def col(name: str) -> np.ndarray:
        return np.asarray(getattr(arrays, name)).astype(np.int64)

    def code(values: np.ndarray) -> np.ndarray:
        term = (values + 1).astype(np.uint64) * weight
        return np.add.reduceat(term, starts)

    out = np.stack(
        [
            (col("axis")[starts] * 65536 + col("num_shards")[starts]).astype(np.uint64),
            code(ps.astype(np.int64)),
            code(np.where(ps, col("server") + 1, 0)),
            code(np.where(ps, col("local_replication") + 1, 0)),
            code(np.where(cc, col("group") + 1, 0)),
            code(np.where(cc, col("compressor") * 65536 + col("rank") + 1, 0)),
            code(np.where(cc, col("algorithm") + 1, 0)),
        ],
        axis=1,
    )
    return out.reshape(arrays.size, variables * 7)


def _sampled(model: ModelSpec, cluster: ClusterSpec, n: int, seed: int) -> tuple[Space, ChoiceArrays]:
    space = Space(model, cluster, SpaceConfig(compressors=("none", "fp16", "powersgd")))
    return space, ArraySampler(space, seed, None, chunk=n).sample_arrays(n)


def test_codes_are_the_numpy_formula(model: ModelSpec, cluster: ClusterSpec) -> None:
    _, arrays = _sampled(model, cluster, 80, 3)
    sim = FactorSimilarity(model)
    codes = sim.embed_arrays(arrays)
    assert codes.dtype == np.uint64 and codes.shape == (80, len(sim.variables) * 7)
    assert np.array_equal(codes, reference_codes(arrays, len(sim.variables)))


def test_codes_on_a_zoo_model_with_powersgd_ranks() -> None:
    model, cluster = zoo.model("BERT-large"), zoo.cluster("B7")
    _, arrays = _sampled(model, cluster, 40, 1)
    sim = FactorSimilarity(model)
    assert np.array_equal(sim.embed_arrays(arrays), reference_codes(arrays, len(sim.variables)))


def test_codes_refuse_arrays_of_another_model(model: ModelSpec, cluster: ClusterSpec) -> None:
    _, arrays = _sampled(model, cluster, 10, 0)
    with pytest.raises(ValueError, match="variable segments"):
        FactorSimilarity(zoo.model("BERT-large")).embed_arrays(arrays)


def _codes_with_cardinalities(n: int, distinct: list[int], seed: int) -> np.ndarray:
    """(n, len(distinct)) random 64-bit codes, column c taking exactly distinct[c] values."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, len(distinct)), dtype=np.uint64)
    for c, d in enumerate(distinct):
        values = rng.integers(0, 2**63, d, dtype=np.int64).astype(np.uint64) * np.uint64(2)
        out[:, c] = values[rng.permutation(np.concatenate([np.arange(d), rng.integers(0, d, n - d)]))]
    return out


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.uint64, np.int64])
def test_rows_are_between_on_constant_narrow_and_wide_columns(order: Literal["C", "F"], dtype: type) -> None:
    # constant, 2, 256 (the narrow limit), 257 and 600 distinct codes per column
    distinct = [1, 2, 256, 257, 600, 1, 3, 40]
    codes: np.ndarray = np.asarray(_codes_with_cardinalities(700, distinct, 0).view(dtype), order=order)
    sim = FactorSimilarity(zoo.model("BERT-large"))
    rows = FactorRows.of_codes(codes)
    assert rows.constant == 2 and rows.narrow.shape == (4, 700) and rows.wide.shape == (2, 700)
    assert rows.narrow.dtype == np.uint8 and rows.wide.dtype == np.uint16
    expected = sim.between(codes, codes)
    for i in range(len(codes)):
        assert np.array_equal(rows(i), expected[i]), i


def test_rows_with_colliding_table_slots() -> None:
    # codes equal in their high bits and differing only low: after the multiplicative hash
    # many share a slot, so the probing decides; plus 0 and 2^64 - 1
    low = np.arange(500, dtype=np.uint64)
    column = np.concatenate([low, low << np.uint64(40), [np.uint64(0), np.uint64(2**64 - 1)]])
    rng = np.random.default_rng(1)
    codes = np.stack([rng.permutation(np.tile(column, 2)), rng.permutation(np.tile(column, 2))], axis=1)
    rows = FactorRows.of_codes(codes)
    expected = FactorSimilarity(zoo.model("BERT-large")).between(codes, codes)
    for i in range(0, len(codes), 7):
        assert np.array_equal(rows(i), expected[i])


def test_rows_past_65536_candidates_use_four_byte_ids() -> None:
    n = 70_000
    codes = np.stack([np.arange(n, dtype=np.uint64), np.arange(n, dtype=np.uint64) % np.uint64(3)], axis=1)
    rows = FactorRows.of_codes(codes)
    assert rows.wide.dtype == np.uint32 and rows.wide.shape == (1, n) and rows.narrow.shape == (1, n)
    r = rows(4)
    assert (
        r[4] == 1.0 and r[7] == 0.5 and r[5] == 0.0 and np.count_nonzero(r == 0.5) == 23_333 - 1
    )  # j = 1 mod 3, but 4


def test_rows_refuse_other_embeddings() -> None:
    with pytest.raises(ValueError, match="64-bit codes"):
        FactorRows.of_codes(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="64-bit codes"):
        FactorRows.of_codes(np.zeros(3, dtype=np.int64))


def test_object_and_array_rows_agree(model: ModelSpec, cluster: ClusterSpec) -> None:
    space, arrays = _sampled(model, cluster, 120, 7)
    objects = [arrays.strategy(space, i) for i in range(arrays.size)]
    sim = FactorSimilarity(model)
    from_objects, from_arrays = sim.rows(sim.embed(objects)), sim.rows(sim.embed_arrays(arrays))
    matrix = sim.matrix(objects)
    for i in range(arrays.size):
        assert np.array_equal(from_objects(i), matrix[i]) and np.array_equal(from_arrays(i), matrix[i])
    assert len(np.unique(matrix)) > 5  # not trivially all equal


def test_selection_on_arrays_is_selection_on_objects(model: ModelSpec, cluster: ClusterSpec) -> None:
    space, arrays = _sampled(model, cluster, 200, 11)
    objects = [arrays.strategy(space, i) for i in range(arrays.size)]
    scores = np.random.default_rng(2).uniform(1.0, 2.0, arrays.size)
    sim = FactorSimilarity(model)
    for alpha in (0.0, 0.1, 1.0):
        a = select_embedded(sim.embed_arrays(arrays), scores, 6, alpha, sim)
        o = select_diverse(objects, scores, 6, alpha, sim)
        assert a.indices == o.indices and a.similarity == o.similarity and a.objective == o.objective


def test_rows_from_arrays_are_the_rows_of_their_codes() -> None:
    model, cluster = zoo.model("BERT-large"), zoo.cluster("B7")
    _, arrays = _sampled(model, cluster, 700, 2)
    sim = FactorSimilarity(model)
    index = np.random.default_rng(3).permutation(700)[:650]  # unsorted, some left out
    for picked in (None, index):
        direct = sim.rows_arrays(arrays, picked)
        sub = arrays if picked is None else arrays.take(picked)
        via_codes = sim.rows(sim.embed_arrays(sub))
        assert isinstance(via_codes, FactorRows) and direct.width == via_codes.width
        assert np.array_equal(direct.narrow, via_codes.narrow) and np.array_equal(direct.wide, via_codes.wide)
        assert direct.constant == via_codes.constant and len(direct.wide) > 0  # BERT-large: wide columns
        for i in (0, 17, len(sub.offsets) - 2):
            assert np.array_equal(direct(i), via_codes(i))


def test_rows_from_arrays_refuse_another_model(model: ModelSpec, cluster: ClusterSpec) -> None:
    _, arrays = _sampled(model, cluster, 10, 0)
    with pytest.raises(ValueError, match="variable segments"):
        FactorSimilarity(zoo.model("BERT-large")).rows_arrays(arrays)


def test_select_rows_is_select_embedded(model: ModelSpec, cluster: ClusterSpec) -> None:
    _, arrays = _sampled(model, cluster, 150, 4)
    scores = np.random.default_rng(5).uniform(1.0, 2.0, arrays.size)
    sim = FactorSimilarity(model)
    for alpha in (0.0, 0.3):
        by_rows = select_rows(sim.rows_arrays(arrays), scores, 5, alpha)
        assert by_rows == select_embedded(sim.embed_arrays(arrays), scores, 5, alpha, sim)
    with pytest.raises(ValueError, match="similarity rows"):
        select_rows(sim.rows_arrays(arrays), scores[:100], 5, 0.3)
    with pytest.raises(ValueError, match="scores"):
        select_embedded(sim.embed_arrays(arrays), scores[:100], 5, 0.3, sim)


def test_default_rows_ask_between(model: ModelSpec, cluster: ClusterSpec) -> None:
    from simulator.analytical import AnalyticalSimulator

    sim = HiddenSimilarity(AnalyticalSimulator(), model, cluster)
    e = np.random.default_rng(0).normal(size=(20, 4))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    assert np.array_equal(sim.rows(e)(3), sim.between(e[3:4], e)[0])
