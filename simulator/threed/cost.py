"""Iteration time of a 3D-parallel GPT plan: compute by ``layer_times``, collectives by NCCL figures.

Per pipeline stage i and micro-batch (one TP rank; b = micro-batch, s = seq, h = hidden, t = tp):
    f_i, b_i   forward / backward GPU seconds of the rank's layers (``simulator.threed.layers.stage_spec``
               through ``simulator.analytical.compute.roofline``, the one compute model's roofline
               that ``layer_times`` applies, with the launch cost taken out: it is the host's, k_i).
               GEMM FLOPs are first divided by their wave efficiency on the device's SMs
               (``layers.wave_efficiency``: 128 x 128 output tiles, NVIDIA's matrix-multiplication
               guide), so small GEMMs (TP 8, micro-batch 1) run below the 70 % of peak big ones reach
    r_i        recompute: full = the transformer layers' forward again before their backward,
               selective = the attention cores' forward again (Korthikanti et al. 2022, §4-5)
    c_i        TP collectives (Megatron, Shoeybi et al. 2019 §3): per transformer layer 2 all-reduces
               of b·s·h fp16 in the forward (after proj and fc2, the g operators), 2 in the backward
               (before qkv and fc1, the f operators) and 2 more when the forward is recomputed; the
               first stage's vocab-parallel embedding 1 (forward), the last stage's logits 1 (backward)
               and the vocab-parallel cross-entropy's 3 fp32 all-reduces of b·s (max, sum, target).
               With sequence parallelism each all-reduce becomes a reduce-scatter + all-gather of
               the same ring bytes (same time).
    k_i        host seconds issuing them: (kernels + collective calls + gradient-accumulation adds)
               x (the device's ``launch_overhead_us``, the driver's launch, +
               ``FrameworkParams.host_per_kernel_us``, the framework's eager dispatch before it),
               + calls that launch no kernel (views, RNG tracker, autograd Functions, module calls,
               checkpointing: ``layers.HOST_CALLS_*``, counted in Megatron-DeepSpeed's layer code)
               x ``host_per_call_us``; kernels run asynchronously
    x_i        Megatron-DeepSpeed synchronises host and GPU in every layer's forward
               (``layers.SYNCS_PER_LAYER``), so the host runs ahead only within a segment: each
               layer's forward, each layer's recompute + backward, the embedding / head. Per segment
               smax(G, H + tail) (G its GPU seconds incl. its collectives, H its host seconds, tail
               the GPU work issued just before the sync, which the host waits for: the attention
               proj all-reduce, bias-dropout-add and norm); x_i = Σ_segments + o_μ. With
               ``syncs_per_layer`` = 0: x_i = smax(f_i + b_i + r_i + c_i, k_i) + o_μ.
               smax(g, h) = (g^k + h^k)^(1/k), ``FrameworkParams.overlap_sharpness``; o_μ: the
               framework's host cost per micro-batch
Pipeline (1F1B and GPipe have the same length; Narayanan et al. 2021 §2.2): with m micro-batches,
p stages and a point-to-point send of b·s·h fp16 between stages costing q,
    T_pipe = Σ_i x_i + 2(p−1)·q + (m−1)·max_i (x_i + 2q·[p>1])
(one micro-batch through every stage, then m−1 more at the slowest stage's rate; for uniform
stages this is (m + p − 1)·x, the bubble (p−1)/m of the ideal m·x).
Data parallelism over d replicas, gradient bytes G = 2 · (the stage's parameters / t):
    ZeRO 0/1  one all-reduce of G after the backward (ZeRO-1: reduce-scatter + all-gather, same bytes)
    ZeRO 2    a reduce-scatter of G per micro-batch during its backward, exposed max(0, RS − b_i),
              and the all-gather of the updated fp16 parameters after the step
    ZeRO 3    as ZeRO 2, plus an all-gather of the parameters before each forward, backward and
              recomputed forward, overlapped with that pass: exposed max(0, AG − pass)
    overlap_grad_sync (ZeRO 0/1): buckets all-reduced during the last backward: exposed
              max(0, AR − b_i) + one bucket's all-reduce
plus, when p > 1, the tied word embedding's gradient all-reduce between the first and last stage.
Optimizer (mixed-precision Adam, memory-bound): N parameters per rank (÷ d under ZeRO ≥ 1) x
``FrameworkParams.optimizer_bytes`` / (memory bandwidth x the memory efficiency).
    T = T_pipe + exposed DP sync + tied sync + optimizer + o_step

Shapes: every time in seconds; ``stage_*`` tuples have one entry per pipeline stage.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from simulator.analytical.compute import LayerWork, layer_work, roofline
from simulator.analytical.params import CostParams
from simulator.spec import DeviceType, ModelSpec
from simulator.threed.layers import (
    HOST_CALLS_BWD,
    HOST_CALLS_CHECKPOINT,
    HOST_CALLS_FWD,
    SYNCS_PER_LAYER,
    E,
    sm_count,
    stage_spec,
    wave_efficiency,
)
from simulator.threed.nccl import Collectives
from simulator.threed.plan import GPTConfig, ThreeDPlan

#: DDP's default bucket (25 MiB): the tail an overlapped gradient sync cannot hide.
BUCKET_BYTES = 25 * 2**20


@dataclass(frozen=True)
class FrameworkParams:
    """Costs of the training framework itself (host scheduling, optimizer), not of the model's math."""

    # Host microseconds per kernel before the driver's launch (the device's ``launch_overhead_us``):
    # PyTorch eager dispatch of one op, Python call, pybind11, autograd recording, ATen dispatcher,
    # backend selection: ~1 + 1 + 1-3 + 1-2 + 1-5 us by layer, 5-25 us per op with the driver's
    # launch (J. Lin, "From PyTorch op to kernel launch", GPU kernel serving lesson 18). 10: the
    # middle of that range (15 us) less the 5 us launch the zoo's devices already charge. A
    # property of the host framework, not of the GPU; 0 for a graph-captured or compiled step.
    host_per_kernel_us: float = 10.0
    # Host microseconds per call that launches no kernel (a view, transpose, split, module call,
    # RNG-state call, an autograd node with no kernel): the same chain less the backend and the
    # driver: Python ~1 + pybind11 ~1 + autograd recording 1-3 + dispatcher 1-2 (J. Lin, lesson 18
    # above): 5, the middle. Counted per layer in ``simulator.threed.layers.HOST_CALLS_*``.
    host_per_call_us: float = 5.0
    # Host-device synchronisations per transformer-layer forward (``layers.SYNCS_PER_LAYER``: 2 in
    # Megatron-DeepSpeed). With any, a micro-batch's stage time is a sum over segments (a layer's
    # forward; a layer's recompute + backward; the embedding / head) of each segment's
    # max(host, GPU); with none, one max over the whole micro-batch (the host runs ahead freely).
    syncs_per_layer: int = SYNCS_PER_LAYER
    # GEMM FLOPs divided by their wave efficiency on the device's SMs (``layers.wave_efficiency``).
    wave_quantisation: bool = True
    # Host seconds per micro-batch and stage (Python schedule, p2p/collective launches, loss scaling).
    micro_overhead_s: float = 1e-3
    # Host seconds per iteration (optimizer launch, gradient-norm reduction, overflow check, logging).
    step_overhead_s: float = 5e-3
    # Bytes the mixed-precision Adam step moves per parameter: fp32 master, m, v read + written
    # (24), fp16 gradient read twice (norm and update, 4), fp16 parameter written (2).
    optimizer_bytes: float = 30.0
    # k of the smooth maximum (g^k + h^k)^(1/k) of a micro-batch's GPU and host time: the launch
    # queue hides the host only partly when the two are close (k → ∞: a hard max).
    overlap_sharpness: float = 4.0


