#include "transport/rdma/soft/failure_signal.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

namespace l5pg::rdma::soft {

std::shared_ptr<FailureSignal> FailureSignal::create(std::string& error) {
    sys::UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!fd.valid()) {
        error = sys::errno_text("soft device: eventfd", errno);
        return nullptr;
    }
    return std::make_shared<FailureSignal>(std::move(fd));
}

void FailureSignal::notify() noexcept {
    const uint64_t one = 1;
    (void)!::write(fd_.get(), &one, sizeof one);
}

void FailureSignal::drain() noexcept {
    uint64_t count;
    (void)!::read(fd_.get(), &count, sizeof count);
}

}  // namespace l5pg::rdma::soft
