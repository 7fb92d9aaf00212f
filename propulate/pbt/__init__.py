"""Population-based training (Jaderberg et al. 2017): members that inherit weights and hyperparameters.

:class:`PopulationBasedTraining` is the propagator that runs it (:mod:`propulate.pbt.propagator`);
:mod:`~propulate.pbt.exploit` and :mod:`~propulate.pbt.explore` hold its two operators,
:mod:`~propulate.pbt.states` the transfer of committed states between members, and
:mod:`~propulate.pbt.lineage` what each member did and the schedule of the best one, which
:func:`~propulate.pbt.replay.replay` trains again from scratch. :class:`PB2` (:mod:`propulate.pbt.pb2`)
explores with a Gaussian-process bandit instead of random perturbations. See :doc:`/pbt`.
"""

from .explore import explore
from .lineage import Segment, ancestry, histories, schedule
from .pb2 import PB2
from .propagator import PopulationBasedTraining
from .replay import replay
from .states import MemberStates, StateUnavailableError

__all__ = [
    "PB2",
    "MemberStates",
    "PopulationBasedTraining",
    "Segment",
    "StateUnavailableError",
    "ancestry",
    "explore",
    "histories",
    "replay",
    "schedule",
]
