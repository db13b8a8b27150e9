#include "clientlib/rdma_end.hpp"

namespace l5pg::shim {

using transport::IoResult;
using transport::IoStatus;
using transport::Want;

RdmaEnd::RdmaEnd(std::unique_ptr<rdma::ClientChannel> channel) : channel_(std::move(channel)) {}

// Each call names the socket by the descriptor the program used (channel_end.hpp): the
// doorbells follow it should the program have moved the socket (dup2(), then close()).
IoResult RdmaEnd::write(int fd, std::span<const std::byte> bytes) {
    channel_->use_session_fd(fd);
    if (bytes.empty()) {
        // Like a socket: a zero-length send succeeds unless the connection is gone.
        if (channel_->peer_closed())
            return {0, IoStatus::Closed};
        return {0, channel_->broken() ? IoStatus::Error : IoStatus::Ok};
    }
    return channel_->write(bytes);
}

IoResult RdmaEnd::read(int fd, std::span<std::byte> out) {
    channel_->use_session_fd(fd);
    return channel_->read(out);
}

bool RdmaEnd::ready(Want want) {
    return want == Want::Read ? channel_->readable() : channel_->writable();
}

// The flag lives in l5pgd's memory: arm_*() WRITE it and re-check once the WRITE completed.
bool RdmaEnd::arm(Want want, uint64_t) {
    return want == Want::Read ? channel_->arm_read() : channel_->arm_write();
}

void RdmaEnd::on_socket_readable(int fd) {
    channel_->use_session_fd(fd);
    channel_->on_socket_readable();
}

// An epoll user only wakes for bytes on the socket: arm the flag so that l5pgd rings
// when it next publishes (see the note in rdma_end.hpp about data already received).
void RdmaEnd::prepare_for_foreign_wait(int fd, bool) {
    channel_->use_session_fd(fd);
    if (!channel_->readable())
        (void)channel_->arm_read();
}

wait::WaitPolicy RdmaEnd::wait_policy(wait::AdaptiveSpin& spin, const wait::WaitPolicy& configured,
                                      bool) {
    return spin.budget(configured);
}

void RdmaEnd::forget_after_fork() {
    (void)channel_.release();
}

}  // namespace l5pg::shim
