"""What gicbench writes into NVSHMEM's device state, as numpy records of NVSHMEM's own structures.

NVSHMEM's IBGDA device code (cuda/nvshmem/) reads two __constant__ structures of the kernels'
module and the arrays they point to, all of which NVSHMEM's host transport (ibgda.cpp) would
fill; gicbench fills them from its fabric objects instead (docs/nvshmem.md gives every field,
what NVSHMEM puts there and gicbench's source):

- IBGDA_STATE_DTYPE: `nvshmemi_ibgda_device_state_t` (symbol IBGDA_STATE_SYMBOL), 8384 bytes;
- DEVICE_STATE_DTYPE: `nvshmemi_device_host_state_t` (symbol DEVICE_STATE_SYMBOL), 848 bytes;
- QP_DTYPE (`nvshmemi_ibgda_device_qp_t`, 184) and CQ_DTYPE (`nvshmemi_ibgda_device_cq_t`, 72):
  the RC QP array (`globalmem.rcs`, [device][QP slot][PE]) and its CQ array (`globalmem.cqs`),
  in GPU memory (their indices are updated with GPU atomics);
- KEY_DTYPE (`nvshmemi_ibgda_device_key_t`, 16): the lkey/rkey tables;
- LOCAL_MHANDLE_DTYPE (`nvshmemi_ibgda_device_local_only_mhandle_t`, 96): a list node in GPU
  memory naming a registered buffer outside the symmetric heap (`globalmem.
  local_only_mhandle_head`), e.g. a source buffer.
JOB_DTYPE and SAMPLE_DTYPE are the kernels' own records (cuda/nvshmem/gicbench_nvshmem.cuh).

Field names are NVSHMEM's, dotted for nested members (`tx_wq.nwqes`); bytes no name covers stay
zero. tests/test_nvshmem_layout.py checks every offset and size against the headers' own
offsetof/sizeof (cuda/nvshmem/nvshmem_layout_host.cu) and the enum values below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import ConfigError

IBGDA_STATE_SYMBOL = "nvshmemi_ibgda_device_state_d"
DEVICE_STATE_SYMBOL = "nvshmemi_device_state_d"

# enum values NVSHMEM's headers define (checked by the layout test)
QP_TYPE_DCI, QP_TYPE_RC = 1, 3
MAP_TYPE = {"cta": 0, "sm": 1, "warp": 2, "none": 4}
TRANSPORT_IBGDA = 1  # NVSHMEMI_DEVICE_TRANSPORT_TYPE_IBGDA
JOB_GPU_LDST, JOB_GPU_PROXY = 2, 8  # job_connectivity: > LDST takes the network path in quiet
PROXY_NONE = 0
TMA_DISABLE = 0
MAX_CONST_KEYS = 64  # NVSHMEMI_IBGDA_MAX_CONST_LKEYS / _RKEYS
MIN_QP_DEPTH, MAX_QP_DEPTH = 128, 32768  # NVSHMEMI_IBGDA_MIN_QP_DEPTH / MAX_QP_DEPTH
IBUF_SLOT = 256  # NVSHMEMI_IBGDA_IBUF_SLOT_SIZE: slot 0 receives non-fetch atomics' old values
QP_DEFAULT, QP_ALL, PE_ANY = 1, 2**31 - 1, 1 << 15  # NVSHMEMX_QP_DEFAULT, _QP_ALL, _PE_ANY
SIGNAL_ADD = 10  # NVSHMEM_SIGNAL_ADD
DEFAULT_RC_PER_PE = 2  # NVSHMEM_IBGDA_NUM_RC_PER_PE's default
DEFAULT_REQUESTS_IN_BATCH = 32  # NVSHMEM_IBGDA_NUM_REQUESTS_IN_BATCH's default
CQE_INIT = 0xFF  # NVSHMEM fills its CQs with 0xff: opcode INVALID, owner 1, wqe_counter 0xffff


def _dtype(size: int, fields: Sequence[tuple[str, str | np.dtype | tuple, int]]) -> np.dtype:
    return np.dtype({"names": [f[0] for f in fields], "formats": [f[1] for f in fields],
                     "offsets": [f[2] for f in fields], "itemsize": size})  # fmt: skip


def _version(size: int) -> int:
    """The `version` word NVSHMEM's init macros store: (1 << 16) + sizeof."""
    return (1 << 16) + size


