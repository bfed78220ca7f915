"""Point-to-point buffers derived from the kFkB action lists (simulator.pipeline.buffers).

The derived count must bound what any execution holds: checked against the event simulation with
random compute and transfer times (slow links included), where a receive buffer lives from its
post to the end of the compute that consumes it and a send buffer from its post to the end of its
transfer.
"""

from __future__ import annotations

import random

import pytest

from simulator.pipeline import Op, kfkb, simulate
from simulator.pipeline.buffers import live_buffers, peak_buffered, send_release

GRID = [(P, N, k) for P in range(1, 6) for N in range(1, 11) for k in range(1, N + 1)]


def _simulated_live(P: int, N: int, k: int, seed: int) -> list[tuple[int, int]]:
    """Per stage: the most (input side, output side) buffers live at once in one random execution."""
    rng = random.Random(seed)
    s = kfkb(P, N, k)
    fwd = [rng.choice([0.0, 1.0, 3.0]) * rng.random() for _ in range(P)]
    bwd = [rng.choice([0.0, 2.0, 6.0]) * rng.random() for _ in range(P)]
    links = [(r, r + 1) for r in range(P - 1)] + [(r + 1, r) for r in range(P - 1)]
    transfer = {ln: rng.choice([0.0, 0.5, 5.0, 40.0]) * rng.random() for ln in links}
    tl = simulate(s, fwd, bwd, transfer)
    out = []
    for r in range(P):
        spans = tl.spans[r]
        end_of = {(a.op, a.mb): t1 for a, _, t1 in spans}
        intervals: list[tuple[str, float, float]] = []
        for a, t0, _ in spans:
            if a.op is Op.RECV_F:
                intervals.append(("in", t0, end_of[(Op.F, a.mb)]))
            elif a.op is Op.RECV_B:
                intervals.append(("out", t0, end_of[(Op.B, a.mb)]))
            elif a.op is Op.SEND_B:
                intervals.append(("in", t0, tl.send_done[a]))
        peak_in = peak_out = 0
        for _, t, _ in intervals:  # the count only rises at a post
            live = [side for side, a0, a1 in intervals if a0 <= t < a1 or a0 == t == a1]
            peak_in = max(peak_in, live.count("in"))
            peak_out = max(peak_out, live.count("out"))
        out.append((peak_in, peak_out))
    return out


@pytest.mark.parametrize(("P", "N", "k"), GRID)
def test_derived_buffers_bound_every_simulated_execution(P: int, N: int, k: int) -> None:
    s = kfkb(P, N, k)
    derived = [live_buffers(s, r) for r in range(P)]
    for seed in range(4):
        for r, (sim_in, sim_out) in enumerate(_simulated_live(P, N, k, seed)):
            assert sim_in <= max(i for i, _ in derived[r])
            assert sim_out <= max(o for _, o in derived[r])
            assert max(sim_in, sim_out) <= peak_buffered(P, N, k, r)


@pytest.mark.parametrize(("P", "N", "k"), GRID)
def test_send_of_an_activation_completes_within_the_stash(P: int, N: int, k: int) -> None:
    """SEND_F m's tensor is the stashed output of F m: its transfer must be done before B m."""
    s = kfkb(P, N, k)
    for r in range(P - 1):
        pos = {(a.op, a.mb): i for i, a in enumerate(s.stages[r])}
        rel = send_release(s, r)
        for mb in range(N):
            assert pos[(Op.F, mb)] < rel[(Op.SEND_F, mb)] <= pos[(Op.B, mb)]


@pytest.mark.parametrize(("P", "N"), [(4, 32), (3, 7), (5, 12)])
def test_gpipe_holds_one_batch_per_side(P: int, N: int) -> None:
    """GPipe posts all N receives of each direction at the step's start: N per side, never 3N."""
    s = kfkb(P, N, N)
    for r in range(P):
        ins = max(i for i, _ in live_buffers(s, r))
        outs = max(o for _, o in live_buffers(s, r))
        assert ins == (N if r > 0 else 0)
        assert outs == (N if r < P - 1 else 0)
        assert peak_buffered(P, N, N, r) == N


def test_kfkb_hand_worked_counts() -> None:
    """P = 4, N = 32: output side 2k (current + next gradient group), input side of stage r > 0
    up to (P - r + 1)·k, at least 3k (two activation groups + the drain's gradients in flight)."""
    for k in (1, 2, 4, 8):
        peaks = [peak_buffered(4, 32, k, r) for r in range(4)]
        assert peaks == [2 * k, 4 * k, 3 * k, 3 * k]
    # 1F1B stage 0: the gradient being consumed and the next one posted
    assert max(o for _, o in live_buffers(kfkb(4, 32, 1), 0)) == 2
    # a partial last group (N = 10, k = 3: groups 3 3 3 1)
    assert [peak_buffered(4, 10, 3, r) for r in range(4)] == [6, 10, 7, 9]


@pytest.mark.parametrize(("P", "N", "k"), [(4, 16, 2), (4, 32, 1), (4, 32, 8), (5, 12, 3), (3, 10, 3)])
def test_the_input_side_bound_is_reached_when_the_gradient_link_crawls(P: int, N: int, k: int) -> None:
    """Only link r -> r-1 slow: stage r's input gradients pile up and the derived count is met."""
    s = kfkb(P, N, k)
    for r in range(1, P):
        transfer = {(a, b): 0.0 for a in range(P) for b in range(P) if abs(a - b) == 1}
        transfer[(r, r - 1)] = 50.0
        tl = simulate(s, [1.0] * P, [1.0] * P, transfer)
        end_of = {(a.op, a.mb): t1 for a, _, t1 in tl.spans[r]}
        intervals = [
            (t0, end_of[(Op.F, a.mb)] if a.op is Op.RECV_F else tl.send_done[a])
            for a, t0, _ in tl.spans[r]
            if a.op in (Op.RECV_F, Op.SEND_B)
        ]
        simulated = max(sum(1 for a0, a1 in intervals if a0 <= t < a1) for t, _ in intervals)
        assert simulated == max(i for i, _ in live_buffers(s, r))
