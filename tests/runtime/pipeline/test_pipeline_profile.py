"""Transfer and compute samples from event logs (hand-made logs with known answers)."""

from __future__ import annotations

import pytest

from runtime.pipeline.profile import gantt, profile_records
from simulator.pipeline.cost import TransferWindow


def records() -> dict[int, dict[str, object]]:
    # stage 0 sends activation 0 at 1.0; stage 1 posted its receive at 0.5, waited from 0.6 (its last
    # action) and started F0 at 1.3 -> sample 0.3. Activation 1 is sent at 2.0 but stage 1 only posts
    # the receive at 2.5 and starts F1 at 2.9 after idling from 2.55 -> sample 0.4 (from the later post).
    # The gradient of mb 0 is sent at 4.0; stage 0 starts B0 at 4.2 without having waited (its previous
    # action ended at 4.1995) -> no sample.
    s0 = [
        ["F", 0, 0.0, 1.0],
        ["SEND_F", 0, 1.0, 1.0],
        ["F", 1, 1.0, 2.0],
        ["SEND_F", 1, 2.0, 2.0],
        ["RECV_B", 0, 2.0, 2.0],
        ["F", 9, 2.0, 4.1995],
        ["B", 0, 4.2, 6.2],
    ]
    s1 = [
        ["RECV_F", 0, 0.5, 0.5],
        ["SEND_B", 7, 0.6, 0.6],
        ["F", 0, 1.3, 2.3],
        ["RECV_F", 1, 2.5, 2.5],
        ["SEND_B", 8, 2.55, 2.55],
        ["F", 1, 2.9, 3.9],
        ["B", 0, 3.9, 4.0],
        ["SEND_B", 0, 4.0, 4.0],
    ]
    return {
        0: {"replica": 0, "stage": 0, "events": s0, "steps": [[0, 0.0, 6.2]]},
        1: {"replica": 0, "stage": 1, "events": s1, "steps": [[0, 0.5, 4.0]]},
    }


def test_transfer_samples_only_when_the_receiver_waited() -> None:
    prof = profile_records(records())
    assert prof.transfers[(0, 1)] == pytest.approx([0.3, 0.4])
    assert (1, 0) not in prof.transfers
    assert prof.fwd == pytest.approx([1.0, 1.0])  # medians of F durations (1, 1, 2.1995) and (1, 1)
    assert prof.bwd == pytest.approx([2.0, 0.1])
    w = prof.feed(TransferWindow(window=1))
    assert w.mean((0, 1)) == pytest.approx(0.4)


def test_gantt_is_relative_to_the_first_step() -> None:
    rows = gantt(records())
    assert rows[0] == (0, 0, "F", 0, 0.0, 1.0)
    assert (0, 1, "B", 0, pytest.approx(3.9), pytest.approx(4.0)) in rows
    assert all(kind in ("F", "B") for _, _, kind, _, _, _ in rows)


def test_queueing_behind_the_previous_message_is_not_in_the_sample() -> None:
    # two activations posted back to back at 1.0 and 1.05 (receives posted at 0.5); F0 waits until
    # 1.3 (sample 0.3); F1 waits from 1.4 to 1.7: its transfer started when message 0 had arrived
    # (1.3), so its sample is 0.4, not 1.7 - 1.05 = 0.65 (the simulation queues it again itself)
    s0 = [["F", 0, 0.0, 1.0], ["SEND_F", 0, 1.0, 1.0], ["F", 1, 1.0, 1.05], ["SEND_F", 1, 1.05, 1.05]]
    s1 = [["RECV_F", 0, 0.5, 0.5], ["RECV_F", 1, 0.5, 0.5], ["F", 0, 1.3, 1.4], ["F", 1, 1.7, 1.8]]
    recs = {
        0: {"replica": 0, "stage": 0, "events": s0, "steps": [[0, 0.0, 1.05]]},
        1: {"replica": 0, "stage": 1, "events": s1, "steps": [[0, 0.5, 1.8]]},
    }
    assert profile_records(recs).transfers[(0, 1)] == pytest.approx([0.3, 0.4])


