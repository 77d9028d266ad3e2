/* The mlx5 wire format as rdma-core defines it, printed as JSON for gicbench's tests.
 *
 * Built by tests/test_wire_rdma_core.py against the system's <infiniband/mlx5dv.h> (Debian's
 * libibverbs-dev). Prints one JSON object:
 *   "fields":  {"struct.field": [offsetof, sizeof], ...} for every field gicbench reads or writes
 *   "sizes":   {"struct": sizeof}
 *   "enums":   {"MLX5_...": value}
 *   "results": one hex string per command line read from stdin, in order:
 *     ctrl   pi opcode opmod qpn fm_ce_se ds signature imm   mlx5dv_set_ctrl_seg on a zeroed seg
 *     ctrlx  (same arguments)                                 mlx5dv_x86_set_ctrl_seg (SSSE3), else ""
 *     data   length lkey addr                                 mlx5dv_set_data_seg
 *     raddr  raddr rkey                                       fields, htobe*
 *     atomic swap_add compare                                 fields, htobe*
 *     mfa4   add field_boundary                               4-byte masked fetch-add segment
 *     mfa8   add field_boundary                               8-byte one (mlx5_wqe_atomic_seg)
 *     mcs4   swap compare swap_mask compare_mask              4-byte masked compare-and-swap
 *     mcs8   swap compare swap_mask compare_mask              mlx5_wqe_masked_atomic_seg (32 B)
 *     inline length                                           mlx5_wqe_inl_data_seg header (4 B)
 *     av     key dqp_dct ext stat_rate_sl fl_mlid rlid rmac_hex tclass hop_limit grh_gid_fl rgid_hex
 *                                                             mlx5dv_set_dgram_seg (48 B)
 *     cqe    opcode owner wqe_counter byte_cnt qpn wqe_opcode imm timestamp
 *                                                             mlx5_cqe64 fields (imm as passed)
 *     errcqe opcode owner syndrome vendor_synd qpn wqe_opcode wqe_counter
 *                                                             mlx5_err_cqe fields
 *     dbrec  pi                                               qp->db[MLX5_SND_DBR] as qp.c stores it
 *     cqci   ci                                               cq->dbrec[MLX5_CQ_SET_CI] as cq.c
 *                                                             (index 0: private to the provider)
 * Numbers are C literals (strtoull base 0); *_hex are plain hex byte strings.
 *   "masked_fields": the same [offsetof, sizeof] for the extended atomic segments below.
 */
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>

/* Extended (masked) atomic segments. rdma-core declares the 8-byte masked compare-and-swap one
 * in its provider's private header (providers/mlx5/wqe.h: struct mlx5_wqe_masked_atomic_seg,
 * swap_add, compare, swap_add_mask, compare_mask, each 64 bits), which libibverbs-dev does not
 * install: the same four fields are declared here under that name. The 8-byte masked fetch-add
 * uses struct mlx5_wqe_atomic_seg (swap_add = add, compare = field boundary). The 4-byte forms
 * are the PRM's and have no rdma-core struct: declared as NVSHMEM's IBGDA headers lay them out
 * (add, field boundary, 8 reserved bytes; swap, compare, swap mask, compare mask). */
struct mlx5_wqe_masked_atomic_seg {
  __be64 swap_add;
  __be64 compare;
  __be64 swap_add_mask;
  __be64 compare_mask;
};
struct ext_atomic32_fa_seg {
  __be32 add;
  __be32 field_boundary;
  uint64_t reserved;
};
struct ext_atomic32_cs_seg {
  __be32 swap;
  __be32 compare;
  __be32 swap_mask;
  __be32 compare_mask;
};

