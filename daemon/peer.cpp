#include "daemon/peer.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include <fmt/format.h>

namespace l5pg::daemon {

std::string PeerIdentity::limit_key() const {
    return local ? fmt::format("uid {}", uid) : address;
}

std::string PeerIdentity::describe() const {
    if (local)
        return fmt::format("uid {} pid {}", uid, pid);
    return address.find(':') != std::string::npos ? fmt::format("[{}]:{}", address, tcp_port)
                                                  : fmt::format("{}:{}", address, tcp_port);
}

PeerIdentity identify_peer(int fd, bool unix_socket) {
    PeerIdentity peer;
    peer.local = unix_socket;
    if (unix_socket) {
        ucred cred{};
        socklen_t len = sizeof cred;
        if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
            peer.uid = cred.uid;
            peer.gid = cred.gid;
            peer.pid = cred.pid;
        } else {
            peer.uid = static_cast<uid_t>(-1);
            peer.gid = static_cast<gid_t>(-1);
        }
        return peer;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    char text[INET6_ADDRSTRLEN] = "?";
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
        if (addr.ss_family == AF_INET) {
            const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
            ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
            peer.tcp_port = ntohs(in->sin_port);
        } else if (addr.ss_family == AF_INET6) {
            const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
            ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
            peer.tcp_port = ntohs(in6->sin6_port);
        }
    }
    peer.address = text;
    return peer;
}

// _SC_GETPW_R_SIZE_MAX is a hint (glibc: 1024), not a bound: an entry longer than that (a
// directory user's long GECOS) makes getpwuid_r() say ERANGE, and the buffer grows.
std::string os_user_name(uid_t uid) {
    constexpr size_t kMaxEntry = 1 << 20;
    const long hint = ::sysconf(_SC_GETPW_R_SIZE_MAX);
    std::vector<char> buf(hint > 0 ? static_cast<size_t>(hint) : 16384);
    passwd pw{};
    passwd* found = nullptr;
    int rc = 0;
    while ((rc = ::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found)) == ERANGE &&
           buf.size() < kMaxEntry)
        buf.resize(buf.size() * 4);
    if (rc != 0 || found == nullptr)
        return {};
    return pw.pw_name;
}

}  // namespace l5pg::daemon