@dataclass(frozen=True)
class ThreeDCost:
    """Predicted seconds of one iteration and its parts."""

    stage_forward: tuple[float, ...]
    stage_backward: tuple[float, ...]
    stage_recompute: tuple[float, ...]
    stage_tp_comm: tuple[float, ...]
    # Host seconds issuing one micro-batch's kernels and collectives per stage.
    stage_host: tuple[float, ...]
    p2p: float
    pipeline: float
    dp_sync: float
    tied_sync: float
    optimizer: float
    overhead: float

    @property
    def total(self) -> float:
        return self.pipeline + self.dp_sync + self.tied_sync + self.optimizer + self.overhead

    # m · max_i x_i: the slowest stage's busy time.
    busy: float = 0.0

    @property
    def bubble(self) -> float:
        """Fraction of the pipeline the slowest stage is idle: 1 − m·max x / T_pipe."""
        return 0.0 if self.pipeline <= 0 else max(0.0, 1.0 - self.busy / self.pipeline)


@cache
def _spec(cfg: GPTConfig, tp: int, pp: int, stage: int, sp: bool, fused: bool, micro: int) -> ModelSpec:
    return stage_spec(cfg, tp, pp, stage, sp=sp, fused=fused, micro_batch=micro)


@cache
def _work(
    cfg: GPTConfig, tp: int, pp: int, stage: int, sp: bool, fused: bool, micro: int, dtype: str | None
) -> LayerWork:
    """``layer_work`` of a stage spec, kept for the process (its own cache holds 64 specs)."""
    return layer_work(_spec(cfg, tp, pp, stage, sp, fused, micro), micro, dtype)


