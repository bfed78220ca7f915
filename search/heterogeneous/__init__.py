"""Layer scheduling over heterogeneous resource types with money (HeterPS Sections 4-5).

Public API:
    provision(cost_model, stages) -> Provisioning      least-money units per stage (Section 5.1)
    Scheduler.schedule(cost_model) -> ScheduleResult   (plan, provisioning, money, throughput, seconds)
    RLScheduler (LSTM + REINFORCE), BruteForceScheduler, ExactScheduler (DP over layers),
    OptunaScheduler("gp" | "tpe" | "nsga2"), GreedyScheduler, SingleTypeScheduler("cpu" | "gpu"),
    AIBoxScheduler
"""

from search.heterogeneous.aibox import AIBoxScheduler
from search.heterogeneous.base import Objective, Scheduler, ScheduleResult
from search.heterogeneous.brute_force import BruteForceScheduler
from search.heterogeneous.exact import ExactScheduler
from search.heterogeneous.greedy import GreedyScheduler
from search.heterogeneous.optuna_sampler import OptunaScheduler
from search.heterogeneous.provisioning import Provisioning, max_throughput, provision, units_needed
from search.heterogeneous.rl import RLConfig, RLScheduler
from search.heterogeneous.single_type import SingleTypeScheduler

__all__ = [
    "AIBoxScheduler",
    "BruteForceScheduler",
    "ExactScheduler",
    "GreedyScheduler",
    "Objective",
    "OptunaScheduler",
    "Provisioning",
    "RLConfig",
    "RLScheduler",
    "ScheduleResult",
    "Scheduler",
    "SingleTypeScheduler",
    "max_throughput",
    "provision",
    "units_needed",
]
