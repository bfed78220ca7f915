"""The model zoo's recipes: which reference implementation, variant, inputs and batch each model uses.

AutoSync supplementary Table 1 (12 models, with its per-GPU batch sizes) and Ada-Grouper Table 1
(4 GPT configurations). Every spec is extracted from a real implementation: torchvision's CNNs,
transformers' BERT and GPT-2 built from a config (no weights), and ``reference_models`` for NCF
and the WMT Transformer. The variant choices that make the parameter counts match the published
figures are explained in datasets/README.md ("Model zoo"). torchvision and transformers are
imported only inside the factories: this module loads in the main environment, building needs the
zoo environment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from simulator.extract.ctr_models import CRITEO_DENSE, CRITEO_SPARSE, CTRDNN, NCE, MatchNet, TwoEmb
from simulator.extract.extractor import Inputs, extract_model
from simulator.extract.reference_models import NeuMF, WMTTransformer
from simulator.spec import ModelSpec

TRACE_BATCH = 2  # samples in the traced forward pass (> 1 so batch norm's training checks pass)
BERT_SEQ = 128  # BERT pre-training phase-1 sequence length
GPT_SEQ = 1024  # GPT-2 context length
WMT_SEQ = 64  # tokens per sentence on each side; 80 sentence pairs x 64 tokens = 5120 ~ "5K"
GPT_VOCAB = 50257


@dataclass(frozen=True)
class ZooRecipe:
    """How one zoo model is built and traced."""

    name: str  # zoo name (file stem under datasets/models/)
    family: str  # task family: IC, MT, CF, LM
    batch_size: int  # per-GPU batch size from the paper (samples)
    factory: Callable[[], nn.Module]  # builds the reference implementation (runs on meta)
    inputs: Callable[[int], Inputs]  # example inputs for a traced batch of n samples
    variant: str  # which implementation and variant, written to ModelSpec.source
    sparse_embeddings: bool = True  # embedding-only parameters get sparse gradients
    dtype: torch.dtype | None = None  # cast floating-point parameters before tracing


def _images(size: int) -> Callable[[int], Inputs]:
    return lambda n: torch.zeros(n, 3, size, size)


def _tokens(seq: int) -> Callable[[int], Inputs]:
    return lambda n: torch.zeros(n, seq, dtype=torch.long)


def _pairs(n: int) -> Inputs:
    return (torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long))


def _wmt_inputs(n: int) -> Inputs:
    return (torch.zeros(n, WMT_SEQ, dtype=torch.long), torch.zeros(n, WMT_SEQ, dtype=torch.long))


def _criteo(n: int) -> Inputs:
    return (torch.zeros(n, CRITEO_SPARSE, dtype=torch.long), torch.zeros(n, CRITEO_DENSE))


def _id_pairs(width: int, second: int | None = None) -> Callable[[int], Inputs]:
    return lambda n: (
        torch.zeros(n, width, dtype=torch.long),
        torch.zeros(n, second or width, dtype=torch.long),
    )


def _ctrdnn(layers: int) -> Callable[[], nn.Module]:
    return lambda: CTRDNN(layers)


def _torchvision(arch: str, headless: bool = False, **kwargs: object) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import torchvision.models as tvm

        model: nn.Module = getattr(tvm, arch)(**kwargs)
        if headless:
            model.fc = nn.Identity()
        return model

    return make


def _bert(layers: int, hidden: int, heads: int) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        from transformers import BertConfig, BertForPreTraining

        config = BertConfig(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            intermediate_size=4 * hidden,
        )
        return BertForPreTraining(config)

    return make


def _gpt(layers: int, hidden: int, ffn: int, heads: int) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(
            vocab_size=GPT_VOCAB,
            n_positions=GPT_SEQ,
            n_layer=layers,
            n_embd=hidden,
            n_inner=ffn,
            n_head=heads,
        )
        return GPT2LMHeadModel(config)

    return make


_TV = "torchvision.models.{}"
_BERT = "transformers BertForPreTraining (MLM + NSP heads, decoder tied to word embeddings), L={} H={} A={}"
_GPT = "transformers GPT2LMHeadModel (LM head tied to wte), fp16, seq 1024, L={} H={} F={} A={}"
_NCF = (
    "reference_models.NeuMF (tensorflow/models NeuMF layout: mf_dim 8, MLP 64-32-16-8), "
    "MovieLens-20M x16x32: 2,215,888 users, 855,808 items; embedding gradients {}"
)
_CTR = "ctr_models.{} (HeterPS Section 6.2 {}, {} layers; see datasets/README.md 'HeterPS CTR models')"
CTR_BATCH = 2048  # samples per unit and iteration (B = B_o in the HeterPS cost model)

ZOO_MODELS: tuple[ZooRecipe, ...] = (
    ZooRecipe("ResNet50", "IC", 32, _torchvision("resnet50", headless=True), _images(224),
              _TV.format("resnet50") + " without the 1000-way fc head"),
    ZooRecipe("ResNet101", "IC", 32, _torchvision("resnet101"), _images(224),
              _TV.format("resnet101") + " with its fc head"),
    ZooRecipe("InceptionV3", "IC", 32,
              _torchvision("inception_v3", aux_logits=False, init_weights=False), _images(299),
              _TV.format("inception_v3") + " without the auxiliary head, 299x299 input"),
    ZooRecipe("VGG16", "IC", 32, _torchvision("vgg16"), _images(224), _TV.format("vgg16")),
    ZooRecipe("DenseNet121", "IC", 32, _torchvision("densenet121"), _images(224),
              _TV.format("densenet121")),
    ZooRecipe("Transformer", "MT", 5120 // WMT_SEQ, WMTTransformer, _wmt_inputs,
              "reference_models.WMTTransformer: Transformer-base (6+6 layers, d 512, ffn 2048, 8 heads), "
              "shared 33,708-token en-de vocabulary, tied output; a sample is a sentence pair of "
              f"{WMT_SEQ}+{WMT_SEQ} tokens"),
    ZooRecipe("NCF-dense", "CF", 256, NeuMF, _pairs, _NCF.format("dense"), sparse_embeddings=False),
    ZooRecipe("NCF-sparse", "CF", 256, NeuMF, _pairs, _NCF.format("sparse")),
    ZooRecipe("BERT-3L", "LM", 32, _bert(3, 256, 4), _tokens(BERT_SEQ), _BERT.format(3, 256, 4)),
    ZooRecipe("BERT-6L", "LM", 32, _bert(6, 512, 8), _tokens(BERT_SEQ), _BERT.format(6, 512, 8)),
    ZooRecipe("BERT-base", "LM", 32, _bert(12, 768, 12), _tokens(BERT_SEQ),
              _BERT.format(12, 768, 12)),
    ZooRecipe("BERT-large", "LM", 8, _bert(24, 1024, 16), _tokens(BERT_SEQ),
              _BERT.format(24, 1024, 16)),
    ZooRecipe("GPT-Medium", "LM", 8, _gpt(24, 1024, 4096, 16), _tokens(GPT_SEQ),
              _GPT.format(24, 1024, 4096, 16), dtype=torch.float16),
    ZooRecipe("GPT-Large", "LM", 8, _gpt(24, 1536, 6144, 16), _tokens(GPT_SEQ),
              _GPT.format(24, 1536, 6144, 16), dtype=torch.float16),
    ZooRecipe("GPT-XL", "LM", 8, _gpt(24, 2048, 8192, 32), _tokens(GPT_SEQ),
              _GPT.format(24, 2048, 8192, 32), dtype=torch.float16),
    ZooRecipe("GPT-2.7B", "LM", 8, _gpt(32, 2560, 10240, 32), _tokens(GPT_SEQ),
              _GPT.format(32, 2560, 10240, 32), dtype=torch.float16),
    ZooRecipe("CTRDNN", "CTR", CTR_BATCH, _ctrdnn(16), _criteo, _CTR.format("CTRDNN", "CTRDNN", 16)),
    ZooRecipe("CTRDNN-8", "CTR", CTR_BATCH, _ctrdnn(8), _criteo, _CTR.format("CTRDNN", "CTRDNN variant", 8)),
    ZooRecipe("CTRDNN-12", "CTR", CTR_BATCH, _ctrdnn(12), _criteo, _CTR.format("CTRDNN", "CTRDNN variant", 12)),
    ZooRecipe("CTRDNN-20", "CTR", CTR_BATCH, _ctrdnn(20), _criteo, _CTR.format("CTRDNN", "CTRDNN variant", 20)),
    ZooRecipe("MATCHNET", "CTR", CTR_BATCH, MatchNet, _id_pairs(32), _CTR.format("MatchNet", "MATCHNET", 16)),
    ZooRecipe("2EMB", "CTR", CTR_BATCH, TwoEmb, _id_pairs(16), _CTR.format("TwoEmb", "2EMB", 10)),
    ZooRecipe("NCE", "CTR", CTR_BATCH, NCE, _id_pairs(5, 6), _CTR.format("NCE", "NCE", 5)),
)  # fmt: skip


def build(recipe: ZooRecipe) -> ModelSpec:
    """Build the recipe's model on the meta device and extract its spec."""
    with torch.device("meta"):
        module = recipe.factory()
    return extract_model(
        module,
        lambda: recipe.inputs(TRACE_BATCH),
        name=recipe.name,
        batch_size=recipe.batch_size,
        family=recipe.family,
        source=f"simulator.extract.zoo_build: {recipe.variant}",
        sparse_embeddings=recipe.sparse_embeddings,
        dtype=recipe.dtype,
    )
