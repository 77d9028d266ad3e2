// Host program: the layout of every NVSHMEM structure field gicbench writes, as NVSHMEM's own
// headers define it (sizeof/offsetof compiled by nvcc's host compiler), and the enum values it
// writes. tests/test_nvshmem_layout.py compiles it and checks gicbench.submit.nvshmem.layout
// against its output, one line per item:
//   size <struct> <bytes>
//   field <struct> <dotted member> <offset> <bytes>
//   const <name> <value>
// With the argument "read" it instead reads one QP, one CQ, the IBGDA state and the device
// state (in that order, as gicbench.submit.nvshmem.layout builds them) from stdin and prints
// what NVSHMEM's own structures see in them: "<struct>.<member> <value>".
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "nvshmem/gicbench_nvshmem.cuh"

#define SIZE(T) printf("size %s %zu\n", #T, sizeof(T))
#define FIELD(T, m) \
  printf("field %s %s %zu %zu\n", #T, #m, offsetof(T, m), sizeof(((T*)nullptr)->m))
#define CONST(c) printf("const %s %lld\n", #c, static_cast<long long>(c))

#define SHOW(s, p, m) printf("%s.%s %llu\n", s, #m, static_cast<unsigned long long>((p)->m))

static int read_back() {
  static nvshmemi_ibgda_device_qp_t qp;
  static nvshmemi_ibgda_device_cq_t cq;
  static nvshmemi_ibgda_device_state_t ib;
  static nvshmemi_device_host_state_t st;
  if (fread(&qp, sizeof qp, 1, stdin) != 1 || fread(&cq, sizeof cq, 1, stdin) != 1 ||
      fread(&ib, sizeof ib, 1, stdin) != 1 || fread(&st, sizeof st, 1, stdin) != 1) {
    fprintf(stderr, "short input\n");
    return 1;
  }
  SHOW("qp", &qp, version); SHOW("qp", &qp, qp_type); SHOW("qp", &qp, qpn);
  SHOW("qp", &qp, dev_idx); SHOW("qp", &qp, ibuf.nslots);
  SHOW("qp", &qp, ibuf.lkey); SHOW("qp", &qp, ibuf.rkey); SHOW("qp", &qp, tx_wq.nwqes);
  printf("qp.ibuf.buf %llu\n", (unsigned long long)(uintptr_t)qp.ibuf.buf);
  printf("qp.tx_wq.wqe %llu\n", (unsigned long long)(uintptr_t)qp.tx_wq.wqe);
  printf("qp.tx_wq.dbrec %llu\n", (unsigned long long)(uintptr_t)qp.tx_wq.dbrec);
  printf("qp.tx_wq.bf %llu\n", (unsigned long long)(uintptr_t)qp.tx_wq.bf);
  printf("qp.tx_wq.cq %llu\n", (unsigned long long)(uintptr_t)qp.tx_wq.cq);
  printf("qp.tx_wq.prod_idx %llu\n", (unsigned long long)(uintptr_t)qp.tx_wq.prod_idx);
  SHOW("qp", &qp, mvars.post_send_lock); SHOW("qp", &qp, mvars.tx_wq.resv_head);
  SHOW("qp", &qp, mvars.tx_wq.ready_head); SHOW("qp", &qp, mvars.tx_wq.prod_idx);
  SHOW("qp", &qp, mvars.tx_wq.cons_idx); SHOW("qp", &qp, mvars.version);
  SHOW("cq", &cq, version); SHOW("cq", &cq, qp_type); SHOW("cq", &cq, cqn);
  SHOW("cq", &cq, ncqes); SHOW("cq", &cq, qpn);
  printf("cq.cqe %llu\n", (unsigned long long)(uintptr_t)cq.cqe);
  printf("cq.dbrec %llu\n", (unsigned long long)(uintptr_t)cq.dbrec);
  printf("cq.prod_idx %llu\n", (unsigned long long)(uintptr_t)cq.prod_idx);
  printf("cq.cons_idx %llu\n", (unsigned long long)(uintptr_t)cq.cons_idx);
  printf("cq.resv_head %llu\n", (unsigned long long)(uintptr_t)cq.resv_head);
  printf("cq.ready_head %llu\n", (unsigned long long)(uintptr_t)cq.ready_head);
  SHOW("ibgda", &ib, version); SHOW("ibgda", &ib, num_rc_per_pe);
  SHOW("ibgda", &ib, num_default_rc_per_pe); SHOW("ibgda", &ib, rc_map_type);
  SHOW("ibgda", &ib, num_requests_in_batch); SHOW("ibgda", &ib, log2_cumem_granularity);
  SHOW("ibgda", &ib, num_devices_initialized); SHOW("ibgda", &ib, num_qp_groups);
  SHOW("ibgda", &ib, num_shared_dcis); SHOW("ibgda", &ib, num_exclusive_dcis);
  SHOW("ibgda", &ib, may_skip_cst); SHOW("ibgda", &ib, use_async_postsend);
  SHOW("ibgda", &ib, nic_buf_on_gpumem); SHOW("ibgda", &ib, support_half_av_seg);
  SHOW("ibgda", &ib, dci_map_type); SHOW("ibgda", &ib, ndcts_per_pe);
  SHOW("ibgda", &ib, num_dct_groups); SHOW("ibgda", &ib, use_address_stable_amo);
  SHOW("ibgda", &ib, region_batch_rma_threshold);
  printf("ibgda.region_batch_rma_pending_qps %llu\n",
         (unsigned long long)(uintptr_t)ib.region_batch_rma_pending_qps);
  printf("ibgda.globalmem.dcis %llu\n", (unsigned long long)(uintptr_t)ib.globalmem.dcis);
  printf("ibgda.globalmem.dcts %llu\n", (unsigned long long)(uintptr_t)ib.globalmem.dcts);
  printf("ibgda.globalmem.lkeys %llu\n", (unsigned long long)(uintptr_t)ib.globalmem.lkeys);
  printf("ibgda.globalmem.rkeys %llu\n", (unsigned long long)(uintptr_t)ib.globalmem.rkeys);
  printf("ibgda.globalmem.local_only_mhandle_head %llu\n",
         (unsigned long long)(uintptr_t)ib.globalmem.local_only_mhandle_head);
  SHOW("ibgda", &ib, constmem.lkeys[0].key); SHOW("ibgda", &ib, constmem.lkeys[0].next_addr);
  SHOW("ibgda", &ib, constmem.rkeys[1].key); SHOW("ibgda", &ib, constmem.rkeys[1].next_addr);
  printf("ibgda.globalmem.rcs %llu\n", (unsigned long long)(uintptr_t)ib.globalmem.rcs);
  printf("ibgda.globalmem.cqs %llu\n", (unsigned long long)(uintptr_t)ib.globalmem.cqs);
  printf("ibgda.globalmem.qp_group_switches %llu\n",
         (unsigned long long)(uintptr_t)ib.globalmem.qp_group_switches);
  SHOW("state", &st, version); SHOW("state", &st, mype); SHOW("state", &st, npes);
  SHOW("state", &st, job_connectivity); SHOW("state", &st, heap_size);
  SHOW("state", &st, symmetric_heap_kind); SHOW("state", &st, enable_rail_opt);
  SHOW("state", &st, selected_device_transport); SHOW("state", &st, tma_policy);
  SHOW("state", &st, ibgda_is_initialized); SHOW("state", &st, node_mype);
  SHOW("state", &st, node_npes); SHOW("state", &st, proxy);
  SHOW("state", &st, nvshmemi_is_nvshmem_initialized);
  SHOW("state", &st, nvshmemi_is_nvshmem_bootstrapped);
  SHOW("state", &st, region_slots_len);
  printf("state.region_slots %llu\n", (unsigned long long)(uintptr_t)st.region_slots);
  printf("state.heap_base %llu\n", (unsigned long long)(uintptr_t)st.heap_base);
  printf("state.peer_heap_base_p2p %llu\n", (unsigned long long)(uintptr_t)st.peer_heap_base_p2p);
  printf("state.peer_heap_base_remote %llu\n",
         (unsigned long long)(uintptr_t)st.peer_heap_base_remote);
  printf("state.region_active_count %llu\n",
         (unsigned long long)(uintptr_t)st.region_active_count);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "read") == 0) return read_back();
  using cq_t = nvshmemi_ibgda_device_cq_t;
  using qp_t = nvshmemi_ibgda_device_qp_t;
  using mvars_t = nvshmemi_ibgda_device_qp_management_t;
  using key_t_ = nvshmemi_ibgda_device_key_t;
  using ibgda_t = nvshmemi_ibgda_device_state_t;
  using state_t = nvshmemi_device_host_state_t;
  using job_t = gicbench_nvshmem_job;
  using sample_t = gicbench_nvshmem_sample;

  SIZE(cq_t);
  FIELD(cq_t, version); FIELD(cq_t, qp_type); FIELD(cq_t, dbrec); FIELD(cq_t, cqe);
  FIELD(cq_t, prod_idx); FIELD(cq_t, cons_idx); FIELD(cq_t, resv_head); FIELD(cq_t, ready_head);
  FIELD(cq_t, cqn); FIELD(cq_t, ncqes); FIELD(cq_t, qpn);

  SIZE(mvars_t);
  FIELD(mvars_t, version); FIELD(mvars_t, post_send_lock);
  FIELD(mvars_t, tx_wq.resv_head); FIELD(mvars_t, tx_wq.ready_head);
  FIELD(mvars_t, tx_wq.prod_idx); FIELD(mvars_t, tx_wq.cons_idx);
  FIELD(mvars_t, tx_wq.get_head); FIELD(mvars_t, tx_wq.get_tail);
  FIELD(mvars_t, ibuf.head); FIELD(mvars_t, ibuf.tail);

  SIZE(qp_t);
  FIELD(qp_t, version); FIELD(qp_t, qp_type); FIELD(qp_t, qpn); FIELD(qp_t, dev_idx);
  FIELD(qp_t, ibuf.nslots); FIELD(qp_t, ibuf.buf); FIELD(qp_t, ibuf.lkey); FIELD(qp_t, ibuf.rkey);
  FIELD(qp_t, tx_wq.nwqes); FIELD(qp_t, tx_wq.wqe); FIELD(qp_t, tx_wq.dbrec);
  FIELD(qp_t, tx_wq.bf); FIELD(qp_t, tx_wq.cq); FIELD(qp_t, tx_wq.prod_idx);
  FIELD(qp_t, mvars);
  FIELD(qp_t, mvars.tx_wq.resv_head); FIELD(qp_t, mvars.tx_wq.ready_head);
  FIELD(qp_t, mvars.tx_wq.prod_idx); FIELD(qp_t, mvars.tx_wq.cons_idx);

  using mh_t = nvshmemi_ibgda_device_local_only_mhandle_t;
  SIZE(mh_t);
  FIELD(mh_t, version); FIELD(mh_t, is_sysmem_scope); FIELD(mh_t, start); FIELD(mh_t, end);
  FIELD(mh_t, next); FIELD(mh_t, lkeys);

  SIZE(key_t_);
  FIELD(key_t_, key); FIELD(key_t_, next_addr);

  SIZE(ibgda_t);
  FIELD(ibgda_t, version); FIELD(ibgda_t, num_shared_dcis); FIELD(ibgda_t, num_exclusive_dcis);
  FIELD(ibgda_t, dci_map_type); FIELD(ibgda_t, ndcts_per_pe); FIELD(ibgda_t, num_qp_groups);
  FIELD(ibgda_t, num_dct_groups); FIELD(ibgda_t, num_rc_per_pe); FIELD(ibgda_t, rc_map_type);
  FIELD(ibgda_t, num_requests_in_batch); FIELD(ibgda_t, log2_cumem_granularity);
  FIELD(ibgda_t, num_devices_initialized); FIELD(ibgda_t, nic_buf_on_gpumem);
  FIELD(ibgda_t, support_half_av_seg); FIELD(ibgda_t, may_skip_cst);
  FIELD(ibgda_t, use_async_postsend);
  FIELD(ibgda_t, constmem.lkeys); FIELD(ibgda_t, constmem.rkeys); FIELD(ibgda_t, constmem.dcts);
  FIELD(ibgda_t, globalmem.qp_group_switches); FIELD(ibgda_t, globalmem.cqs);
  FIELD(ibgda_t, globalmem.dcis); FIELD(ibgda_t, globalmem.rcs);
  FIELD(ibgda_t, globalmem.local_only_mhandle_head); FIELD(ibgda_t, globalmem.dcts);
  FIELD(ibgda_t, globalmem.lkeys); FIELD(ibgda_t, globalmem.rkeys);
  FIELD(ibgda_t, num_default_rc_per_pe); FIELD(ibgda_t, use_address_stable_amo);
  FIELD(ibgda_t, extra); FIELD(ibgda_t, region_batch_rma_pending_qps);
  FIELD(ibgda_t, region_batch_rma_threshold);

  SIZE(state_t);
  FIELD(state_t, version); FIELD(state_t, mype); FIELD(state_t, npes);
  FIELD(state_t, node_mype); FIELD(state_t, node_npes); FIELD(state_t, pe_dist);
  FIELD(state_t, proxy); FIELD(state_t, atomics_sync); FIELD(state_t, job_connectivity);
  FIELD(state_t, proxy_ops_are_ordered); FIELD(state_t, atomics_complete_on_quiet);
  FIELD(state_t, heap_base); FIELD(state_t, heap_size); FIELD(state_t, peer_heap_base_p2p);
  FIELD(state_t, peer_heap_base_remote); FIELD(state_t, symmetric_heap_kind);
  FIELD(state_t, enable_rail_opt); FIELD(state_t, atomics_le_min_size);
  FIELD(state_t, timeout); FIELD(state_t, test_wait_any_start_idx_ptr);
  FIELD(state_t, proxy_channels_issue); FIELD(state_t, global_exit_request_state);
  FIELD(state_t, ibgda_is_initialized); FIELD(state_t, nvshmemi_is_nvshmem_initialized);
  FIELD(state_t, nvshmemi_is_nvshmem_bootstrapped); FIELD(state_t, selected_device_transport);
  FIELD(state_t, tma_policy); FIELD(state_t, tma_smem_bases); FIELD(state_t, tma_smem_bases_len);
  FIELD(state_t, tma_smem_size); FIELD(state_t, unicast_le_ids_);
  FIELD(state_t, counted_operations_available); FIELD(state_t, region_slots);
  FIELD(state_t, region_active_count); FIELD(state_t, region_slots_len);
  FIELD(state_t, region_slot_probe_limit);

  SIZE(job_t);
  FIELD(job_t, dst); FIELD(job_t, src); FIELD(job_t, sig); FIELD(job_t, value);
  FIELD(job_t, size); FIELD(job_t, iters); FIELD(job_t, pe); FIELD(job_t, stride);
  SIZE(sample_t);
  FIELD(sample_t, issue); FIELD(sample_t, complete); FIELD(sample_t, issue_ns);
  FIELD(sample_t, complete_ns);

  CONST(NVSHMEMI_IBGDA_DEVICE_QP_TYPE_DCI); CONST(NVSHMEMI_IBGDA_DEVICE_QP_TYPE_RC);
  CONST(NVSHMEMI_IBGDA_DEVICE_QP_MAP_TYPE_CTA); CONST(NVSHMEMI_IBGDA_DEVICE_QP_MAP_TYPE_SM);
  CONST(NVSHMEMI_IBGDA_DEVICE_QP_MAP_TYPE_WARP); CONST(NVSHMEMI_IBGDA_DEVICE_QP_MAP_TYPE_NONE);
  CONST(NVSHMEMI_DEVICE_TRANSPORT_TYPE_IBGDA); CONST(NVSHMEMI_JOB_GPU_LDST);
  CONST(NVSHMEMI_JOB_GPU_PROXY); CONST(NVSHMEMI_PROXY_NONE); CONST(NVSHMEMX_TMA_DISABLE);
  CONST(NVSHMEMI_IBGDA_MAX_CONST_LKEYS); CONST(NVSHMEMI_IBGDA_MAX_CONST_RKEYS);
  CONST(NVSHMEMI_IBGDA_MIN_QP_DEPTH); CONST(NVSHMEMI_IBGDA_MAX_QP_DEPTH);
  CONST(NVSHMEMI_IBGDA_IBUF_SLOT_SIZE);
  CONST(NVSHMEMX_QP_DEFAULT); CONST(NVSHMEMX_QP_ALL); CONST(NVSHMEMX_PE_ANY);
  CONST(NVSHMEM_SIGNAL_ADD);
  return 0;
}
