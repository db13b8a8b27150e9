// The RDMA kind of Channel (channel.hpp): the same byte-stream entry points on top of
// rdma::ClientChannel. Called by channel.cpp's dispatch only.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include "clientlib/channel.hpp"

namespace l5pg::shim {

[[nodiscard]] ssize_t rdma_send(Channel& ch, int fd, const iovec* iov, int iovcnt, int flags,
                                bool nosignal) noexcept;
[[nodiscard]] ssize_t rdma_recv(Channel& ch, int fd, const iovec* iov, int iovcnt,
                                int flags) noexcept;
[[nodiscard]] short rdma_revents(Channel& ch, short events) noexcept;
void rdma_arm(Channel& ch, short events) noexcept;
void rdma_drain(Channel& ch) noexcept;
void rdma_prepare_for_foreign_wait(Channel& ch) noexcept;
void rdma_destroy(Channel& ch) noexcept;

}  // namespace l5pg::shim