def test_the_runtime_wait_decides_what_is_a_transfer_sample() -> None:
    # stage 1 starts F0 at 1.3 after a 0.3 gap, but its wait for the input returned at once (the
    # process was descheduled, the activation had arrived): no sample. F1's wait blocked from 1.5 to
    # 1.8 (its F starts at 1.81): sample 1.8 - max(post 1.05, arrival of message 0 <= 1.0)... = 0.75
    s0 = [["F", 0, 0.0, 0.9], ["SEND_F", 0, 0.9, 0.9], ["F", 1, 0.95, 1.05], ["SEND_F", 1, 1.05, 1.05]]
    s1 = [
        ["RECV_F", 0, 0.5, 0.5],
        ["RECV_F", 1, 0.5, 0.5],
        ["WAIT_F", 0, 1.2999, 1.3],
        ["F", 0, 1.3, 1.5],
        ["WAIT_F", 1, 1.5, 1.8],
        ["F", 1, 1.81, 1.9],
    ]
    recs = {
        0: {"replica": 0, "stage": 0, "events": s0, "steps": [[0, 0.0, 1.05]]},
        1: {"replica": 0, "stage": 1, "events": s1, "steps": [[0, 0.5, 1.9]]},
    }
    assert profile_records(recs).transfers[(0, 1)] == pytest.approx([1.8 - 1.05])
    # the same log without the wait events: the gap rule takes both (the 2026-11-23 behaviour)
    old = {
        r: {**v, "events": [e for e in v["events"] if not e[0].startswith("WAIT")]} for r, v in recs.items()
    }
    assert len(profile_records(old).transfers[(0, 1)]) == 2


def test_host_time_is_the_gap_between_computes_less_the_input_wait() -> None:
    # stage 1: F0 (first of the step: no sample); posts, then a 0.5 s wait for F1's input within a
    # 0.7 s gap -> 0.2 s of host time; B1 right after F1 plus 0.1 s of posting -> 0.1; after REDUCE a
    # new step: its first F is not sampled
    s1 = [
        ["F", 0, 0.0, 1.0],
        ["SEND_F", 0, 1.0, 1.0],
        ["RECV_F", 1, 1.1, 1.1],
        ["WAIT_F", 1, 1.15, 1.65],
        ["F", 1, 1.7, 2.7],
        ["RECV_B", 1, 2.75, 2.75],
        ["WAIT_B", 1, 2.8, 2.8],
        ["B", 1, 2.8, 3.8],
        ["REDUCE", -1, 3.8, 3.9],
        ["F", 2, 5.0, 6.0],
    ]
    recs = {
        0: {"replica": 0, "stage": 0, "events": [["F", 0, 0.0, 1.0]], "steps": [[0, 0.0, 1.0]]},
        1: {"replica": 0, "stage": 1, "events": s1, "steps": [[0, 0.0, 6.0]]},
    }
    prof = profile_records(recs)
    assert prof.host == pytest.approx([0.0, 0.15])  # median of 0.2 and 0.1; stage 0: no sample


def test_unwaited_messages_count_at_the_floor() -> None:
    # records(): link 0 -> 1 has two waited messages (0.3, 0.4); link 1 -> 0's only message (mb 0's
    # gradient) was there when B0 asked: unknown, None in ``messages``
    prof = profile_records(records())
    assert prof.messages[(0, 1)] == pytest.approx([0.3, 0.4])
    assert prof.messages[(1, 0)] == [None]
    plain = prof.feed(TransferWindow(window=8))
    assert (1, 0) not in plain.means()  # without a floor: only the waited-for messages
    floored = prof.feed(TransferWindow(window=8), {(0, 1): 0.05, (1, 0): 0.02})
    assert floored.means() == {(0, 1): pytest.approx(0.35), (1, 0): pytest.approx(0.02)}