def quantised(
    work: LayerWork, spec: ModelSpec, cfg: GPTConfig, tp: int, micro: int, sms: int | None
) -> LayerWork:
    """``work`` with every GEMM's FLOPs divided by its wave efficiency on ``sms`` SMs.

    A linear layer of K inputs and N outputs over M = b·s tokens: forward output M x N; backward
    dgrad M x K and wgrad N x K, each half the backward FLOPs. The logits (K = h, N = V/t) alike.
    FLOPs / efficiency is the work of the SM slots the GEMM holds, idle ones included, so the
    roofline's compute ceiling applies to it unchanged. Attention cores (batched, mostly
    memory-bound) and vector kernels keep their FLOPs. None SMs: ``work`` unchanged.
    """
    if sms is None:
        return work
    flops = work.flops.copy()
    tokens = micro * cfg.seq
    for i, ly in enumerate(spec.layers):
        if ly.kind == "linear" and ly.variables:
            n, k = ly.variables[0].shape
        elif ly.name == "logits":
            n, k = cfg.padded_vocab(tp) // tp, cfg.hidden
        else:
            continue
        q_f = wave_efficiency(tokens, n, sms)
        q_b = 2.0 / (1.0 / wave_efficiency(tokens, k, sms) + 1.0 / wave_efficiency(n, k, sms))
        flops[0, i] /= q_f
        flops[1, i] /= q_b
    return replace(work, flops=flops)


@cache
def _recomputed(
    cfg: GPTConfig, tp: int, pp: int, stage: int, sp: bool, fused: bool, micro: int, recompute: str
) -> np.ndarray:
    """Mask of the layers whose forward runs again before the backward."""
    spec = _spec(cfg, tp, pp, stage, sp, fused, micro)
    if recompute == "full":
        return np.array([ly.name.startswith("l") and "." in ly.name for ly in spec.layers])
    if recompute == "selective":
        return np.array([ly.name.endswith("attn_core") for ly in spec.layers])
    return np.zeros(len(spec.layers), dtype=bool)


@cache
def _qwork(
    cfg: GPTConfig,
    tp: int,
    pp: int,
    stage: int,
    sp: bool,
    fused: bool,
    micro: int,
    dtype: str | None,
    sms: int | None,
) -> LayerWork:
    """``quantised`` ``_work``, kept for the process."""
    spec = _spec(cfg, tp, pp, stage, sp, fused, micro)
    return quantised(_work(cfg, tp, pp, stage, sp, fused, micro, dtype), spec, cfg, tp, micro, sms)


#: Roofline seconds per (stage, dtype, SMs, device and efficiency figures): rows of a benchmark
#: share stages, and a calibration re-evaluates them with new efficiencies (new keys).
_ROOFLINE: dict[object, np.ndarray] = {}


def stage_params(cfg: GPTConfig, tp: int, pp: int, stage: int) -> float:
    """Parameters one TP rank of ``stage`` holds (embedding on the first, final norm on the last)."""
    n = cfg.layers // pp * cfg.layer_params() / tp
    if stage == 0:
        n += cfg.embedding_params(tp) / tp
    if stage == pp - 1:
        n += 2 * cfg.hidden
        if pp > 1:
            n += cfg.padded_vocab(tp) * cfg.hidden / tp  # the tied output embedding's copy
    return n


def tp_allreduces(cfg: GPTConfig, plan: ThreeDPlan, stage: int) -> int:
    """All-reduces of b·s·h activations one micro-batch issues on ``stage`` (0 without TP)."""
    if plan.tp == 1:
        return 0
    per_layer = 4 + (2 if plan.recompute == "full" else 0)
    n = cfg.layers // plan.pp * per_layer
    return n + (1 if stage == 0 else 0) + (1 if stage == plan.pp - 1 else 0)


