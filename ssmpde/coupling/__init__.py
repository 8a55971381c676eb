"""Solvers and trained surrogates as interchangeable time-steppers (the Stepper protocol of
:mod:`ssmpde.solvers.base`), and hybrid rollouts that mix them.

Layers, lowest first: :mod:`~ssmpde.coupling.steps` (inputs, one step, a rollout of one
stepper); :mod:`~ssmpde.coupling.stepper` (a checkpoint as a Stepper);
:mod:`~ssmpde.coupling.indicators`, :mod:`~ssmpde.coupling.parareal` and
:mod:`~ssmpde.coupling.baseline` on top of the steps; :mod:`~ssmpde.coupling.schedules`
(rollout schedules as named objects) and :mod:`~ssmpde.coupling.hybrid` (a rollout by a
schedule) on top of those; :mod:`~ssmpde.coupling.run` (the commands) last.
"""

from ssmpde.solvers.base import Checks

from .hybrid import hybrid_rollout, to_dataset
from .schedules import (HybridResult, HybridRolloutError, Schedule, parse_schedule,
                        register_schedule)
from .stepper import SurrogateStepper
from .steps import Conditions, rollout
from .warm_start import OperatorSurrogate, warm_start

__all__ = ["Checks", "Conditions", "HybridResult", "HybridRolloutError", "OperatorSurrogate",
           "Schedule", "SurrogateStepper", "hybrid_rollout", "parse_schedule",
           "register_schedule", "rollout", "to_dataset", "warm_start"]
