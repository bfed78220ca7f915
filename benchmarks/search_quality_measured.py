"""Search quality on measured runtimes: best measured time after 5, 10, 20 trials (issue 16 item 4).

Replay: a searcher may only "measure" strategies whose runtime is in the dataset. Each domain's
pool is its distinct measured strategies (``simulator.learned.runtimes``; repeated trials merged by
their median); no testbed runs. Searchers, each for ``--seeds`` seeds:

(a) learned   the AutoSync loop with transfer: a round samples half of the not yet measured
              strategies of the pool (seeded; the stand-in for "sample M under the constraints",
              whose fresh draws have no measured runtime), scores them, keeps the round's
              qualified fraction and picks K by Eq. 11 (``search.round.DEFAULTS``: alpha,
              qualified_fraction, factor similarity; ``search.round.qualify_and_select``, the
              round's own qualify + Eq. 11 step). Scorer: the hybrid (``simulator.learned.scoring``) of the
              transfer ensemble pretrained leave-one-domain-out (every set of the domain under
              test, from any dataset, is excluded) and fine-tuned on the domain's trials after
              each round, when the fallback rule (``transfer.choose``) says learned; else Eq. 1-3.
(b) analytical the same loop scored by Eq. 1-3 (default constants) alone.
(c) random    the pool in a seeded random order (the pool was drawn by the collector's sampler:
              'constrained' = under c_lb, c_am and memory; 'random' = uniform: printed per domain).
(d) tpe       Optuna TPE (``search.searchers.tpe.TPESearcher``); each suggestion is snapped to the
              most similar not yet measured pool strategy (factor similarity) and TPE is told that
              strategy's measured time for its suggestion.

K = 5 per round, 4 rounds. Printed per domain: mean over seeds of the best measured seconds after
5, 10, 20 trials and its excess over the domain's best measured strategy; the LODO pairwise accuracy
of the pretrained ensemble and of the analytical model on all of the domain's strategies; and how
often the learned loop's rounds used the learned scorer.

    nice -n 10 python benchmarks/search_quality_measured.py [--seeds 5] [--datasets DIR ...]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna

from search.round import DEFAULTS, qualify_and_select
from search.searchers.tpe import TPESearcher
from search.similarity import FactorSimilarity
from simulator import zoo
from simulator.learned.data import Domain
from simulator.learned.runtimes import domain_folders, load_domain
from simulator.learned.scoring import HybridScorer
from simulator.learned.transfer import (
    DomainZ,
    EnsembleTrainer,
    TransferConfig,
    accuracy,
    analytical_accuracy,
    choose,
    choose_from_lodo,
    domain_z,
    lodo_metrics,
)

K = 5
ROUNDS = 4
CHECKPOINTS = (5, 10, 20)
SEARCHERS = ("learned", "analytical", "random", "tpe")


@dataclass(frozen=True)
class MeasuredSet:
    """One domain of one dataset: the pool, its features and how its strategies were drawn."""

    label: str  # "<dataset folder>/<domain>"
    dataset: str
    domain: Domain
    z: DomainZ
    sampler: str


def load_sets(roots: Sequence[Path]) -> list[MeasuredSet]:
    out = []
    for root in roots:
        for folder in domain_folders(root):
            domain, _ = load_domain(folder)
            samplers = sorted({f.name.split("-seed")[0] for f in folder.files})
            label = f"{root.name}/{domain.name}"
            out.append(MeasuredSet(label, root.name, domain, domain_z(domain, label), "+".join(samplers)))
    return out


def best_after(times: Sequence[float]) -> list[float]:
    """Best measured time after each checkpoint (inf when fewer trials were made)."""
    return [min(times[:n]) if len(times) >= n else math.inf for n in CHECKPOINTS]


def loop(
    target: MeasuredSet,
    embedded: np.ndarray,
    similarity: FactorSimilarity,
    seed: int,
    trainer: EnsembleTrainer | None,
    prior: dict[str, dict[str, dict[str, float]]],
) -> tuple[list[float], int]:
    """The round loop on the pool; returns measured times in trial order and rounds scored learned."""
    z, times, analytical = target.z.z, target.z.times, target.z.analytical
    rng = np.random.default_rng([seed, 16])
    measured: list[int] = []
    learned_rounds = 0
    for _ in range(ROUNDS):
        left = np.setdiff1d(np.arange(len(times)), measured)
        if len(left) == 0:
            break
        sample = rng.choice(left, max(min(K, len(left)), math.ceil(len(left) / 2)), replace=False)
        seconds = analytical[sample]
        if trainer is not None:
            tz = target.z.subset(measured) if len(measured) >= 2 else None
            ensemble = trainer.fit(tz)
            if choose(trainer, tz, prior).choice == "learned":
                learned_rounds += 1
                seconds, _, _ = HybridScorer(ensemble).blend(ensemble.member_scores(z[sample]), seconds)
        rows = embedded[sample]
        qualified, choice = qualify_and_select(
            seconds, min(K, len(sample)), rows.__getitem__, similarity, DEFAULTS
        )
        measured += [int(sample[qualified[i]]) for i in choice.indices]
    return [float(times[i]) for i in measured], learned_rounds


def tpe(target: MeasuredSet, embedded: np.ndarray, similarity: FactorSimilarity, seed: int) -> list[float]:
    """TPE's suggestions snapped to the most similar unmeasured pool strategy (module docstring)."""
    d = target.domain
    searcher = TPESearcher(d.model, d.cluster, seed=seed)
    measured: list[int] = []
    while len(measured) < min(CHECKPOINTS[-1], len(d)):
        (suggestion,) = searcher.ask(1)
        sim = similarity.between(similarity.embed([suggestion]), embedded)[0]
        sim[measured] = -1.0
        i = int(np.argmax(sim))
        measured.append(i)
        searcher.tell([suggestion], [float(d.times[i])])
    return [float(d.times[i]) for i in measured]