KEY_DTYPE = _dtype(16, [("key", "<u4", 0), ("next_addr", "<u8", 8)])
LOCAL_MHANDLE_DTYPE = _dtype(96, [
    ("version", "<i4", 0), ("is_sysmem_scope", "u1", 4), ("start", "<u8", 8), ("end", "<u8", 16),
    ("next", "<u8", 24), ("lkeys", ("<u4", (15,)), 32),
])  # fmt: skip
CQ_DTYPE = _dtype(72, [
    ("version", "<i4", 0), ("qp_type", "<i4", 4), ("dbrec", "<u8", 8), ("cqe", "<u8", 16),
    ("prod_idx", "<u8", 24), ("cons_idx", "<u8", 32), ("resv_head", "<u8", 40),
    ("ready_head", "<u8", 48), ("cqn", "<u4", 56), ("ncqes", "<u4", 60), ("qpn", "<u4", 64),
])  # fmt: skip
MVARS_BYTES, MVARS_OFFSET = 96, 88  # nvshmemi_ibgda_device_qp_management_t, qp.mvars
MVARS = {"version": 0, "post_send_lock": 4, "tx_wq.resv_head": 8, "tx_wq.ready_head": 16,
         "tx_wq.prod_idx": 24, "tx_wq.cons_idx": 32, "tx_wq.get_head": 40, "tx_wq.get_tail": 48,
         "ibuf.head": 56, "ibuf.tail": 64}  # fmt: skip
QP_DTYPE = _dtype(184, [
    ("version", "<i4", 0), ("qp_type", "<i4", 4), ("qpn", "<u4", 8), ("dev_idx", "<u4", 12),
    ("ibuf.nslots", "<u4", 16), ("ibuf.buf", "<u8", 24), ("ibuf.lkey", "<u4", 32),
    ("ibuf.rkey", "<u4", 36), ("tx_wq.nwqes", "<u2", 40), ("tx_wq.wqe", "<u8", 48),
    ("tx_wq.dbrec", "<u8", 56), ("tx_wq.bf", "<u8", 64), ("tx_wq.cq", "<u8", 72),
    ("tx_wq.prod_idx", "<u8", 80), ("mvars.version", "<i4", MVARS_OFFSET),
])  # fmt: skip
IBGDA_STATE_DTYPE = _dtype(8384, [
    ("version", "<i4", 0), ("num_shared_dcis", "<u4", 4), ("num_exclusive_dcis", "<u4", 8),
    ("dci_map_type", "<i4", 12), ("ndcts_per_pe", "<u4", 16), ("num_qp_groups", "<u4", 20),
    ("num_dct_groups", "<u4", 24), ("num_rc_per_pe", "<u4", 28), ("rc_map_type", "<i4", 32),
    ("num_requests_in_batch", "<u4", 36), ("log2_cumem_granularity", "<u8", 40),
    ("num_devices_initialized", "<i4", 48), ("nic_buf_on_gpumem", "u1", 52),
    ("support_half_av_seg", "u1", 53), ("may_skip_cst", "u1", 54),
    ("use_async_postsend", "u1", 55), ("constmem.lkeys", (KEY_DTYPE, (MAX_CONST_KEYS,)), 56),
    ("constmem.rkeys", (KEY_DTYPE, (MAX_CONST_KEYS,)), 1080),
    ("globalmem.qp_group_switches", "<u8", 8248), ("globalmem.cqs", "<u8", 8256),
    ("globalmem.dcis", "<u8", 8264), ("globalmem.rcs", "<u8", 8272),
    ("globalmem.local_only_mhandle_head", "<u8", 8280), ("globalmem.dcts", "<u8", 8288),
    ("globalmem.lkeys", "<u8", 8296), ("globalmem.rkeys", "<u8", 8304),
    ("num_default_rc_per_pe", "<i4", 8312), ("use_address_stable_amo", "u1", 8316),
    ("extra", "<u8", 8320), ("region_batch_rma_pending_qps", "<u8", 8328),
    ("region_batch_rma_threshold", "<u4", 8336),
])  # fmt: skip
DEVICE_STATE_DTYPE = _dtype(848, [
    ("version", "<i4", 0), ("mype", "<i4", 4), ("npes", "<i4", 8), ("node_mype", "<i4", 12),
    ("node_npes", "<i4", 16), ("pe_dist", "<i4", 20), ("proxy", "<i4", 24),
    ("atomics_sync", "<i4", 28), ("job_connectivity", "<i4", 32),
    ("proxy_ops_are_ordered", "u1", 36), ("atomics_complete_on_quiet", "u1", 37),
    ("heap_base", "<u8", 40), ("heap_size", "<u8", 48), ("peer_heap_base_p2p", "<u8", 56),
    ("peer_heap_base_remote", "<u8", 64), ("symmetric_heap_kind", "u1", 72),
    ("enable_rail_opt", "u1", 73), ("atomics_le_min_size", "<u4", 76),
    ("ibgda_is_initialized", "u1", 768), ("nvshmemi_is_nvshmem_initialized", "u1", 769),
    ("nvshmemi_is_nvshmem_bootstrapped", "u1", 770), ("selected_device_transport", "<i4", 772),
    ("tma_policy", "<i4", 776), ("region_slots", "<u8", 824),
    ("region_active_count", "<u8", 832), ("region_slots_len", "<u4", 840),
    ("region_slot_probe_limit", "<u4", 844),
])  # fmt: skip
JOB_DTYPE = np.dtype([
    ("dst", "<u8"), ("src", "<u8"), ("sig", "<u8"), ("value", "<u8"), ("size", "<u4"),
    ("iters", "<u4"), ("pe", "<u4"), ("stride", "<u4"),
])  # fmt: skip
SAMPLE_DTYPE = np.dtype([("issue", "<u8"), ("complete", "<u8"), ("issue_ns", "<u8"),
                         ("complete_ns", "<u8")])  # fmt: skip
