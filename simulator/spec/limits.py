"""Bounds on every count, size and number a spec or request may hold: one place, one reason each.

Each bound reflects real hardware and models with generous headroom, so no real input is refused,
while an absurd one (a node with 10**12 GPUs, a shape of 2**70, ``Infinity`` FLOPs) is refused at
the door with its field path instead of exhausting memory or overflowing far from the cause. The
spec classes read these bounds, so the API (422), the CLI (exit 2) and the worker, which all
parse through them, enforce the same limits. Floats are finite everywhere (pydantic's
``allow_inf_nan=False`` on every spec class).

Long lists (layers, variables, nodes, shards, iteration times) stop at their first invalid item
(pydantic's ``fail_fast``): a 10 MB body of 10**6 bad items is one error, not a million-entry 422
that takes seconds to build.

Names (of models, layers, variables, nodes, device types, searches, users) are 1-200 printable
characters: no control characters (NUL cannot be stored in PostgreSQL text; tabs and newlines in a
name break tables and logs) and, as every ``str`` pydantic validates, no lone surrogates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, Field

INT4_MAX = 2**31 - 1  # largest PostgreSQL ``integer``: the service's id, seed and count columns


@dataclass(frozen=True)
class Limits:
    """The bounds; ``LIMITS`` is the one instance every validator reads."""

    # --- names and text ---
    # Characters in a name; the database stores names in VARCHAR(200) columns.
    name_chars: int = 200
    # Characters in a model's or a cluster's name: their domain '<model>__<cluster>' is stored in
    # VARCHAR(401) columns (199 + 2 + 199 fits; 200 + 2 + 200 would not).
    spec_name_chars: int = 199
    # Characters in a free-text field (a cluster's description, a model's source, a failure reason).
    text_chars: int = 10_000
    # Bytes of a spec file the CLI reads (the zoo's largest is ~0.2 MB; 100,000 layers ~30 MB).
    spec_file_bytes: int = 100_000_000

    # --- clusters ---
    # GPUs on one node: today's largest single systems have 8-72 (NVL72); 1024 is 14x that.
    gpus_per_node: int = 1024
    # Nodes in one cluster: the largest training clusters (~100k GPUs) have ~10^4 nodes.
    nodes: int = 16_384
    # GPUs in one cluster: 2**17, above the largest clusters built (~100k GPUs).
    gpus: int = 131_072
    # Distinct device types in one cluster (heterogeneous clusters mix a handful).
    device_types: int = 64
    # Device peak TFLOPS (any precision): an H100 is 67 FP32 / 989 FP16, FP4 parts ~20,000.
    tflops: float = 1e6
    # Device memory, GB (today 16-288).
    memory_gb: float = 1e5
    # Device memory bandwidth, GB/s (today up to ~8,000).
    memory_bw_gbs: float = 1e6
    # Any link, Gbit/s: NICs are 10-1,600, NVLink 5 is 14,400 per GPU.
    link_gbps: float = 1e6
    # The smallest positive rate (TFLOPS, GB, GB/s, Gbit/s): 1e-6 is a 1 MFLOPS / 1 kbit/s device;
    # anything smaller only turns predicted times into overflow.
    min_rate: float = 1e-6
    # One-way latency of a link, microseconds (10 s: a satellite hop is ~600 ms).
    latency_us: float = 1e7
    # Host CPU cores (today up to ~400) and host RAM, GB (today up to ~32,000).
    cpu_cores: int = 65_536
    host_memory_gb: float = 1e6
    # Price of one node, USD per hour (an 8-GPU H100 node rents for ~100).
    price_per_hour: float = 1e6
    # Units (CPU cores or GPUs) of one HeterPS resource type, and units one stage provisions: the
    # provisioning search walks unit counts one by one (zoo: 8-192).
    resource_units: int = 131_072

    # --- models ---
    # Layers (ops) of one model: zoo models have 8-300, fine-grained traces of 100B+ models ~10^4.
    layers: int = 100_000
    # Trainable variables of one model (zoo: 10-400).
    variables: int = 100_000
    # Inputs of one layer (a concatenation of many branches; DenseNet's widest has 25).
    layer_inputs: int = 4096
    # Dimensions of a variable's shape (conv3d weights have 5).
    shape_rank: int = 8
    # Elements of one variable: 2**40 (~1.1e12) holds a whole 1T-parameter model in one tensor.
    variable_elements: int = 2**40
    # Elements of all variables of a model: 2**44 (~1.8e13), 10x the largest published models.
    model_elements: int = 2**44
    # Per-GPU batch size in samples (zoo: 8-256).
    batch_size: int = 2**20
    # Forward FLOPs of one layer per sample (GPT-3's whole forward pass is ~7e14 per sequence).
    layer_flops: float = 1e18
    # Bytes of one layer's output per sample (1 PB).
    activation_bytes: float = 1e15

    # --- strategies and plans ---
    # Shards one variable is partitioned into (AutoSync partitions into at most the servers).
    shards_per_variable: int = 4096
    # A collective merge-group id: the scorer numbers calls by (strategy, group, op) in int64.
    merge_group: int = 2**20
    # Stale-synchronous staleness bound, steps.
    staleness: int = 1000
    # PowerSGD rank (1-4 in its paper; a rank at the matrix size compresses nothing).
    powersgd_rank: int = 65_536
    # Samples per training step of a plan over the whole cluster, and per micro-batch.
    global_batch: int = 2**30
    micro_batch: int = 2**20
    # Micro-batches per step of a pipeline (Ada-Grouper tunes tens).
    micro_batches: int = 65_536

    # --- measurements ---
    # Seconds of one iteration (a day: a real step takes milliseconds to minutes).
    seconds: float = 86_400.0
    # Iterations in one measurement, and warm-up iterations before it.
    iterations: int = 100_000
    # Factor bytes and bandwidth were divided by on the emulated cluster (used: 1-10^4).
    scale: float = 1e9
    # Nesting depth of a measurement's free-form ``environment`` JSON.
    json_depth: int = 16

    # --- searches (the service reads these for its request schemas) ---
    # Candidate trials of one search (AutoSync ran ~10^2 per search).
    trial_budget: int = 10_000
    # Candidates (K) per round.
    candidates_per_round: int = 1000
    # Strategies sampled and scored per round (M). Measured on the 2-core dev machine, planning a
    # round of BERT-base costs ~9 ms and ~0.35 MB per sample (5,000: 45 s, 1.8 GB), so 10,000 is
    # already a large round; 1,000,000 would need hours and hundreds of GB.
    samples_per_round: int = 10_000
    # A search's seed; stored in a PostgreSQL ``integer`` column.
    seed: int = INT4_MAX
    # Ids of stored objects (PostgreSQL ``integer`` primary keys, on SQLite too for the same 422).
    id: int = INT4_MAX


LIMITS = Limits()

# C0 and C1 control characters (NUL, tab, newline, escape, ...); the JSON-schema pattern that says
# so lets an OpenAPI client (and the fuzzer) know before it sends.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"
TEXT_PATTERN = r"^[^\x00]*$"


def _printable(value: str) -> str:
    m = _CONTROL.search(value)
    if m:
        raise ValueError(f"must not contain control characters (found {m.group()!r} at {m.start()})")
    return value


def _no_nul(value: str) -> str:
    i = value.find("\x00")
    if i >= 0:
        raise ValueError(f"must not contain NUL characters (found one at {i})")
    return value


#: A required name: 1-200 printable characters.
Name = Annotated[
    str,
    Field(min_length=1, max_length=LIMITS.name_chars, json_schema_extra={"pattern": NAME_PATTERN}),
    AfterValidator(_printable),
]
#: A model's or a cluster's name: 1-199 printable characters (see ``Limits.spec_name_chars``).
SpecName = Annotated[
    str,
    Field(min_length=1, max_length=LIMITS.spec_name_chars, json_schema_extra={"pattern": NAME_PATTERN}),
    AfterValidator(_printable),
]
#: An optional label (may be empty): at most 200 printable characters.
Label = Annotated[
    str,
    Field(max_length=LIMITS.name_chars, json_schema_extra={"pattern": NAME_PATTERN}),
    AfterValidator(_printable),
]
#: Free text (newlines allowed): at most 10,000 characters, no NUL.
Text = Annotated[
    str,
    Field(max_length=LIMITS.text_chars, json_schema_extra={"pattern": TEXT_PATTERN}),
    AfterValidator(_no_nul),
]


def printable_issue(value: str) -> str | None:
    """Why ``value`` is not a valid name (empty, too long, control characters), or None."""
    if not value:
        return "must not be empty"
    if len(value) > LIMITS.name_chars:
        return f"must be at most {LIMITS.name_chars} characters, got {len(value)}"
    try:
        _printable(value)
    except ValueError as e:
        return str(e)
    return None


def _text_issue(value: str) -> str | None:
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\\ud800" in JSON) cannot be stored as UTF-8
        return "must be valid Unicode (no lone surrogates)"
    return None


def json_issues(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(path, reason) for every non-finite number, NUL or lone surrogate, or too-deep nesting in JSON data.

    For free-form JSON (a measurement's ``environment``) that no schema describes: it must still
    serialise as strict JSON and store in PostgreSQL.
    """
    if len(path) > LIMITS.json_depth:
        yield path, f"nested deeper than {LIMITS.json_depth} levels"
        return
    if isinstance(value, float) and not math.isfinite(value):
        yield path, f"must be a finite number, got {value}"
    elif isinstance(value, str) and (reason := _text_issue(value)):
        yield path, reason
    elif isinstance(value, dict):
        for k, v in value.items():
            if reason := _text_issue(str(k)):
                yield (*path, str(k)), f"key {reason}"
            yield from json_issues(v, (*path, str(k)))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from json_issues(v, (*path, i))
