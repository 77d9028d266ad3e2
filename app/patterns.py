"""Traffic patterns: who sends to whom (`--pattern`).

pairs: rank 2i sends to rank 2i+1 (an odd world's last rank idles). all-to-all: every rank to
every other. fan-in: every rank to rank 0. fan-out: rank 0 to every rank. RC QPs are brought up
only between neighbours (ranks that send to or receive from each other), so a pairs run on 128
ranks does not build a full mesh.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import PATTERNS
from .errors import ConfigError

ROOT = 0  # the target of fan-in and the source of fan-out


@dataclass(frozen=True)
class Traffic:
    """One rank's part in a pattern."""

    pattern: str
    rank: int
    size: int
    sends_to: tuple[int, ...]
    receives_from: tuple[int, ...]

    @property
    def neighbours(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.sends_to) | set(self.receives_from)))

    @property
    def role(self) -> str:
        """sender, receiver, both (sends and receives) or idle: how results are grouped."""
        if self.sends_to and self.receives_from:
            return "both"
        if self.sends_to:
            return "sender"
        return "receiver" if self.receives_from else "idle"

    @property
    def sends(self) -> bool:
        return bool(self.sends_to)


def flows(pattern: str, size: int) -> list[tuple[int, int]]:
    """Every directed (source, destination) pair of the pattern."""
    if pattern == "pairs":
        return [(r, r + 1) for r in range(0, size - 1, 2)]
    if pattern == "all-to-all":
        return [(s, d) for s in range(size) for d in range(size) if s != d]
    if pattern == "fan-in":
        return [(s, ROOT) for s in range(size) if s != ROOT]
    if pattern == "fan-out":
        return [(ROOT, d) for d in range(size) if d != ROOT]
    raise ConfigError("pattern (--pattern)", pattern, "one of " + ", ".join(PATTERNS))


def traffic(pattern: str, rank: int, size: int) -> Traffic:
    """Rank `rank`'s destinations and sources, without walking every flow (128 ranks of
    all-to-all would be 16,256 flows per call)."""
    if size < 2:
        raise ConfigError("ranks", size, ">= 2 (launch with mpiexec -n 2 or srun -n 2)")
    others = tuple(r for r in range(size) if r != rank)
    if pattern == "pairs":
        partner = rank ^ 1
        if partner >= size:
            return Traffic(pattern, rank, size, (), ())
        return Traffic(
            pattern, rank, size, (partner,) if rank % 2 == 0 else (), (partner,) if rank % 2 else ()
        )
    if pattern == "all-to-all":
        return Traffic(pattern, rank, size, others, others)
    if pattern == "fan-in":
        if rank == ROOT:
            return Traffic(pattern, rank, size, (), others)
        return Traffic(pattern, rank, size, (ROOT,), ())
    if pattern == "fan-out":
        if rank == ROOT:
            return Traffic(pattern, rank, size, others, ())
        return Traffic(pattern, rank, size, (), (ROOT,))
    raise ConfigError("pattern (--pattern)", pattern, "one of " + ", ".join(PATTERNS))


def max_neighbours(pattern: str, size: int) -> int:
    """The most neighbours any rank has: every rank sizes its landing layout from it, so a
    sender computes where its region lies in any receiver's landing buffer."""
    return 1 if pattern == "pairs" else size - 1


def describe(pattern: str, size: int) -> str:
    """One line for the preamble."""
    if pattern == "pairs":
        idle = f"; rank {size - 1} idles (odd world)" if size % 2 else ""
        return f"pairs: rank 2i sends to rank 2i+1{idle}"
    if pattern == "all-to-all":
        return f"all-to-all: every rank sends to the other {size - 1}"
    if pattern == "fan-in":
        return f"fan-in: {size - 1} ranks send to rank {ROOT}"
    return f"fan-out: rank {ROOT} sends to {size - 1} ranks"