#define FIELD(T, f) \
  printf("%s\"%s.%s\": [%zu, %zu]", sep(), #T, #f, offsetof(struct T, f), sizeof(((struct T*)0)->f))
#define SIZE(T) printf("%s\"%s\": %zu", sep(), #T, sizeof(struct T))
#define ENUM(e) printf("%s\"%s\": %lld", sep(), #e, (long long)(e))

static int first = 1;
static const char* sep(void) {
  const char* s = first ? "" : ", ";
  first = 0;
  return s;
}

static void fields(void) {
  first = 1;
  printf("\"fields\": {");
  FIELD(mlx5_wqe_ctrl_seg, opmod_idx_opcode);
  FIELD(mlx5_wqe_ctrl_seg, qpn_ds);
  FIELD(mlx5_wqe_ctrl_seg, signature);
  FIELD(mlx5_wqe_ctrl_seg, dci_stream_channel_id);
  FIELD(mlx5_wqe_ctrl_seg, fm_ce_se);
  FIELD(mlx5_wqe_ctrl_seg, imm);
  FIELD(mlx5_wqe_raddr_seg, raddr);
  FIELD(mlx5_wqe_raddr_seg, rkey);
  FIELD(mlx5_wqe_raddr_seg, reserved);
  FIELD(mlx5_wqe_data_seg, byte_count);
  FIELD(mlx5_wqe_data_seg, lkey);
  FIELD(mlx5_wqe_data_seg, addr);
  FIELD(mlx5_wqe_inl_data_seg, byte_count);
  FIELD(mlx5_wqe_atomic_seg, swap_add);
  FIELD(mlx5_wqe_atomic_seg, compare);
  FIELD(mlx5_wqe_av, key.dc_key);
  FIELD(mlx5_wqe_av, dqp_dct);
  FIELD(mlx5_wqe_av, stat_rate_sl);
  FIELD(mlx5_wqe_av, fl_mlid);
  FIELD(mlx5_wqe_av, rlid);
  FIELD(mlx5_wqe_av, reserved0);
  FIELD(mlx5_wqe_av, rmac);
  FIELD(mlx5_wqe_av, tclass);
  FIELD(mlx5_wqe_av, hop_limit);
  FIELD(mlx5_wqe_av, grh_gid_fl);
  FIELD(mlx5_wqe_av, rgid);
  FIELD(mlx5_cqe64, imm_inval_pkey);
  FIELD(mlx5_cqe64, byte_cnt);
  FIELD(mlx5_cqe64, timestamp);
  FIELD(mlx5_cqe64, sop_drop_qpn);
  FIELD(mlx5_cqe64, wqe_counter);
  FIELD(mlx5_cqe64, signature);
  FIELD(mlx5_cqe64, op_own);
  FIELD(mlx5_err_cqe, vendor_err_synd);
  FIELD(mlx5_err_cqe, syndrome);
  FIELD(mlx5_err_cqe, s_wqe_opcode_qpn);
  FIELD(mlx5_err_cqe, wqe_counter);
  FIELD(mlx5_err_cqe, signature);
  FIELD(mlx5_err_cqe, op_own);
  printf("}");
}

static void masked_fields(void) {
  first = 1;
  printf("\"masked_fields\": {");
  FIELD(mlx5_wqe_masked_atomic_seg, swap_add);
  FIELD(mlx5_wqe_masked_atomic_seg, compare);
  FIELD(mlx5_wqe_masked_atomic_seg, swap_add_mask);
  FIELD(mlx5_wqe_masked_atomic_seg, compare_mask);
  FIELD(ext_atomic32_fa_seg, add);
  FIELD(ext_atomic32_fa_seg, field_boundary);
  FIELD(ext_atomic32_fa_seg, reserved);
  FIELD(ext_atomic32_cs_seg, swap);
  FIELD(ext_atomic32_cs_seg, compare);
  FIELD(ext_atomic32_cs_seg, swap_mask);
  FIELD(ext_atomic32_cs_seg, compare_mask);
  printf("}");
}

static void sizes(void) {
  first = 1;
  printf("\"sizes\": {");
  SIZE(mlx5_wqe_ctrl_seg);
  SIZE(mlx5_wqe_raddr_seg);
  SIZE(mlx5_wqe_data_seg);
  SIZE(mlx5_wqe_inl_data_seg);
  SIZE(mlx5_wqe_atomic_seg);
  SIZE(mlx5_wqe_av);
  SIZE(mlx5_cqe64);
  SIZE(mlx5_err_cqe);
  printf("}");
}

static void enums(void) {
  first = 1;
  printf("\"enums\": {");
  ENUM(MLX5_OPCODE_NOP);
  ENUM(MLX5_OPCODE_RDMA_WRITE);
  ENUM(MLX5_OPCODE_RDMA_WRITE_IMM);
  ENUM(MLX5_OPCODE_SEND);
  ENUM(MLX5_OPCODE_SEND_IMM);
  ENUM(MLX5_OPCODE_RDMA_READ);
  ENUM(MLX5_OPCODE_ATOMIC_CS);
  ENUM(MLX5_OPCODE_ATOMIC_FA);
  ENUM(MLX5_OPCODE_ATOMIC_MASKED_CS);
  ENUM(MLX5_OPCODE_ATOMIC_MASKED_FA);
  ENUM(MLX5_WQE_CTRL_CQ_UPDATE);
  ENUM(MLX5_WQE_CTRL_SOLICITED);
  ENUM(MLX5_WQE_CTRL_FENCE);
  ENUM(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE);
  ENUM(MLX5_SEND_WQE_BB);
  ENUM(MLX5_SEND_WQE_SHIFT);
  ENUM(MLX5_INLINE_SEG);
  ENUM(MLX5_EXTENDED_UD_AV);
  ENUM(MLX5_SND_DBR);
  ENUM(MLX5_RCV_DBR);
  ENUM(MLX5_CQE_OWNER_MASK);
  ENUM(MLX5_CQE_REQ);
  ENUM(MLX5_CQE_RESP_WR_IMM);
  ENUM(MLX5_CQE_RESP_SEND);
  ENUM(MLX5_CQE_RESP_SEND_IMM);
  ENUM(MLX5_CQE_REQ_ERR);
  ENUM(MLX5_CQE_RESP_ERR);
  ENUM(MLX5_CQE_INVALID);
  ENUM(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
  ENUM(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
  ENUM(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
  ENUM(MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  ENUM(MLX5_CQE_SYNDROME_BAD_RESP_ERR);
  ENUM(MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
  ENUM(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
  ENUM(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  ENUM(MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
  ENUM(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
  ENUM(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
  ENUM(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR);
  printf("}");
}

static void put_hex(const void* p, size_t n) {
  const uint8_t* b = p;
  putchar('"');
  for (size_t i = 0; i < n; ++i) printf("%02x", b[i]);
  putchar('"');
}

static void get_hex(const char* s, uint8_t* out, size_t n) {
  memset(out, 0, n);
  for (size_t i = 0; i < n && s[2 * i] && s[2 * i + 1]; ++i) {
    char two[3] = {s[2 * i], s[2 * i + 1], 0};
    out[i] = (uint8_t)strtoul(two, NULL, 16);
  }
}

#define MAXARG 16
/* One command line -> one hex result (printed). Returns 0 on an unknown command. */
static int run(char* line) {
  char* tok[MAXARG + 1];
  int n = 0;
  for (char* t = strtok(line, " \t\n"); t && n <= MAXARG; t = strtok(NULL, " \t\n")) tok[n++] = t;
  if (n == 0) return 1;
  uint64_t a[MAXARG] = {0};
  for (int i = 1; i < n; ++i) a[i - 1] = strtoull(tok[i], NULL, 0);
  const char* cmd = tok[0];
  if (!strcmp(cmd, "ctrl")) {
    struct mlx5_wqe_ctrl_seg s;
    memset(&s, 0, sizeof s);
    mlx5dv_set_ctrl_seg(&s, (uint16_t)a[0], (uint8_t)a[1], (uint8_t)a[2], (uint32_t)a[3],
                        (uint8_t)a[4], (uint8_t)a[5], (uint8_t)a[6], (uint32_t)a[7]);
    put_hex(&s, sizeof s);
  } else if (!strcmp(cmd, "ctrlx")) {
#if defined(__SSSE3__)
    struct mlx5_wqe_ctrl_seg s __attribute__((aligned(16)));
    memset(&s, 0, sizeof s);
    mlx5dv_x86_set_ctrl_seg(&s, (uint16_t)a[0], (uint8_t)a[1], (uint8_t)a[2], (uint32_t)a[3],
                            (uint8_t)a[4], (uint8_t)a[5], (uint8_t)a[6], (uint32_t)a[7]);
    put_hex(&s, sizeof s);
#else
    printf("\"\"");
#endif
  } else if (!strcmp(cmd, "data")) {
    struct mlx5_wqe_data_seg s;
    memset(&s, 0, sizeof s);
    mlx5dv_set_data_seg(&s, (uint32_t)a[0], (uint32_t)a[1], (uintptr_t)a[2]);
    put_hex(&s, sizeof s);
  } else if (!strcmp(cmd, "raddr")) {
    struct mlx5_wqe_raddr_seg s;
    memset(&s, 0, sizeof s);
    s.raddr = htobe64(a[0]);
    s.rkey = htobe32((uint32_t)a[1]);
    put_hex(&s, sizeof s);
  } else if (!strcmp(cmd, "atomic")) {
    struct mlx5_wqe_atomic_seg s;
    memset(&s, 0, sizeof s);
    s.swap_add = htobe64(a[0]);
    s.compare = htobe64(a[1]);
    put_hex(&s, sizeof s);
  } else if (!strcmp(cmd, "mfa4")) {
    struct ext_atomic32_fa_seg s;
    memset(&s, 0, sizeof s);
    s.add = htobe32((uint32_t)a[0]);
    s.field_boundary = htobe32((uint32_t)a[1]);
    put_hex(&s, sizeof s);
  } else if (!strcmp(cmd, "mfa8")) {
    struct mlx5_wqe_atomic_seg s;
    memset(&s, 0, sizeof s);
    s.swap_add = htobe64(a[0]);
    s.compare = htobe64(a[1]);
    put_hex(&s, sizeof s);
  } else if (!strcmp(cmd, "mcs4")) {
    struct ext_atomic32_cs_seg s;
    memset(&s, 0, sizeof s);
    s.swap = htobe32((uint32_t)a[0]);
    s.compare = htobe32((uint32_t)a[1]);
    s.swap_mask = htobe32((uint32_t)a[2]);
    s.compare_mask = htobe32((uint32_t)a[3]);
    put_hex(&s, sizeof s);
  } else if (!strcmp(cmd, "mcs8")) {
    struct mlx5_wqe_masked_atomic_seg s;
    memset(&s, 0, sizeof s);
    s.swap_add = htobe64(a[0]);
    s.compare = htobe64(a[1]);
    s.swap_add_mask = htobe64(a[2]);
    s.compare_mask = htobe64(a[3]);
    put_hex(&s, sizeof s);
  } else if (!strcmp(cmd, "inline")) {
    struct mlx5_wqe_inl_data_seg s;
    s.byte_count = htobe32((uint32_t)a[0] | MLX5_INLINE_SEG);
    put_hex(&s, sizeof s);
  } else if (!strcmp(cmd, "av")) {
    if (n < 12) return 0;
    struct mlx5_wqe_datagram_seg s;
    uint8_t rmac[6], rgid[16];
    memset(&s, 0, sizeof s);
    get_hex(tok[7], rmac, sizeof rmac);
    get_hex(tok[11], rgid, sizeof rgid);
    mlx5dv_set_dgram_seg(&s, a[0], (uint32_t)a[1], (uint8_t)a[2], (uint8_t)a[3], (uint8_t)a[4],
                         (uint16_t)a[5], rmac, (uint8_t)a[7], (uint8_t)a[8], (uint32_t)a[9], rgid);
    put_hex(&s, sizeof s);
  } else if (!strcmp(cmd, "cqe")) {
    struct mlx5_cqe64 c;
    memset(&c, 0, sizeof c);
    c.op_own = (uint8_t)((a[0] << 4) | (a[1] & MLX5_CQE_OWNER_MASK));
    c.wqe_counter = htobe16((uint16_t)a[2]);
    c.byte_cnt = htobe32((uint32_t)a[3]);
    c.sop_drop_qpn = htobe32((uint32_t)((a[5] << 24) | (a[4] & 0xffffff)));
    c.imm_inval_pkey = (uint32_t)a[6]; /* raw: verbs' wc.imm_data is this __be32 as is */
    c.timestamp = htobe64(a[7]);
    put_hex(&c, sizeof c);
  } else if (!strcmp(cmd, "errcqe")) {
    struct mlx5_err_cqe c;
    memset(&c, 0, sizeof c);
    c.op_own = (uint8_t)((a[0] << 4) | (a[1] & MLX5_CQE_OWNER_MASK));
    c.syndrome = (uint8_t)a[2];
    c.vendor_err_synd = (uint8_t)a[3];
    c.s_wqe_opcode_qpn = htobe32((uint32_t)((a[5] << 24) | (a[4] & 0xffffff)));
    c.wqe_counter = htobe16((uint16_t)a[6]);
    put_hex(&c, sizeof c);
  } else if (!strcmp(cmd, "dbrec")) {
    uint32_t db[2] = {0, 0};
    db[MLX5_SND_DBR] = htobe32((uint32_t)a[0] & 0xffff);
    put_hex(&db[MLX5_SND_DBR], 4);
  } else if (!strcmp(cmd, "cqci")) {
    const uint32_t ci = htobe32((uint32_t)a[0] & 0xffffff);
    put_hex(&ci, 4);
  } else {
    return 0;
  }
  return 1;
}

int main(void) {
  printf("{");
  fields();
  printf(", ");
  sizes();
  printf(", ");
  enums();
  printf(", ");
  masked_fields();
  printf(", \"results\": [");
  char line[1024];
  int count = 0;
  while (fgets(line, sizeof line, stdin)) {
    if (line[0] == '\n' || line[0] == '#') continue;
    if (count++) printf(", ");
    char copy[1024];
    strcpy(copy, line);
    if (!run(line)) {
      fprintf(stderr, "mlx5_layout: bad command: %s", copy);
      return 2;
    }
  }
  printf("]}\n");
  return 0;
}