def tp_comm_calls(cfg: GPTConfig, plan: ThreeDPlan, stage: int) -> int:
    """Collective calls one micro-batch issues on ``stage`` (the cross-entropy's 3 included)."""
    n = tp_allreduces(cfg, plan, stage)
    return n + (3 if n and stage == plan.pp - 1 else 0)


def tp_comm_seconds(cfg: GPTConfig, plan: ThreeDPlan, stage: int, comms: Collectives) -> float:
    """TP collective seconds one micro-batch costs ``stage`` (forward + backward + recompute)."""
    t = plan.tp
    if t == 1:
        return 0.0
    act = plan.micro_batch * cfg.seq * cfg.hidden * E
    sec = tp_allreduces(cfg, plan, stage) * comms.allreduce(act, t)
    if stage == plan.pp - 1:
        sec += 3 * comms.allreduce(plan.micro_batch * cfg.seq * 4, t)
    return sec


@dataclass(frozen=True, eq=False)
class Segments:
    """One micro-batch of one stage split at host-device synchronisations: per transformer layer
    its forward segment and its (recompute +) backward segment, then the rest (embedding, head,
    loss). Arrays (n,), one entry per segment: GPU seconds (kernels + collectives), kernels and
    collective calls the host launches, host calls that launch nothing, and the tail: GPU seconds
    of the work the host issues last before the synchronisation that ends the segment, which the
    host waits for however early the rest finished (a segment takes max(G, H + tail))."""

    gpu: np.ndarray
    launches: np.ndarray
    calls: np.ndarray
    tail: np.ndarray

    def host(self, launch: float, call: float) -> np.ndarray:
        return self.launches * launch + self.calls * call

    def pairs(self, launch: float, call: float) -> list[tuple[float, float]]:
        return list(zip(self.gpu.tolist(), (self.host(launch, call) + self.tail).tolist(), strict=True))

    def gpu_total(self) -> float:
        return float(self.gpu.sum())

    def host_total(self, launch: float, call: float) -> float:
        return float(self.host(launch, call).sum())


@dataclass(frozen=True, eq=False)
class _Structure:
    """Which layers of a stage spec form each transformer layer (``blocks`` (n, L) 0/1), the rest
    (L,) 0/1, each block's forward tail (L,) 0/1: its bias-dropout-add after attention and second
    norm), and parameter tensors / bytes per layer (L,)."""

    blocks: np.ndarray
    rest: np.ndarray
    tail: np.ndarray
    tensors: np.ndarray
    nbytes: np.ndarray


def _smax_sum(g: np.ndarray, h: np.ndarray, k: float) -> float:
    """Σ (g^k + h^k)^(1/k), scaled by max(g, h) so that large k cannot underflow."""
    top = np.maximum(g, h)
    ok = top > 0
    g, h, top = g[ok], h[ok], top[ok]
    return float((top * ((g / top) ** k + (h / top) ** k) ** (1.0 / k)).sum())


@cache
def _structure(cfg: GPTConfig, tp: int, pp: int, stage: int, sp: bool, fused: bool, micro: int) -> _Structure:
    spec = _spec(cfg, tp, pp, stage, sp, fused, micro)
    heads: list[str] = []
    owner = []
    for ly in spec.layers:
        if ly.name.startswith("l") and "." in ly.name:
            head = ly.name.split(".", 1)[0]
            if head not in heads:
                heads.append(head)
            owner.append(heads.index(head))
        else:
            owner.append(-1)
    n_layers = len(spec.layers)
    blocks = np.zeros((len(heads), n_layers))
    for j, o in enumerate(owner):
        if o >= 0:
            blocks[o, j] = 1.0
    return _Structure(
        blocks=blocks,
        rest=np.array([1.0 if o < 0 else 0.0 for o in owner]),
        tail=np.array([1.0 if ly.name.endswith((".drop_add1", ".ln2")) else 0.0 for ly in spec.layers]),
        tensors=np.array([float(len(ly.variables)) for ly in spec.layers]),
        nbytes=np.array([float(sum(v.bytes for v in ly.variables)) for ly in spec.layers]),
    )


