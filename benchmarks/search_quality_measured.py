"""Search quality on measured runtimes: best measured time after 5, 10, 20 trials (issue 16 item 4).

Replay: a searcher may only "measure" strategies whose runtime is in the dataset. Each domain's
pool is its distinct measured strategies (``simulator.learned.runtimes``; repeated trials merged by
their median); no testbed runs. Searchers, each for ``--seeds`` seeds:

(a) learned   the AutoSync loop with transfer: a round samples a fraction (``--sample``, default
              half) of the not yet measured strategies of the pool (seeded; the stand-in for "sample
              M under the constraints", whose fresh draws have no measured runtime; 1 = the round
              scores every unmeasured strategy, the analogue of M = 10,000 draws from a
              204-strategy space, so that the figure measures the scorer's ranking alone), scores
              them, keeps the round's qualified fraction and picks K by Eq. 11
              (``search.round.DEFAULTS``: alpha, qualified_fraction, factor similarity;
              ``search.round.qualify_and_select``, the round's own qualify + Eq. 11 step). Scorer: the hybrid (``simulator.learned.scoring``)
              of the model ``simulator.learned.tuning.fine_tune`` picks after each round: in round
              0 the transfer ensemble pretrained leave-one-domain-out (every set of the domain
              under test, from any dataset, is excluded) when the LODO rule says learned, else Eq.
              1-3; with 2 to ``ResidualConfig.min_line`` - 1 measured strategies (every later
              round here: 5, 10, 15) the blend of that ensemble fine-tuned on them and the
              residual model on log Eq. 1-3 (``simulator.learned.blend``); from ``min_line`` on
              (the in-domain figure), whichever of the residual model on its two bases (log Eq.
              1-3, or the domain's linear price list of its sync terms, + a learned residual), the
              fine-tuned transfer ensemble and Eq. 1-3 ranks the domain's measured strategies best
              out of fold.
(b) analytical the same loop scored by Eq. 1-3 (default constants) alone.
(o) oracle    the same loop scored by the measured times themselves (a perfect ranker): the floor
              the replay's sampling leaves, since a round can only pick what it sampled.
(c) random    the pool in a seeded random order (the pool was drawn by the collector's sampler:
              'constrained' = under c_lb, c_am and memory; 'random' = uniform: printed per domain).
(d) tpe       Optuna TPE (``search.searchers.tpe.TPESearcher``); each suggestion is snapped to the
              most similar not yet measured pool strategy (factor similarity) and TPE is told that
              strategy's measured time for its suggestion.

K = 5 per round, 4 rounds; seeds ``--first-seed`` .. ``--first-seed`` + ``--seeds`` - 1. Printed
per domain: mean over seeds of the best measured seconds after 5, 10, 20 trials and its excess over
the domain's best measured strategy (and, at 20, per seed with the learned - analytical difference
and its 95 % bootstrap interval over seeds); the LODO pairwise accuracy
of the pretrained ensemble and of the analytical model on all of the domain's strategies; how
often the learned loop's rounds used a learned scorer; the fine-tuned in-domain accuracy on
held-out strategies (``simulator.learned.tuning.held_out``) next to Eq. 1-3's, the domain's noise
ceiling from its retest (``simulator.learned.noise.from_retest``) and both accuracies on the pairs
the noise resolves.

Repeat runs (``--repeat DATASET=DIR``, default ``runtimes-v2=datasets/repeat-v2``): where a domain
was measured again in full by the same collect command, its labels are both runs merged
(``simulator.learned.runtimes.merge_runs``: the repeat divided by its drift, geometric mean), the
replay and every accuracy use the merged times, and the noise ceiling comes from the collection
against its repeat (every strategy it measured again, not the retest's 30) with labels averaging
the runs each strategy has (a partial repeat: two for some, one for the rest).
``--repeat`` with no value judges against the single collection, as before.

    nice -n 10 python benchmarks/search_quality_measured.py [--seeds 5] [--first-seed 0] [--sample 0.5]
        [--trace] [--datasets DIR ...] [--only LABEL ...] [--retest DATASET=RETEST_DIR ...]
        [--repeat DATASET=REPEAT_DIR ...] [--split-seeds FIRST] [--alpha A]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna

from search.round import DEFAULTS, RoundDefaults, qualify_and_select
from search.searchers.tpe import TPESearcher
from search.similarity import FactorSimilarity
from simulator import zoo
from simulator.learned.data import Domain
from simulator.learned.noise import NoiseCeiling, from_retest
from simulator.learned.runtimes import MergedRuns, domain_folders, load_dataset, load_domain
from simulator.learned.scoring import HybridScorer
from simulator.learned.transfer import (
    DomainZ,
    EnsembleTrainer,
    TransferConfig,
    accuracy,
    analytical_accuracy,
    choose_from_lodo,
    domain_z,
    lodo_metrics,
)
from simulator.learned.tuning import HeldOut, fine_tune, held_out

K = 5
ROUNDS = 4
#: Split seeds of the fine-tuned figure (``--split-seeds FIRST``: FIRST .. FIRST + 4): 0-4 were
#: looked at while choosing the residual model (``simulator.learned.residual``), so the figure is
#: reported on seeds it did not see; 5-9 have been reported since 2026-11-29 (and 10-14, 15-19, 20-24
#: with --split-seeds: results -29k, -29l, -29r, -29s, -29u; 25-29 in design runs; 30-54 judged Eq. 2's
#: local step, result -29z; 55-59 in -29za). Search seeds looked at: 0-889 (fresh figures from 890).
SPLIT_SEEDS = tuple(range(5, 10))
#: Resolved-pair gap where a domain has no retest: the repeatability benchmark's 5 %.
DEFAULT_GAP = 0.05
CHECKPOINTS = (5, 10, 20)
SEARCHERS = ("learned", "analytical", "oracle", "random", "tpe")


@dataclass(frozen=True)
class MeasuredSet:
    """One domain of one dataset: the pool, its features and how its strategies were drawn."""

    label: str  # "<dataset folder>/<domain>"
    dataset: str
    domain: Domain
    z: DomainZ
    sampler: str
    merged: MergedRuns | None = None  # the collection and its repeat run merged into ``domain``


def load_sets(roots: Sequence[Path], repeats: dict[str, Path] | None = None) -> list[MeasuredSet]:
    """Every domain of every dataset folder; a domain with a repeat run (``repeats``: dataset
    folder name -> repeat root) is the two runs merged (``runtimes.load_dataset``)."""
    out = []
    repeats = repeats or {}
    for root in roots:
        for d in load_dataset(root, repeats.get(root.name)):
            samplers = sorted({f.name.split("-seed")[0] for f in d.folder.files})
            label = f"{root.name}/{d.domain.name}"
            z = domain_z(d.domain, label)
            out.append(MeasuredSet(label, root.name, d.domain, z, "+".join(samplers), d.merged))
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
    fraction: float = 0.5,
    trace: list[str] | None = None,
    oracle: bool = False,
    defaults: RoundDefaults = DEFAULTS,
) -> tuple[list[float], int]:
    """The round loop on the pool; returns measured times in trial order and rounds scored learned.
    Scored by ``trainer``'s fine-tuned model, by Eq. 1-3 (``trainer`` None) or, with ``oracle``, by
    the measured times.

    ``trace``, when given, gets one entry per round about the domain's best measured strategy:
    ``out`` (not in the round's sample), ``in rank R picked|missed`` (R = how many sampled
    strategies the round's scorer put before it), or ``measured`` (picked in an earlier round). It
    tells a sampling miss from a ranking miss.
    """
    z, times, analytical = target.z.z, target.z.times, target.z.analytical
    rng = np.random.default_rng([seed, 16])
    measured: list[int] = []
    learned_rounds = 0
    best = int(np.argmin(times))
    for _ in range(ROUNDS):
        left = np.setdiff1d(np.arange(len(times)), measured)
        if len(left) == 0:
            break
        sample = rng.choice(left, max(min(K, len(left)), math.ceil(len(left) * fraction)), replace=False)
        seconds = times[sample] if oracle else analytical[sample]
        if trainer is not None:
            tz = target.z.subset(measured) if len(measured) >= 2 else None
            ranker, _ = fine_tune(trainer, tz, prior)
            if ranker is not None:
                learned_rounds += 1
                members = ranker.member_scores(z[sample], target.z.sync_terms[sample])
                seconds, _, _ = HybridScorer(ranker).blend(members, seconds)
        rows = embedded[sample]
        qualified, choice = qualify_and_select(
            seconds, min(K, len(sample)), rows.__getitem__, similarity, defaults
        )
        picked = [int(sample[qualified[i]]) for i in choice.indices]
        if trace is not None:
            at = np.flatnonzero(sample == best)
            rank = int((seconds < seconds[at[0]]).sum()) if len(at) else -1
            if best in measured:
                trace.append("measured")
            else:
                trace.append(
                    "out" if rank < 0 else f"in rank {rank} {'picked' if best in picked else 'missed'}"
                )
        measured += picked
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


def fine_tuned(
    target: MeasuredSet, trainer: EnsembleTrainer, gap: float, split_seeds: Sequence[int] = SPLIT_SEEDS
) -> list[HeldOut]:
    """Per split seed: fine-tune on the 70 % train split (the model chosen by cross-validation on
    it alone) and judge on the other 30 % next to Eq. 1-3."""
    return [held_out(trainer, target.z, *target.domain.held_out_positions(seed), gap) for seed in split_seeds]


def retest_ceiling(target: MeasuredSet, retest: dict[str, Path]) -> NoiseCeiling | None:
    """The domain's noise ceiling: from its repeat run where it has one (labels of two runs),
    else from its retest folder, if it has one."""
    if target.merged is not None:
        first, repeat = target.merged.inputs
        return from_retest(first, repeat, target.domain.times, target.merged.runs)
    root = retest.get(target.dataset)
    folder = next((f for f in domain_folders(root) if f.name == target.domain.name), None) if root else None
    return from_retest(target.domain, load_domain(folder)[0]) if folder is not None else None


LODO_HEADER = """\
Pairwise ranking accuracy. LODO: the pretrained ensemble without the domain, on all its strategies,
next to Eq. 1-3 on the same strategies; rule: the fallback rule's LODO verdict from the other
domains (their mean LODO accuracy, learned / analytical)."""
TUNED_HEADER = """\
Fine-tuned in-domain (simulator.learned.tuning.held_out): the LODO trainer and the domain's train
split (70 %, seeded hash split) -> residual on the price line of the sync terms / residual on
Eq. 1-3 / fine-tuned transfer / Eq. 1-3, chosen by 4-fold CV on the train split only; judged on
the other 30 % next to Eq. 1-3. Mean [min, max] over split seeds {first}-{last} (seeds 0-4 were seen
while designing the model). picks: p = physical (residual on the price line), r = residual on
Eq. 1-3, t = transfer, a = Eq. 1-3.
Noise ceiling (simulator.learned.noise): retest = pairwise agreement of the collection with its
retest (matched strategies; where the domain has a repeat run, with the repeat: every strategy it
measured again, and the ceiling is against labels merged from the runs each strategy has);
ceiling = a perfect ranker's expected
agreement with the labels:
estimate from the retest's log ratios as pair noise (scaled x s so it reproduces the retest
agreement), and its bounds for one-measurement labels [r, (1 + sqrt(2r - 1)) / 2]. Resolved: pairs whose measured times
differ by more than the gap (the 90th percentile of the retest's |centred log ratio|; 5 % without a
retest), share of held-out pairs; tuned>gap / Eq>gap: accuracy on those pairs; ceil>gap: the
ceiling estimate on the domain's resolved pairs."""


