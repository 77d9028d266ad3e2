"""The one record of a failed native loop, and the one decoder from it into gicbench's exceptions.

Every submitter's native side reports a failure as the same fields: the C++ loops as a dict
(native `put_loop_fields`: host loops, mini-proxy's engine, the verbs loops), mini-gda's kernels
as status words, DOCA's kernels as per-unit result rows. Each submitter turns its form into a
`LoopFailure` with the place it happened (`where`: rank, QP, indices) and calls `raise_failure`,
so a timeout, an error CQE, a signal or a refused argument reads the same from every path and
is the same exception class: CompletionTimeout, CompletionError, LoopInterrupted, ConfigError,
FabricError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from ..errors import CompletionError, CompletionTimeout, ConfigError, FabricError
from ..mlx5.constants import Syndrome

# What a loop reports (`kind`).
TIMEOUT = "timeout"  # nothing arrived before the deadline
CQE_ERROR = "cqe_error"  # an error completion (mlx5 syndrome, or a verbs work completion status)
INTERRUPTED = "interrupted"  # SIGTERM/SIGINT ended the loop
BAD_ARGUMENTS = "bad_arguments"  # refused before anything was posted (a field and its limits)
STOPPED = "stopped"  # another thread of the same engine failed first


class LoopInterrupted(FabricError):
    """SIGTERM/SIGINT ended a native loop early; `done` of `total` operations had been issued."""

    def __init__(self, message: str, done: int, total: int) -> None:
        self.done, self.total = done, total
        super().__init__(message)


@dataclass
class LoopFailure:
    """What a failed native loop reports. `where` locates it (rank, loop, QP and indices);
    the rest depends on `kind`."""

    kind: str
    where: str
    message: str = ""
    field: str = ""  # bad_arguments: the field and what it allows
    allowed: str = ""
    qpn: int = 0
    syndrome: int = 0  # cqe_error (mlx5)
    vendor_syndrome: int | None = None
    wqe_counter: int = 0
    wc_status: int = -1  # cqe_error through verbs: the ibv_wc status (>= 0)
    wr_id: int = 0
    vendor_err: int = 0
    word_seen: int = 0  # timeout of a polled data word (round trips)
    word_expected: int = 0
    done: int = 0  # interrupted: progress
    total: int = 0

    @classmethod
    def from_native(cls, err: Mapping[str, Any], where: str) -> LoopFailure:
        """The record of a native dict (native/src `put_loop_fields` and its extensions)."""

        def get(key: str, default: Any) -> Any:
            v = err.get(key, default)
            return default if v is None else v

        return cls(
            kind=str(get("kind", "")),
            where=where,
            message=str(get("message", "")),
            field=str(get("field", "")),
            allowed=str(get("allowed", "")),
            qpn=int(get("qpn", 0)),
            syndrome=int(get("syndrome", 0)),
            vendor_syndrome=int(err["vendor_syndrome"]) if "vendor_syndrome" in err else None,
            wqe_counter=int(get("wqe_counter", 0)),
            wc_status=int(get("wc_status", -1)),
            wr_id=int(get("wr_id", 0)),
            vendor_err=int(get("vendor_err", 0)),
            word_seen=int(get("word_seen", 0)),
            word_expected=int(get("word_expected", 0)),
            done=int(get("done", 0)),
            total=int(get("total", 0)),
        )


def syndrome_name(syndrome: int) -> str:
    try:
        return Syndrome(syndrome).name
    except ValueError:
        return "unknown"


def raise_failure(
    f: LoopFailure,
    what: str,
    timeout_s: float,
    *,
    values: Mapping[str, Any] | None = None,
    waiting_for: str = "completion",
    wc_error: Callable[[LoopFailure], BaseException] | None = None,
) -> NoReturn:
    """Raise the exception for `f` (`what`: the loop, e.g. "single-op issue"). `values`: the
    values the loop was given, by field name, for a refused argument's message; `waiting_for`:
    what a timeout waited for; `wc_error`: how a verbs work completion's status becomes an
    exception (the verbs provider names its statuses)."""
    if f.kind == TIMEOUT:
        extra = ""
        if f.word_expected:
            extra = f"; polled word holds {f.word_seen}, waiting for {f.word_expected}"
        msg = f": {f.message}" if f.message else ""
        raise CompletionTimeout(
            f"no {waiting_for} within {timeout_s:g} s{msg} ({f.where}{extra})"
        )
    if f.kind == CQE_ERROR and f.wc_status >= 0 and wc_error is not None:
        exc = wc_error(f)
        exc.add_note(f.where)
        raise exc
    if f.kind == CQE_ERROR:
        vendor = f", vendor 0x{f.vendor_syndrome:02x}" if f.vendor_syndrome is not None else ""
        raise CompletionError(
            f"error CQE {syndrome_name(f.syndrome)} (0x{f.syndrome:02x}{vendor}) for WQE "
            f"{f.wqe_counter} ({f.where})",
            f.syndrome,
            f.wqe_counter,
            f.qpn,
        )
    if f.kind == INTERRUPTED:
        raise LoopInterrupted(
            f"{what} interrupted by a signal after {f.done} of {f.total} operations ({f.where})",
            f.done,
            f.total,
        )
    if f.kind == BAD_ARGUMENTS:
        # refused before anything was posted: the field and what is allowed; the native
        # sentence (lane, QP) rides along as a note
        given = (values or {}).get(f.field, f.message)
        exc = ConfigError(f.field, given, f.allowed)
        exc.add_note(f.message)
        raise exc
    detail = f": {f.message}" if f.message else ""
    raise FabricError(f"{what} failed: {f.kind}{detail} ({f.where})")
