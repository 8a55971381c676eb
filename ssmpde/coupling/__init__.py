"""Solvers and trained surrogates as interchangeable time-steppers (the Stepper protocol of
:mod:`ssmpde.solvers.base`), and hybrid rollouts that mix them."""

from .hybrid import (Checks, Conditions, HybridResult, HybridRolloutError, hybrid_rollout,
                     parse_schedule, rollout, to_dataset)
from .stepper import SurrogateStepper
from .warm_start import OperatorSurrogate, warm_start

__all__ = ["Checks", "Conditions", "HybridResult", "HybridRolloutError", "OperatorSurrogate",
           "SurrogateStepper", "hybrid_rollout", "parse_schedule", "rollout", "to_dataset",
           "warm_start"]
