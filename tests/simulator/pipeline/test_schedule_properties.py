"""kFkB planner properties, exhaustively over small grids (P ≤ 5 stages, N ≤ 12 micro-batches, every k).

Indexing: stage r is 0-based, stage 0 holds the first layers; the stash bound is min(N, (P - r)·k).
"""

from __future__ import annotations

import itertools

import pytest

from simulator.pipeline import (
    Action,
    Deadlock,
    Op,
    PairingError,
    Schedule,
    expected_peak_stashed,
    kfkb,
    simulate,
)
from simulator.pipeline.schedule import compute_groups

GRID = [(P, N, k) for P in range(1, 6) for N in range(1, 13) for k in range(1, N + 1)]


@pytest.mark.parametrize(("P", "N", "k"), GRID)
def test_kfkb_properties(P: int, N: int, k: int) -> None:
    s = kfkb(P, N, k)
    for r in range(P):
        row = s.stages[r]
        assert all(a.stage == r for a in row)
        comp = s.compute_order(r)
        # every micro-batch forward once and backward once, F before B
        assert sorted(a.mb for a in comp if a.op is Op.F) == list(range(N))
        assert sorted(a.mb for a in comp if a.op is Op.B) == list(range(N))
        pos = {(a.op, a.mb): i for i, a in enumerate(row)}
        for mb in range(N):
            assert pos[(Op.F, mb)] < pos[(Op.B, mb)]
            # the receive a compute consumes is posted before it, the send follows it
            if r > 0:
                assert pos[(Op.RECV_F, mb)] < pos[(Op.F, mb)]
                assert pos[(Op.SEND_B, mb)] > pos[(Op.B, mb)]
            if r < P - 1:
                assert pos[(Op.RECV_B, mb)] < pos[(Op.B, mb)]
                assert pos[(Op.SEND_F, mb)] > pos[(Op.F, mb)]
        assert s.peak_stashed(r) == expected_peak_stashed(P, N, k, r) == min(N, (P - r) * k)
    # sends and receives pair up link by link, in posting order
    for r in range(P - 1):
        sent = [a.mb for a in s.stages[r] if a.op is Op.SEND_F]
        got = [a.mb for a in s.stages[r + 1] if a.op is Op.RECV_F]
        assert sent == got == list(range(N))
        sent_b = [a.mb for a in s.stages[r + 1] if a.op is Op.SEND_B]
        got_b = [a.mb for a in s.stages[r] if a.op is Op.RECV_B]
        assert sent_b == got_b
    # no deadlock, with non-blocking and with blocking sends
    simulate(s)
    simulate(s, blocking_sends=True)


@pytest.mark.parametrize(("P", "N"), [(4, 8), (3, 6), (2, 5)])
def test_k1_is_1f1b_and_kN_is_gpipe(P: int, N: int) -> None:
    for r in range(P):
        ones = [op for op, _ in compute_groups(P, N, 1, r)]
        warm = min(N, P - r - 1)
        assert ones[:warm] == [Op.F] * warm
        steady = ones[warm : warm + 2 * (N - warm)]
        assert steady == [Op.F, Op.B] * (N - warm)
        gp = [a.op for a in kfkb(P, N, N).compute_order(r)]
        assert gp == [Op.F] * N + [Op.B] * N


