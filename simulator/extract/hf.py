"""Import a Hugging Face transformers model from its local ``config.json``: built on meta, no download.

    spec = import_hf("models/gpt2/config.json", seq_len=1024, batch_size=8)

The config is read with ``transformers.AutoConfig.from_pretrained`` on the local folder (or the file's
folder) with ``local_files_only=True``, so nothing is fetched. The model class is the config's first
``architectures`` entry (e.g. ``GPT2LMHeadModel``, ``BertForMaskedLM``), or ``model_class`` when
given, else ``AutoModel`` (the bare encoder/decoder). It is built under ``torch.device("meta")``
(no weights, no memory) and traced on ``input_ids`` of ``(2, seq_len)`` tokens by the extractor;
tied weights (an LM head tied to the embeddings) are counted once, as the published parameter
counts do. ``transformers`` comes with the ``dev`` and ``zoo`` extras.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from simulator.extract.extractor import extract_model
from simulator.spec import ModelSpec

#: Samples in the traced pass (> 1, as the zoo builder's).
TRACE_BATCH = 2
#: Longest default sequence (a config's position table can be far longer than one trains with).
MAX_DEFAULT_SEQ = 2048


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise ValueError(
            "importing a Hugging Face config needs transformers: pip install 'strategist[dev]' (or [zoo])"
        ) from None
    return transformers


def load_config(path: str | Path) -> Any:
    """The transformers config of a local ``config.json`` (or a folder holding one); ValueError if bad."""
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    if not (folder / "config.json").is_file():
        raise ValueError(f"{path}: no config.json there (a Hugging Face model folder or its config.json)")
    if not p.is_dir() and p.name != "config.json":
        raise ValueError(f"{path}: the file must be named config.json (transformers reads it by that name)")
    tf = _transformers()
    try:
        return tf.AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except Exception as e:  # transformers raises many kinds for unknown model types or bad JSON
        raise ValueError(f"{path}: transformers cannot read it: {type(e).__name__}: {e}") from None


def default_seq_len(config: Any) -> int:
    """The config's context length (n_positions / max_position_embeddings), at most MAX_DEFAULT_SEQ."""
    for key in ("n_positions", "max_position_embeddings", "n_ctx", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return min(value, MAX_DEFAULT_SEQ)
    return 512


def build_module(config: Any, model_class: str | None = None) -> tuple[nn.Module, str]:
    """The model of ``config`` on the meta device, and the class name used."""
    tf = _transformers()
    name = model_class or next(iter(getattr(config, "architectures", None) or ()), None)
    with torch.device("meta"):
        if name is None:
            return tf.AutoModel.from_config(config), "AutoModel"
        cls = getattr(tf, name, None)
        if cls is None or not isinstance(cls, type) or not issubclass(cls, nn.Module):
            raise ValueError(f"model class {name!r} is not a transformers PyTorch model class")
        return cls(config), name


def import_hf(
    path: str | Path,
    *,
    seq_len: int | None = None,
    batch_size: int | None = None,
    name: str | None = None,
    family: str = "LM",
    model_class: str | None = None,
) -> ModelSpec:
    """The ModelSpec of the model a local ``config.json`` describes (module docstring)."""
    config = load_config(path)
    seq = seq_len or default_seq_len(config)
    if seq < 1:
        raise ValueError(f"sequence length must be >= 1, got {seq}")
    module, used = build_module(config, model_class)
    model_type = getattr(config, "model_type", "model")
    return extract_model(
        module,
        lambda: {"input_ids": torch.zeros(TRACE_BATCH, seq, dtype=torch.long)},
        name=name or model_type,
        batch_size=batch_size or 1,
        family=family,
        source=f"import-model --hf-config {path}: transformers {used} ({model_type}), seq {seq}",
    )
