"""One tensor-parallel rank's layers of a GPT pipeline stage, as a ``ModelSpec`` for ``layer_times``.

The compute of a 3D plan is the one compute model's (``simulator.analytical.compute.layer_times``)
on a spec whose layers are what one TP rank runs for one sample (a sequence of s tokens), after
Megatron's split (Shoeybi et al. 2019, §3): QKV and fc1 column-parallel (h → 3h/t, h → 4h/t),
attention by heads (a/t per rank), proj and fc2 row-parallel (h/t → h; their outputs are the
all-reduced partial sums), vocab-parallel embedding and logits (V/t rows each). Norms, dropouts and
residual adds run whole on every rank, or on s/t tokens with sequence parallelism.

FLOPs per sample and rank (fp16, multiply-add = 2), e = 2 bytes per element:
    qkv 6sh²/t, core 4s²h/t (QKᵀ and AV), proj 2sh²/t, fc1 8sh²/t, fc2 8sh²/t  (sum 24sh²/t + 4s²h/t)
    logits 2shV/t (last stage)
Activation bytes read + written (``fwd_bytes``, parameters excluded):
    linear          (in + out) · e
    core, Megatron  q, k, v read + out written (4sh/t · e) and the a/t · s² scores: baddbmm writes
                    (1), fused scale-mask-softmax reads + writes (2), dropout reads + writes (2)
                    + its 1-byte mask (0.5), AV reads (1): 6.5 · (a/t)s² · e. Megatron's fused
                    softmax kernel runs only when b·a/t is a multiple of 4 (its batches per CUDA
                    block for s <= 1024: ``FusedScaleMaskSoftmax.is_kernel_available``); otherwise
                    PyTorch casts to fp32, masks, softmaxes and casts back: 29 bytes per score
                    element instead of 4 (14.5 e instead of 2 e), 4 kernels instead of 1
    core, fused     FlashAttention (Dao et al. 2022, Thm. 2): K, V read once, Q, O (and the
                    row statistics) read and written once per K/V block: per head
                    e · (2sd + T_c · 4sd), T_c = ⌈s / B_c⌉, B_c = ⌈M / (4 d e)⌉ with M the SRAM bytes
                    per SM; no s² tensor in HBM
    norm / dropout+add / gelu: their inputs and outputs (Megatron's fused bias-gelu and
                    bias-dropout-add kernels)
"""

from __future__ import annotations

import math

from simulator.spec import Layer, ModelSpec, Variable
from simulator.threed.plan import GPTConfig

E = 2  # fp16 bytes per element
#: Shared memory per SM an attention kernel may tile with (A100: 164 KiB of 192 KiB L1/smem).
SRAM_BYTES = 164 * 1024


def flash_bytes(seq: int, head_dim: int, heads: int, sram: int = SRAM_BYTES) -> float:
    """FlashAttention forward HBM bytes for ``heads`` heads (Dao et al. 2022, Algorithm 1 / Thm. 2)."""
    block = math.ceil(sram / (4 * head_dim * E))
    t_c = math.ceil(seq / block)
    return float(heads * E * (2 * seq * head_dim + t_c * 4 * seq * head_dim))


def _lin(name: str, n_in: int, n_out: int, seq: int, inputs: tuple[str, ...]) -> Layer:
    w = Variable(name=f"{name}.weight", shape=(n_out, n_in), dtype="float16")
    b = Variable(name=f"{name}.bias", shape=(n_out,), dtype="float16")
    return Layer(
        name=name,
        kind="linear",
        fwd_flops=2.0 * seq * n_in * n_out,
        activation_bytes=float(seq * n_out * E),
        variables=(w, b),
        inputs=inputs,
        fwd_bytes=float(seq * (n_in + n_out) * E),
        fwd_kernels=1,
    )


