#include "daemon/peer.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

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

std::string os_user_name(uid_t uid) {
    long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
    std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
    passwd pw{};
    passwd* found = nullptr;
    if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr)
        return {};
    return pw.pw_name;
}

}  // namespace l5pg::daemon
