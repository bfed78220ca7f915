"""The vocabulary every stage speaks: models, clusters, strategies, plans, and their errors."""

from simulator.spec.cluster import GBPS, ClusterSpec, Device, DeviceType, Node
from simulator.spec.domain import domain_name
from simulator.spec.errors import Issue, SpecError
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
    "ClusterSpec",
    "CollectiveSync",
    "Compressor",
    "ComputeDType",
    "Device",
    "DeviceType",
    "Issue",
    "Layer",
    "ModelSpec",
    "Node",
    "PSSync",
    "Partition",
    "Plan",
    "ResourceLink",
    "ResourcePlan",
    "ResourceStage",
    "ResourceType",
    "Shard",
    "Spec",
    "SpecError",
    "Stage",
    "Strategy",
    "Synchronizer",
    "Variable",
    "VariableStrategy",
    "domain_name",
    "dump_json",
    "load_spec",
    "parse_spec",
    "strategy_key",
]