def _segments(
    cfg: GPTConfig,
    plan: ThreeDPlan,
    stage: int,
    work: LayerWork,
    t_fb: np.ndarray,
    again: np.ndarray,
    comms: Collectives,
    device: DeviceType,
    params: CostParams,
    m: int,
    syncs: int,
) -> Segments:
    """Split one micro-batch of ``stage`` at Megatron-DeepSpeed's per-layer synchronisations.

    Layer j's forward: its kernels' GPU seconds + 2 TP all-reduces; host: its kernels, the 2
    all-reduce calls and the ``syncs`` copies as launches, ``HOST_CALLS_FWD`` calls; its tail (the
    sync sits after the attention block): the proj all-reduce, the bias-dropout-add and the second
    norm. Layer j's backward: its backward kernels, with full recompute its forward again (its 2
    all-reduces, copies, calls and tail, plus ``HOST_CALLS_CHECKPOINT``), 2 TP all-reduces, and the
    gradient accumulation into ``.grad`` of micro-batches after the first ((m−1)/m of an
    element-wise kernel per parameter tensor, reading two and writing one fp16 copy of its bytes);
    ``HOST_CALLS_BWD`` calls. The rest: the embedding / head layers, their collectives (the
    vocab-parallel embedding's and logits' all-reduces, the cross-entropy's 3) and accumulations.
    """
    st = _structure(
        cfg, plan.tp, plan.pp, stage, plan.sequence_parallel, plan.fused_attention, plan.micro_batch
    )
    t = plan.tp
    full = plan.recompute == "full"
    ar = comms.allreduce(plan.micro_batch * cfg.seq * cfg.hidden * E, t) if t > 1 else 0.0
    n_ar = 2 if t > 1 else 0
    b_ar = n_ar * (2 if full else 1)
    share = (m - 1) / m
    bw = device.memory_bw_gbs * 1e9 * params.op_efficiency.memory
    acc_k = share * st.tensors
    acc_g = share * 3.0 * st.nbytes / bw
    rec_f = t_fb[0] * again
    rec_k = work.kernels[0] * again
    B = st.blocks
    n = B.shape[0]
    tail = (B @ (t_fb[0] * st.tail) + ar) if syncs else np.zeros(n)
    f_gpu = B @ t_fb[0] + n_ar * ar
    f_k = B @ work.kernels[0] + n_ar + syncs
    b_gpu = B @ (rec_f + t_fb[1] + acc_g) + b_ar * ar
    b_k = B @ (rec_k + work.kernels[1] + acc_k) + b_ar + (syncs if full else 0)
    b_calls = HOST_CALLS_BWD + (HOST_CALLS_FWD + HOST_CALLS_CHECKPOINT if full else 0)
    rest_comm = max(0.0, tp_comm_seconds(cfg, plan, stage, comms) - n * (n_ar + b_ar) * ar)
    rest_calls = max(0, tp_comm_calls(cfg, plan, stage) - n * (n_ar + b_ar))
    r = st.rest
    rest_gpu = float((t_fb[0] + t_fb[1] + acc_g) @ r) + rest_comm
    rest_k = float((work.kernels[0] + work.kernels[1] + acc_k) @ r) + rest_calls
    # interleave: forward 0, backward 0, forward 1, ... (the order does not change the sum)
    gpu = np.concatenate([np.ravel(np.column_stack([f_gpu, b_gpu])), [rest_gpu]])
    launches = np.concatenate([np.ravel(np.column_stack([f_k, b_k])), [rest_k]])
    calls = np.concatenate(
        [np.ravel(np.column_stack([np.full(n, float(HOST_CALLS_FWD)), np.full(n, float(b_calls))])), [0.0]]
    )
    tails = np.concatenate([np.ravel(np.column_stack([tail, tail if full else np.zeros(n)])), [0.0]])
    return Segments(gpu, launches, calls, tails)


