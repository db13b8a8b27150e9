#include "transport/rdma/verbs/verbs_qp.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include "transport/rdma/sys.hpp"
#include "transport/wait/spin.hpp"

namespace l5pg::rdma::verbs {
namespace {

constexpr int kPollBatch = 16;

[[nodiscard]] WcStatus map_status(ibv_wc_status s) noexcept {
    switch (s) {
        case IBV_WC_SUCCESS:
            return WcStatus::Success;
        case IBV_WC_LOC_PROT_ERR:
        case IBV_WC_LOC_ACCESS_ERR:
        case IBV_WC_LOC_LEN_ERR:
            return WcStatus::LocalProtectionError;
        case IBV_WC_REM_ACCESS_ERR:
            return WcStatus::RemoteAccessError;
        case IBV_WC_REM_INV_REQ_ERR:
        case IBV_WC_REM_INV_RD_REQ_ERR:
            return WcStatus::RemoteInvalidRequest;
        case IBV_WC_RETRY_EXC_ERR:
        case IBV_WC_RNR_RETRY_EXC_ERR:
        case IBV_WC_RESP_TIMEOUT_ERR:
            return WcStatus::RetryExceeded;
        case IBV_WC_WR_FLUSH_ERR:
            return WcStatus::Flushed;
        default:
            return WcStatus::TransportError;
    }
}

[[nodiscard]] bool modify(const IbvApi* api, ibv_qp* qp, ibv_qp_attr& attr, int mask,
                          const char* what, std::string& error) {
    if (const int rc = api->modify_qp(qp, &attr, mask); rc != 0) {
        error = sys::errno_text(what, rc);
        return false;
    }
    return true;
}

}  // namespace

std::unique_ptr<QueuePair> VerbsQueuePair::create(std::shared_ptr<ibv_pd> pd,
                                                  std::shared_ptr<const VerbsConfig> config,
                                                  const QpOptions& options, std::string& error) {
    if (options.soft_wire_fd >= 0) {
        ::close(options.soft_wire_fd);  // QpOptions: the fd is always taken over
        error = "verbs queue pairs take no wire socket (QpOptions::soft_wire_fd must be -1)";
        return nullptr;
    }
    auto qp = std::make_unique<VerbsQueuePair>(std::move(pd), std::move(config));
    const uint32_t depth = std::clamp<uint32_t>(options.max_send_wr, 1, qp->config_->max_qp_wr);
    if (!qp->init(depth, error))
        return nullptr;
    return qp;
}

VerbsQueuePair::VerbsQueuePair(std::shared_ptr<ibv_pd> pd,
                               std::shared_ptr<const VerbsConfig> config) noexcept
    : pd_(std::move(pd)), config_(std::move(config)) {}

bool VerbsQueuePair::init(uint32_t depth, std::string& error) {
    ibv_context* ctx = config_->context.get();
    const IbvApi* api = config_->api;
    // One CQ entry per possible outstanding WR: every one may be signaled or fail, and
    // an overrun CQ would take the QP down.
    ibv_cq* cq = api->create_cq(ctx, static_cast<int>(depth) + 1, &failure_, nullptr, 0);
    if (cq == nullptr) {
        error = sys::errno_text("ibv_create_cq", errno);
        return false;
    }
    cq_ = std::shared_ptr<ibv_cq>(cq,
                                  [ctx = config_->context, api](ibv_cq* c) { api->destroy_cq(c); });

    ibv_qp_init_attr init{};
    init.qp_context = &failure_;
    init.send_cq = cq;
    init.recv_cq = cq;
    init.cap.max_send_wr = depth;
    init.cap.max_recv_wr = 1;  // we never post receives; some providers reject 0
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = config_->max_inline;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;  // selective signaling: only WRs flagged signaled complete
    ibv_qp* qp = api->create_qp(pd_.get(), &init);
    if (qp == nullptr) {
        error = sys::errno_text("ibv_create_qp (RC)", errno);
        if (errno == EINVAL)
            error += "; max_inline or max_send_wr may exceed what the device supports";
        return false;
    }
    qp_ = std::shared_ptr<ibv_qp>(qp, [pd = pd_, api](ibv_qp* q) { api->destroy_qp(q); });
    max_inline_ = init.cap.max_inline_data;  // what the provider actually granted
    max_send_wr_ = init.cap.max_send_wr;
    psn_ = static_cast<uint32_t>(std::random_device{}()) & 0xffffffu;

    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = config_->port;
    attr.qp_access_flags =
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    return modify(config_->api, qp, attr,
                  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                  "ibv_modify_qp(INIT)", error);
}

QpEndpoint VerbsQueuePair::local_endpoint() const noexcept {
    QpEndpoint e;
    e.kind = DeviceKind::Verbs;
    e.qpn = qp_->qp_num;
    e.psn = psn_;
    e.lid = config_->lid;
    e.mtu = static_cast<uint8_t>(config_->active_mtu);
    e.gid = config_->gid;
    return e;
}

bool VerbsQueuePair::connect(const QpEndpoint& remote, std::string& error) {
    if (remote.kind != DeviceKind::Verbs) {
        error =
            std::string("peer uses the ") + to_string(remote.kind) + " RDMA device, this end verbs";
        return false;
    }
    if (connected_) {
        error = "queue pair already connected";
        return false;
    }
    if (remote.mtu < IBV_MTU_256 || remote.mtu > IBV_MTU_4096 || remote.qpn > 0xffffff ||
        remote.psn > 0xffffff) {
        error = "peer sent an invalid verbs endpoint (mtu, qpn or psn out of range)";
        return false;
    }
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = std::min(config_->active_mtu, static_cast<ibv_mtu>(remote.mtu));
    attr.dest_qp_num = remote.qpn;
    attr.rq_psn = remote.psn;
    attr.max_dest_rd_atomic = config_->max_rd_atomic;
    attr.min_rnr_timer = 12;
    attr.ah_attr.dlid = remote.lid;
    attr.ah_attr.sl = 0;
    attr.ah_attr.src_path_bits = 0;
    attr.ah_attr.port_num = config_->port;
    if (config_->gid_index >= 0) {
        // Global routing: mandatory for RoCE, where the GID carries the IP address.
        attr.ah_attr.is_global = 1;
        std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid.data(), 16);
        attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(config_->gid_index);
        attr.ah_attr.grh.hop_limit = 64;
    }
    if (!modify(config_->api, qp_.get(), attr,
                IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                "ibv_modify_qp(RTR)", error))
        return false;

