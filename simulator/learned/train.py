"""Training the learned simulators (AutoSync supplementary §10) and judging them as rankers.

Recipe: Adam at lr 1e-3, decayed ×0.3 at epochs 80 and 160, 200 epochs, gradient norm clipped
to 0.25. Mini-batches hold strategies of one domain, so the pairwise ranking loss only compares
runtimes measured on the same model and cluster:

    rank: L = mean over pairs (a, b) with t_a > t_b of softplus(-(f̂_a - f̂_b))   (RankNet)
    mse:  L = mean (f̂ - log t)^2

Model selection keeps the epoch with the best mean validation pairwise accuracy (validation
splits only; the test split is never looked at here).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch.nn import functional as F

from simulator.learned.data import EncodedDomain
from simulator.learned.gat import GATSimulatorNet
from simulator.learned.linear import LinearRanker, fit_linear
from simulator.learned.net import SimulatorNet
from simulator.learned.residual import Ranker
from simulator.learned.rnn import RNNSimulatorNet
from simulator.learned.simulator import NeuralSimulator
from simulator.metrics import RankingMetrics, pairwise_accuracy, ranking_metrics

Kind = Literal["rnn", "gat", "linear"]
Loss = Literal["rank", "mse"]
KINDS: tuple[str, ...] = ("linear", "rnn", "gat")
#: Every simulator the registry saves and loads: the networks, AutoSync's linear ranker, and the
#: z-ensembles (``residual.Ranker``: the transfer ensemble and the residual model).
LearnedSimulator = NeuralSimulator | LinearRanker | Ranker


@dataclass(frozen=True)
class TrainConfig:
    """How to train one simulator (defaults: AutoSync §10)."""

    kind: Kind = "rnn"  # network: 'rnn' (Eqs. 4-7), 'gat' (Eqs. 8-10) or 'linear' (pairwise logistic)
    loss: Loss = "rank"  # 'rank' (pairwise logistic) or 'mse' (on log seconds); linear is always 'rank'
    epochs: int = 200  # passes over the training data
    lr: float = 1e-3  # Adam learning rate
    milestones: tuple[int, ...] = (80, 160)  # epochs at which lr is multiplied by gamma
    gamma: float = 0.3  # lr decay factor
    clip_norm: float = 0.25  # gradient-norm clip
    hidden: int = 32  # hidden width H
    batch_size: int = 32  # strategies per mini-batch (one domain per batch)
    seed: int = 0  # initialisation and shuffling
    eval_every: int = 5  # epochs between validation checks (model selection)
    threads: int = 1  # torch intra-op threads while training (these models are too small to gain)

    def as_dict(self) -> dict[str, object]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class FitResult:
    """A trained simulator and how its training went."""

    simulator: NeuralSimulator | LinearRanker
    best_epoch: int
    history: list[tuple[int, float, float]] = field(default_factory=list)  # (epoch, loss, val acc)


def make_net(kind: str, hidden: int) -> SimulatorNet:
    if kind == "rnn":
        return RNNSimulatorNet(hidden=hidden)
    if kind == "gat":
        return GATSimulatorNet(hidden=hidden)
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def ranking_loss(out: torch.Tensor, log_t: torch.Tensor) -> torch.Tensor:
    """Pairwise logistic loss over every pair of the batch with distinct measured times."""
    slower = (log_t[:, None] - log_t[None, :]) > 0
    if not slower.any():
        return out.sum() * 0.0
    margin = (out[:, None] - out[None, :])[slower]
    return F.softplus(-margin).mean()


def _batches(
    data: Sequence[EncodedDomain], size: int, rng: np.random.Generator
) -> list[tuple[int, np.ndarray]]:
    out: list[tuple[int, np.ndarray]] = []
    for k, d in enumerate(data):
        perm = rng.permutation(len(d))
        out += [(k, perm[s : s + size]) for s in range(0, len(d), size) if len(perm[s : s + size]) > 1]
    order = rng.permutation(len(out))
    return [out[i] for i in order]


def validation_accuracy(sim: NeuralSimulator | LinearRanker, val: Sequence[EncodedDomain]) -> float:
    """Mean pairwise accuracy over validation domains (NaN when none has a pair)."""
    accs = [pairwise_accuracy(sim.outputs(d.graphs), d.times) for d in val if len(d) >= 2]
    accs = [a for a in accs if np.isfinite(a)]
    return float(np.mean(accs)) if accs else float("nan")


def fit(
    train: Sequence[EncodedDomain],
    val: Sequence[EncodedDomain],
    config: TrainConfig,
    start: NeuralSimulator | None = None,
) -> FitResult:
    """Train a simulator on ``train``, selecting the epoch on ``val`` (if it has pairs).

    ``start`` continues from a trained network (fine-tuning; its normalisation is kept).
    """
    train = [d for d in train if len(d)]
    if not train:
        raise ValueError("no training data")
    if config.kind == "linear":
        return FitResult(fit_linear(train, val, seed=config.seed), best_epoch=0)
    previous = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        return _fit_net(train, val, config, start)
    finally:
        torch.set_num_threads(previous)


def _fit_net(
    train: Sequence[EncodedDomain],
    val: Sequence[EncodedDomain],
    config: TrainConfig,
    start: NeuralSimulator | None,
) -> FitResult:
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    if start is not None:
        net = copy.deepcopy(start.net)
    else:
        net = make_net(config.kind, config.hidden)
        net.fit_normaliser([g for d in train for g in d.graphs])
    opt = torch.optim.Adam(net.parameters(), lr=config.lr)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=list(config.milestones), gamma=config.gamma)
    targets = [torch.as_tensor(d.log_times, dtype=torch.float32) for d in train]
    sim = NeuralSimulator(net, config.loss)
    best = (-1.0, 0, copy.deepcopy(net.state_dict()))
    history: list[tuple[int, float, float]] = []
    for epoch in range(1, config.epochs + 1):
        net.train()
        losses = []
        for k, idx in _batches(train, config.batch_size, rng):
            out = net(net.collate([train[k].graphs[i] for i in idx]))
            y = targets[k][torch.as_tensor(idx)]
            loss = ranking_loss(out, y) if config.loss == "rank" else F.mse_loss(out, y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), config.clip_norm)
            opt.step()
            losses.append(float(loss.detach()))
        sched.step()
        if epoch % config.eval_every == 0 or epoch == config.epochs:
            net.eval()
            acc = validation_accuracy(sim, val)
            history.append((epoch, float(np.mean(losses)) if losses else float("nan"), acc))
            # Without validation pairs the last epoch is kept (no selection possible).
            if not np.isfinite(acc) or acc > best[0]:
                best = (acc if np.isfinite(acc) else -1.0, epoch, copy.deepcopy(net.state_dict()))
    net.load_state_dict(best[2])
    net.eval()
    return FitResult(sim, best_epoch=best[1], history=history)


def fine_tune(
    base: NeuralSimulator | LinearRanker,
    source: Sequence[EncodedDomain],
    target: EncodedDomain,
    config: TrainConfig,
    epochs: int = 50,
) -> NeuralSimulator | LinearRanker:
    """Adapt a transferred simulator with a few points of a new domain (no selection: fixed epochs).

    Networks continue training on ``target`` alone at a 10× lower learning rate; the linear ranker
    is refitted on the source pairs plus the target's, the target weighted as much as all sources.
    """
    if isinstance(base, LinearRanker):
        weights = [1.0] * len(source) + [float(max(1, len(source)))]
        return fit_linear([*source, target], [], seed=config.seed, weights=weights)
    tuned = TrainConfig(
        kind=config.kind,
        loss=config.loss,
        epochs=epochs,
        lr=config.lr * 0.1,
        milestones=(),
        clip_norm=config.clip_norm,
        hidden=config.hidden,
        batch_size=config.batch_size,
        seed=config.seed,
        eval_every=epochs,
        threads=config.threads,
    )
    return fit([target], [], tuned, start=base).simulator


def evaluate(sim: LearnedSimulator, data: EncodedDomain) -> RankingMetrics:
    """Ranking metrics of ``sim`` on already-encoded data."""
    return ranking_metrics(sim.outputs(data.graphs), data.times)