# The harness loops' records (cuda/nvshmem/gicbench_nvshmem_loops.cuh) and their enums.
SINGLE_JOB_DTYPE = np.dtype([
    ("dst", "<u8"), ("src", "<u8"), ("src_dev", "<u8"), ("watch_dev", "<u8"),
    ("timeout_ns", "<u8"), ("size", "<u4"), ("iters", "<u4"), ("pe", "<u4"), ("mode", "<u4"),
    ("quiet", "<u4"), ("cta", "<u4"),
])  # fmt: skip
RESULT_DTYPE = np.dtype([("status", "<u4"), ("done", "<u4"), ("seen", "<u8")])
RATE_LANE_DTYPE = np.dtype([("dst", "<u8"), ("src", "<u8"), ("src_dev", "<u8"), ("pe", "<i4"),
                            ("pad", "<u4")])  # fmt: skip
RATE_JOB_DTYPE = np.dtype([
    ("size", "<u4"), ("per_thread", "<u4"), ("first", "<u4"), ("slots", "<u4"),
    ("window", "<u4"), ("max_windows", "<u4"), ("quiet", "<u4"), ("pad", "<u4"),
])  # fmt: skip
RATE_RESULT_DTYPE = np.dtype([("start_ns", "<u8"), ("end_ns", "<u8"), ("posted", "<u8")])
MODE_LATENCY, MODE_RTT, MODE_RESPOND = 0, 1, 2  # gicbench_nvshmem_mode
QUIET_QP, QUIET_PE, QUIET_ALL = 0, 1, 2  # gicbench_nvshmem_quiet
STATUS_OK, STATUS_NO_SEQ, STATUS_ABORTED = 0, 2, 3  # gicbench_nvshmem_status
assert (SINGLE_JOB_DTYPE.itemsize, RESULT_DTYPE.itemsize, RATE_LANE_DTYPE.itemsize,
        RATE_JOB_DTYPE.itemsize, RATE_RESULT_DTYPE.itemsize) == (64, 16, 32, 32, 24)
assert (KEY_DTYPE.itemsize, CQ_DTYPE.itemsize, QP_DTYPE.itemsize, IBGDA_STATE_DTYPE.itemsize,
        DEVICE_STATE_DTYPE.itemsize, JOB_DTYPE.itemsize, SAMPLE_DTYPE.itemsize) == (
    16, 72, 184, 8384, 848, 48, 32)  # fmt: skip


def be32(v: int) -> int:
    """The value whose little-endian bytes are `v` big-endian: NVSHMEM keeps keys htobe32'd."""
    return int.from_bytes((int(v) & 0xFFFFFFFF).to_bytes(4, "little"), "big")