def test_kfkb_is_k_interleaved_copies_of_1f1b() -> None:
    """§5.4: copy j of 1F1B runs micro-batches j, j+k, ...; merging the copies gives kFkB."""
    P, N, k = 4, 12, 3
    for r in range(P):
        merged = kfkb(P, N, k).compute_order(r)
        for j in range(k):
            copy = [(a.op, a.mb) for a in merged if a.mb % k == j]
            one = [(a.op, a.mb * k + j) for a in kfkb(P, N // k, 1).compute_order(r)]
            assert copy == one


def test_kfkb_hand_worked_example() -> None:
    s = kfkb(2, 4, 2)
    assert [str(a) for a in s.stages[0]] == [
        "0F0",
        "0SEND_F0",
        "0F1",
        "0SEND_F1",
        "0RECV_B0",
        "0RECV_B1",
        "0F2",
        "0SEND_F2",
        "0F3",
        "0SEND_F3",
        "0RECV_B2",
        "0RECV_B3",
        "0B0",
        "0B1",
        "0B2",
        "0B3",
    ]
    assert [str(a) for a in s.stages[1]] == [
        "1RECV_F0",
        "1RECV_F1",
        "1F0",
        "1F1",
        "1RECV_F2",
        "1RECV_F3",
        "1B0",
        "1SEND_B0",
        "1B1",
        "1SEND_B1",
        "1F2",
        "1F3",
        "1B2",
        "1SEND_B2",
        "1B3",
        "1SEND_B3",
    ]


def test_action_string_round_trip() -> None:
    for a in [Action(0, op, mb) for op in Op for mb in (0, 7, 12)] + [Action(13, Op.SEND_B, 101)]:
        assert Action.parse(str(a)) == a
    for bad in ("F0", "0X1", "0F", "0SEND_F", ""):
        with pytest.raises(ValueError, match="not an action"):
            Action.parse(bad)


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="num_stages"):
        kfkb(0, 4, 1)
    with pytest.raises(ValueError, match="k: must be"):
        kfkb(2, 4, 0)


def _swap(s: Schedule, r: int, i: int, j: int) -> Schedule:
    rows = [list(row) for row in s.stages]
    rows[r][i], rows[r][j] = rows[r][j], rows[r][i]
    return Schedule(s.num_stages, s.num_micro_batches, s.k, tuple(tuple(x) for x in rows))


def test_simulation_catches_mispaired_and_deadlocked_lists() -> None:
    s = kfkb(2, 4, 2)
    # receives posted in the wrong order: the first send would land in micro-batch 1's buffer
    i, j = s.stages[1].index(Action(1, Op.RECV_F, 0)), s.stages[1].index(Action(1, Op.RECV_F, 1))
    with pytest.raises(PairingError, match="micro-batch"):
        simulate(_swap(s, 1, i, j))
    # stage 0 waits for gradient 0 before sending activation 1; stage 1 needs activation 1 first
    rows = (
        tuple(
            Action.parse(a)
            for a in ["0F0", "0SEND_F0", "0RECV_B0", "0B0", "0F1", "0SEND_F1", "0RECV_B1", "0B1"]
        ),
        tuple(
            Action.parse(a)
            for a in ["1RECV_F0", "1RECV_F1", "1F0", "1F1", "1B0", "1SEND_B0", "1B1", "1SEND_B1"]
        ),
    )
    with pytest.raises(Deadlock, match="stage 0 at 0B0"):
        simulate(Schedule(2, 2, 1, rows))
    # a backward before its forward is refused
    early = (
        rows[0],
        tuple(
            Action.parse(a)
            for a in ["1RECV_F0", "1RECV_F1", "1B0", "1SEND_B0", "1F0", "1F1", "1B1", "1SEND_B1"]
        ),
    )
    with pytest.raises(ValueError, match="before its forward"):
        simulate(Schedule(2, 2, 1, early))


def test_pipeline_length_hand_worked() -> None:
    # 2 stages, 2 micro-batches, GPipe, F = 1, B = 2, transfer 0.5 each way:
    # stage 0: F0 [0,1] F1 [1,2]; stage 1: F0 [1.5,2.5] F1 [2.5,3.5] B0 [3.5,5.5] B1 [5.5,7.5]
    # stage 0: B0 waits for grad 0 at 6.0 -> [6,8], B1 grad at 8.0 -> [8,10]
    t = simulate(kfkb(2, 2, 2), [1, 1], [2, 2], {(0, 1): 0.5, (1, 0): 0.5})
    assert t.length == pytest.approx(10.0)
    # 1F1B: stage 1 F0 [1.5,2.5] B0 [2.5,4.5] F1 [4.5,5.5] B1 [5.5,7.5]; stage 0 F0 F1, B0 at 5 -> [5,7], B1 at 8 -> [8,10]
    t1 = simulate(kfkb(2, 2, 1), [1, 1], [2, 2], {(0, 1): 0.5, (1, 0): 0.5})
    assert t1.length == pytest.approx(10.0)


def test_grouping_shortens_the_pipeline_when_transfers_are_slow() -> None:
    """Ada-Grouper Fig. 2: with transfers at half a forward, 2F2B is shorter than 1F1B."""
    P, N = 4, 8
    tr = {(a, b): 0.5 for a, b in itertools.permutations(range(P), 2)}
    lengths = {k: simulate(kfkb(P, N, k), [1.0] * P, [2.0] * P, tr).length for k in (1, 2, 4, 8)}
    assert lengths[2] < lengths[1]
    # with free transfers 1F1B is already optimal: grouping gains nothing
    free = {k: simulate(kfkb(P, N, k), [1.0] * P, [2.0] * P).length for k in (1, 2)}
    assert free[2] >= free[1]
