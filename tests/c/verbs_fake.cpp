// The native loops that post through VerbsPoster, over a fake provider, for machines without an
// RDMA device: the host submitter's verbs loops (native/src/verbs_loops.cpp) and mini-proxy's
// workers on verbs lanes (proxy/src/proxy_verbs.cpp, fed by its host producers). ibv_post_send
// and ibv_poll_cq are inline calls through the context's ops table, so a table of our own stands
// in for a NIC. A posted write lands at once (memcpy to its remote address); a signaled one
// queues its completion, handed out a few at a time by poll_cq (so the loops reap and wait for
// room). Each scenario prints one JSON object: the loop's result, its error record and what the
// fake saw (chains, signaled work requests, where each write landed).
// tests/test_verbs_loops_fake.py builds this with g++ and checks them.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "interrupt.hpp"
#include "proxy_engine.hpp"
#include "proxy_host.hpp"
#include "verbs_loops.hpp"

using namespace gicbench;

namespace {

struct FakeCq {
  ibv_cq cq{};
  std::deque<ibv_wc> ready;
  int per_poll = 16;  // completions one poll_cq hands out at most
  bool hold = false;  // completions never come (timeouts)
  bool fail = false;  // poll_cq returns an error
};

struct FakeQp {
  ibv_qp qp{};
  FakeCq* cq = nullptr;
  uint32_t depth = 64;           // what ibv_query_qp reports as max_send_wr
  long fail_post = -1;           // this post_send call (0-based) fails with ENOMEM
  uint64_t error_wr = 0;         // the completion of this wr_id carries an error status
  uint64_t echo_word = 0;        // respond: after each landing, store its sequence + 1 here
  uint32_t echo_size = 0;
  // what the fake saw
  long posts = 0;
  std::vector<uint32_t> chains;  // work requests per post_send
  uint64_t signaled = 0, unsignaled = 0, inlined = 0;
  std::vector<uint64_t> offsets;  // remote address - remote base of every write, in order
  uint64_t remote_base = 0;
  uint64_t last_wr_id = 0;
  bool wr_ids_cumulative = true;  // each wr_id = this QP's work requests so far
};

std::map<ibv_qp*, FakeQp*> g_qps;
ibv_context g_ctx{};

int fake_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  FakeQp& f = *g_qps.at(qp);
  if (f.posts++ == f.fail_post) {
    *bad = wr;
    return ENOMEM;
  }
  uint32_t n = 0;
  for (; wr != nullptr; wr = wr->next, ++n) {
    const ibv_sge& s = wr->sg_list[0];
    std::memcpy(reinterpret_cast<void*>(wr->wr.rdma.remote_addr),
                reinterpret_cast<const void*>(s.addr), s.length);
    f.offsets.push_back(wr->wr.rdma.remote_addr - f.remote_base);
    if (wr->wr_id != f.last_wr_id + 1) f.wr_ids_cumulative = false;
    f.last_wr_id = wr->wr_id;
    if (wr->send_flags & IBV_SEND_INLINE) ++f.inlined;
    if (f.echo_word != 0) {
      uint64_t seq;
      std::memcpy(&seq, reinterpret_cast<const void*>(s.addr + f.echo_size - 8), 8);
      __atomic_store_n(reinterpret_cast<uint64_t*>(f.echo_word), seq + 1, __ATOMIC_RELEASE);
    }
    if (!(wr->send_flags & IBV_SEND_SIGNALED)) {
      ++f.unsignaled;
      continue;
    }
    ++f.signaled;
    ibv_wc wc{};
    wc.wr_id = wr->wr_id;
    wc.status = wr->wr_id == f.error_wr ? IBV_WC_REM_ACCESS_ERR : IBV_WC_SUCCESS;
    wc.vendor_err = wc.status == IBV_WC_SUCCESS ? 0 : 0x88;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.qp_num = qp->qp_num;
    f.cq->ready.push_back(wc);
  }
  f.chains.push_back(n);
  return 0;
}

int fake_poll_cq(ibv_cq* cq, int num, ibv_wc* wc) {
  FakeCq& c = *reinterpret_cast<FakeCq*>(cq);  // cq is FakeCq's first member
  if (c.fail) return -1;
  if (c.hold) return 0;
  int got = 0;
  while (got < num && got < c.per_poll && !c.ready.empty()) {
    wc[got++] = c.ready.front();
    c.ready.pop_front();
  }
  return got;
}

}  // namespace