def predict(
    cfg: GPTConfig,
    plan: ThreeDPlan,
    device: DeviceType,
    comms: Collectives,
    params: CostParams | None = None,
    framework: FrameworkParams | None = None,
) -> ThreeDCost:
    """One iteration of ``plan`` training ``cfg`` on GPUs of type ``device`` (see the module doc)."""
    plan.check(cfg)
    params = params or CostParams()
    fw = framework or FrameworkParams()
    p, m, d = plan.pp, plan.num_micro_batches, plan.dp
    gpu_only = device.model_copy(update={"launch_overhead_us": 0.0})
    launch = (device.launch_overhead_us + fw.host_per_kernel_us) * 1e-6
    call = fw.host_per_call_us * 1e-6
    sms = sm_count(device.name) if fw.wave_quantisation else None
    k = fw.overlap_sharpness

    def smax(g: float, hst: float) -> float:
        top = max(g, hst)  # scaled: (g/top)^k cannot underflow for large k
        return float(top * ((g / top) ** k + (hst / top) ** k) ** (1.0 / k)) if top > 0 else 0.0

    dev_key = (
        device.name,
        device.fp32_tflops,
        device.fp16_tflops,
        device.tf32_tflops,
        device.bf16_tflops,
        device.memory_bw_gbs,
        device.first_touch_gbs,
        params.op_efficiency,
        params.efficiency_of(device.name),
    )
    fwd, bwd, rec, tpc, host, x = [], [], [], [], [], []
    for i in range(p):
        key = (cfg, plan.tp, p, i, plan.sequence_parallel, plan.fused_attention, plan.micro_batch)
        work = _qwork(*key, params.compute_dtype, sms)
        t_fb = _ROOFLINE.get((key, params.compute_dtype, sms, dev_key))
        if t_fb is None:
            t_fb = roofline(work, gpu_only, params)
            if len(_ROOFLINE) > 4096:
                _ROOFLINE.clear()
            _ROOFLINE[(key, params.compute_dtype, sms, dev_key)] = t_fb
        again = _recomputed(*key, plan.recompute)
        fwd.append(float(t_fb[0].sum()))
        bwd.append(float(t_fb[1].sum()))
        rec.append(float(t_fb[0][again].sum()))
        tpc.append(tp_comm_seconds(cfg, plan, i, comms))
        seg = _segments(cfg, plan, i, work, t_fb, again, comms, device, params, m, fw.syncs_per_layer)
        host.append(seg.host_total(launch, call))
        # The host issues kernels asynchronously: a segment takes the longer of its GPU time and
        # its host time (launch-bound when the kernels are small).
        if fw.syncs_per_layer > 0:
            t_mb = _smax_sum(seg.gpu, seg.host(launch, call) + seg.tail, k)
        else:
            t_mb = smax(seg.gpu_total(), seg.host_total(launch, call))
        x.append(t_mb + fw.micro_overhead_s)
    q = comms.send(plan.micro_batch * cfg.seq * cfg.hidden * E) if p > 1 else 0.0
    pipeline = sum(x) + 2 * (p - 1) * q + (m - 1) * (max(x) + 2 * q)

    dp_sync = 0.0
    if d > 1:
        worst = 0.0
        for i in range(p):
            g = 2.0 * stage_params(cfg, plan.tp, p, i)
            if plan.zero_stage <= 1:
                ar = comms.allreduce(g, d)
                exposed = (
                    max(0.0, ar - bwd[i]) + comms.allreduce(min(g, BUCKET_BYTES), d)
                    if plan.overlap_grad_sync
                    else ar
                )
            else:
                rs = comms.reduce_scatter(g, d)
                exposed = m * max(0.0, rs - bwd[i]) + comms.reduce_scatter(g, d)  # + the parameter all-gather
                if plan.zero_stage == 3:
                    passes = [fwd[i], bwd[i]] + ([rec[i]] if rec[i] > 0 else [])
                    exposed += m * sum(max(0.0, rs - t) for t in passes)
            worst = max(worst, exposed)
        dp_sync = worst
    tied = comms.allreduce(2.0 * cfg.padded_vocab(plan.tp) * cfg.hidden / plan.tp, 2) if p > 1 else 0.0
    n_opt = max(stage_params(cfg, plan.tp, p, i) for i in range(p)) / (d if plan.zero_stage >= 1 else 1)
    optimizer = n_opt * fw.optimizer_bytes / (device.memory_bw_gbs * 1e9 * params.op_efficiency.memory)
    return ThreeDCost(
        stage_forward=tuple(fwd),
        stage_backward=tuple(bwd),
        stage_recompute=tuple(rec),
        stage_tp_comm=tuple(tpc),
        stage_host=tuple(host),
        p2p=q,
        pipeline=pipeline,
        dp_sync=dp_sync,
        tied_sync=tied,
        optimizer=optimizer,
        overhead=fw.step_overhead_s,
        busy=m * max(x),
    )
