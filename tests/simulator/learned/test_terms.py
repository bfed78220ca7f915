"""The additive sync terms of a strategy (by hand) and the per-domain price line fitted on them."""

from __future__ import annotations

import numpy as np

from simulator.analytical import cluster_arrays, encode, model_arrays
from simulator.learned.terms import NUM_TERMS, TERM_NAMES, TermsLine, sync_terms
from simulator.spec import CollectiveSync, Partition, PSSync, Strategy, VariableStrategy

from .conftest import toy_cluster, toy_model


def test_terms_of_a_hand_built_strategy() -> None:
    model, cluster = toy_model(depth=1), toy_cluster()  # emb.w (sparse), fc0.w, fc0.b
    strategy = Strategy(
        variables=(
            VariableStrategy(
                variable="emb.w",
                partition=Partition(shards=2),
                shards=(PSSync(server="s"), PSSync(server="a", local_replication=True)),
            ),
            VariableStrategy(
                variable="fc0.w", partition=Partition(shards=1), shards=(CollectiveSync(group=0),)
            ),
            VariableStrategy(
                variable="fc0.b", partition=Partition(shards=1), shards=(CollectiveSync(group=0),)
            ),
        )
    )
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    batch = encode(ma, ca, [strategy, strategy])
    t = sync_terms(ma, ca, batch)
    assert t.shape == (2, NUM_TERMS) and len(set(TERM_NAMES)) == NUM_TERMS
    np.testing.assert_array_equal(t[0], t[1])
    col = dict(zip(TERM_NAMES, t[0], strict=True))
    # Two sparse PS shards on two servers (one locally replicated), two dense ring rows in one call.
    assert (col["ps_sp_n_n"], col["ps_sp_L_n"], col["cc_de_r_n"]) == (1, 1, 2)
    assert (col["ps_sp_n_nmax"], col["ps_sp_L_nmax"]) == (1, 1)
    assert (
        sum(
            v for k, v in col.items() if k.endswith("_n") and k not in ("ps_sp_n_n", "ps_sp_L_n", "cc_de_r_n")
        )
        == 0
    )
    assert (col["ps_shards"], col["cc_shards"], col["servers_used"], col["max_server_shards"]) == (2, 2, 2, 1)
    assert (col["calls"], col["calls_ring"], col["calls_hierarchical"], col["calls_allgather"]) == (
        1,
        1,
        0,
        0,
    )
    assert (col["primitive_calls"], col["ps_local_shards"]) == (1, 1)
    sent = batch.geo.sent_bytes[: batch.offsets[1]]
    ps = batch.is_ps[: batch.offsets[1]]
    assert col["ps_bytes"] == sent[ps].sum() and col["cc_bytes"] == sent[~ps].sum()
    assert col["ps_sp_n_b"] + col["ps_sp_L_b"] == col["ps_bytes"]
    assert col["ps_sp_n_bmax"] == col["ps_sp_n_b"]  # one shard of that kind: it is the busiest


def test_the_line_recovers_a_price_list_and_floors_its_log() -> None:
    rng = np.random.default_rng(0)
    terms = rng.uniform(0, 1, (80, NUM_TERMS)) * rng.uniform(1, 1e6, NUM_TERMS)
    price = np.where(rng.random(NUM_TERMS) < 0.3, rng.uniform(0, 1e-7, NUM_TERMS), 0.0)
    times = 0.02 + terms @ price
    line = TermsLine.fit(terms, times, floor_fraction=0.01)
    assert (line.weights >= 0).all()
    np.testing.assert_allclose(line.seconds(terms), times, rtol=1e-6)
    assert line.floor == 0.01 * np.median(times)
    below = TermsLine(np.zeros(NUM_TERMS), np.ones(NUM_TERMS), -1.0, 0.5)
    np.testing.assert_allclose(below.log_seconds(terms[:3]), np.log(0.5))