def _mean_range(values: Sequence[float]) -> str:
    v = np.array(values, dtype=np.float64)
    return f"{np.nanmean(v):.3f} [{np.nanmin(v):.3f}, {np.nanmax(v):.3f}]"


def seed_spread(results: dict[str, list[list[float]]], best: float) -> str:
    """The learned loop's excess at the last checkpoint per seed, its mean, and its paired
    difference to the analytical loop (same seeds): means with 95 % bootstrap intervals over seeds
    (2,000 resamples; one domain's misses cost the same large step each, so its mean is coarse)."""
    learned = np.array([r[-1] for r in results["learned"]]) / best - 1.0
    analytical = np.array([r[-1] for r in results["analytical"]]) / best - 1.0
    diff = learned - analytical
    idx = np.random.default_rng(0).integers(0, len(diff), (2000, len(diff)))
    lo, hi = np.percentile(diff[idx].mean(axis=1), [2.5, 97.5])
    own_lo, own_hi = np.percentile(learned[idx].mean(axis=1), [2.5, 97.5])
    per_seed = " ".join(f"{100 * e:+.1f}" for e in learned)
    return (
        f"learned per seed (%): {per_seed}; learned {100 * learned.mean():+.2f} % "
        f"[{100 * own_lo:+.2f}, {100 * own_hi:+.2f}]; learned - analytical {100 * diff.mean():+.1f} % "
        f"[{100 * lo:+.1f}, {100 * hi:+.1f}]"
    )