def mvars_addr(qp_addr: int, name: str) -> int:
    """The GPU address of a management variable (MVARS) of the QP structure at `qp_addr`: the
    CQ's prod_idx/cons_idx/resv_head/ready_head point there, as NVSHMEM's host sets them."""
    return qp_addr + MVARS_OFFSET + MVARS[name]


def rc_index(slot: int, pe: int, npes: int, rc_per_pe: int, dev: int = 0) -> int:
    """Where the RC QP `slot` to `pe` sits in globalmem.rcs: [device][QP slot][PE]."""
    if not (0 <= slot < rc_per_pe and 0 <= pe < npes):
        raise ConfigError("slot/pe", (slot, pe), f"slot < {rc_per_pe}, pe < {npes}")
    return (dev * rc_per_pe + slot) * npes + pe


def check_depth(wqebbs: int) -> None:
    if wqebbs & (wqebbs - 1) or not MIN_QP_DEPTH <= wqebbs <= MAX_QP_DEPTH:
        raise ConfigError("sq_wqebbs", wqebbs, f"a power of two in {MIN_QP_DEPTH}..{MAX_QP_DEPTH}"
                          " (NVSHMEM's QP depth bounds; its nwqes is a uint16)")  # fmt: skip


@dataclass(frozen=True)
class QueueArgs:
    """How a QP and its send CQ must be created for NVSHMEM's IBGDA code: as ibgda.cpp creates
    them, a collapsed CQ (cqc.cc: every CQE in entry 0; the poll reads entry 0's wqe_counter)
    that ignores overrun (cqc.oi: NVSHMEM never publishes a consumer index), one per QP, of
    the QP's depth; a QP with a doorbell record."""

    qp: dict
    cq: dict
    ncqe: int


def queue_kwargs(sq_wqebbs: int) -> QueueArgs:
    check_depth(sq_wqebbs)
    return QueueArgs(qp={"dbr": True}, cq={"collapsed": True, "overrun_ignore": True},
                     ncqe=sq_wqebbs)  # fmt: skip


def cq_record(*, cqn: int, ncqe: int, cqe: int, dbrec: int, qpn: int, qp_addr: int) -> np.ndarray:
    """One CQ_DTYPE record: the CQ ring's and record's GPU addresses, and the QP's management
    variables the poll reads (prod_idx, cons_idx, resv_head, ready_head) in the QP structure at
    `qp_addr` (its place in globalmem.rcs)."""
    rec = np.zeros((), CQ_DTYPE)
    rec["version"], rec["qp_type"] = _version(CQ_DTYPE.itemsize), QP_TYPE_RC
    rec["dbrec"], rec["cqe"], rec["cqn"], rec["ncqes"], rec["qpn"] = dbrec, cqe, cqn, ncqe, qpn
    for name in ("prod_idx", "cons_idx", "resv_head", "ready_head"):
        rec[name] = mvars_addr(qp_addr, f"tx_wq.{name}")
    return rec


def qp_record(*, qpn: int, wqe: int, nwqes: int, dbrec: int, bf: int, cq_addr: int,
              qp_addr: int, ibuf: int, ibuf_lkey: int, ibuf_rkey: int = 0, ibuf_slots: int = 1,
              dev_idx: int = 0) -> np.ndarray:  # fmt: skip
    """One QP_DTYPE record for an RC QP. dbrec: the GPU address of the **send** word of the
    doorbell record (record + 4, MLX5_SND_DBR); bf: the doorbell register (IBGDA's 8-byte
    store of the next producer index; NVSHMEM names the UAR page bf but never copies a WQE
    there); cq_addr: this QP's CQ_DTYPE record in GPU memory; ibuf: a NIC-registered local
    buffer of IBUF_SLOT * (ibuf_slots + 1) bytes (slot 0 receives put-signal's atomic result).
    Management variables start at zero (ibgda.cpp memsets them)."""
    check_depth(nwqes)
    if ibuf_slots & (ibuf_slots - 1) or ibuf_slots < 1:
        raise ConfigError("ibuf_slots", ibuf_slots, "a power of two >= 1")
    rec = np.zeros((), QP_DTYPE)
    rec["version"], rec["qp_type"] = _version(QP_DTYPE.itemsize), QP_TYPE_RC
    rec["qpn"], rec["dev_idx"] = qpn & 0xFFFFFF, dev_idx
    rec["ibuf.nslots"], rec["ibuf.buf"] = ibuf_slots, ibuf
    rec["ibuf.lkey"], rec["ibuf.rkey"] = be32(ibuf_lkey), be32(ibuf_rkey)
    rec["tx_wq.nwqes"], rec["tx_wq.wqe"], rec["tx_wq.dbrec"] = nwqes, wqe, dbrec
    rec["tx_wq.bf"], rec["tx_wq.cq"] = bf, cq_addr
    rec["tx_wq.prod_idx"] = mvars_addr(qp_addr, "tx_wq.prod_idx")
    rec["mvars.version"] = 0  # ibgda.cpp memsets the management variables
    return rec


