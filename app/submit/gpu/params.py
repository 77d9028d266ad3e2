"""The GPU submitter's knobs: the ordering before the doorbell (the paper's Table 4, a build-time
choice of the kernels), how threads sharing a QP publish their WQEs in msg-rate, who rings the
doorbell (the GPU, or a host thread forwarding ready marks), and how CQs are polled."""

from __future__ import annotations

from dataclasses import dataclass

from ...knobs import KIND_STR, knob

# The seven GPU-side orderings of the paper (arXiv 2610.01380), Table 4, in the order of
# cuda/gda/ordering.cuh's GDA_ORDERING numbers.
ORDERINGS = (
    "none",
    "gpu-fence",
    "gpu-fence-dbrec",
    "gpu-release-store",
    "threadfence",
    "sys-release-store",
    "sys-fence",
)
UNSAFE_ORDERINGS = frozenset({"none"})
# Orderings that leave the doorbell record and the doorbell unordered (no fence or release
# between the two stores): the engine may see the doorbell first and counts dbrec_lag. That is
# what tells gpu-fence from gpu-fence-dbrec (Table 4): recorded, not a failure. Their WQE stores
# are fenced, so stale WQEs must still read zero.
RECORD_UNORDERED_ORDERINGS = frozenset({"none", "gpu-fence"})

# msg-rate publication (the paper §4.3.1, Table 5): per-thread slot handoff in reservation order,
# cooperative per warp (reserve once, build in lockstep, one lane rings), one doorbell lock per WQE.
PUBLISH = ("thread", "warp", "lock")
PUBLISH_CODES = {"thread": 0, "warp": 1, "lock": 2}


# Who rings: the GPU threads themselves (record + doorbell per publication), or a host thread that
# advances each QP's ready prefix (GPU threads release-store every WQE's slot in a ready array in
# host memory): the second paper's "GDAKI Free Flow", the first paper's CPU-assisted doorbell.
DOORBELLS = ("gpu", "host")

# CQ polling (a build-time choice, GDA_CQ_POLL): scan (every wait reaps all CQEs present under the
# QP's CQ lock with an acquire load per poll, the CQ record stored at every reap, msg-rate reaps
# after every doorbell: the first mini-gda) or expected (the next CQE only, relaxed loads and one
# acquire on the hit, the record stored only when its lag could overrun the CQ).
CQ_POLLS = ("scan", "expected")


@dataclass(frozen=True)
class GpuParams:
    ordering: str = knob(
        "gpu-fence",
        flag="--ordering",
        kind=KIND_STR,
        choices=ORDERINGS,
        help="ordering before the doorbell (the paper's Table 4)",
    )
    publish: str = knob(
        "thread",
        flag="--publish",
        kind=KIND_STR,
        choices=PUBLISH,
        help="msg-rate: thread (slot handoff in reservation order), warp (cooperative), "
        "lock (one doorbell lock per WQE)",
    )
    doorbell: str = knob(
        "gpu",
        flag="--doorbell",
        kind=KIND_STR,
        choices=DOORBELLS,
        help="who rings: gpu (the GPU stores the record and the doorbell) or host (GPU threads "
        "mark WQEs ready in host memory, a host thread rings: GDAKI Free Flow)",
    )
    cq_poll: str = knob(
        "expected",
        flag="--cq-poll",
        kind=KIND_STR,
        choices=CQ_POLLS,
        help="CQ polling: expected (the next CQE only, record stored when needed) or scan (all "
        "CQEs present, record stored at every reap: the first mini-gda)",
    )
