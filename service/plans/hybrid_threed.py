"""Hybrid searches in the 3D space (issue 42): TP x PP x DP plans with ZeRO and recompute for a GPT.

A search of kind ``hybrid`` whose ``plan_options.space`` is ``"3d"`` is planned here instead of by
Whale's TaskGraph planner (``service.plans.hybrid``). Options, every one optional but ``space``:

- ``global_batch``: samples per iteration (default the model's ``batch_size`` x ``gpus``);
- ``gpus``: GPUs of the cluster's first node the plans use (default all of them; one node: the
  3D collective model has no inter-node links yet, ``search.hybrid.threed``);
- ``zero_stages``: ZeRO stages to consider, a subset of [0, 1, 2, 3] (default all);
- ``recompute``: activation recompute modes, a subset of ["none", "selective", "full"] (default all);
- ``micro_batches``: micro-batch sizes (samples), default [1, 2, 4, 8];
- ``fused_attention``: false, true, or a list of both (FlashAttention-style fused attention core;
  default [false], Megatron's bmm + fused softmax);
- ``heads``: attention heads of the model (a traced model spec does not record them; default
  hidden / 64, GPT-2's head size).

The model must be a GPT as ``import-model`` traces one (a word embedding (V, h), a position
embedding (s, h), blocks named ``<prefix>.h.<i>``): its shape becomes ``simulator.threed.GPTConfig``.
Each round ranks every plan of ``search.hybrid.threed.enumerate_plans`` with
``search.hybrid.threed.rank_plans``: plans the 3D memory model predicts to run out of memory on the
cluster's GPU are dropped (never proposed), the rest go fastest first as ``hybrid_3d`` documents
(``simulator.threed.document.ThreeDDocument``) carrying the predicted time and memory per GPU.
No baseline is measured: nothing in this service runs a Megatron-style 3D plan on GPUs yet, so the
kind is predicted only here (``HybridPlans.predicted_only``): the loop runs one round of
``trial_budget`` candidates, queues no trial and completes the search (``service.loop``); the
result never names a measured best (``service.plans.results``), and a worker handed a 3D trial
refuses it (``runtime.worker.plan_hybrid3d``). ``ranking_rows`` / ``ranking_lines`` are the answer
as the dashboard and the CLI print it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from service.plans.base import Loc, OptionsInvalid, RoundAsk, RoundPlan, known_options, ranked_round
from simulator.spec import ClusterSpec, ModelSpec
from simulator.spec.limits import LIMITS
from simulator.threed import GPTConfig
from simulator.threed.document import ThreeDDocument

SPACE = "3d"
DEFAULTS: dict[str, Any] = {
    "space": SPACE,
    "global_batch": None,
    "gpus": None,
    "zero_stages": [0, 1, 2, 3],
    "recompute": ["none", "selective", "full"],
    "micro_batches": [1, 2, 4, 8],
    "fused_attention": [False],
    "heads": None,
}
RECOMPUTE = ("none", "selective", "full")
SCORER = "threed-cost-model"
#: The most micro-batch sizes a search may list (each multiplies the plans ranked per round).
MAX_MICRO_BATCH_SIZES = 16

_BLOCK = re.compile(r"\.h\.(\d+)(?:[.#]|$)")


def gpt_config(model: ModelSpec, heads: int | None = None) -> GPTConfig:
    """The GPT shape of a traced model spec; ValueError saying what is missing."""
    embeddings = [
        v.shape
        for layer in model.layers
        if layer.kind == "embedding"
        for v in layer.variables
        if len(v.shape) == 2
    ]
    if len(embeddings) < 2:
        raise ValueError("needs a word and a position embedding layer")
    word = max(embeddings, key=lambda s: s[0])
    hidden = int(word[1])
    pos = [s for s in embeddings if s is not word and int(s[1]) == hidden]
    if not pos:
        raise ValueError(f"no position embedding of width {hidden}")
    blocks = {m.group(1) for layer in model.layers if (m := _BLOCK.search(layer.name))}
    if not blocks:
        raise ValueError("no transformer blocks named '<prefix>.h.<i>'")
    a = heads if heads is not None else hidden // 64
    if a < 1 or hidden % a:
        raise ValueError(f"heads: must divide hidden={hidden}, got {a}")
    return GPTConfig(hidden=hidden, heads=a, layers=len(blocks), seq=int(min(pos)[0]), vocab=int(word[0]))


def _bad(field: str, reason: str) -> tuple[Loc, str]:
    return (("plan_options", field), reason)


def _show(v: Any) -> str:
    """``repr(v)`` cut to 60 characters (a 100k-character value is not echoed whole in a 422)."""
    text = repr(v)
    return text if len(text) <= 60 else text[:59] + "…"


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _subset(out: dict[str, Any], field: str, allowed: Sequence[Any]) -> list[tuple[Loc, str]]:
    v = out[field]
    ok = isinstance(v, list) and v and all(x in allowed and type(x) is type(allowed[0]) for x in v)
    if not ok:
        return [_bad(field, f"must be a non-empty list of {', '.join(map(repr, allowed))}, got {_show(v)}")]
    out[field] = sorted(set(v), key=list(allowed).index)
    return []


class ThreeDSpace:
    """The 3D space of a hybrid search (see the module docstring); ``HybridPlans`` delegates here."""

    def validate(
        self, options: dict[str, Any] | None, *, model: ModelSpec, cluster: ClusterSpec
    ) -> dict[str, Any]:
        out = known_options(options, DEFAULTS, "hybrid 3d")
        issues: list[tuple[Loc, str]] = []
        node_gpus = cluster.nodes[0].gpus
        if out["space"] != SPACE:
            issues.append(_bad("space", f"must be {SPACE!r} (or left out: Whale's TaskGraph plans)"))
        if out["gpus"] is None:
            out["gpus"] = node_gpus
        if not _int(out["gpus"]) or not 1 <= out["gpus"] <= node_gpus:
            issues.append(
                _bad(
                    "gpus",
                    f"must be an int in [1, {node_gpus}] (one node of {cluster.name}), got {_show(out['gpus'])}",
                )
            )
        elif out["global_batch"] is None:
            out["global_batch"] = min(model.batch_size * out["gpus"], LIMITS.global_batch)
        gb = out["global_batch"]
        if gb is not None and (not _int(gb) or not 1 <= gb <= LIMITS.global_batch):
            issues.append(
                _bad("global_batch", f"must be an int in [1, {LIMITS.global_batch}], got {_show(gb)}")
            )
        for field in ("zero_stages", "recompute", "micro_batches", "fused_attention"):
            if isinstance(out[field], (int, str)):  # one value for a list of one (bool is an int)
                out[field] = [out[field]]
        issues += _subset(out, "zero_stages", (0, 1, 2, 3))
        issues += _subset(out, "recompute", RECOMPUTE)
        issues += _subset(out, "fused_attention", (False, True))
        mbs = out["micro_batches"]
        if (
            not isinstance(mbs, list)
            or not 1 <= len(mbs) <= MAX_MICRO_BATCH_SIZES
            or not all(_int(b) and 1 <= b <= LIMITS.global_batch for b in mbs)
        ):
            issues.append(
                _bad(
                    "micro_batches",
                    f"must be a list of 1 to {MAX_MICRO_BATCH_SIZES} ints in [1, {LIMITS.global_batch}], got {_show(mbs)}",
                )
            )
        else:
            out["micro_batches"] = sorted(set(mbs))
        heads = out["heads"]
        if heads is not None and (not _int(heads) or heads < 1):
            issues.append(_bad("heads", f"must be a positive int, got {_show(heads)}"))
        if issues:
            raise OptionsInvalid(issues)
        try:
            cfg = gpt_config(model, heads)
        except ValueError as e:
            if str(e).startswith("heads: "):
                raise OptionsInvalid([_bad("heads", str(e).removeprefix("heads: "))]) from None
            raise OptionsInvalid([(("model",), f"the 3d space needs a GPT: {e}")]) from None
        if out["heads"] is None:
            out["heads"] = cfg.heads
        if not self.plans(model, cluster, out):
            raise OptionsInvalid(
                [
                    _bad(
                        "global_batch",
                        f"no TP x PP x DP plan of {out['gpus']} GPUs makes a global batch of {gb} from "
                        f"micro-batches {out['micro_batches']} ({cfg.layers} layers, {cfg.heads} heads)",
                    )
                ]
            )
        return out

    def plans(self, model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any]) -> list[Any]:
        """Every ``ThreeDPlan`` the options allow (before the memory filter)."""
        from search.hybrid.threed import enumerate_plans

        return enumerate_plans(
            gpt_config(model, options["heads"]),
            int(options["gpus"]),
            int(options["global_batch"]),
            micro_batches=options["micro_batches"],
            zero_stages=options["zero_stages"],
            recomputes=options["recompute"],
            fused_attention=options["fused_attention"],
        )

    def ranked(
        self, model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any]
    ) -> tuple[list[ThreeDDocument], int]:
        """The documents of every plan that fits, fastest first, and how many were dropped as OOM."""
        from search.hybrid.threed import node_of, rank_plans

        cfg = gpt_config(model, options["heads"])
        plans = self.plans(model, cluster, options)
        ranked = rank_plans(
            cfg, cluster, int(options["global_batch"]), gpus=int(options["gpus"]), plans=plans
        )
        device = node_of(cluster)[0].name
        dropped = len(plans) - len(ranked)
        docs = [
            ThreeDDocument.of(cfg, r.plan, r.cost, r.memory, device).model_copy(
                update={"enumerated": len(plans), "out_of_memory_dropped": dropped}
            )
            for r in ranked
        ]
        return docs, dropped

    def plan_round(
        self, model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any], ask: RoundAsk
    ) -> RoundPlan:
        docs, _ = self.ranked(model, cluster, options)
        return ranked_round(
            ((d.predicted.seconds, d) for d in docs),
            ask,
            lambda d: (d.layout.tp, d.layout.pp, d.layout.dp, d.zero_stage, d.recompute, d.micro_batch),
            SCORER,
        )


def is_3d(options: dict[str, Any] | None) -> bool:
    """Whether a hybrid search's options ask for the 3D space (any ``space`` given is checked here)."""
    return isinstance(options, dict) and options.get("space") is not None


