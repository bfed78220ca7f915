"""ModelSpec: a training model as strategist sees it (layers in forward order, variables, the DAG)."""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from simulator.spec.errors import Issue, structural
from simulator.spec.limits import LIMITS, Label, Name, SpecName, Text

DType = Literal["float32", "float16", "bfloat16", "int64", "int32"]
DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4}
#: The arithmetic a layer runs in: tf32 is float32 storage on tensor cores (Ampere and later).
ComputeDType = Literal["float32", "tf32", "float16", "bfloat16"]


class Variable(BaseModel):
    """A trainable parameter tensor; the unit AutoSync assigns a sub-strategy to.

    ``sparse`` marks a gradient that is sparse in rows (an embedding looked up per sample); its
    expected ``density`` is the fraction of rows touched per step on one worker, so the gradient
    message is ``bytes * density`` (m_i in AutoSync Eq. 2). ``bytes`` is derived from shape and
    dtype; it may be given in input, and must then agree.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: Name = Field(description="Unique parameter name, e.g. 'encoder.0.attn.q.weight'.")
    shape: tuple[int, ...] = Field(
        min_length=1, max_length=LIMITS.shape_rank, description="Tensor shape; every dimension >= 1."
    )
    dtype: DType = Field("float32", description="Element type of the parameter.")
    sparse: bool = Field(False, description="Gradient is row-sparse (embedding lookups).")
    density: float = Field(1.0, gt=0.0, le=1.0, description="Expected fraction of rows with gradient.")

    @model_validator(mode="before")
    @classmethod
    def _check_bytes(cls, data: Any) -> Any:
        if isinstance(data, dict) and "bytes" in data:
            data = dict(data)
            given = data.pop("bytes")
            shape = data.get("shape") or ()
            dtype = data.get("dtype", "float32")
            # (a shape longer than the rank limit is refused by the field; no huge product first)
            ok_shape = len(shape) <= LIMITS.shape_rank and all(isinstance(d, int) and d >= 1 for d in shape)
            if ok_shape and dtype in DTYPE_BYTES:
                want = math.prod(shape) * DTYPE_BYTES[dtype]
                if given != want:
                    structural([Issue(("bytes",), f"is {given} but shape x dtype gives {want}")])
        return data

    @model_validator(mode="after")
    def _check(self) -> Variable:
        structural(Issue(("shape", i), f"must be >= 1, got {d}") for i, d in enumerate(self.shape) if d < 1)
        if self.numel > LIMITS.variable_elements:
            structural(
                [Issue(("shape",), f"has {self.numel} elements, more than {LIMITS.variable_elements}")]
            )
        if not self.sparse and self.density != 1.0:
            structural([Issue(("density",), "must be 1.0 for a dense variable")])
        return self

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def bytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]

    @property
    def grad_bytes(self) -> float:
        """Expected bytes of one worker's gradient message (m_i): density-scaled for sparse ones."""
        return self.bytes * self.density