// libibverbs' exported calls the loops make, answered by the fake (the test links no libibverbs).
extern "C" int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  *attr = ibv_qp_attr{};
  *init = ibv_qp_init_attr{};
  init->cap.max_send_wr = g_qps.at(qp)->depth;
  return 0;
}
extern "C" const char* ibv_wc_status_str(ibv_wc_status s) {
  return s == IBV_WC_REM_ACCESS_ERR ? "remote access error" : "some status";
}

namespace {

struct Region {
  std::vector<uint8_t> mem;
  verbs::Side side(uint32_t key) { return verbs::Side{reinterpret_cast<uint64_t>(mem.data()), key, mem.size()}; }
  uint64_t word(size_t at) const {
    uint64_t v;
    std::memcpy(&v, mem.data() + at, 8);
    return v;
  }
};

struct Rig {
  FakeCq cq;
  FakeQp qp;
  Region src, dst;
  Rig(uint32_t qpn, size_t bytes) {
    cq.cq.context = &g_ctx;
    qp.qp.context = &g_ctx;
    qp.qp.qp_num = qpn;
    qp.qp.send_cq = &cq.cq;
    qp.cq = &cq;
    g_qps[&qp.qp] = &qp;
    src.mem.assign(bytes, 0);
    dst.mem.assign(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) src.mem[i] = static_cast<uint8_t>(i * 7 + qpn);
    qp.remote_base = reinterpret_cast<uint64_t>(dst.mem.data());
  }
  ~Rig() { g_qps.erase(&qp.qp); }
  verbs::Queue queue() { return verbs::Queue{&qp.qp, &cq.cq, qp.qp.qp_num}; }
};

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) o += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return o;
}

void print_err(const LoopError& e) {
  printf("\"err\": {\"failed\": %d, \"kind\": \"%s\", \"field\": \"%s\", "
         "\"message\": \"%s\", \"qpn\": %u, "
         "\"posted\": %llu, \"completed\": %llu, \"status\": %d, \"vendor_err\": %u, "
         "\"wr_id\": %llu, \"wc_qpn\": %u, \"word_seen\": %llu, \"word_expected\": %llu, "
         "\"done\": %llu, \"total\": %llu}",
         e.failed, esc(e.kind).c_str(), esc(e.field).c_str(), esc(e.message).c_str(), e.qpn,
         (unsigned long long)e.pi, (unsigned long long)e.retired, e.wc_status, e.vendor_err,
         (unsigned long long)e.wr_id, e.wc_qpn, (unsigned long long)e.word_seen,
         (unsigned long long)e.word_expected, (unsigned long long)e.done,
         (unsigned long long)e.total);
}

void print_qp(const FakeQp& f) {
  printf("{\"posts\": %ld, \"signaled\": %llu, \"unsignaled\": %llu, \"inlined\": %llu, "
         "\"wr_ids_cumulative\": %d, \"chains\": [",
         f.posts, (unsigned long long)f.signaled, (unsigned long long)f.unsignaled,
         (unsigned long long)f.inlined, f.wr_ids_cumulative);
  for (size_t i = 0; i < f.chains.size(); ++i) printf("%s%u", i ? ", " : "", f.chains[i]);
  printf("], \"offsets\": [");
  for (size_t i = 0; i < f.offsets.size(); ++i)
    printf("%s%llu", i ? ", " : "", (unsigned long long)f.offsets[i]);
  printf("]}");
}

constexpr uint64_t kTimeout = 20'000'000;  // 20 ms: the failure scenarios wait this long

// single-op: mode 0 issue, 1 put+completion, 2 round trip (the reply word is the landing's last
// word: the fake lands the request at once, so the "reply" is the request itself), or with
// `reply_elsewhere` a word nobody writes (a reply that never comes).
void single_op(const char* name, int mode, bool inline_payload, uint32_t size, uint64_t iters,
               uint64_t warmup, bool reply_elsewhere = false, bool hold = false,
               uint64_t error_wr = 0, bool interrupt = false) {
  Rig r(0x11, 4096);
  r.cq.hold = hold;
  r.qp.error_wr = error_wr;
  Region other;
  other.mem.assign(4096, 0);
  verbs::LatencyArgs a;
  a.q = r.queue();
  a.mode = mode;
  a.src = r.src.side(1);
  a.dst = r.dst.side(2);
  a.reply = reply_elsewhere ? other.side(3) : r.dst.side(2);
  a.size = size;
  a.inline_payload = inline_payload;
  a.iters = iters;
  a.warmup = warmup;
  a.timeout_ns = kTimeout;
  std::vector<int64_t> samples(iters, -1);
  LoopError err;
  g_interrupt.store(interrupt ? 1 : 0);
  const bool ok = verbs::single_op(a, samples.data(), err);
  g_interrupt.store(0);
  int64_t neg = 0;
  for (auto s : samples) neg += s < 0;
  printf("{\"name\": \"%s\", \"ok\": %d, \"negative_samples\": %lld, \"last_word\": %llu, ", name,
         ok, (long long)neg, (unsigned long long)r.dst.word(size - 8));
  print_err(err);
  printf(", \"qp\": ");
  print_qp(r.qp);
  printf("}\n");
}