    attr = ibv_qp_attr{};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = config_->timeout;
    attr.retry_cnt = config_->retry_count;
    attr.rnr_retry = config_->rnr_retry;
    attr.sq_psn = psn_;
    attr.max_rd_atomic = config_->max_rd_atomic;
    if (!modify(config_->api, qp_.get(), attr,
                IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
                "ibv_modify_qp(RTS)", error))
        return false;
    connected_ = true;
    return true;
}

bool VerbsQueuePair::post(const WorkRequest& wr, std::string& error) {
    std::string why;
    if (failed(&why)) {
        error = "queue pair failed: " + why;
        return false;
    }
    if (!connected_) {
        error = "queue pair not connected";
        return false;
    }
    if (wr.length == 0 || wr.length > config_->max_message) {
        error = "work request length must be 1.." + std::to_string(config_->max_message);
        return false;
    }
    if (wr.inline_data && (wr.opcode != Opcode::Write || wr.length > max_inline_)) {
        error = "inline data only for WRITEs of at most " + std::to_string(max_inline_) + " bytes";
        return false;
    }
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uint64_t>(wr.local);
    sge.length = wr.length;
    sge.lkey = wr.lkey;
    ibv_send_wr swr{};
    swr.wr_id = wr.wr_id;
    swr.sg_list = &sge;
    swr.num_sge = 1;
    swr.opcode = wr.opcode == Opcode::Write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
    swr.send_flags = (wr.signaled ? IBV_SEND_SIGNALED : 0) | (wr.inline_data ? IBV_SEND_INLINE : 0);
    swr.wr.rdma.remote_addr = wr.remote_addr;
    swr.wr.rdma.rkey = wr.rkey;
    ibv_send_wr* bad = nullptr;
    // ibv_post_send and ibv_poll_cq are static inline in verbs.h: they call the
    // provider through the context's ops and need no symbol from libibverbs.
    if (const int rc = ibv_post_send(qp_.get(), &swr, &bad); rc != 0) {
        error = sys::errno_text("ibv_post_send", rc);
        if (rc == ENOMEM)
            error += " (send queue full)";
        return false;
    }
    return true;
}

Completion VerbsQueuePair::convert(const ibv_wc& wc) {
    Completion c;
    c.wr_id = wc.wr_id;
    c.status = map_status(wc.status);
    c.opcode = wc.opcode == IBV_WC_RDMA_READ ? Opcode::Read : Opcode::Write;
    c.byte_len = wc.byte_len;
    if (wc.status != IBV_WC_SUCCESS) {
        // After an error completion the QP is in the error state: everything else flushes.
        failure_.set(std::string("completion error: ") + config_->api->wc_status_str(wc.status) +
                     " (vendor error " + std::to_string(wc.vendor_err) + ")");
    }
    return c;
}

size_t VerbsQueuePair::drain_cq() {
    ibv_wc wcs[kPollBatch];
    const int n = ibv_poll_cq(cq_.get(), kPollBatch, wcs);
    if (n < 0) {
        failure_.set("ibv_poll_cq failed");
        return 0;
    }
    for (int i = 0; i < n; ++i)
        ready_.push_back(convert(wcs[i]));
    return static_cast<size_t>(n);
}

size_t VerbsQueuePair::poll(std::span<Completion> out) {
    if (ready_.size() < out.size())
        drain_cq();
    size_t n = 0;
    while (n < out.size() && !ready_.empty()) {
        out[n++] = ready_.front();
        ready_.pop_front();
    }
    return n;
}

// Busy-polls (pause, then yield): completions of a verbs QP arrive within microseconds
// and the callers only wait for ones they know are coming.
bool VerbsQueuePair::wait(std::chrono::nanoseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int spins = 0;; ++spins) {
        if (!ready_.empty() || drain_cq() > 0 || failed(nullptr))
            return true;
        if (std::chrono::steady_clock::now() >= deadline)
            return false;
        if (spins < 1000)
            wait::cpu_relax();
        else
            wait::sched_yield_noexcept();
    }
}

bool VerbsQueuePair::failed(std::string* reason) const {
    return failure_.get(reason) || config_->device_failure->get(reason);
}

}  // namespace l5pg::rdma::verbs
