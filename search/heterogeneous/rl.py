"""HeterPS's scheduler (Section 5.2, Algorithm 1): an LSTM policy over layers trained with REINFORCE.

The LSTM reads one layer per step (the layer index is its time step) with the paper's five
features: the layer's index (one-hot), its type (one-hot over op kinds), the size of its input
data and of its weights (log bytes per sample, standardised), and its data-communication time
(log of the bytes it sends to the next layer over the slowest link, standardised). We also feed
the previous layer's action (one-hot), so the policy is P(a_l | a_{l-1..1}; θ) as in Formula 15.
A linear head and a softmax give P_{l,t}, the probability of scheduling layer l to type t. Our
addition: a learnable bias κ (initially 2) on the logit of the previous layer's type; stages are
runs of layers, and a near-uniform first policy almost never draws a schedule whose many stages
fit the counts, so without it the first rounds carry no signal.

Training (Algorithm 1): each round samples N schedules, scores each with the money of Formula 8
under the least-cost provisioning (R_n = -Cost / Cost_ref, so less money is more reward;
a schedule that cannot meet the limit gets the penalty R = -PENALTY), and follows Formula 17,
the REINFORCE gradient with the moving-average baseline b <- (1 - γ) b + γ mean(R_n).

Decisions where the paper is silent: Adam instead of plain gradient ascent (Formula 18 with an
adaptive η); the advantage R - b is divided by the round's reward spread; a small entropy bonus keeps the policy from collapsing in the first rounds; Cost_ref
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

STAY_INIT = 2.0  # initial κ: P(same type as the previous layer) ≈ 0.65 with 5 types
PENALTY = 3.0  # reward of a schedule that cannot meet the throughput limit within the counts
KINDS = ("embedding", "linear", "conv1d", "conv2d", "matmul", "cat")  # + "other"


@dataclass(frozen=True)
class RLConfig:
    """Algorithm 1's inputs and the policy's size."""

    plans_per_round: int = 32  # N (and G of Formula 16): schedules sampled per round
    rounds: int = 2000  # I: the maximum number of rounds
    gamma: float = 0.1  # γ: the rate of the moving-average baseline
    learning_rate: float = 0.02  # η (Adam)
    hidden: int = 64  # LSTM hidden size
    entropy: float = 0.02  # weight of the entropy bonus
    patience: int = 2000  # stop after this many rounds without a cheaper schedule
    time_limit: float = 5.0  # seconds


class LayerPolicy(nn.Module):
    """LSTM over layers -> softmax over resource types (HeterPS Figure 4).

    Sampling runs the LSTM one layer at a time (each step reads the previous action); training
    recomputes the log-probabilities of the sampled actions in one fused ``nn.LSTM`` call over the
    whole sequence (the previous actions are known by then), which is the same function.

    Shapes:
        features (L, F) float; actions (N, L) int64 -> log-probabilities (N, L, T)
    """

    def __init__(self, features: int, types: int, hidden: int) -> None:
        super().__init__()
        self.types = types
        self.lstm = nn.LSTM(features + types, hidden, batch_first=True)
        self.head = nn.Linear(hidden, types)
        # κ: a learnable preference for the previous layer's type (stages are runs of layers).
        self.stay = nn.Parameter(torch.tensor(STAY_INIT))

    def log_probs(self, feats: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """log P(a_l = t | a_{l-1..1}) for every plan, layer and type: (N, L, T)."""
        n, num_layers = actions.shape
        prev = torch.zeros(n, num_layers, self.types)
        prev[:, 1:] = nn.functional.one_hot(actions[:, :-1], self.types).float()
        x = torch.cat([feats.expand(n, -1, -1), prev], dim=2)
        out, _ = self.lstm(x)
        return torch.log_softmax(self.head(out) + self.stay * prev, dim=2)

    @torch.no_grad()
    def sample(
        self, feats: torch.Tensor, n: int, generator: torch.Generator, greedy: bool = False
    ) -> torch.Tensor:
        """n schedules (n, L), drawn layer by layer (or the most likely one when ``greedy``)."""
        lstm = self.lstm
        w_ih, w_hh = lstm.weight_ih_l0, lstm.weight_hh_l0
        b_ih, b_hh = lstm.bias_ih_l0, lstm.bias_hh_l0
        assert isinstance(w_ih, torch.Tensor) and isinstance(w_hh, torch.Tensor)
        assert isinstance(b_ih, torch.Tensor) and isinstance(b_hh, torch.Tensor)
        h = torch.zeros(n, lstm.hidden_size)
        c = torch.zeros(n, lstm.hidden_size)
        prev = torch.zeros(n, self.types)
        eye = torch.eye(self.types)
        actions = []
        for layer in range(feats.shape[0]):
            x = torch.cat([feats[layer].expand(n, -1), prev], dim=1)
            h, c = torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)  # one step of self.lstm
            p = torch.softmax(self.head(h) + self.stay * prev, dim=1)
            a = p.argmax(dim=1) if greedy else torch.multinomial(p, 1, generator=generator).squeeze(1)
            actions.append(a)
            prev = eye[a]
        return torch.stack(actions, 1)


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
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a tiny policy: more threads only add contention
        try:
            return self._train(objective)
        finally:
            torch.set_num_threads(threads)

    def _train(self, objective: Objective) -> tuple[Assignment | None, dict[str, object]]:
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
            actions = policy.sample(feats, cfg.plans_per_round, gen)
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
            logp_all = policy.log_probs(feats, actions)
            logp = logp_all.gather(2, actions[:, :, None]).squeeze(2).sum(1)
            entropy = -(logp_all.exp() * logp_all).sum(2).sum(1)
            adv = torch.tensor((reward - baseline) / (reward.std() + 1e-8), dtype=torch.float32)
            loss = -(adv * logp).mean() - cfg.entropy * entropy.mean()  # Formula 17 (ascent on R)
            opt.zero_grad()
            loss.backward()
            opt.step()
            baseline = (1 - cfg.gamma) * baseline + cfg.gamma * float(reward.mean())  # Algorithm 1, line 8
            if stale >= cfg.patience or time.perf_counter() - start > cfg.time_limit:
                break
        greedy = tuple(policy.sample(feats, 1, gen, greedy=True)[0].tolist())
        if objective.money(greedy) < best_money:
            best = greedy
        return best, {"notes": (f"{rounds} rounds of {cfg.plans_per_round} schedules",)}