void respond(const char* name, uint64_t count, bool hold = false, bool never_asked = false) {
  Rig r(0x22, 4096);
  r.cq.hold = hold;
  Region watch;
  watch.mem.assign(64, 0);
  const uint32_t size = 32;
  const uint64_t watch_word = reinterpret_cast<uint64_t>(watch.mem.data()) + size - 8;
  // The first request is there already; each answer brings the next (the fake's echo).
  if (!never_asked) {
    const uint64_t one = 1;
    std::memcpy(watch.mem.data() + size - 8, &one, 8);
    r.qp.echo_word = watch_word;
    r.qp.echo_size = size;
  }
  verbs::RespondArgs a;
  a.q = r.queue();
  a.src = r.src.side(1);
  a.dst = r.dst.side(2);
  a.watch = watch.side(3);
  a.size = size;
  a.inline_payload = false;
  a.count = count;
  a.timeout_ns = kTimeout;
  LoopError err;
  const bool ok = verbs::respond(a, err);
  printf("{\"name\": \"%s\", \"ok\": %d, \"last_word\": %llu, ", name, ok,
         (unsigned long long)r.dst.word(size - 8));
  print_err(err);
  printf(", \"qp\": ");
  print_qp(r.qp);
  printf("}\n");
}

struct RateSetup {
  uint32_t lanes = 3, depth = 16, batch = 5, size = 8, per_poll = 3;
  bool inline_payload = true;
  uint64_t messages = 1000, warmup = 37, window = 100;
  long fail_post = -1;
  bool hold = false, interrupt = false;
};

void msg_rate(const char* name, const RateSetup& s) {
  std::vector<Rig*> rigs;
  std::vector<verbs::RateLane> lanes;
  for (uint32_t i = 0; i < s.lanes; ++i) {
    Rig* r = new Rig(0x100 + i, 256);
    r->qp.depth = s.depth;
    r->cq.per_poll = s.per_poll;
    r->cq.hold = s.hold;
    if (i == 1) r->qp.fail_post = s.fail_post;
    rigs.push_back(r);
    verbs::RateLane l;
    l.q = r->queue();
    l.src = r->src.side(10 + i);
    l.dst = r->dst.side(20 + i);
    lanes.push_back(l);
  }
  verbs::RateArgs a;
  a.batch = s.batch;
  a.size = s.size;
  a.inline_payload = s.inline_payload;
  a.messages = s.messages;
  a.warmup = s.warmup;
  a.window = s.window;
  a.timeout_ns = kTimeout;
  std::vector<int64_t> windows;
  verbs::RateStats st;
  LoopError err;
  g_interrupt.store(s.interrupt ? 1 : 0);
  const bool ok = verbs::msg_rate(lanes, a, windows, st, err);
  g_interrupt.store(0);
  int64_t neg = 0;
  for (auto w : windows) neg += w < 0;
  printf("{\"name\": \"%s\", \"ok\": %d, \"windows\": %zu, \"negative_windows\": %lld, "
         "\"elapsed_positive\": %d, \"messages\": %llu, \"doorbells\": %llu, \"cqes\": %llu, ",
         name, ok, windows.size(), (long long)neg, st.elapsed_ns > 0,
         (unsigned long long)st.messages, (unsigned long long)st.doorbells,
         (unsigned long long)st.cqes);
  print_err(err);
  printf(", \"lanes\": [");
  for (size_t i = 0; i < rigs.size(); ++i) {
    printf("%s", i ? ", " : "");
    print_qp(rigs[i]->qp);
  }
  printf("]}\n");
  for (Rig* r : rigs) delete r;
}