def local_mhandle(*, start: int, length: int, lkey: int, sysmem: bool = True,
                  next_addr: int = 0) -> np.ndarray:  # fmt: skip
    """One LOCAL_MHANDLE_DTYPE node: [start, start + length) with its lkey (one NIC)."""
    rec = np.zeros((), LOCAL_MHANDLE_DTYPE)
    rec["version"], rec["is_sysmem_scope"] = _version(LOCAL_MHANDLE_DTYPE.itemsize), sysmem
    rec["start"], rec["end"], rec["next"] = start, start + length - 1, next_addr
    rec["lkeys"][0] = be32(lkey)
    return rec


def key_table(keys: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(constmem part, globalmem part) of a key table from (key, next_addr) per entry: the first
    MAX_CONST_KEYS in constant memory, the rest in a GPU array (globalmem.lkeys / .rkeys)."""
    table = np.zeros(len(keys), KEY_DTYPE)
    for i, (key, nxt) in enumerate(keys):
        table[i]["key"], table[i]["next_addr"] = be32(key), nxt
    const = np.zeros(MAX_CONST_KEYS, KEY_DTYPE)
    const[: min(len(keys), MAX_CONST_KEYS)] = table[:MAX_CONST_KEYS]
    return const, table[MAX_CONST_KEYS:]


def lkeys(heap_base: int, heap_size: int, lkey: int, log2_chunk: int) -> list[tuple[int, int]]:
    """The lkey table of a local heap registered as one region: one entry per chunk of
    2**log2_chunk bytes, each (lkey, heap end as an address), as ibgda.cpp writes it."""
    n = -(-heap_size >> log2_chunk) if heap_size else 0
    return [(lkey, heap_base + heap_size)] * max(n, 1)


def rkeys(heap_size: int, rkey_of_pe: Sequence[int], log2_chunk: int) -> list[tuple[int, int]]:
    """The rkey table: entry chunk * npes + pe holds (that PE's rkey, heap end as an offset)."""
    n = max(-(-heap_size >> log2_chunk), 1)
    return [(rkey_of_pe[pe], heap_size) for _ in range(n) for pe in range(len(rkey_of_pe))]


def ibgda_state(*, rcs: int, cqs: int, qp_group_switches: int,
                lkey_table: Sequence[tuple[int, int]], rkey_table: Sequence[tuple[int, int]],
                log2_chunk: int, rc_per_pe: int = DEFAULT_RC_PER_PE, rc_map: str = "cta",
                requests_in_batch: int = DEFAULT_REQUESTS_IN_BATCH, nic_buf_on_gpumem: bool = False,
                lkeys_rest: int = 0, rkeys_rest: int = 0,
                region_pending: int = 0) -> np.ndarray:  # fmt: skip
    """The IBGDA_STATE_DTYPE record: RC QPs only (no DCI, no DCT: every put goes to another
    PE), one NIC, no consistency op (may_skip_cst: no DUMP WQEs, which emu lacks), no half AV
    segment (RC WQEs carry none), GPU-rung doorbells (use_async_postsend off). rcs / cqs /
    qp_group_switches: GPU addresses of the QP array, the CQ array and the group counters
    (at least max(rc_per_pe, 2) + 1 zeroed uint32). lkeys_rest / rkeys_rest: GPU addresses of
    the key entries past MAX_CONST_KEYS (0 when none)."""
    if requests_in_batch & (requests_in_batch - 1) or requests_in_batch < 1:
        raise ConfigError("requests_in_batch", requests_in_batch, "a power of two >= 1")
    if rc_map not in MAP_TYPE:
        raise ConfigError("rc_map", rc_map, " or ".join(MAP_TYPE))
    rec = np.zeros((), IBGDA_STATE_DTYPE)
    rec["version"] = _version(IBGDA_STATE_DTYPE.itemsize)
    rec["dci_map_type"] = MAP_TYPE["cta"]
    rec["num_qp_groups"] = max(rc_per_pe, 2)
    rec["num_dct_groups"] = 1
    rec["num_rc_per_pe"], rec["num_default_rc_per_pe"] = rc_per_pe, rc_per_pe
    rec["rc_map_type"] = MAP_TYPE[rc_map]
    rec["num_requests_in_batch"] = requests_in_batch
    rec["log2_cumem_granularity"] = log2_chunk
    rec["num_devices_initialized"] = 1
    rec["nic_buf_on_gpumem"] = nic_buf_on_gpumem
    rec["may_skip_cst"] = 1
    const_l, rest_l = key_table(lkey_table)
    const_r, rest_r = key_table(rkey_table)
    if (len(rest_l) and not lkeys_rest) or (len(rest_r) and not rkeys_rest):
        raise ConfigError("lkeys_rest/rkeys_rest", 0, "the GPU address of the key entries past "
                          f"the {MAX_CONST_KEYS} in constant memory")  # fmt: skip
    rec["constmem.lkeys"], rec["constmem.rkeys"] = const_l, const_r
    rec["globalmem.lkeys"], rec["globalmem.rkeys"] = lkeys_rest, rkeys_rest
    rec["globalmem.qp_group_switches"], rec["globalmem.cqs"] = qp_group_switches, cqs
    rec["globalmem.rcs"] = rcs
    rec["region_batch_rma_pending_qps"] = region_pending
    return rec


def device_state(*, mype: int, npes: int, heap_base: int, heap_size: int,
                 peer_heap_base_p2p: int, peer_heap_base_remote: int, region_active_count: int,
                 heap_in_sysmem: bool = True) -> np.ndarray:  # fmt: skip
    """The DEVICE_STATE_DTYPE record the IBGDA paths read. peer_heap_base_p2p: GPU address of
    npes zeroed pointers (no peer reachable by load/store, so every op takes the transport);
    peer_heap_base_remote: GPU address of npes uint64, each peer's heap base as the NIC
    addresses it (the WQE's raddr = that + offset); region_active_count: GPU address of a zeroed
    uint32 (the public API loads it before every nbi op and quiet); heap_in_sysmem:
    symmetric_heap_kind 1, so a put fences at system scope before it rings (the emulated NIC's
    memory is host memory)."""
    rec = np.zeros((), DEVICE_STATE_DTYPE)
    rec["version"] = _version(DEVICE_STATE_DTYPE.itemsize)
    rec["mype"], rec["npes"], rec["node_mype"], rec["node_npes"] = mype, npes, mype, npes
    rec["proxy"] = PROXY_NONE
    rec["job_connectivity"] = JOB_GPU_PROXY
    rec["heap_base"], rec["heap_size"] = heap_base, heap_size
    rec["peer_heap_base_p2p"] = peer_heap_base_p2p
    rec["peer_heap_base_remote"] = peer_heap_base_remote
    rec["symmetric_heap_kind"] = 1 if heap_in_sysmem else 0
    rec["enable_rail_opt"] = 0
    rec["ibgda_is_initialized"] = 1
    rec["nvshmemi_is_nvshmem_initialized"] = rec["nvshmemi_is_nvshmem_bootstrapped"] = 1
    rec["selected_device_transport"] = TRANSPORT_IBGDA
    rec["tma_policy"] = TMA_DISABLE
    rec["region_active_count"] = region_active_count
    return rec


def job_record(*, dst: int, src: int = 0, sig: int = 0, value: int = 0, size: int = 8,
               iters: int = 1, pe: int, stride: int = 0) -> np.ndarray:  # fmt: skip
    rec = np.zeros((), JOB_DTYPE)
    for k, v in {"dst": dst, "src": src, "sig": sig, "value": value, "size": size,
                 "iters": iters, "pe": pe, "stride": stride}.items():  # fmt: skip
        rec[k] = v
    return rec


def flat_fields(dt: np.dtype) -> Mapping[str, tuple[int, int]]:
    """{name: (offset, bytes)} of a record's named fields (what the layout test compares)."""
    return {n: (int(dt.fields[n][1]), int(dt.fields[n][0].itemsize)) for n in dt.names}
