// The soft device's counterpart of the verbs async event fd: an eventfd that becomes
// readable whenever one of the device's queue pairs fails, so a server sleeping in
// epoll learns that a session died even though its client never rang the doorbell
// (e.g. a client whose out-of-range WRITE was refused). Level-triggered until drained.
#pragma once

#include <memory>
#include <string>

#include "transport/rdma/sys.hpp"

namespace l5pg::rdma::soft {

class FailureSignal {
  public:
    [[nodiscard]] static std::shared_ptr<FailureSignal> create(std::string& error);
    [[nodiscard]] int fd() const noexcept { return fd_.get(); }
    void notify() noexcept;
    void drain() noexcept;

    explicit FailureSignal(sys::UniqueFd fd) noexcept : fd_(std::move(fd)) {}

  private:
    sys::UniqueFd fd_;
};

}  // namespace l5pg::rdma::soft
