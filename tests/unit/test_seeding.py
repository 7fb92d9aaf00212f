"""A seed that derives each rank's generator: ``propulate.utils.rank_rng`` and ``rng=<int>``."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from propulate import Float, Propulator
from propulate.utils import get_default_propagator, rank_rng


def draws(rng: random.Random, n: int = 8) -> list[float]:
    return [rng.random() for _ in range(n)]


def at_rank(seed: int, rank: int, stream: int = 0) -> list[float]:
    return draws(rank_rng(seed, stream, comm=SimpleNamespace(rank=rank)))


def test_the_same_seed_gives_the_same_streams() -> None:
    assert at_rank(42, 3) == at_rank(42, 3)
    assert at_rank(42, 3, stream=1) == at_rank(42, 3, stream=1)


def test_ranks_streams_and_seeds_never_share_a_stream() -> None:
    """``random.Random(seed + rank)`` gives rank 1 of seed 1 the stream of rank 0 of seed 2; this does not."""
    assert draws(random.Random(1 + 1)) == draws(random.Random(2 + 0))
    streams = {
        tuple(at_rank(seed, rank, stream)) for seed in range(8) for rank in range(8) for stream in range(2)
    }
    assert len(streams) == 8 * 8 * 2


@pytest.mark.parametrize("seed", [-1, 1.5, "1", True, None])
def test_a_bad_seed_is_refused_naming_it(seed: object) -> None:
    with pytest.raises(ValueError, match="seed"):
        rank_rng(seed)  # type: ignore[arg-type]


def test_an_int_rng_seeds_the_propagator_and_the_optimizer_on_separate_streams(tmp_path) -> None:
    limits = {"x": Float(1e-3, 1.0, log=True)}
    propagator = get_default_propagator(4, limits, rng=5)
    propulator = Propulator(lambda p: p["x"], propagator, 5, generations=0, checkpoint_path=tmp_path)
    assert draws(propulator.rng) == at_rank(5, 0, stream=1)
    # The propagator's operators draw from stream 0: the same seed breeds the same first individuals.
    again, other = (get_default_propagator(4, limits, rng=seed) for seed in (5, 6))
    firsts = [[ind["x"] for ind in (p([])[0] for _ in range(4))] for p in (propagator, again, other)]
    assert firsts[0] == firsts[1] != firsts[2]