def ranking_rows(candidates: Sequence[tuple[int, int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The predicted ranking of a 3D search, one row per (candidate id, rank, document), best first:
    what the CLI (``search status``/``watch``) and the dashboard's search page print. Documents of
    another kind are skipped."""
    rows = []
    for cid, rank, doc in sorted(candidates, key=lambda c: (c[1], c[0])):
        if doc.get("kind") != "hybrid_3d":
            continue
        d = ThreeDDocument.model_validate(doc)
        rows.append(
            {
                "candidate_id": cid,
                "rank": rank,
                "layout": d.summary(),
                "predicted_s": d.predicted.seconds,
                "memory_gb": d.memory.peak_bytes / 1e9,
                "capacity_gb": d.memory.capacity_bytes / 1e9,
                "fits": d.memory.fits,
            }
        )
    return rows


def ranking_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """``ranking_rows`` as text lines (the CLI's table; says that nothing in it was measured)."""
    if not rows:
        return []
    out = [f"predicted ranking ({len(rows)} 3D plans, predicted only: none is measured):"]
    out += [
        f"  {r['rank']:>3}. candidate {r['candidate_id']}: {r['layout']}; predicted "
        f"{r['predicted_s'] * 1e3:.1f} ms/iteration, {r['memory_gb']:.1f} of {r['capacity_gb']:.0f} GB per GPU, "
        f"{'fits' if r['fits'] else 'out of memory'}"
        for r in rows
    ]
    return out