// mini-proxy: `workers` workers over `lanes` verbs lanes and `rings` rings, one host producer per
// ring (tuned handoff), `per_producer` descriptors each.
void proxy_rate(const char* name, uint32_t workers, uint32_t lanes, uint32_t rings,
                uint32_t batch, uint64_t per_producer) {
  std::vector<Rig*> rigs;
  std::vector<host::Lane> ls;
  std::vector<proxy::VerbsQueues> qs;
  const uint32_t size = 16;
  for (uint32_t i = 0; i < lanes; ++i) {
    Rig* r = new Rig(0x200 + i, 1024);
    r->qp.depth = 32;
    r->cq.per_poll = 2;
    rigs.push_back(r);
    host::Lane l{};
    l.sq.wqebb_cnt = 32;  // a verbs lane's SQ depth in work requests
    l.sq.qpn = 0x200 + i;
    l.cq.ncqe = 8;  // chains in flight at most
    l.src = r->src.side(30 + i);
    l.dst = r->dst.side(40 + i);
    ls.push_back(l);
    qs.push_back(proxy::VerbsQueues{&r->qp.qp, &r->cq.cq, 64});
  }
  proxy::EngineConfig c;
  c.workers = workers;
  c.rings = rings;
  c.batch = batch;
  c.depth = 64;
  c.max_size = size;
  c.inline_payload = false;
  c.timeout_ns = 2'000'000'000;
  proxy::Engine e(ls, qs, c);
  proxy::EngineError err;
  proxy::RateResult res;
  bool ok = e.init(err) && e.start(err);
  if (ok) {
    proxy::RateArgs a;
    a.producers = rings;
    a.handoff = proxy::Handoff::kTuned;
    a.size = size;
    a.messages_per_producer = per_producer;
    a.window = per_producer;
    ok = proxy::rate(e, a, res, err);
  }
  proxy::EngineError stop_err;
  const bool stopped = e.stop(stop_err);
  if (ok && !stopped) err = stop_err;
  uint64_t carried = 0;
  for (auto m : res.ring_messages) carried += m;
  printf("{\"name\": \"%s\", \"ok\": %d, \"stopped\": %d, \"messages\": %llu, "
         "\"carried\": %llu, ",
         name, ok, stopped, (unsigned long long)res.messages, (unsigned long long)carried);
  print_err(err);
  printf(", \"lanes\": [");
  for (size_t i = 0; i < rigs.size(); ++i) {
    printf("%s", i ? ", " : "");
    print_qp(rigs[i]->qp);
  }
  printf("]}\n");
  for (Rig* r : rigs) delete r;
}

}  // namespace

int main() {
  g_ctx.ops.post_send = fake_post_send;
  g_ctx.ops.poll_cq = fake_poll_cq;
  for (int mode = 0; mode < 3; ++mode) {
    const std::string m = std::to_string(mode);
    single_op(("single_op_inline_" + m).c_str(), mode, true, 64, 50, 5);
    single_op(("single_op_pointer_" + m).c_str(), mode, false, 256, 20, 0);
  }
  single_op("single_op_timeout", 1, false, 64, 5, 0, false, true);
  single_op("single_op_no_reply", 2, false, 64, 5, 0, true);
  single_op("single_op_cqe_error", 1, false, 64, 10, 0, false, false, 3);
  single_op("single_op_interrupted", 1, false, 64, 10, 0, false, false, 0, true);
  respond("respond", 20);
  respond("respond_never_asked", 3, false, true);
  respond("respond_timeout", 3, true);
  RateSetup s;
  msg_rate("rate", s);
  RateSetup w0 = s;
  w0.warmup = 0;
  w0.inline_payload = false;
  w0.size = 24;  // 256-byte regions: 10 slots, the offsets wrap
  msg_rate("rate_pointer_no_warmup", w0);
  RateSetup full = s;
  full.batch = 16;  // a chain the size of the SQ: every work request signaled
  full.lanes = 1;
  msg_rate("rate_batch_is_depth", full);
  RateSetup near = s;
  near.batch = 15;  // more than depth - depth/4 + 1: every wait for room must still end
  near.lanes = 1;
  msg_rate("rate_batch_near_depth", near);
  RateSetup big = s;
  big.batch = 17;
  msg_rate("rate_batch_too_big", big);
  RateSetup pf = s;
  pf.fail_post = 2;
  msg_rate("rate_post_failed", pf);
  RateSetup to = s;
  to.hold = true;
  msg_rate("rate_timeout", to);
  RateSetup in = s;
  in.interrupt = true;
  msg_rate("rate_interrupted", in);
  proxy_rate("proxy_one_worker", 1, 2, 2, 4, 3000);
  proxy_rate("proxy_two_workers", 2, 4, 4, 16, 2000);
  return 0;
}
