"""Model import: trace a torch.nn.Module on the meta device into a ModelSpec (and the zoo builder)."""

from simulator.extract.builder import BuildOptions, build_spec, embedding_density
from simulator.extract.extractor import (
    example_inputs,
    extract_model,
    import_model,
    load_factory,
    to_meta,
)
from simulator.extract.tracer import Segment, Trace, trace

__all__ = [
    "BuildOptions",
    "Segment",
    "Trace",
    "build_spec",
    "embedding_density",
    "example_inputs",
    "extract_model",
    "import_model",
    "load_factory",
    "to_meta",
    "trace",
]
