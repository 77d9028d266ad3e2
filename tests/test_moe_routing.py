"""MoE routing and the checks of what a dispatch delivered (app/moe/routing.py): top-k without
replacement, reproducible per seed, slots and counts consistent with the routing, and the
checks catch a wrong count, a wrong byte, a missing token and a combine mismatch."""

from __future__ import annotations

import numpy as np
import pytest

from gicbench.moe import routing as rt

WORLD, TOKENS, TOPK, EXPERTS, WIDTH = 4, 32, 8, 32, 64


def _tokens(seed: int = 0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {s: rng.integers(0, 256, (TOKENS, WIDTH), dtype=np.uint8) for s in range(WORLD)}


@pytest.fixture
def routing() -> np.ndarray:
    return rt.draw_routing(7, WORLD, TOKENS, TOPK, EXPERTS)


def test_routing_is_without_replacement_and_in_range(routing: np.ndarray) -> None:
    assert routing.shape == (WORLD, TOKENS, TOPK) and routing.dtype == np.int32
    assert routing.min() >= 0 and routing.max() < EXPERTS
    for row in routing.reshape(-1, TOPK):
        assert len(set(row.tolist())) == TOPK
    rt.check_routing(routing, EXPERTS)
    # topk == experts: every expert once per token
    full = rt.draw_routing(1, 2, 5, 6, 6)
    assert (np.sort(full, axis=-1) == np.arange(6)).all()


def test_routing_check_refuses_a_repeated_expert(routing: np.ndarray) -> None:
    bad = routing.copy()
    bad[1, 3, 1] = bad[1, 3, 0]
    with pytest.raises(rt.DispatchCheckError, match="source 1 token 3 picks an expert twice"):
        rt.check_routing(bad, EXPERTS)


def test_routing_is_reproducible_per_seed_and_differs_across_seeds() -> None:
    a = rt.draw_routing(7, WORLD, TOKENS, TOPK, EXPERTS)
    b = rt.draw_routing(7, WORLD, TOKENS, TOPK, EXPERTS)
    c = rt.draw_routing(8, WORLD, TOKENS, TOPK, EXPERTS)
    assert np.array_equal(a, b) and rt.routing_digest(a) == rt.routing_digest(b)
    assert not np.array_equal(a, c) and rt.routing_digest(a) != rt.routing_digest(c)
    assert len(rt.routing_digest(a)) == 64


def test_routing_is_roughly_uniform_over_experts() -> None:
    r = rt.draw_routing(3, 8, 256, 8, 128)
    per_expert = np.bincount(r.ravel(), minlength=128)
    mean = r.size / 128
    assert per_expert.min() > 0.6 * mean and per_expert.max() < 1.4 * mean


def test_counts_and_slots_agree_with_the_routing(routing: np.ndarray) -> None:
    counts = rt.counts_of(routing, EXPERTS)
    slots = rt.slots_of(routing, EXPERTS)
    assert counts.shape == (WORLD, EXPERTS) and counts.dtype == np.int32
    assert (counts.sum(axis=1) == TOKENS * TOPK).all()
    for s in range(WORLD):
        for e in range(EXPERTS):
            sent = rt.tokens_to(routing, s, e)
            assert sent.size == counts[s, e]
            assert list(sent) == sorted(sent)  # slot order is token order
            for i, t in enumerate(sent):
                j = int(np.flatnonzero(routing[s, t] == e)[0])
                assert slots[s, t, j] == i
    # every slot of an expert is used once, 0..count-1
    for s in range(WORLD):
        for e in range(EXPERTS):
            used = sorted(slots[s][routing[s] == e].tolist())
            assert used == list(range(counts[s, e]))


def test_expected_received_and_expert_major_rows(routing: np.ndarray) -> None:
    counts = rt.counts_of(routing, EXPERTS)
    el = EXPERTS // WORLD
    for rank in range(WORLD):
        recv = rt.expected_received(counts, rank, WORLD)
        assert recv.shape == (el, WORLD)
        assert (recv == counts[:, rank * el : (rank + 1) * el].T).all()
        first = rt.expert_major_rows(counts, rank, WORLD)
        assert first[0, 0] == 0
        flat = recv.ravel()
        assert (np.diff(first.ravel()) == flat[:-1]).all()
    with pytest.raises(ValueError, match="evenly"):
        rt.local_experts(30, 4)


def test_the_signal_rule_round_trips() -> None:
    for count in (0, 1, 255):
        assert rt.count_from_signal(rt.signal_value(count)) == count
    with pytest.raises(ValueError):
        rt.count_from_signal(0)


def test_a_correct_dispatch_passes_every_check(routing: np.ndarray) -> None:
    tokens = _tokens()
    counts = rt.counts_of(routing, EXPERTS)
    for rank in range(WORLD):
        em = rt.expected_expert_major(routing, rank, WORLD, EXPERTS, tokens)
        rt.check_counts(rt.expected_received(counts, rank, WORLD), counts, rank, WORLD)
        assert rt.check_expert_major(em, routing, rank, WORLD, EXPERTS, tokens) == em.size
        # a buffer longer than the tokens (T_max slots) passes too
        padded = np.concatenate([em.ravel(), np.zeros(4 * WIDTH, np.uint8)])
        rt.check_expert_major(padded, routing, rank, WORLD, EXPERTS, tokens)
        assert rt.combine_check(em, routing, rank, WORLD, EXPERTS, tokens) == 0.0


def test_a_wrong_count_is_named(routing: np.ndarray) -> None:
    counts = rt.counts_of(routing, EXPERTS)
    got = rt.expected_received(counts, 2, WORLD).copy()
    got[3, 1] += 1
    with pytest.raises(rt.DispatchCheckError, match=r"local expert 3 \(expert 19\).*from rank 1"):
        rt.check_counts(got, counts, 2, WORLD)
    with pytest.raises(rt.DispatchCheckError, match="shape"):
        rt.check_counts(got[:, :2], counts, 2, WORLD)


def test_a_wrong_byte_is_named(routing: np.ndarray) -> None:
    tokens = _tokens()
    em = rt.expected_expert_major(routing, 1, WORLD, EXPERTS, tokens).copy()
    em[5, 17] ^= 0x01
    with pytest.raises(rt.DispatchCheckError, match=r"row 5.*first at byte 17"):
        rt.check_expert_major(em, routing, 1, WORLD, EXPERTS, tokens)
    with pytest.raises(rt.DispatchCheckError, match="combine check"):
        rt.combine_check(em, routing, 1, WORLD, EXPERTS, tokens)


def test_a_missing_token_is_named(routing: np.ndarray) -> None:
    tokens = _tokens()
    rank = 0
    em = rt.expected_expert_major(routing, rank, WORLD, EXPERTS, tokens).copy()
    counts = rt.counts_of(routing, EXPERTS)
    first = rt.expert_major_rows(counts, rank, WORLD)
    # the first (local expert, source) block with two tokens: its first slot never arrived
    e, s = next((e, s) for e, s in np.argwhere(rt.expected_received(counts, rank, WORLD) >= 2))
    row = int(first[e, s])
    lost = int(rt.tokens_to(routing, int(s), int(e))[0])
    em[row] = 0
    with pytest.raises(rt.DispatchCheckError, match=rf"tokens missing from that block: \[{lost}\]"):
        rt.check_expert_major(em, routing, rank, WORLD, EXPERTS, tokens)
    # a slot holding the block's next token (the sender's slot off by one) is named as such
    em[row] = em[row + 1]
    nxt = int(rt.tokens_to(routing, int(s), int(e))[1])
    with pytest.raises(rt.DispatchCheckError, match=rf"holds token {nxt} of that source instead"):
        rt.check_expert_major(em, routing, rank, WORLD, EXPERTS, tokens)


def test_a_short_buffer_is_refused(routing: np.ndarray) -> None:
    tokens = _tokens()
    em = rt.expected_expert_major(routing, 3, WORLD, EXPERTS, tokens)
    with pytest.raises(rt.DispatchCheckError, match="expert-major buffer of"):
        rt.check_expert_major(em[:-1], routing, 3, WORLD, EXPERTS, tokens)


def test_combine_check_reads_bf16_values_with_nan_and_inf() -> None:
    # one source, one rank, a token of +Inf, NaN, 1.5 and the largest BF16 (sums overflow
    # identically): copies equal to the token pass; a changed value fails
    r = np.array([[[0, 1]]], dtype=np.int32)  # [world=1, T=1, topk=2]
    vals = np.array([0x7F80, 0x7FC1, 0x3FC0, 0x7F7F], dtype="<u2")
    tok = {0: vals.view(np.uint8).reshape(1, 8)}
    em = np.concatenate([tok[0], tok[0]])
    assert rt.combine_check(em, r, 0, 1, 2, tok) == 0.0
    bad = em.copy()
    bad[1, 4:6] = np.array([0x3F80], dtype="<u2").view(np.uint8)  # 1.0 instead of 1.5
    with pytest.raises(rt.DispatchCheckError, match="element 2 over its 2 copies"):
        rt.combine_check(bad, r, 0, 1, 2, tok)
    bad = em.copy()
    bad[0, 0:2] = np.array([0xFF80], dtype="<u2").view(np.uint8)  # -Inf: Inf + -Inf is NaN
    with pytest.raises(rt.DispatchCheckError, match="element 0"):
        rt.combine_check(bad, r, 0, 1, 2, tok)


def test_token_checksums_tell_tokens_apart() -> None:
    t = _tokens()[0]
    sums = rt.token_checksums(t)
    assert sums.dtype == np.uint64 and len(set(sums.tolist())) == TOKENS
    swapped = t.copy()
    swapped[0, [0, 8]] = swapped[0, [8, 0]]  # same bytes, other positions
    if swapped[0, 0] != swapped[0, 8]:
        assert rt.token_checksums(swapped)[0] != sums[0]
    odd = np.ones((2, 6), np.uint8)  # widths that are not whole words are padded
    assert rt.token_checksums(odd)[0] == rt.token_checksums(odd)[1]