class Layer(BaseModel):
    """One op/layer in forward order with its cost per sample and the variables it owns."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: Name = Field(description="Unique layer name.")
    kind: Name = Field(description="Op kind, e.g. 'linear', 'conv2d', 'embedding'.")
    fwd_flops: float = Field(
        ge=0.0, le=LIMITS.layer_flops, description="Forward FLOPs per sample (multiply-add = 2 FLOPs)."
    )
    activation_bytes: float = Field(
        ge=0.0, le=LIMITS.activation_bytes, description="Bytes of this layer's output per sample."
    )
    variables: tuple[Variable, ...] = Field(
        (), max_length=LIMITS.variables, fail_fast=True, description="Parameters owned by this layer."
    )
    inputs: tuple[Name, ...] = Field(
        (),
        max_length=LIMITS.layer_inputs,
        fail_fast=True,
        description="Names of the layers whose outputs feed this one.",
    )
    fwd_bytes: float | None = Field(
        None,
        ge=0.0,
        le=LIMITS.activation_bytes,
        description="Activation bytes the forward kernels read + write per sample (parameters not"
        " included); None: estimated from kind and activation sizes (simulator.analytical.compute).",
    )
    fwd_kernels: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="Kernels (ATen ops, views excluded) the forward launches; None: by kind.",
    )


class ModelSpec(BaseModel):
    """A model: layers in forward (topological) order, their variables and the data-flow DAG.

    Invariants checked on construction: layer and variable names are unique, every input names a
    known layer, the DAG has no cycle, and the layer order is a topological order of the DAG; the
    model has at least one variable (there is nothing to synchronise otherwise) and its sizes are
    within `simulator.spec.limits`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    kind: Literal["model"] = "model"
    name: SpecName
    family: Label = Field("", description="Task family: IC, MT, CF, LM, ...")
    batch_size: int = Field(ge=1, le=LIMITS.batch_size, description="Default per-GPU batch size (samples).")
    layers: tuple[Layer, ...] = Field(min_length=1, max_length=LIMITS.layers, fail_fast=True)
    source: Text = Field("", description="Where the spec came from (extractor, module, variant).")
    compute_dtype: ComputeDType | None = Field(
        None,
        description="Arithmetic of the matmul/conv layers (mixed precision: 'float16'/'bfloat16');"
        " None: each layer's parameter dtype (float32 without parameters).",
    )

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        structural(_model_issues(self))
        return self

    @cached_property
    def variables(self) -> tuple[Variable, ...]:
        """All variables in forward order (layer order, then order within the layer)."""
        return tuple(v for layer in self.layers for v in layer.variables)

    @cached_property
    def variable_index(self) -> dict[str, int]:
        return {v.name: i for i, v in enumerate(self.variables)}

    @cached_property
    def variable_layer(self) -> tuple[int, ...]:
        """For each variable (forward order), the index of the layer owning it."""
        return tuple(li for li, layer in enumerate(self.layers) for _ in layer.variables)

    def variable(self, name: str) -> Variable:
        return self.variables[self.variable_index[name]]

    @property
    def params(self) -> int:
        return sum(v.numel for v in self.variables)

    @property
    def param_bytes(self) -> int:
        return sum(v.bytes for v in self.variables)

    @property
    def fwd_flops(self) -> float:
        """Forward FLOPs per sample of the whole model."""
        return sum(layer.fwd_flops for layer in self.layers)

    @property
    def activation_bytes(self) -> float:
        return sum(layer.activation_bytes for layer in self.layers)

    @cached_property
    def edges(self) -> tuple[tuple[int, int], ...]:
        """DAG edges as (producer layer index, consumer layer index)."""
        index = {layer.name: i for i, layer in enumerate(self.layers)}
        return tuple((index[src], dst) for dst, layer in enumerate(self.layers) for src in layer.inputs)


def _model_issues(m: ModelSpec) -> list[Issue]:
    n_vars = sum(len(layer.variables) for layer in m.layers)
    if n_vars == 0:
        return [Issue(("layers",), "the model has no variables (nothing to synchronise)")]
    if n_vars > LIMITS.variables:
        return [Issue(("layers",), f"the model has {n_vars} variables, more than {LIMITS.variables}")]
    elements = sum(math.prod(v.shape) for layer in m.layers for v in layer.variables)
    if elements > LIMITS.model_elements:
        return [Issue(("layers",), f"the model has {elements} parameters, more than {LIMITS.model_elements}")]
    issues: list[Issue] = []
    index: dict[str, int] = {}
    for i, layer in enumerate(m.layers):
        if layer.name in index:
            issues.append(Issue(("layers", i, "name"), f"duplicate layer name {layer.name!r}"))
        index.setdefault(layer.name, i)
    seen_vars: set[str] = set()
    for i, layer in enumerate(m.layers):
        for j, v in enumerate(layer.variables):
            if v.name in seen_vars:
                issues.append(
                    Issue(("layers", i, "variables", j, "name"), f"duplicate variable name {v.name!r}")
                )
            seen_vars.add(v.name)
        for j, src in enumerate(layer.inputs):
            if src not in index:
                issues.append(Issue(("layers", i, "inputs", j), f"unknown layer {src!r}"))
    if issues:
        return issues
    cycle = _find_cycle(m.layers, index)
    if cycle:
        first = index[cycle[0]]
        return [Issue(("layers", first, "inputs"), "cycle in the DAG: " + " -> ".join(cycle))]
    for i, layer in enumerate(m.layers):
        for j, src in enumerate(layer.inputs):
            if index[src] >= i:
                issues.append(
                    Issue(("layers", i, "inputs", j), f"layer {src!r} comes later in forward order")
                )
    return issues


def _find_cycle(layers: tuple[Layer, ...], index: dict[str, int]) -> list[str]:
    """Return one cycle as a list of layer names (first repeated at the end), or [] if acyclic."""
    state = [0] * len(layers)  # 0 new, 1 on stack, 2 done
    parent: dict[int, int] = {}
    for start in range(len(layers)):
        if state[start]:
            continue
        stack: list[tuple[int, int]] = [(start, 0)]
        state[start] = 1
        while stack:
            node, k = stack[-1]
            ins = layers[node].inputs
            if k < len(ins):
                stack[-1] = (node, k + 1)
                nxt = index[ins[k]]
                if state[nxt] == 1:
                    path = [nxt]
                    cur = node
                    while cur != nxt:
                        path.append(cur)
                        cur = parent[cur]
                    path.append(nxt)
                    return [layers[p].name for p in reversed(path)]
                if state[nxt] == 0:
                    state[nxt] = 1
                    parent[nxt] = node
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                stack.pop()
    return []
