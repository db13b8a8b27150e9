// A verbs RC queue pair with its own completion queue. Transitions INIT at creation,
// RTR/RTS in connect(); finite timeout and retry counts from the device options, so a
// dead peer turns into RETRY_EXC_ERR completions instead of a hang.
#pragma once

#include <infiniband/verbs.h>

#include <deque>
#include <memory>
#include <string>

#include "transport/rdma/device.hpp"
#include "transport/rdma/verbs/verbs_common.hpp"

namespace l5pg::rdma::verbs {

class VerbsQueuePair final : public QueuePair {
  public:
    [[nodiscard]] static std::unique_ptr<QueuePair> create(
        std::shared_ptr<ibv_pd> pd, std::shared_ptr<const VerbsConfig> config,
        const QpOptions& options, std::string& error);

    QpEndpoint local_endpoint() const noexcept override;
    bool connect(const QpEndpoint& remote, std::string& error) override;
    bool post(const WorkRequest& wr, std::string& error) override;
    size_t poll(std::span<Completion> out) override;
    bool wait(std::chrono::nanoseconds timeout) override;
    bool failed(std::string* reason) const override;
    uint32_t max_inline() const noexcept override { return max_inline_; }
    uint32_t max_send_wr() const noexcept override { return max_send_wr_; }
    uint32_t max_message_size() const noexcept override { return config_->max_message; }

    // Private, for make_unique.
    VerbsQueuePair(std::shared_ptr<ibv_pd> pd, std::shared_ptr<const VerbsConfig> config) noexcept;

  private:
    [[nodiscard]] bool init(uint32_t depth, std::string& error);
    [[nodiscard]] Completion convert(const ibv_wc& wc);
    size_t drain_cq();  // moves what the CQ has into ready_

    std::shared_ptr<ibv_pd> pd_;
    std::shared_ptr<const VerbsConfig> config_;
    FailureState failure_;        // qp_context / cq_context; outlives cq_ and qp_
    std::shared_ptr<ibv_cq> cq_;  // declared before qp_: the QP is destroyed first
    std::shared_ptr<ibv_qp> qp_;
    std::deque<Completion> ready_;  // polled from the CQ by wait(), not yet returned
    uint32_t psn_ = 0;
    uint32_t max_inline_ = 0;
    uint32_t max_send_wr_ = 0;
    bool connected_ = false;
};

}  // namespace l5pg::rdma::verbs
