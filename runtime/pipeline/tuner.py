"""Online auto-tuner (Ada-Grouper §3.2.2, §5.4): re-evaluate the (k, b) candidates and switch plans.

Every ``interval`` steps, at a step boundary, each pipeline process contributes the events it
logged since the last decision (``all_gather_object`` on the world group), so every process holds
the same profile and takes the same decision with this deterministic code: no coordinator process
and no extra message is needed to agree on the switch (decided for issue 17; the paper's
coordinator dispatches the plan instead).

The estimate for candidate c (a decision where the paper is vague; it profiles every plan):
- stage compute per micro-batch: the median measured for c's micro-batch size b_c if c has run
  before, else the current plan's median scaled by b_c / b (compute is linear in the batch);
- transfer per link (every message of the link, one its receiver did not wait for at the link's
  unloaded bytes / bandwidth, ``floors``; ``runtime.pipeline.profile`` says why): the moving
  average of the samples measured while running plans with b_c if
  those are fresh, else the freshest samples (those of the plan that ran last) scaled by b_c / b
  (bytes are linear in b; the paper notes this is only approximate, which is why fresh measured
  samples win); links with no sample at all use 0, i.e. no delay was observed. Samples of b_c are
  *fresh* while their last observation is fewer than ``max_age`` observations older than the
  freshest samples' (default 1: only the sizes of the interval that ran last); stale samples are
  dropped when b_c runs again, so a window never mixes two stretches of the network. (Until
  2026-11-25d a candidate kept the samples of whenever it last ran: under the preemption trace
  (1.5 s of background flows every 3 s, ~3 steps; evaluations every 2 steps) U-Net's tuner, after
  two k=8 steps inside a burst (1347, 1408 ms), switched back to 1F1B, whose estimate (1485 ms)
  was its own step measured 4 steps earlier in a lull: a fresh plan in a burst against a stale
  plan in a lull. Re-derived from the current samples, 1F1B pays the burst too. Each evaluation
  logs ``rederived``: the candidates whose transfers were re-derived and how many observations
  old their own samples were; a switch to such a candidate says so in its reason.)
- the runtime's host time per action (``Profile.host``: the gap between a stage's computes less its
  input wait; sends and receives posted, torch's schedule loop) measured with b_c, else the
  current plan's (per action, not scaled: it does not grow with b);
- pipeline length of c's action lists by event simulation (``simulator.pipeline.cost``), the host
  time added before each compute (2026-11-27; before, the tuner's simulation had no host time);
- plus the plan's *residual*: what its measured steps took beyond its simulated length (the
  runtime's per-action cost, host scheduling, anything the event simulation does not model). The
  paper profiles every plan individually (§5.2); here each candidate's residual is measured while
  it runs: at every evaluation, median step time of the interval (slowest process) minus the
  simulated length from the then-current profiles, and a candidate's estimate adds the median of
  its own residuals. A candidate that has not run yet is charged the current plan's residual per
  micro-batch (clipped at 0) times its own micro-batch count: per-message costs scale with the
  number of micro-batches, not with b, and without this prior small-b candidates look cheaper
  than they are. (Until 2026-11-25 every candidate was charged the *current* plan's residual
  per micro-batch, so the current plan's estimate was always its measured step while the others
  were model figures plus someone else's residual: after a switch to k=4 b=1 its 32 micro-batches
  carried one interval's residual and 1F1B was re-chosen, and back on 1F1B the small residual of
  8 micro-batches favoured k=4 again.) When the profile has the host time (2026-11-27), the
  per-action cost is in the simulated length already and what is left of the residual is not
  per micro-batch (under preemption it is the bursts' delay beyond the mean transfer): a
  candidate that has not run is charged the current plan's residual as it is, per step. The
  per-micro-batch charge made the first choice under preemption k=2 b=4 in 3 of 3 GPT repeats
  (2026-11-25d, c7d7109: 1F1B's burst residual x 32 micro-batches put k=8 b=1 at 1748-2854 ms
  against 882 measured). Replayed offline on the five 2026-11-25d dumps (their fixed 1F1B phase's
  first step as the first evaluation's input, ``benchmarks/pipeline_tuner_first_choice.py``; a
  replay, not a tuner run): this rule chooses k=8 b=1 in 15 of 15 repeats (9 of 9 preempted), the
  per-micro-batch one in 8 of 15 (2 of 9 preempted; k=2 b=4 in 5, k=4 b=2 in 2); on the four
  2026-11-27a dumps k=8 b=1 in 12 of 12 against 8 of 12 (2 of 6 preempted). Measured online
  on GPT preempted only (pipeline_schedules-2026-11-27a, c715a2b): first choice k=8 b=1 in 3 of 3,
  adaptive steady 1.00x [0.90, 1.18] of the best fixed plan (0.81x [0.65, 1.04] at c430868).

Why the tuner switched back to 1F1B under preemption (2026-11-23 runs; diagnosed 2026-11-25 with
``tuner_log``'s ``measured_s`` and the profile of fixed runs): not the moving-average window and
not the linear scaling to b, but the transfer samples (``runtime.pipeline.profile``): a compute
counted as "waited for its input" whenever it started > 1 ms after the stage's previous action,
and on the loaded host a process descheduled for tens of ms made such gaps while its input had
long arrived; the sample then held the whole gap, and the simulation charged it to every message
of that link (k=4 b=1 U-Net, preempted, D=8, load ~13: profiled 2053 ms against 976 / 887
measured). Samples now come from the runtime's own wait for the receive (``WAIT_F`` / ``WAIT_B``
events, ``runtime.pipeline.adapter``): 862 ms profiled for the same run, and the tuner kept k=4.

Each evaluation's log entry holds ``predicted_s`` (every candidate, with its residual),
``model_s`` (the simulated lengths alone), ``measured_s`` (the interval's step times of the plan
that ran) and ``residual_s`` (per candidate that has run).

The first step a process runs with a plan (torch's runtime sets itself up lazily in it: buffers,
shapes) is left out of what the tuner observes, as the fixed phases' warm-up step is left out of
their measurement; every candidate's stage and runtime are built before step 0. (Until
2026-11-23 that step was observed, and at D = 8 it made the tuner predict k=4 b=1 2-3x slower
than it ran as a fixed plan and switch back to 1F1B two steps after choosing it.)

The tuner switches when the best candidate's length is below the current plan's by more than
``margin`` (hysteresis against noise), and logs every evaluation and switch with its reason.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from runtime.pipeline.profile import Profile
from simulator.pipeline.cost import TransferWindow, pipeline_length
from simulator.spec import Plan


@dataclass(frozen=True)
class TunerConfig:
    """When and how the tuner re-evaluates the candidates."""

    # Steps between two evaluations (the paper triggers hourly; trials here last seconds).
    interval: int = 4
    # Transfer samples kept per link and micro-batch size for the moving average.
    window: int = 16
    # Switch only when the best candidate is predicted this fraction faster than the current one.
    margin: float = 0.03
    # A micro-batch size's own transfer samples are used while their last observation is fewer
    # than this many observations older than the freshest samples'; older ones are stale (the
    # network has moved on): re-derived from the freshest samples (module docstring).
    max_age: int = 1

    def __post_init__(self) -> None:
        if self.interval < 1:
            raise ValueError(f"TunerConfig.interval: must be >= 1, got {self.interval}")
        if self.window < 1:
            raise ValueError(f"TunerConfig.window: must be >= 1, got {self.window}")
        if not 0 <= self.margin < 1:
            raise ValueError(f"TunerConfig.margin: must be in [0, 1), got {self.margin}")
        if self.max_age < 1:
            raise ValueError(f"TunerConfig.max_age: must be >= 1, got {self.max_age}")


@dataclass
class AutoTuner:
    """Chooses among ``candidates`` (same stages and global batch) from measured profiles."""

    candidates: list[Plan]
    current: int
    config: TunerConfig = field(default_factory=TunerConfig)
    log: list[dict[str, Any]] = field(default_factory=list)
    _windows: dict[int, TransferWindow] = field(default_factory=dict)  # by micro-batch size
    _compute: dict[int, tuple[list[float], list[float]]] = field(default_factory=dict)
    _overhead_per_mb: float = 0.0  # the latest residual per micro-batch of the plan that ran (>= 0)
    # the latest residual per step of the plan that ran (>= 0); None: its profile had no host time
    # (the prior is then per micro-batch)
    _overhead_per_step: float | None = None
    _host: dict[int, list[float]] = field(default_factory=dict)  # by micro-batch size: per stage
    _residuals: dict[int, list[float]] = field(default_factory=dict)  # by candidate: measured - model
    _measured: list[float] = field(default_factory=list)  # the latest interval's step times
    # Per micro-batch size: each link's transfer on the unloaded link (bytes / bandwidth, wall
    # seconds), the value a message its receiver did not wait for adds (``Profile.feed``); empty:
    # only waited-for messages are samples (as until 2026-11-25d)
    floors: dict[int, dict[tuple[int, int], float]] = field(default_factory=dict)
    _observations: int = 0  # observe() calls so far
    _fed: dict[int, int] = field(default_factory=dict)  # by micro-batch size: observation of its last samples

    def __post_init__(self) -> None:
        if not self.candidates:
            raise ValueError("candidates: at least one plan is needed")
        if not 0 <= self.current < len(self.candidates):
            raise ValueError(f"current: {self.current} is not a candidate index")

    def observe(self, profile: Profile, step_seconds: list[float] | None = None) -> None:
        """Add what the current plan measured since the last observation (and its step times)."""
        plan = self.candidates[self.current]
        b = plan.micro_batch_size
        self._observations += 1
        floor = self.floors.get(b)
        if any(profile.transfers.values()) or (floor and any(profile.messages.values())):
            if b in self._fed and self._observations - self._fed[b] > self.config.max_age:
                self._windows.pop(b, None)  # stale samples: not averaged with the fresh ones
            self._fed[b] = self._observations
        window = self._windows.setdefault(b, TransferWindow(self.config.window))
        profile.feed(window, floor)
        if any(profile.fwd):
            self._compute[b] = (profile.fwd, profile.bwd)
        if profile.host:
            self._host[b] = list(profile.host)
        self._measured = list(step_seconds or [])
        if step_seconds:
            model = self._length(self.current)
            if model is not None:
                excess = statistics.median(step_seconds) - model
                self._residuals.setdefault(self.current, []).append(excess)
                self._overhead_per_mb = max(0.0, excess) / plan.replica_micro_batches(0)
                self._overhead_per_step = max(0.0, excess) if b in self._host else None

    def residual(self, index: int) -> float:
        """Seconds added to candidate ``index``'s simulated length (its own, else the prior)."""
        own = self._residuals.get(index)
        if own:
            return statistics.median(own)
        if self._overhead_per_step is not None:  # the per-action cost is simulated (host time)
            return self._overhead_per_step
        return self._overhead_per_mb * self.candidates[index].replica_micro_batches(0)

    def estimate(self, index: int) -> float | None:
        """Predicted step seconds of candidate ``index`` (None before any compute was measured)."""
        length = self._length(index)
        if length is None:
            return None
        return length + self.residual(index)

    def _freshest(self) -> int | None:
        """The micro-batch size whose transfer samples are the most recent (ties: the current's)."""
        if not self._fed:
            return None
        cur_b = self.candidates[self.current].micro_batch_size
        return max(self._fed, key=lambda b: (self._fed[b], b == cur_b))

    def stale_age(self, index: int) -> int | None:
        """How many observations older than the freshest samples candidate ``index``'s own transfer
        samples are, when that makes them stale (its transfers are then re-derived); else None."""
        b = self.candidates[index].micro_batch_size
        ref = self._freshest()
        if ref is None or b not in self._fed:
            return None
        age = self._fed[ref] - self._fed[b]
        return age if age >= self.config.max_age else None

    def _length(self, index: int) -> float | None:
        """The event-simulated step of candidate ``index`` from the profiles (no overhead term)."""
        cur_b = self.candidates[self.current].micro_batch_size
        plan = self.candidates[index]
        b = plan.micro_batch_size
        if b in self._compute:
            fwd, bwd = self._compute[b]
        elif cur_b in self._compute:
            f0, b0 = self._compute[cur_b]
            fwd, bwd = [t * b / cur_b for t in f0], [t * b / cur_b for t in b0]
        else:
            return None
        ref = self._freshest()
        base = self._windows.get(ref) if ref is not None else None
        transfers = {k: v * b / ref for k, v in base.means().items()} if base and ref else {}
        own = self._windows.get(b)
        if own and self.stale_age(index) is None:
            transfers.update(own.means())
        host = self._host.get(b) or self._host.get(cur_b)
        return pipeline_length(plan, fwd, bwd, transfers, host=host)

    def decide(self, step: int) -> int:
        """The candidate to run from ``step`` on (the current one unless another is clearly faster)."""
        est = {i: self.estimate(i) for i in range(len(self.candidates))}
        known = {i: t for i, t in est.items() if t is not None}
        entry: dict[str, Any] = {
            "step": step,
            "current": self.current,
            "predicted_s": {str(i): t for i, t in known.items()},
            "model_s": {str(i): t - self.residual(i) for i, t in known.items()},
            "measured_s": self._measured,
            "residual_s": {str(i): statistics.median(r) for i, r in self._residuals.items() if r},
        }
        stale = {i: a for i in known if (a := self.stale_age(i)) is not None}
        if stale:
            entry["rederived"] = {str(i): a for i, a in stale.items()}
        if self.current not in known:
            entry["reason"] = "no profile of the current plan yet"
            self.log.append(entry)
            return self.current
        best = min(known, key=lambda i: (known[i], i))
        cur = known[self.current]
        if best != self.current and known[best] < cur * (1 - self.config.margin):
            p, q = self.candidates[self.current], self.candidates[best]
            entry["switch_to"] = best
            entry["reason"] = (
                f"(k={q.group_size(q.replica_micro_batches(0))}, b={q.micro_batch_size}) predicted "
                f"{known[best]:.4f} s < {cur:.4f} s of (k={p.group_size(p.replica_micro_batches(0))}, "
                f"b={p.micro_batch_size}) by more than {self.config.margin:.0%}"
            )
            if best in stale:
                entry["reason"] += (
                    f"; its transfers re-derived from the latest samples (b={self._freshest()}), its own "
                    f"being {stale[best]} observations old"
                )
            self.current = best
        else:
            entry["reason"] = "current plan within margin of the best"
        self.log.append(entry)
        return self.current