def fine_tuned(target: MeasuredSet, trainer: EnsembleTrainer) -> tuple[int, float, float]:
    """(held-out strategies, fine-tuned accuracy, Eq. 1-3 accuracy) on the domain's val + test splits."""
    train, val, test = target.domain.split(0)
    keys = {k: i for i, k in enumerate(target.domain.keys)}
    tr = target.z.subset([keys[k] for k in train.keys])
    te = target.z.subset([keys[k] for k in (*val.keys, *test.keys)])  # no selection uses val here
    return len(te), accuracy(trainer.fit(tr), te), analytical_accuracy(te)


def run(sets: list[MeasuredSet], targets: list[MeasuredSet], seeds: int, config: TransferConfig) -> None:
    """Search every target; every set of another domain pretrains (LODO by domain name)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(
        "Replay on measured runtimes: a searcher only measures strategies in the dataset (no testbed runs)."
    )
    print(
        f"K = {K} per round, {ROUNDS} rounds; mean over {seeds} seeds; best measured s/iter after n trials."
    )
    print(f"Transfer ensemble: {config.members} linear rankers; LODO = every set of the domain left out.\n")
    header = f"{'dataset/domain':30s} {'searcher':11s} " + " ".join(
        f"{'best@' + str(n):>15s}" for n in CHECKPOINTS
    )
    lodo_rows = []
    for target in targets:
        d = target.domain
        sources = [s.z for s in sets if s.domain.name != d.name]
        similarity = FactorSimilarity(d.model)
        embedded = similarity.embed(list(d.strategies))
        best = float(d.times.min())
        t0 = time.time()
        trainer = EnsembleTrainer(sources, config) if sources else None
        prior = lodo_metrics(sources, config) if sources else {}
        pre_acc = accuracy(trainer.fit(), target.z) if trainer else float("nan")
        tuned = fine_tuned(target, trainer or EnsembleTrainer([], config))
        lodo_rows.append(
            (target.label, len(d), pre_acc, analytical_accuracy(target.z), choose_from_lodo(prior), tuned)
        )
        results: dict[str, list[list[float]]] = {s: [] for s in SEARCHERS}
        learned_rounds = 0
        for seed in range(seeds):
            times, lr = loop(target, embedded, similarity, seed, trainer, prior)
            results["learned"].append(best_after(times))
            learned_rounds += lr
            results["analytical"].append(best_after(loop(target, embedded, similarity, seed, None, {})[0]))
            order = np.random.default_rng([seed, 3]).permutation(len(d))
            results["random"].append(best_after([float(d.times[i]) for i in order]))
            results["tpe"].append(best_after(tpe(target, embedded, similarity, seed)))
        print(header)
        for name in SEARCHERS:
            mean = np.mean(np.array(results[name]), axis=0)
            cells = " ".join(f"{m:8.4f} ({100 * (m / best - 1):+5.1f}%)" for m in mean)
            print(f"{target.label:30s} {name:11s} {cells}")
        print(
            f"{target.label:30s} {'best':11s} {best:8.4f}   of {len(d)} measured strategies "
            f"(pool drawn by: {target.sampler}); learned scorer in {learned_rounds}/{seeds * ROUNDS} "
            f"rounds; {time.time() - t0:.0f} s\n"
        )
    print(
        "Pairwise ranking accuracy. LODO: the pretrained ensemble without the domain, on all its strategies,"
    )
    print("next to Eq. 1-3 on the same strategies; rule: the fallback rule's LODO verdict from the other")
    print(
        "domains (their mean LODO accuracy, learned / analytical). Fine-tuned: the LODO ensemble fine-tuned"
    )
    print("on the domain's train split (70 %, seeded hash split), judged on the other 30 % next to Eq. 1-3.")
    print(
        f"{'dataset/domain':30s} {'n':>4s} {'LODO':>6s} {'Eq.1-3':>6s}  {'rule':32s} "
        f"{'held n':>6s} {'tuned':>6s} {'Eq.1-3':>6s}"
    )
    for label, n, acc, ana, rule, (nt, tacc, tana) in lodo_rows:
        verdict = f"{rule.choice} ({rule.learned_accuracy:.3f} / {rule.analytical_accuracy:.3f})"
        print(f"{label:30s} {n:4d} {acc:6.3f} {ana:6.3f}  {verdict:32s} {nt:6d} {tacc:6.3f} {tana:6.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--datasets",
        type=Path,
        nargs="+",
        default=[zoo.datasets_dir() / "runtimes", zoo.datasets_dir() / "runtimes-v2"],
        help="dataset folders; every domain of each is a target, the others' sets pretrain",
    )
    parser.add_argument("--only", nargs="*", default=None, help="targets by label (dataset/domain)")
    args = parser.parse_args()
    sets = load_sets(args.datasets)
    targets = [s for s in sets if args.only is None or s.label in args.only]
    run(sets, targets, args.seeds, TransferConfig())


if __name__ == "__main__":
    main()