def _vec(name: str, kind: str, tokens: int, width: int, passes: float, inputs: tuple[str, ...]) -> Layer:
    """A norm / element-wise layer over ``tokens`` x ``width`` elements moving ``passes`` x that."""
    variables: tuple[Variable, ...] = ()
    if kind == "layernorm":
        variables = (
            Variable(name=f"{name}.weight", shape=(width,), dtype="float16"),
            Variable(name=f"{name}.bias", shape=(width,), dtype="float16"),
        )
    return Layer(
        name=name,
        kind=kind,
        fwd_flops=0.0,
        activation_bytes=float(tokens * width * E),
        variables=variables,
        inputs=inputs,
        fwd_bytes=float(passes * tokens * width * E),
        fwd_kernels=1,
    )


#: Host calls per transformer layer *forward* that launch no kernel, counted in Megatron-DeepSpeed's
#: ``ParallelTransformerLayer`` / ``ParallelAttention`` / ``ParallelMLP`` forward
#: (microsoft/Megatron-DeepSpeed, megatron/model/transformer.py and megatron/mpu/layers.py, the
#: 2022-23 code vTrain ran): 16 view / transpose / split / permute / expand_as calls (QKV view,
#: split, q and k views, 3 transposes, scores view, v view, probs view, v transpose, context view,
#: permute, context view, 2 bias expand_as), 1 ``torch.empty`` (the baddbmm buffer), 4 CUDA RNG
#: tracker calls around the attention dropout (``get_cuda_rng_tracker().fork()``: get and set
#: the state on entry and on exit), 4 tensor-parallel autograd Functions (copy-to-region before
#: QKV and fc1, reduce-from-region after proj and fc2; called at t = 1 too), 2 TorchScript
#: bias-dropout-add calls and 11 ``nn.Module`` calls (layer, 2 norms, attention, QKV, softmax,
#: dropout, proj, MLP, fc1, fc2): 38.
HOST_CALLS_FWD = 38
#: Autograd nodes of the backward that launch no kernel: the 14 view / transpose / split /
#: permute nodes above, the 4 tensor-parallel Functions' backward (identity without TP; the
#: all-reduce itself is counted as a collective) and the 2 TorchScript autodiff graphs: 20.
HOST_CALLS_BWD = 20
#: Host calls of Megatron's ``CheckpointFunction`` per recomputed layer (megatron/mpu/random.py):
#: forward saves the CPU, CUDA and tracker RNG states (3) and detaches the input; backward restores
#: and re-saves the three states (6), detaches the inputs, and runs a nested
#: ``torch.autograd.backward`` (engine start and its output/gradient bookkeeping, ~4): 15.
HOST_CALLS_CHECKPOINT = 15
#: Host-device synchronisations per transformer layer forward: Megatron-DeepSpeed's
#: ``ParallelTransformerLayer.forward`` creates ``moe_loss`` and ``mlp_bias`` with
#: ``torch.tensor(0.0, device=...)``: a pageable host-to-device copy with ``non_blocking=False``,
#: which PyTorch issues as ``cudaMemcpyAsync`` + ``cudaStreamSynchronize`` (``memcpy_and_sync``):
#: the host waits for the GPU to drain before the MLP, so host and GPU overlap only within a
#: layer, not across layers.
SYNCS_PER_LAYER = 2
#: Parameter tensors of one transformer layer (QKV, proj, fc1, fc2 weight + bias; 2 norms' weight +
#: bias): each micro-batch after the first adds its gradient into ``.grad`` (autograd's
#: AccumulateGrad: one element-wise kernel per tensor).
PARAM_TENSORS_PER_LAYER = 12


