"""MoE token routing for the dispatch experiment, and the checks of what a dispatch delivered.

Routing (arXiv 2611.12362, §III-A): every rank holds T tokens; each token picks `topk`
distinct experts uniformly at random (top-k without replacement), drawn once per cell from the
run's seed and reused for every backend, SM cap, wait, iteration and round, so that the
backends of a round are compared on the same traffic. `E` experts are spread evenly over the
`W` ranks: rank r owns experts [r*E/W, (r+1)*E/W) (local expert e of rank r is global expert
r*E/W + e).

Landing (the DeepEP low-latency layout): each receiver has one landing slice per (source,
local expert). Slot i of the slice holds the source's i-th token to that expert, in token order
(`slots`); after `T_max` slots comes one 8-byte count word.

The signal rule, one place for it: after a sender has issued all of its token writes to expert
e on rank d, it adds (count + 1) to the count word of (itself, e) at d, where count is the
number of tokens it sent to e and may be 0, so every (source, expert) pair gets exactly one
signal: E signals per rank per dispatch. The RDMA backends post the add on the QP that carried
that expert's writes (one QP per local expert of the peer), after them, so it lands after
them; the GPI backends queue a SIGNAL descriptor after the WRITE or FANOUT descriptors. The
receiver polls each count word until it is nonzero, reads count = value - 1, copies that many
slots into its expert-major buffer (local expert by local expert, sources in rank order, slots
in order) and zeroes the word for the next iteration.

Checks (run on the host after a point): the counts the receiver read against the routing's, the
expert-major buffer byte for byte against the sources' tokens (a wrong or missing token is
named by its checksum), and a combine-style check: every token's copies summed as BF16 -> FP32,
as a combine kernel would weight and reduce them, against the token times its number of copies.

This module needs numpy only: it sits below the experiment and the submitters that use it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np


class DispatchCheckError(ValueError):
    """What a dispatch delivered differs from the routing (the message says where)."""


# ---- routing ------------------------------------------------------------------------------------
def draw_routing(seed: int, world: int, tokens: int, topk: int, experts: int) -> np.ndarray:
    """int32 [world, tokens, topk]: source s's token t goes to experts routing[s, t, :], `topk`
    distinct experts drawn uniformly (a random permutation's first `topk`), reproducible from
    the seed and the cell's shape."""
    if not 1 <= topk <= experts:
        raise ValueError(f"topk {topk} must be in 1..experts ({experts})")
    if tokens < 1 or world < 1:
        raise ValueError(f"tokens {tokens} and world {world} must be >= 1")
    rng = np.random.default_rng([seed, world, tokens, topk, experts])
    out = np.empty((world, tokens, topk), dtype=np.int32)
    for s in range(world):  # one source at a time: tokens x experts keys, not world x that
        keys = rng.random((tokens, experts))
        # the experts of the topk smallest keys: a uniform topk-subset, in key order
        pick = (
            np.argpartition(keys, topk - 1, axis=1)[:, :topk]
            if topk < experts
            else np.broadcast_to(np.arange(experts), (tokens, experts))
        )
        order = np.argsort(np.take_along_axis(keys, pick, axis=1), axis=1, kind="stable")
        out[s] = np.take_along_axis(pick, order, axis=1)
    return out


def counts_of(routing: np.ndarray, experts: int) -> np.ndarray:
    """int32 [world, experts]: tokens each source sends to each expert."""
    world = routing.shape[0]
    out = np.zeros((world, experts), dtype=np.int64)
    for s in range(world):
        out[s] = np.bincount(routing[s].ravel(), minlength=experts)
    return out.astype(np.int32)


def slots_of(routing: np.ndarray, experts: int) -> np.ndarray:
    """int32 [world, tokens, topk]: the receive slot of each (source, token, j) at its expert,
    the token's index among that source's tokens to that expert, in token order."""
    world, tokens = routing.shape[:2]
    out = np.empty_like(routing, dtype=np.int32)
    for s in range(world):
        hit = np.zeros((tokens, experts), dtype=np.int32)
        hit[np.arange(tokens)[:, None], routing[s]] = 1
        before = np.cumsum(hit, axis=0) - hit  # tokens before t that chose each expert
        out[s] = np.take_along_axis(before, routing[s].astype(np.intp), axis=1)
    return out


def routing_digest(routing: np.ndarray) -> str:
    """Hex sha256 of the routing array (int32, C order): the trace's record of which routing a
    point ran, comparable across backends and rounds."""
    return hashlib.sha256(np.ascontiguousarray(routing, dtype=np.int32).tobytes()).hexdigest()


def check_routing(routing: np.ndarray, experts: int) -> None:
    """Raise DispatchCheckError unless every token's experts are distinct and in range."""
    if routing.min() < 0 or routing.max() >= experts:
        raise DispatchCheckError(f"routing names an expert outside 0..{experts - 1}")
    ordered = np.sort(routing, axis=-1)
    dup = np.argwhere(ordered[..., 1:] == ordered[..., :-1])
    if dup.size:
        s, t, _ = dup[0]
        raise DispatchCheckError(f"source {s} token {t} picks an expert twice: {routing[s, t]}")


# ---- who lands where ----------------------------------------------------------------------------
def local_experts(experts: int, world: int) -> int:
    if experts % world:
        raise ValueError(f"{experts} experts do not spread evenly over {world} ranks")
    return experts // world


def tokens_to(routing: np.ndarray, source: int, expert: int) -> np.ndarray:
    """The token indices `source` sends to `expert`, in slot order (token order)."""
    return np.flatnonzero((routing[source] == expert).any(axis=1))


def expected_received(counts: np.ndarray, rank: int, world: int) -> np.ndarray:
    """int32 [E_local, world]: the count word rank `rank` must read for each local expert from
    each source."""
    el = local_experts(counts.shape[1], world)
    return np.ascontiguousarray(counts[:, rank * el : (rank + 1) * el].T, dtype=np.int32)


def expert_major_rows(counts: np.ndarray, rank: int, world: int) -> np.ndarray:
    """int64 [E_local, world]: the first row of (local expert e, source s) in rank `rank`'s
    expert-major buffer (in tokens): local expert by local expert, sources in rank order."""
    recv = expected_received(counts, rank, world).astype(np.int64)
    flat = np.concatenate([[0], np.cumsum(recv.ravel())[:-1]])
    return flat.reshape(recv.shape)


def expected_expert_major(
    routing: np.ndarray, rank: int, world: int, experts: int, tokens: Mapping[int, np.ndarray]
) -> np.ndarray:
    """uint8 [rows, token_bytes]: what rank `rank`'s expert-major buffer must hold, from each
    source's tokens (`tokens[s]`: uint8 [T, token_bytes])."""
    el = local_experts(experts, world)
    pieces = [
        tokens[s][tokens_to(routing, s, rank * el + e)] for e in range(el) for s in range(world)
    ]
    width = next(iter(tokens.values())).shape[1]
    return np.concatenate(pieces) if pieces else np.zeros((0, width), np.uint8)


def token_checksums(tokens: np.ndarray) -> np.ndarray:
    """uint64 [n]: a position-sensitive checksum of each token (row): its bytes as 64-bit words,
    each times an odd weight of its position, summed modulo 2**64. Two different tokens of the
    random pattern collide with negligible probability; names which token a slot holds."""
    rows = np.ascontiguousarray(tokens, dtype=np.uint8)
    n, width = rows.shape
    pad = (-width) % 8
    if pad:
        rows = np.concatenate([rows, np.zeros((n, pad), np.uint8)], axis=1)
    words = rows.view("<u8")
    weights = (np.arange(words.shape[1], dtype=np.uint64) * np.uint64(2) + np.uint64(1)) * (
        np.uint64(0x9E3779B97F4A7C15)
    )
    with np.errstate(over="ignore"):
        return (words * weights).sum(axis=1, dtype=np.uint64)


# ---- checks ------------------------------------------------------------------------------------
def check_counts(received: np.ndarray, counts: np.ndarray, rank: int, world: int) -> None:
    """Raise DispatchCheckError naming the first (expert, source) whose count word read
    differs from the routing's."""
    want = expected_received(counts, rank, world)
    got = np.asarray(received)
    if got.shape != want.shape:
        raise DispatchCheckError(
            f"rank {rank}: received counts of shape {got.shape}, expected {want.shape} "
            "(local experts x sources)"
        )
    bad = np.argwhere(got != want)
    if bad.size:
        e, s = bad[0]
        el = want.shape[0]
        raise DispatchCheckError(
            f"rank {rank}: {len(bad)} count words wrong; local expert {e} (expert "
            f"{rank * el + e}) read {int(got[e, s])} tokens from rank {s}, the routing sends "
            f"{int(want[e, s])}"
        )


def check_expert_major(
    got: np.ndarray,
    routing: np.ndarray,
    rank: int,
    world: int,
    experts: int,
    tokens: Mapping[int, np.ndarray],
) -> int:
    """Compare rank `rank`'s expert-major buffer (uint8, at least rows x token_bytes) with the
    sources' tokens; returns the bytes compared. A row that holds another token, or no token
    of the source, is named by checksum; otherwise the first differing byte."""
    want = expected_expert_major(routing, rank, world, experts, tokens)
    rows, width = want.shape
    flat = np.asarray(got, dtype=np.uint8).ravel()
    if flat.size < rows * width:
        raise DispatchCheckError(
            f"rank {rank}: expert-major buffer of {flat.size} bytes, {rows} tokens x {width} "
            f"bytes expected"
        )
    have = flat[: rows * width].reshape(rows, width)
    bad_rows = np.flatnonzero((have != want).any(axis=1))
    if not bad_rows.size:
        return rows * width
    r = int(bad_rows[0])
    el = local_experts(experts, world)
    counts = counts_of(routing, experts)
    first = expert_major_rows(counts, rank, world)
    e, s = np.argwhere(first <= r)[-1]  # the (expert, source) block holding row r
    slot = r - int(first[e, s])
    expert = rank * el + int(e)
    sent = tokens_to(routing, int(s), expert)
    where = (
        f"rank {rank}: {bad_rows.size} of {rows} expert-major tokens wrong; the first at row "
        f"{r}: local expert {e} (expert {expert}), from rank {s}, slot {slot} (token "
        f"{int(sent[slot])})"
    )
    sums = token_checksums(tokens[int(s)])
    held = token_checksums(have[r : r + 1])[0]
    match = np.flatnonzero(sums == held)
    if match.size:
        raise DispatchCheckError(
            f"{where} holds token {int(match[0])} of that source instead"
            + ("" if int(match[0]) in set(sent.tolist()) else " (a token not routed there)")
        )
    block = have[int(first[e, s]) : int(first[e, s]) + sent.size]
    present = set(token_checksums(block).tolist())
    missing = [int(t) for t in sent if int(sums[t]) not in present]
    diff = np.flatnonzero(have[r] != want[r])
    lost = f"; tokens missing from that block: {missing}" if missing else ""
    raise DispatchCheckError(
        f"{where} differs in {diff.size} of {width} bytes, first at byte {int(diff[0])} (got "
        f"0x{int(have[r, diff[0]]):02x}, expected 0x{int(want[r, diff[0]]):02x}){lost}"
    )


def bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    """Little-endian BF16 values (uint8 rows of 2H bytes) as float32 [..., H]."""
    b = np.ascontiguousarray(raw, dtype=np.uint8)
    halves = b.view("<u2").astype(np.uint32) << np.uint32(16)
    return halves.view(np.float32)


def combine_check(
    got: np.ndarray,
    routing: np.ndarray,
    rank: int,
    world: int,
    experts: int,
    tokens: Mapping[int, np.ndarray],
) -> float:
    """The combine-style check of rank `rank`'s part: each source token's copies in this rank's
    expert-major buffer, read as BF16 and summed in FP32 (a combine with unit weights), against
    the source's token times its copies here. Returns the largest absolute difference over the
    finite values (0.0: exact); raises DispatchCheckError when it is not within the FP32
    rounding of the sum, or a token's non-finite values (NaN/Inf bit patterns) disagree.

    Sums of up to 8 copies of one BF16 value are exact in FP32, so any difference means a
    copy's bytes differ; this check reads values where check_expert_major reads bytes."""
    el = local_experts(experts, world)
    flat = np.asarray(got, dtype=np.uint8).ravel()
    counts = counts_of(routing, experts)
    first = expert_major_rows(counts, rank, world)
    worst = 0.0
    # random bytes as BF16 include NaN and Inf patterns: compared by finiteness, not warned on
    with np.errstate(all="ignore"):
        for s in range(world):
            worst = max(worst, _combine_source(flat, routing, rank, el, s, first, tokens[s]))
    return worst


def _combine_source(
    flat: np.ndarray,
    routing: np.ndarray,
    rank: int,
    el: int,
    s: int,
    first: np.ndarray,
    source_tokens: np.ndarray,
) -> float:
    width = source_tokens.shape[1]
    hidden = width // 2
    tokens_f = bf16_to_f32(source_tokens)  # [T, H]
    acc = np.zeros_like(tokens_f)
    hits = np.zeros(tokens_f.shape[0], dtype=np.int64)
    for e in range(el):
        sent = tokens_to(routing, s, rank * el + e)
        if not sent.size:
            continue
        start = int(first[e, s]) * width
        block = flat[start : start + sent.size * width].reshape(sent.size, width)
        acc[sent] += bf16_to_f32(block).reshape(sent.size, hidden)
        hits[sent] += 1
    routed = np.flatnonzero(hits)
    if not routed.size:
        return 0.0
    want = tokens_f[routed] * hits[routed, None].astype(np.float32)
    have = acc[routed]
    finite = np.isfinite(want) & np.isfinite(have)
    err = np.where(finite, np.abs(have - want), np.float32(0))
    tol = np.float32(1e-6) * np.where(finite, np.abs(want), np.float32(0))
    # a non-finite value must be the same non-finite value (NaN anywhere in both, or one Inf)
    odd = ~finite & ~((np.isnan(want) & np.isnan(have)) | (want == have))
    bad = np.argwhere((err > tol) | odd)
    if bad.size:
        i, h = bad[0]
        t = int(routed[i])
        raise DispatchCheckError(
            f"rank {rank}: combine check: rank {s}'s token {t} sums to {float(have[i, h])!r} "
            f"at element {h} over its {int(hits[t])} copies here, expected "
            f"{float(want[i, h])!r}"
        )
    return float(err.max(initial=0.0))


def signal_value(count: int) -> int:
    """What a sender adds to a count word after its `count` tokens to that expert."""
    return count + 1


def count_from_signal(word: int) -> int:
    """The token count a nonzero count word announces."""
    if word <= 0:
        raise ValueError("a count word is nonzero once signalled")
    return word - 1
