"""HeterPS's scheduler (Section 5.2, Algorithm 1): an LSTM policy over layers trained with REINFORCE.

The LSTM reads one layer per step (the layer index is its time step) with the paper's five
features: the layer's index (one-hot), its type (one-hot over op kinds), the size of its input
data and of its weights (log bytes per sample, standardised), and its data-communication time
(log of the bytes it sends to the next layer over the slowest link, standardised). We also feed
the previous layer's action (one-hot), so the policy is P(a_l | a_{l-1..1}; θ) as in Formula 15.
A linear head and a softmax give P_{l,t}, the probability of scheduling layer l to type t.

Training (Algorithm 1): each round samples N schedules, scores each with the money of Formula 8
under the least-cost provisioning (R_n = -Cost / Cost_ref, so less money is more reward;
a schedule that cannot meet the limit gets the penalty R = -PENALTY), and follows Formula 17,
the REINFORCE gradient with the moving-average baseline b <- (1 - γ) b + γ mean(R_n).

Decisions where the paper is silent: Adam instead of plain gradient ascent (Formula 18 with an
adaptive η); a small entropy bonus keeps the policy from collapsing in the first rounds; Cost_ref
is the cheapest money seen so far; the answer is the cheapest schedule seen during training or
the policy's most likely schedule, whichever costs less; training stops after ``rounds`` rounds,
after ``patience`` rounds without a cheaper schedule, or at ``time_limit`` seconds. No
pre-training on random plans (Section 5.2's pre-training stage) is done.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from search.heterogeneous.base import Assignment, Objective, Scheduler

PENALTY = 3.0  # reward of a schedule that cannot meet the throughput limit within the counts
KINDS = ("embedding", "linear", "conv1d", "conv2d", "matmul", "cat")  # + "other"


@dataclass(frozen=True)
class RLConfig:
    """Algorithm 1's inputs and the policy's size."""

    plans_per_round: int = 32  # N (and G of Formula 16): schedules sampled per round
    rounds: int = 300  # I: the maximum number of rounds
    gamma: float = 0.1  # γ: the rate of the moving-average baseline
    learning_rate: float = 0.05  # η (Adam)
    hidden: int = 64  # LSTM hidden size
    entropy: float = 0.01  # weight of the entropy bonus
    patience: int = 60  # stop after this many rounds without a cheaper schedule
    time_limit: float = 5.0  # seconds


class LayerPolicy(nn.Module):
    """LSTM over layers -> softmax over resource types (HeterPS Figure 4).

    Shapes:
        features (L, F) float; actions (N, L) int64 -> log-probabilities (N, L, T)
    """

    def __init__(self, features: int, types: int, hidden: int) -> None:
        super().__init__()
        self.types = types
        self.cell = nn.LSTMCell(features + types, hidden)
        self.head = nn.Linear(hidden, types)

    def sample(
        self, feats: torch.Tensor, n: int, generator: torch.Generator, greedy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """n schedules; returns actions (n, L), summed log-probabilities (n,) and entropy (n,)."""
        num_layers = feats.shape[0]
        h = feats.new_zeros(n, self.cell.hidden_size)
        c = feats.new_zeros(n, self.cell.hidden_size)
        prev = feats.new_zeros(n, self.types)
        actions, logps, ents = [], [], []
        for layer in range(num_layers):
            x = torch.cat([feats[layer].expand(n, -1), prev], dim=1)
            h, c = self.cell(x, (h, c))
            logp = torch.log_softmax(self.head(h), dim=1)
            if greedy:
                a = logp.argmax(dim=1)
            else:
                a = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
            actions.append(a)
            logps.append(logp.gather(1, a[:, None]).squeeze(1))
            ents.append(-(logp.exp() * logp).sum(dim=1))
            prev = torch.nn.functional.one_hot(a, self.types).to(feats.dtype)
        return torch.stack(actions, 1), torch.stack(logps, 1).sum(1), torch.stack(ents, 1).sum(1)


def layer_features(objective: Objective) -> torch.Tensor:
    """The five per-layer features of Section 5.2, shape (L, L + len(KINDS) + 1 + 3)."""
    cm = objective.cm
    model = cm.model
    n = len(model.layers)
    index = np.eye(n)
    kinds = np.zeros((n, len(KINDS) + 1))
    for i, layer in enumerate(model.layers):
        kinds[i, KINDS.index(layer.kind) if layer.kind in KINDS else len(KINDS)] = 1.0
    inputs = np.zeros(n)
    for src, dst in model.edges:
        inputs[dst] += model.layers[src].activation_bytes
    weights = np.array([sum(v.bytes for v in layer.variables) for layer in model.layers], dtype=float)
    slowest = float(cm.link_bytes_per_s.min())
    comm = np.array(cm.cut_bytes[1:]) * cm.workload.b_o / slowest
    numeric = np.stack([np.log1p(inputs), np.log1p(weights), np.log1p(comm * 1e6)], axis=1)
    numeric = (numeric - numeric.mean(0)) / (numeric.std(0) + 1e-9)
    return torch.tensor(np.concatenate([index, kinds, numeric], axis=1), dtype=torch.float32)


class RLScheduler(Scheduler):
    """LSTM + REINFORCE with a moving-average baseline (HeterPS Algorithm 1)."""

    name = "rl"

    def __init__(self, config: RLConfig | None = None, seed: int = 0) -> None:
        self.config = config or RLConfig()
        self.seed = seed

    def _search(self, objective: Objective) -> tuple[Assignment | None, dict[str, object]]:
        cfg = self.config
        start = time.perf_counter()
        torch.manual_seed(self.seed)
        gen = torch.Generator().manual_seed(self.seed)
        feats = layer_features(objective)
        policy = LayerPolicy(feats.shape[1], objective.num_types, cfg.hidden)
        opt = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate)
        best: Assignment | None = None
        best_money = math.inf
        baseline = 0.0
        stale = 0
        rounds = 0
        for rounds in range(1, cfg.rounds + 1):
            actions, logp, ent = policy.sample(feats, cfg.plans_per_round, gen)
            plans = [tuple(row) for row in actions.tolist()]
            money = np.array([objective.money(p) for p in plans])
            improved = False
            for p, m in zip(plans, money, strict=True):
                if m < best_money * (1 - 1e-12):
                    best, best_money, improved = p, float(m), True
            stale = 0 if improved else stale + 1
            ref = best_money if math.isfinite(best_money) else 1.0
            reward = np.where(np.isfinite(money), -np.minimum(money / ref, PENALTY), -PENALTY)
            if rounds == 1:
                baseline = float(reward.mean())
            adv = torch.tensor(reward - baseline, dtype=torch.float32)
            loss = -(adv * logp).mean() - cfg.entropy * ent.mean()  # Formula 17 (ascent on R)
            opt.zero_grad()
            loss.backward()
            opt.step()
            baseline = (1 - cfg.gamma) * baseline + cfg.gamma * float(reward.mean())  # Algorithm 1, line 8
            if stale >= cfg.patience or time.perf_counter() - start > cfg.time_limit:
                break
        with torch.no_grad():
            greedy, _, _ = policy.sample(feats, 1, gen, greedy=True)
        g = tuple(greedy[0].tolist())
        if objective.money(g) < best_money:
            best = g
        return best, {"notes": (f"{rounds} rounds of {cfg.plans_per_round} schedules",)}
