"""Base propagators: the operator interface, composition, conditions, selection and random initialization.

A propagator (evolutionary operator) maps a list of parent individuals to a list of offspring. The loop
calls it once per breeding with the island's active individuals (or only the best few, see
:attr:`Propagator.breeding_pool`) and evaluates the first individual it returns.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..individual import Individual, loss_order
from ..objectives import crowding_distance, loss_vector, pareto_ranks
from ..space import SearchSpace
from ..validation import check_int, check_probability, check_real

if TYPE_CHECKING:  # the evaluation folders sit above the propagators: named for the type checker only
    from ..checkpoint.evaluations import Inheritance

__all__ = [
    "Compose",
    "Conditional",
    "Gaussian",
    "InitUniform",
    "Propagator",
    "SelectMax",
    "SelectMin",
    "SelectParetoBest",
    "SelectParetoWorst",
    "SelectUniform",
    "Stochastic",
]


def as_list(result: Individual | Sequence[Individual]) -> list[Individual]:
    """Normalize a propagator's result (a list, or one individual from user code) to a list."""
    if type(result) is list:
        # The common case, checked first: isinstance() against Individual goes through the ABC machinery.
        return result
    if isinstance(result, Individual):
        return [result]
    return list(result)


class Propagator:
    """Base class of every propagator (evolutionary operator).

    Subclasses implement :meth:`__call__`. Optional hooks, each doing nothing by default:

    - :attr:`breeding_pool`: how many of the best active individuals :meth:`__call__` is given (default: all);
    - :meth:`bind`: called once before the first breeding with the worker's place in its island;
    - :meth:`observe`: called once for every individual that enters the worker's population, whoever
      evaluated it, so that a propagator can learn in O(1) per evaluation (ask/tell);
    - :meth:`reject`: called when the loop discards an offspring that repeats an individual the island
      already knows, before it calls :meth:`__call__` again;
    - :meth:`pending`: called before each breeding with the configurations the island's other workers are
      evaluating now, for propagators that keep their proposals away from them;
    - :meth:`state_dict` / :meth:`load_state_dict`: the state worth checkpointing;
    - :attr:`inheritance`: where its offspring's evaluations start from (another evaluation's committed
      state) and which evaluation folders outlive their evaluation (none by default);
    - :meth:`emigrates`: whether an individual may leave the island as an emigrant (every one by default).

    One breeding is therefore: ``pending`` (if overridden), ``__call__`` (and, for each offspring discarded
    as a duplicate, ``reject`` and ``__call__`` again), then the evaluation, then ``observe`` of the
    evaluated individual.

    Parameters
    ----------
    parents : int
        Number of input individuals used; ``-1`` for any number (all given).
    offspring : int
        Number of individuals returned; ``-1`` for as many as given.
    rng : random.Random, optional
        The random number generator owned by this propagator. A fresh, OS-seeded one if not given; the
        global ``random`` state is never used.

    Raises
    ------
    ValueError
        If ``parents`` or ``offspring`` is not ``-1`` or a non-negative int, or ``offspring`` is 0.
    """

    def __init__(self, parents: int = 0, offspring: int = 0, rng: random.Random | None = None) -> None:
        self.parents = check_int("parents", parents, -1, "-1 (all) or a positive int")
        self.offspring = check_int("offspring", offspring, -1, "-1 (all) or a positive int")
        if offspring == 0:
            raise ValueError("offspring: a propagator has to return at least one individual, got 0")
        self.rng = rng if rng is not None else random.Random()

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        """Breed offspring from ``inds``.

        Parameters
        ----------
        inds : list of Individual
            The parents, best first when the loop passes a breeding pool.

        Returns
        -------
        list of Individual
            The offspring: new objects, never members of the input list, except for selections
            (:class:`SelectMin`, :class:`SelectMax`, :class:`SelectUniform`), which return members.
        """
        raise NotImplementedError

    @property
    def breeding_pool(self) -> int | None:
        """How many of the best active individuals the loop must pass; ``None`` means all of them.

        Bounding it keeps the cost of one breeding independent of how many individuals were evaluated.
        """
        return None

    @property
    def replicated(self) -> bool:
        """Whether the island's workers run copies of one state, proposing the same individuals at once.

        Then two workers often breed the same configuration at the same moment, and each confirms that its
        peers received its announcement before it evaluates, as in a finite search space (see
        :mod:`propulate.breeding`). False by default; :class:`ParallelNelderMead` is replicated.
        """
        return False

    @property
    def repeats(self) -> bool:
        """Whether its offspring may repeat a configuration the island knows, and are evaluated all the same.

        False by default: the loop never spends an evaluation on a known configuration (see
        :mod:`propulate.breeding`). Population-based training (:mod:`propulate.pbt`) continues a member's
        training with the same configuration, so its offspring repeat by design.
        """
        return False

    def bind(self, island_rank: int, island_size: int = 1) -> None:
        """Learn which worker of its island this propagator breeds for.

        Called by the loop before the first breeding (and before :meth:`load_state_dict` on a resume).

        Parameters
        ----------
        island_rank : int >= 0
            The worker's rank in its island (not the MPI world rank). Propagators that keep one particle
            or vertex per worker use it.
        island_size : int >= 1
            The number of workers of the island: how many evaluations run at once. Propagators whose
            generations should grow with the parallelism use it.
        """

    def observe(self, ind: Individual) -> None:
        """Learn of an individual that entered this worker's population.

        Called by the loop once per individual, in the order they arrive: the worker's own evaluations
        right after they end, its island peers' evaluations and immigrants as they are received, and
        after a resume every individual of the restored population, before :meth:`load_state_dict`.
        Failed and pruned evaluations are observed too (see :attr:`Individual.status`), and so are
        individuals that were deactivated (emigrated) before the next breeding.

        Parameters
        ----------
        ind : Individual
            The individual; the propagator must not modify it.
        """

    def reject(self, ind: Individual) -> None:
        """Learn that the loop discarded ``ind``, an offspring of the last call, as a duplicate.

        Its parameters equal those of an individual the island already knows (evaluated, or being
        evaluated by some worker). The loop calls :meth:`__call__` again afterwards, a bounded number of
        times; a propagator whose proposals are deterministic should then propose something else.
        """

    def pending(self, positions: np.ndarray) -> None:
        """Learn which configurations the island's other workers are evaluating now.

        Called by the loop right before each breeding (not again after a :meth:`reject`), only if a
        subclass overrides it. Which evaluations are under way is known from the workers' announcements
        (see :mod:`propulate.breeding`): one that started after this worker last took in messages is not
        among them, and the list holds none whose result this worker already has.

        Parameters
        ----------
        positions : numpy.ndarray
            Shape ``(n_pending, ndim)``: one position of the search space per evaluation under way (every
            parameter on its value, category blocks one-hot); ``n_pending`` is at most the number of the
            island's other workers and may be 0.
        """

    @property
    def uses_pending(self) -> bool:
        """Whether :meth:`pending` does anything: the loop reads the announcements for it otherwise not."""
        return type(self).pending is not Propagator.pending

    @property
    def observes(self) -> bool:
        """Whether :meth:`observe` does anything: the loop skips the call per individual otherwise."""
        return type(self).observe is not Propagator.observe

    @property
    def inheritance(self) -> Inheritance | None:
        """What the run's evaluation folders do for its offspring; ``None`` (the default): nothing.

        A propagator whose offspring continue another evaluation's training (population-based training,
        :mod:`propulate.pbt`) returns the :class:`~propulate.checkpoint.evaluations.Inheritance` that places
        each offspring's starting state in its evaluation folder, keeps the folders later offspring may start
        from, and carries states along with emigrants. The run asks once, when it is built.
        """
        return None

    def emigrates(self, ind: Individual) -> bool:
        """Whether ``ind``, an active individual of the island, may be sent to another island.

        Called by the migration policy for each candidate emigrant, only if a subclass overrides it
        (:attr:`filters_emigrants`). True by default. Population-based training lets only a member's latest
        interval leave: its state is the one that is kept on disk.
        """
        return True

    @property
    def filters_emigrants(self) -> bool:
        """Whether :meth:`emigrates` does anything: the migration policy asks it otherwise not."""
        return type(self).emigrates is not Propagator.emigrates

    def state_dict(self) -> dict[str, Any]:
        """Return the state to checkpoint (none by default)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (nothing by default)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(parents={self.parents}, offspring={self.offspring})"


class Stochastic(Propagator):
    """A propagator applied with a probability; otherwise it passes copies of its parents through.

    Parameters
    ----------
    parents, offspring, rng
        As for :class:`Propagator`.
    probability : float in [0, 1]
        Probability of applying the operator.

    Raises
    ------
    ValueError
        If ``probability`` is outside [0, 1].
    """

    def __init__(
        self, parents: int = 0, offspring: int = 0, probability: float = 1.0, rng: random.Random | None = None
    ) -> None:
        super().__init__(parents, offspring, rng)
        self.probability = check_probability("probability", probability)


class Conditional(Propagator):
    """Apply ``true_prop`` once at least ``pop_size`` individuals are given, else ``false_prop``.

    Parameters
    ----------
    pop_size : int >= 1
        The breeding population size.
    true_prop, false_prop : Propagator
        The propagators for a full and a not yet full population.
    parents, offspring : int
        As for :class:`Propagator`.
    """

    def __init__(
        self,
        pop_size: int,
        true_prop: Propagator,
        false_prop: Propagator,
        parents: int = -1,
        offspring: int = -1,
    ) -> None:
        super().__init__(parents, offspring)
        self.pop_size = check_int("pop_size", pop_size, 1)
        self.true_prop = true_prop
        self.false_prop = false_prop
        self._observers = [p for p in (true_prop, false_prop) if p.observes]

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        chosen = self.true_prop if len(inds) >= self.pop_size else self.false_prop
        return as_list(chosen(inds))

    @property
    def breeding_pool(self) -> int | None:  # noqa: D102
        true_pool = self.true_prop.breeding_pool
        false_pool = self.false_prop.breeding_pool
        if true_pool is None or false_pool is None:
            return None
        return max(self.pop_size, true_pool, false_pool)

    def bind(self, island_rank: int, island_size: int = 1) -> None:  # noqa: D102
        self.true_prop.bind(island_rank, island_size)
        self.false_prop.bind(island_rank, island_size)

    def observe(self, ind: Individual) -> None:  # noqa: D102
        for propagator in self._observers:
            propagator.observe(ind)

    def reject(self, ind: Individual) -> None:  # noqa: D102
        self.true_prop.reject(ind)
        self.false_prop.reject(ind)

    @property
    def observes(self) -> bool:  # noqa: D102
        return bool(self._observers)

    def state_dict(self) -> dict[str, Any]:  # noqa: D102
        return {"true_prop": self.true_prop.state_dict(), "false_prop": self.false_prop.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: D102
        self.true_prop.load_state_dict(state.get("true_prop", {}))
        self.false_prop.load_state_dict(state.get("false_prop", {}))


class Compose(Propagator):
    """Apply propagators one after the other, each to the offspring of the previous one.

    Parameters
    ----------
    propagators : list of Propagator
        The operators in order of application.

    Raises
    ------
    ValueError
        If the list is empty or one operator's offspring count does not match the next one's parents.
    """

    def __init__(self, propagators: Sequence[Propagator]) -> None:
        if len(propagators) == 0:
            raise ValueError("propagators: expected at least one propagator")
        for before, after in itertools.pairwise(propagators):
            if before.offspring != -1 and after.parents not in (-1, before.offspring):
                raise ValueError(
                    f"propagators: {before!r} returns {before.offspring} individual(s) but {after!r} "
                    f"takes {after.parents}"
                )
        super().__init__(propagators[0].parents, propagators[-1].offspring)
        self.propagators = list(propagators)
        self._observers = [p for p in self.propagators if p.observes]

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        for propagator in self.propagators:
            inds = as_list(propagator(inds))
        return inds

    @property
    def breeding_pool(self) -> int | None:  # noqa: D102
        return self.propagators[0].breeding_pool

    def bind(self, island_rank: int, island_size: int = 1) -> None:  # noqa: D102
        for propagator in self.propagators:
            propagator.bind(island_rank, island_size)

    def observe(self, ind: Individual) -> None:  # noqa: D102
        for propagator in self._observers:
            propagator.observe(ind)

    def reject(self, ind: Individual) -> None:  # noqa: D102
        for propagator in self.propagators:
            propagator.reject(ind)

    @property
    def observes(self) -> bool:  # noqa: D102
        return bool(self._observers)

    def state_dict(self) -> dict[str, Any]:  # noqa: D102
        return {str(i): p.state_dict() for i, p in enumerate(self.propagators)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: D102
        for i, p in enumerate(self.propagators):
            p.load_state_dict(state.get(str(i), {}))


class _Select(Propagator):
    def __init__(self, offspring: int, rng: random.Random | None = None) -> None:
        super().__init__(-1, check_int("offspring", offspring, 1), rng)

    def _check_enough(self, inds: list[Individual]) -> None:
        if len(inds) < self.offspring:
            raise ValueError(
                f"{type(self).__name__}: asked to select {self.offspring} of only {len(inds)} individuals"
            )


class SelectMin(_Select):
    """Select the ``offspring`` individuals of lowest loss, best first.

    Raises
    ------
    ValueError
        When called with fewer than ``offspring`` individuals.
    """

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        self._check_enough(inds)
        return sorted(inds, key=loss_order)[: self.offspring]

    @property
    def breeding_pool(self) -> int | None:  # noqa: D102
        return self.offspring


class SelectMax(_Select):
    """Select the ``offspring`` individuals of highest loss, worst first.

    Raises
    ------
    ValueError
        When called with fewer than ``offspring`` individuals.
    """

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        self._check_enough(inds)
        return sorted(inds, key=loss_order, reverse=True)[: self.offspring]


class SelectParetoBest(_Select):
    """Select the ``offspring`` best individuals in NSGA-II's order, for several objectives.

    The order of non-dominated sorting (Pareto rank, lower first) with ties broken by the crowding distance
    within the front (larger first; Deb et al., IEEE TEC 6(2), 2002); individuals with one loss count it
    as their only objective. The default emigrant selection of a run with several ``objectives``.
    O(n log n) for two and three objectives.

    Raises
    ------
    ValueError
        When called with fewer than ``offspring`` individuals.
    """

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        self._check_enough(inds)
        return [inds[i] for i in nsga2_order(inds)[: self.offspring]]


class SelectParetoWorst(_Select):
    """Select the ``offspring`` worst individuals in NSGA-II's order (:class:`SelectParetoBest`), worst first.

    The default choice of the individuals that immigrants replace (pollination) with several ``objectives``.

    Raises
    ------
    ValueError
        When called with fewer than ``offspring`` individuals.
    """

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        self._check_enough(inds)
        return [inds[i] for i in nsga2_order(inds)[::-1][: self.offspring]]


def nsga2_order(inds: Sequence[Individual]) -> np.ndarray:
    """Return the indices of ``inds`` in NSGA-II's order: Pareto rank, then larger crowding distance.

    Ties by position in ``inds``. NaN losses count as ``inf``.
    """
    if not inds:
        return np.zeros(0, dtype=np.int64)
    points = np.array([loss_vector(ind) for ind in inds], dtype=np.float64)
    ranks = pareto_ranks(points)
    if not np.isfinite(points).all():  # NaN counts as inf; the crowding needs finite spans
        points = np.where(np.isfinite(points), points, np.finfo(np.float64).max)
    crowding = crowding_distance(points, ranks)
    # lexsort sorts by its last key first.
    return np.lexsort((np.arange(len(points)), -crowding, ranks))


class SelectUniform(_Select):
    """Select ``offspring`` distinct individuals uniformly at random.

    Raises
    ------
    ValueError
        When called with fewer than ``offspring`` individuals.
    """

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        self._check_enough(inds)
        return self.rng.sample(inds, self.offspring)


class InitUniform(Stochastic):
    """Sample a fresh individual uniformly from the search space.

    With ``parents=0`` it always samples. With ``parents=1`` it samples with ``probability`` and otherwise
    passes a copy of its parent through (used as the "random immigrant" step of the default propagator).

    Parameters
    ----------
    limits : dict or SearchSpace
        The search space.
    parents : int in {0, 1}
        Number of parents.
    probability : float in [0, 1]
        Probability of sampling instead of passing the parent through.
    rng : random.Random, optional
        The generator owned by this propagator.
    """

    def __init__(
        self,
        limits: Mapping[str, Any] | SearchSpace,
        parents: int = 0,
        probability: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        if parents not in (0, 1):
            raise ValueError(f"parents: InitUniform takes 0 or 1 parent, got {parents!r}")
        super().__init__(parents, 1, probability, rng)
        self.space = SearchSpace.of(limits)

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        if self.parents == 0 or len(inds) == 0 or self.rng.random() < self.probability:
            return [Individual(self.space.sample(self.rng), self.space)]
        return [inds[0].child()]

    @property
    def breeding_pool(self) -> int | None:  # noqa: D102
        return 0 if self.parents == 0 else None


class Gaussian(Propagator):
    """Sample a child from an isotropic normal distribution around its parent's position.

    Every slot of the parent's embedding (:attr:`propulate.Individual.position`: one per numeric parameter,
    one per category) gets independent noise of standard deviation ``scale``, in the units of the
    parameters; the child is then clipped into ``limits`` (an integer is rounded, a categorical parameter
    takes its largest slot). As Propulate 1.2.2's ``propulate.propagators.base.Gaussian``, which does not
    clip.

    Parameters
    ----------
    limits : dict or SearchSpace
        The search space.
    scale : float > 0
        Standard deviation of the noise.
    rng : numpy.random.Generator or random.Random, optional
        The generator owned by this propagator (1.2.2 expects a numpy ``Generator``; a ``random.Random``
        works too). Default: a fresh, OS-seeded ``random.Random``.

    Raises
    ------
    ValueError
        If ``scale`` is not a positive finite number.
    """

    def __init__(
        self,
        limits: Mapping[str, Any] | SearchSpace,
        scale: float,
        rng: np.random.Generator | random.Random | None = None,
    ) -> None:
        super().__init__(1, 1, rng if isinstance(rng, random.Random) else None)
        self.space = SearchSpace.of(limits)
        self.scale = check_real("scale", scale, 0.0)
        if self.scale == 0.0:
            raise ValueError("scale: expected a positive standard deviation, got 0")
        self._normal = rng.normal if isinstance(rng, np.random.Generator) else self._normal_from_random

    def _normal_from_random(self, scale: float, size: int) -> np.ndarray:
        return np.array([self.rng.gauss(0.0, scale) for _ in range(size)])

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        child = inds[0].child()
        child.position += self._normal(scale=self.scale, size=child.position.size)
        self.space.clip(child.position)
        return [child]
