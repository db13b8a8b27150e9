#include "clientlib/reconnect.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"
#include "clientlib/upgrade_common.hpp"

namespace l5pg::shim {
namespace {

// What libpq sets on a TCP socket (fe-connect.c: TCP_NODELAY, keepalives_*,
// tcp_user_timeout). Options the old socket does not have are skipped.
constexpr struct {
    int level;
    int name;
} kCopiedOptions[] = {
    {IPPROTO_TCP, TCP_NODELAY},   {SOL_SOCKET, SO_KEEPALIVE}, {IPPROTO_TCP, TCP_KEEPIDLE},
    {IPPROTO_TCP, TCP_KEEPINTVL}, {IPPROTO_TCP, TCP_KEEPCNT}, {IPPROTO_TCP, TCP_USER_TIMEOUT},
};

void copy_options(int from, int to) {
    for (const auto& o : kCopiedOptions) {
        int value = 0;
        socklen_t len = sizeof value;
        if (::getsockopt(from, o.level, o.name, &value, &len) == 0)
            (void)::setsockopt(to, o.level, o.name, &value, len);
    }
}

bool connect_within_timeout(int fd, const sockaddr_storage& peer, socklen_t len) {
    if (real().connect(fd, reinterpret_cast<const sockaddr*>(&peer), len) == 0)
        return true;
    if (errno != EINPROGRESS)
        return false;
    return await_connected(fd);
}

}  // namespace

bool reconnect_plain(int fd) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    const int status = real().fcntl(fd, F_GETFL);
    const int fd_flags = real().fcntl(fd, F_GETFD);
    if (status < 0 || fd_flags < 0 ||
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0)
        return false;
    const int fresh = ::socket(peer.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fresh < 0)
        return false;
    copy_options(fd, fresh);
    if (!connect_within_timeout(fresh, peer, len) || real().fcntl(fresh, F_SETFL, status) != 0 ||
        real().dup3(fresh, fd, (fd_flags & FD_CLOEXEC) ? O_CLOEXEC : 0) != fd) {
        const int saved = errno;
        real().close(fresh);
        errno = saved;
        return false;
    }
    real().close(fresh);
    return true;
}

}  // namespace l5pg::shim
