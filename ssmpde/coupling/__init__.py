"""Solvers and trained surrogates as interchangeable time-steppers (the Stepper protocol of
:mod:`ssmpde.solvers.base`), and hybrid rollouts that mix them."""

from .hybrid import Checks, HybridResult, hybrid_rollout, parse_schedule, rollout
from .stepper import SurrogateStepper

__all__ = ["Checks", "HybridResult", "SurrogateStepper", "hybrid_rollout", "parse_schedule",
           "rollout"]