def run(
    sets: list[MeasuredSet],
    targets: list[MeasuredSet],
    seeds: Sequence[int],
    config: TransferConfig,
    retest: dict[str, Path],
    fraction: float = 0.5,
    traced: bool = False,
    split_seeds: Sequence[int] = SPLIT_SEEDS,
    defaults: RoundDefaults = DEFAULTS,
) -> None:
    """Search every target; every set of another domain pretrains (LODO by domain name)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(
        "Replay on measured runtimes: a searcher only measures strategies in the dataset (no testbed runs)."
    )
    print(
        f"K = {K} per round, {ROUNDS} rounds; mean over {len(seeds)} seeds ({seeds[0]}-{seeds[-1]}); "
        f"best measured s/iter after n trials."
    )
    print(
        f"A round of the learned / analytical loop scores {fraction:.0%} of the unmeasured pool; "
        f"Eq. 11 alpha {defaults.alpha}."
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
        ceiling = retest_ceiling(target, retest)
        gap = ceiling.gap if ceiling is not None else DEFAULT_GAP
        tuned = fine_tuned(target, trainer or EnsembleTrainer([], config), gap, split_seeds)
        lodo_rows.append(
            (
                target.label,
                len(d),
                pre_acc,
                analytical_accuracy(target.z),
                choose_from_lodo(prior),
                tuned,
                ceiling,
                gap,
            )
        )
        results: dict[str, list[list[float]]] = {s: [] for s in SEARCHERS}
        learned_rounds = 0
        for seed in seeds:
            rounds: list[str] | None = [] if traced else None
            times, lr = loop(
                target, embedded, similarity, seed, trainer, prior, fraction, rounds, defaults=defaults
            )
            if rounds is not None:
                print(
                    f"{target.label:30s} {'trace':11s} seed {seed}: best measured strategy by round: {' | '.join(rounds)}"
                )
            results["learned"].append(best_after(times))
            learned_rounds += lr
            analytical = loop(target, embedded, similarity, seed, None, {}, fraction, defaults=defaults)[0]
            results["analytical"].append(best_after(analytical))
            oracle = loop(
                target, embedded, similarity, seed, None, {}, fraction, oracle=True, defaults=defaults
            )[0]
            results["oracle"].append(best_after(oracle))
            order = np.random.default_rng([seed, 3]).permutation(len(d))
            results["random"].append(best_after([float(d.times[i]) for i in order]))
            results["tpe"].append(best_after(tpe(target, embedded, similarity, seed)))
        print(header)
        for name in SEARCHERS:
            mean = np.mean(np.array(results[name]), axis=0)
            cells = " ".join(f"{m:8.4f} ({100 * (m / best - 1):+5.1f}%)" for m in mean)
            print(f"{target.label:30s} {name:11s} {cells}")
        print(f"{target.label:30s} {'@20 spread':11s} {seed_spread(results, best)}")
        print(
            f"{target.label:30s} {'best':11s} {best:8.4f}   of {len(d)} measured strategies "
            f"(pool drawn by: {target.sampler}); learned scorer in {learned_rounds}/{len(seeds) * ROUNDS} "
            f"rounds; {time.time() - t0:.0f} s"
        )
        if target.merged is not None:
            print(
                f"{target.label:30s} {'labels':11s} collection + repeat run merged "
                f"({len(target.merged.inputs[1])} strategies measured again; the repeat's drift "
                f"{100 * math.expm1(target.merged.drift[1]):+.1f} %)"
            )
        print()
    print(LODO_HEADER)
    print(f"{'dataset/domain':30s} {'n':>4s} {'LODO':>6s} {'Eq.1-3':>6s}  {'rule':32s}")
    for label, n, acc, ana, rule, *_ in lodo_rows:
        verdict = f"{rule.choice} ({rule.learned_accuracy:.3f} / {rule.analytical_accuracy:.3f})"
        print(f"{label:30s} {n:4d} {acc:6.3f} {ana:6.3f}  {verdict:32s}")
    print()
    print(TUNED_HEADER.format(first=split_seeds[0], last=split_seeds[-1]))
    print(
        f"{'dataset/domain':30s} {'held n':>6s} {'tuned':>21s} {'Eq.1-3':>21s} {'picks':>5s} "
        f"{'retest':>6s} {'ceiling [bounds]':>22s} {'s':>4s} {'gap':>5s} {'share':>5s} "
        f"{'tuned>gap':>9s} {'Eq>gap':>6s} {'ceil>gap':>8s}"
    )
    for label, _, _, _, _, tuned, ceiling, gap in lodo_rows:
        picks = "".join(t.choice[0] for t in tuned)
        held = f"{min(t.held for t in tuned)}-{max(t.held for t in tuned)}"
        if ceiling is not None:
            noise = (
                f"{ceiling.retest_agreement:6.3f} {ceiling.estimate:6.3f} [{ceiling.lower:.3f}, {ceiling.upper:.3f}]"
                f" {ceiling.scale:4.2f}"
            )
        else:
            noise = f"{'n/a':>6s} {'n/a (no retest)':>22s} {'':4s}"
        print(
            f"{label:30s} {held:>6s} {_mean_range([t.tuned for t in tuned]):>21s} "
            f"{_mean_range([t.analytical for t in tuned]):>21s} {picks:>5s} {noise} {100 * gap:4.1f}% "
            f"{np.mean([t.resolved_share for t in tuned]):5.2f} "
            f"{np.nanmean([t.tuned_resolved for t in tuned]):9.3f} "
            f"{np.nanmean([t.analytical_resolved for t in tuned]):6.3f} "
            f"{ceiling.resolved_estimate if ceiling is not None else float('nan'):8.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument(
        "--split-seeds",
        type=int,
        default=SPLIT_SEEDS[0],
        metavar="FIRST",
        help="split seeds of the fine-tuned figure: FIRST .. FIRST + 4",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=DEFAULTS.alpha,
        help="Eq. 11's alpha of the loops' rounds (default: search.round.DEFAULTS, the service's)",
    )
    parser.add_argument(
        "--sample",
        type=float,
        default=0.5,
        help="fraction of the unmeasured pool a round samples and scores (0 < f <= 1)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="per seed, where the domain's best strategy was in the learned loop's rounds",
    )
    parser.add_argument(
        "--datasets",
        type=Path,
        nargs="+",
        default=[zoo.datasets_dir() / "runtimes", zoo.datasets_dir() / "runtimes-v2"],
        help="dataset folders; every domain of each is a target, the others' sets pretrain",
    )
    parser.add_argument("--only", nargs="*", default=None, help="targets by label (dataset/domain)")
    parser.add_argument(
        "--repeat",
        nargs="*",
        default=[f"runtimes-v2={zoo.datasets_dir() / 'repeat-v2'}"],
        help="DATASET=REPEAT_DIR: a second full run of a dataset folder's domains, merged into their labels",
    )
    parser.add_argument(
        "--retest",
        nargs="*",
        default=[f"runtimes-v2={zoo.datasets_dir() / 'retest-v2'}"],
        help="DATASET=RETEST_DIR: the retest collection of a dataset folder's domains (noise ceiling)",
    )
    args = parser.parse_args()
    if not 0 < args.sample <= 1:
        parser.error(f"--sample: must be in (0, 1], got {args.sample}")
    if args.seeds < 1:
        parser.error(f"--seeds: must be >= 1, got {args.seeds}")
    retest: dict[str, Path] = {}
    repeat: dict[str, Path] = {}
    for flag, items, into in (("--retest", args.retest, retest), ("--repeat", args.repeat, repeat)):
        for item in items:
            name, _, folder = item.partition("=")
            if not folder:
                parser.error(f"{flag}: expected DATASET=DIR, got {item!r}")
            into[name] = Path(folder)
    sets = load_sets(args.datasets, repeat)
    targets = [s for s in sets if args.only is None or s.label in args.only]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    split_seeds = tuple(range(args.split_seeds, args.split_seeds + len(SPLIT_SEEDS)))
    try:
        defaults = dataclasses.replace(DEFAULTS, alpha=args.alpha)
    except ValueError as e:
        parser.error(f"--alpha: {e}")
    run(sets, targets, seeds, TransferConfig(), retest, args.sample, args.trace, split_seeds, defaults)


if __name__ == "__main__":
    main()
