"""Importing this module compiles the round's numba kernels: the array sampler's
(``search.samplers.kernels``), the analytical scorer's (``simulator.analytical.kernels``) and the
factor similarity's (``search.similarity.kernels``).

Why a module: the search loop's jobs are forked from a forkserver that can only *import* what it
preloads (``service.loop.jobs.PRELOAD``). numba compiles a kernel (or loads it from its cache) at
its first call, in the process that calls it; without this, every forked job would pay that again
(0.3-0.5 s from the cache, ~8 s without one) and would map LLVM's library inside its memory cap —
an 8 MiB cap failed with "Could not find/load shared object file 'libllvmlite.so'" instead of its
budget's MemoryError. One small round here (the service's defaults, on a built-in toy domain with
a sparse embedding and dense matrices on two uneven nodes, so PS, collectives, Algorithm 1 and 2
and the memory check all run; no zoo files, since $STRATEGIST_DATASETS may point anywhere) runs
every kernel with the dtypes the sampler uses, so forked jobs inherit the machine code. A failure
only logs: a job then compiles on its own, as before.
"""

from __future__ import annotations

import logging

log = logging.getLogger("strategist.search")


def compile_kernels() -> None:
    """Run two 64-sample rounds on the toy domain (the second with an already-tried strategy), so
    that every kernel a round runs is compiled in this process."""
    from search.round import run_round
    from search.samplers.arrays import ArraySampler
    from search.space import Space
    from simulator.analytical import AnalyticalSimulator
    from simulator.spec import ClusterSpec, DeviceType, Layer, ModelSpec, Node, Variable

    emb = Variable(name="emb.w", shape=(8192, 64), sparse=True, density=0.05)
    layers = [Layer(name="emb", kind="embedding", fwd_flops=0.0, activation_bytes=4096.0, variables=(emb,))]
    for i, (r, c) in enumerate([(1024, 256), (2048, 1024), (512, 512)]):
        w, bias = Variable(name=f"fc{i}.w", shape=(r, c)), Variable(name=f"fc{i}.b", shape=(r,))
        inputs = (layers[-1].name,)
        layers.append(
            Layer(
                name=f"fc{i}",
                kind="linear",
                fwd_flops=2.0 * r * c,
                activation_bytes=4.0 * r,
                variables=(w, bias),
                inputs=inputs,
            )
        )
    model = ModelSpec(name="warm-up", batch_size=32, layers=tuple(layers))
    gpu = DeviceType(name="T4", fp32_tflops=8.1, fp16_tflops=65, memory_gb=16, memory_bw_gbs=320)
    nodes = (
        Node(name="n0", device="T4", gpus=2, nic_gbps=10.0),
        Node(name="n1", device="T4", gpus=2, nic_gbps=25.0),
    )
    cluster = ClusterSpec(name="warm-up", device_types=(gpu,), nodes=nodes, intra_node_gbps=100.0)
    first = run_round(model, cluster, AnalyticalSimulator(), samples=64, k=2, seed=0)
    # a round that excludes tried strategies hashes them from their encoded (int64) columns
    run_round(model, cluster, AnalyticalSimulator(), samples=64, k=2, seed=1, exclude=first.strategies[:1])
    # the scorer's 64-bit path (encoded Strategy objects: AnalyticalSimulator.predict, which the
    # loop's steps call) and the call numbering a learned scorer's features read from a sampled batch
    AnalyticalSimulator().predict(model, cluster, list(first.strategies))
    space = Space(model, cluster)
    _ = ArraySampler(space, 0, None, chunk=8).sample_arrays(8).batch(space).call


try:
    compile_kernels()
except Exception:  # a forkserver preload must not fail; jobs then compile for themselves
    log.warning("search.samplers.warm: could not compile the sampler's kernels", exc_info=True)
