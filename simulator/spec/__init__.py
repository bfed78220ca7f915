"""The vocabulary every stage speaks: models, clusters, strategies, plans, and their errors."""

from simulator.spec.cluster import GBPS, ClusterSpec, Device, DeviceType, Node
from simulator.spec.domain import domain_name, domain_splits, split_domain
from simulator.spec.errors import Issue, SpecError
from simulator.spec.hybrid import (
    Annotation,
    HybridPlan,
    ModuleAnnotation,
    Scope,
    TaskGraph,
    VirtualDevice,
    hybrid_issues,
    plan_from_annotations,
    replicate,
    split,
    trace_scopes,
)
from simulator.spec.io import Spec, dump_json, load_spec, parse_spec
from simulator.spec.model import DTYPE_BYTES, ComputeDType, Layer, ModelSpec, Variable
from simulator.spec.plan import Plan, Stage
from simulator.spec.resources import ResourceLink, ResourcePlan, ResourceStage, ResourceType
from simulator.spec.strategy import (
    CollectiveSync,
    Compressor,
    Partition,
    PSSync,
    Shard,
    Strategy,
    Synchronizer,
    VariableStrategy,
    strategy_key,
)

__all__ = [
    "DTYPE_BYTES",
    "GBPS",
    "Annotation",
    "ClusterSpec",
    "CollectiveSync",
    "Compressor",
    "ComputeDType",
    "Device",
    "DeviceType",
    "HybridPlan",
    "Issue",
    "Layer",
    "ModelSpec",
    "ModuleAnnotation",
    "Node",
    "PSSync",
    "Partition",
    "Plan",
    "ResourceLink",
    "ResourcePlan",
    "ResourceStage",
    "ResourceType",
    "Scope",
    "Shard",
    "Spec",
    "SpecError",
    "Stage",
    "Strategy",
    "Synchronizer",
    "TaskGraph",
    "Variable",
    "VariableStrategy",
    "VirtualDevice",
    "domain_name",
    "domain_splits",
    "dump_json",
    "hybrid_issues",
    "load_spec",
    "parse_spec",
    "plan_from_annotations",
    "replicate",
    "split",
    "split_domain",
    "strategy_key",
    "trace_scopes",
]