def softmax_fused(cfg: GPTConfig, tp: int, micro_batch: int) -> bool:
    """Whether Megatron's fused scale-mask-softmax kernel takes b·(a/t) attention batches of ``cfg``."""
    return 16 < cfg.seq <= 4096 and cfg.seq % 4 == 0 and micro_batch * (cfg.heads // tp) % 4 == 0


def transformer_layer(
    cfg: GPTConfig, tp: int, i: int, *, sp: bool = False, fused: bool = False, micro_batch: int = 1
) -> list[Layer]:
    """The layers one TP rank runs for transformer layer ``i`` (one sample of a ``micro_batch``)."""
    s, h, t = cfg.seq, cfg.hidden, tp
    f = cfg.ffn_mult * h
    tok = s // t if sp else s  # tokens the norms and dropouts see
    p = f"l{i}."
    heads = cfg.heads // t
    d = h // cfg.heads
    if fused:
        core = Layer(
            name=p + "attn_core",
            kind="flash_attention",
            fwd_flops=4.0 * s * s * h / t,
            activation_bytes=float(s * h // t * E),
            inputs=(p + "qkv",),
            fwd_bytes=flash_bytes(s, d, heads),
            fwd_kernels=1,
        )
    else:
        scores = heads * s * s * E
        kernel = softmax_fused(cfg, tp, micro_batch)
        core = Layer(
            name=p + "attn_core",
            kind="matmul",
            fwd_flops=4.0 * s * s * h / t,
            activation_bytes=float(s * h // t * E),
            inputs=(p + "qkv",),
            fwd_bytes=float(4 * s * h // t * E + (6.5 if kernel else 19.0) * scores),
            fwd_kernels=6 if kernel else 9,  # baddbmm, softmax (or 4 ops), dropout, bmm, 2 layout copies
        )
    return [
        _vec(p + "ln1", "layernorm", tok, h, 2, ()),
        _lin(p + "qkv", h, 3 * h // t, s, (p + "ln1",)),
        core,
        _lin(p + "proj", h // t, h, s, (p + "attn_core",)),
        _vec(p + "drop_add1", "dropout_add", tok, h, 3.5, (p + "proj",)),  # x, residual, out, mask
        _vec(p + "ln2", "layernorm", tok, h, 2, (p + "drop_add1",)),
        _lin(p + "fc1", h, f // t, s, (p + "ln2",)),
        _vec(p + "gelu", "gelu", s, f // t, 2, (p + "fc1",)),
        _lin(p + "fc2", f // t, h, s, (p + "gelu",)),
        _vec(p + "drop_add2", "dropout_add", tok, h, 3.5, (p + "fc2",)),
    ]


def embedding_layers(cfg: GPTConfig, tp: int) -> list[Layer]:
    """Vocab-parallel word embedding + position embedding + dropout (the first stage)."""
    s, h = cfg.seq, cfg.hidden
    v = cfg.padded_vocab(tp) // tp
    word = Layer(
        name="wte",
        kind="embedding",
        fwd_flops=0.0,
        activation_bytes=float(s * h * E),
        variables=(Variable(name="wte.weight", shape=(v, h), dtype="float16"),),
        fwd_bytes=float(2 * s * h * E),  # gather + masked write
        fwd_kernels=4,  # mask, shift, gather, zero the foreign rows
    )
    pos = Layer(
        name="wpe",
        kind="embedding",
        fwd_flops=0.0,
        activation_bytes=float(s * h * E),
        variables=(Variable(name="wpe.weight", shape=(s, h), dtype="float16"),),
        fwd_bytes=float(s * h * E),
        fwd_kernels=1,
    )
    return [word, pos, _vec("emb_drop", "dropout_add", s, h, 3.5, ("wte", "wpe"))]


def head_layers(cfg: GPTConfig, tp: int, last_input: str) -> list[Layer]:
    """Final layer norm, logits against the tied vocab-parallel embedding, fp32 cross-entropy."""
    s, h = cfg.seq, cfg.hidden
    v = cfg.padded_vocab(tp) // tp
    logits = Layer(
        name="logits",
        kind="matmul",  # tied weight: its gradient lands on wte (counted there)
        fwd_flops=2.0 * s * h * v,
        activation_bytes=float(s * v * E),
        inputs=("ln_f",),
        fwd_bytes=float(s * (h + v) * E),
        fwd_kernels=1,
    )
    # Vocab-parallel cross-entropy in fp32: cast, max, subtract, exp, sum, divide over s x V/t.
    xent = Layer(
        name="xent",
        kind="cross_entropy",
        fwd_flops=0.0,
        activation_bytes=float(s * v * 4),
        inputs=("logits",),
        fwd_bytes=float(s * v * (E + 5 * 4)),
        fwd_kernels=8,
    )
    return [_vec("ln_f", "layernorm", s, h, 2, (last_input,)), logits, xent]


def stage_spec(
    cfg: GPTConfig,
    tp: int,
    pp: int,
    stage: int,
    *,
    sp: bool = False,
    fused: bool = False,
    micro_batch: int = 1,
) -> ModelSpec:
    """One TP rank's layers of pipeline ``stage`` (of ``pp``): its transformer layers, plus the
    embedding on the first stage and the head on the last."""
    per = cfg.layers // pp
    layers: list[Layer] = embedding_layers(cfg, tp) if stage == 0 else []
    for i in range(stage * per, (stage + 1) * per):
        block = transformer_layer(cfg, tp, i, sp=sp, fused=fused, micro_batch=micro_batch)
        if layers:
            block[0] = block[0].model_copy(update={"inputs": (layers[-1].name,)})
        layers.extend(block)
    if stage == pp - 1:
        layers.extend(head_layers(cfg, tp, layers[-1].name))
    return ModelSpec(
        name=f"gpt-h{cfg.hidden}-L{cfg.layers}-tp{tp}-pp{pp}-s{stage}",
        family="LM",
        batch_size=1,
        layers=tuple(layers),
        source="simulator.threed.layers: Megatron GPT, one tensor-parallel rank of one stage",
        compute_dtype="float16",
    )


#: Streaming multiprocessors per GPU, from the vendors' architecture whitepapers / datasheets
#: (NVIDIA A100 Tensor Core GPU Architecture: 108 SMs; H100 / GH200 SXM5: 132; V100: 80; P100: 56;
#: T4: 40; L4: 58; L40S: 142; RTX 3090: 82; RTX 4090: 128; M60: 16 per GPU; Maxwell TITAN X: 24;
#: MI300X: 304 CUs). Matched as a prefix of the zoo's device name; unknown devices: no wave term.
SM_COUNT: dict[str, int] = {
    "A100": 108,
    "H100": 132,
    "H200": 132,
    "GH200": 132,
    "V100": 80,
    "P100": 56,
    "T4": 40,
    "L40S": 142,
    "L4": 58,
    "RTX3090": 82,
    "RTX4090": 128,
    "M60": 16,
    "TITAN-X": 24,
    "MI300X": 304,
}
#: Output tile of one thread block of a tensor-core GEMM (cuBLAS / CUTLASS fp16 on Volta-Hopper:
#: 128 x 128 is the common choice, NVIDIA "Matrix Multiplication Background User's Guide", §
#: "Dimension Quantization Effects").
GEMM_TILE = (128, 128)


def sm_count(device_name: str) -> int | None:
    """SMs of the zoo device ``device_name`` (longest matching prefix), None when not listed."""
    hits = [k for k in SM_COUNT if device_name.upper().startswith(k)]
    return SM_COUNT[max(hits, key=len)] if hits else None


def wave_efficiency(
    rows: int, cols: int, sms: int, batch: int = 1, tile: tuple[int, int] = GEMM_TILE
) -> float:
    """Share of the GPU's SM slots a GEMM with a ``rows`` x ``cols`` output (``batch`` of them) keeps
    busy: tiles / (waves · SMs), tiles = batch · ⌈rows/128⌉ · ⌈cols/128⌉, waves = ⌈tiles / SMs⌉
    (NVIDIA, "Matrix Multiplication Background User's Guide": tile and wave quantisation; on an
    A100 a GEMM of 108 tiles runs one full wave, one of 109 tiles two waves at half occupancy)."""
    tiles = batch * math.ceil(rows / tile[0]) * math.ceil(cols / tile[1])
    waves = math.ceil(tiles / sms)
    return tiles / (waves * sms)
