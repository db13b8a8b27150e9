#include "clientlib/upgrade.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "clientlib/debug_log.hpp"
#include "clientlib/foreign_waiters.hpp"
#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"
#include "clientlib/upgrade_common.hpp"
#include "protocol/startup.hpp"
#include "protocol/wire.hpp"

namespace l5pg::shim {
namespace {

constexpr char kMarkerSuffix[] = ".l5pg";

// Parses "l5pgd 1 <inode> <pid>\n" without allocating; returns the inode or 0.
uint64_t parse_marker_inode(const char* text, size_t len) {
    constexpr char kPrefix[] = "l5pgd 1 ";
    constexpr size_t kPrefixLen = sizeof kPrefix - 1;
    if (len <= kPrefixLen || std::memcmp(text, kPrefix, kPrefixLen) != 0)
        return 0;
    uint64_t inode = 0;
    size_t i = kPrefixLen;
    for (; i < len && text[i] >= '0' && text[i] <= '9'; ++i)
        inode = inode * 10 + static_cast<uint64_t>(text[i] - '0');
    return i < len && text[i] == ' ' ? inode : 0;
}

struct Marker {
    uint64_t inode = 0;  // 0: no valid marker
    uid_t owner = 0;
};

// O_NOFOLLOW and fstat: the owner we check is the one of the file we read.
Marker read_marker(const char* marker_path) {
    const int fd = ::open(marker_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return {};
    struct stat st {};
    char text[128];
    ssize_t n = 0;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        n = real().read(fd, text, sizeof text);
    real().close(fd);
    if (n <= 0)
        return {};
    return {parse_marker_inode(text, static_cast<size_t>(n)), st.st_uid};
}

// Anybody who can write to the socket's directory can plant a marker next to a real
// Postgres socket, which would then receive our upgrade request and fail the connection.
// l5pgd creates both files, so both have its owner; L5PG_TRUSTED_UID narrows it to one.
bool trusted_marker_owner(uid_t marker_owner, uid_t socket_owner) {
    const int64_t trusted = settings().trusted_uid;
    if (marker_owner == socket_owner && (trusted < 0 || marker_owner == trusted))
        return true;
    DebugLine line = debug_log();
    line.str("ignoring an l5pgd marker owned by uid ")
        .num(marker_owner)
        .str(": the socket's owner is uid ")
        .num(socket_owner);
    if (trusted >= 0)
        line.str(", L5PG_TRUSTED_UID is ").inum(trusted);
    line.end();
    return false;
}

// Sends the upgrade request with the memfd attached.
bool send_upgrade_request(int fd, const shm::Segment& segment) {
    protocol::L5UpgradeRequest request;
    request.c2s_ring_size = segment.c2s_size();
    request.s2c_ring_size = segment.s2c_size();
    auto packet = protocol::build_l5_upgrade_request(request);
    iovec iov{packet.data(), packet.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    const int memfd = segment.fd();
    std::memcpy(CMSG_DATA(cmsg), &memfd, sizeof memfd);
    ssize_t n;
    do {
        n = real().sendmsg(fd, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n == static_cast<ssize_t>(packet.size());
}

// A StartupMessage, SSLRequest or GSSENCRequest: what libpq sends first on a connection it
// may use for queries (the upgrade goes first, the packet then travels the new channel).
bool is_upgradable_first_packet(const std::byte* first, size_t len) {
    if (len < protocol::kMinStartupPacketLength)
        return false;
    const uint32_t code = protocol::read_be32(first + 4);
    return protocol::is_startup_message({first, len}) || code == protocol::kSslRequestCode ||
           code == protocol::kGssEncRequestCode;
}

}  // namespace

bool is_l5pgd_socket(const sockaddr* addr, socklen_t len) {
    if (addr == nullptr || addr->sa_family != AF_UNIX ||
        len <= static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1))
        return false;
    const auto* un = reinterpret_cast<const sockaddr_un*>(addr);
    const size_t max_path = len - offsetof(sockaddr_un, sun_path);
    const size_t path_len = ::strnlen(un->sun_path, std::min(max_path, sizeof un->sun_path));
    if (path_len == 0)
        return false;  // abstract socket
    char marker[sizeof un->sun_path + sizeof kMarkerSuffix];
    std::memcpy(marker, un->sun_path, path_len);
    std::memcpy(marker + path_len, kMarkerSuffix, sizeof kMarkerSuffix);
    const Marker found = read_marker(marker);
    marker[path_len] = '\0';
    struct stat st {};
    return found.inode != 0 && ::stat(marker, &st) == 0 && S_ISSOCK(st.st_mode) &&
           static_cast<uint64_t>(st.st_ino) == found.inode &&
           trusted_marker_owner(found.owner, st.st_uid);
}

// Only a connection that starts with a startup packet is upgraded; cancel requests never
// are (PQcancel runs in signal handlers and must stay a plain socket).
bool first_packet_may_upgrade(int fd, const std::byte* first, size_t len) {
    if (protocol::is_cancel_request({first, len})) {
        debug_log().str("fd ").inum(fd).str(": cancel request, not upgraded").end();
        return false;
    }
    if (!is_upgradable_first_packet(first, len)) {
        debug_log()
            .str("fd ")
            .inum(fd)
            .str(": first bytes are not a startup packet, not upgraded")
            .end();
        return false;
    }
    return true;
}

bool socket_nonblocking(int fd) {
    const int fl = real().fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK) != 0;
}

UpgradeResult try_upgrade(int fd, const std::byte* first, size_t len, Channel*& channel) {
    if (!first_packet_may_upgrade(fd, first, len))
        return UpgradeResult::Plain;
    const int saved_errno = errno;
    const UpgradeClock clock;
    note_io_uring_instances();
    shm::SysError error;
    std::optional<shm::Segment> segment =
        shm::Segment::create(settings().ring_size, settings().ring_size, error);
    if (!segment) {
        return stay_plain(fd, saved_errno, ": cannot create shared memory (", error.what, ": ",
                          std::strerror(error.err), "), staying on the socket");
    }
    if (!send_upgrade_request(fd, *segment)) {
        return upgrade_failed(fd, ": sending the upgrade request failed: ", std::strerror(errno));
    }
    const char answer = await_answer(fd);
    if (answer == static_cast<char>(protocol::kL5Declined)) {
        return stay_plain(fd, saved_errno,
                          ": l5pgd declined the upgrade (see its log), staying on the socket");
    }
    if (answer != static_cast<char>(protocol::kL5Accepted)) {
        if (answer != 0)
            errno = ECONNRESET;
        return upgrade_failed(fd,
                              ": no valid answer to the upgrade request: ", std::strerror(errno));
    }
    const size_t ring = segment->c2s_size();
    segment->close_fd();  // l5pgd holds its own; the rings stay mapped
    channel = channel_acquire(std::move(*segment), socket_nonblocking(fd));
    if (channel == nullptr)
        return no_free_channel(fd);
    debug_log()
        .str("fd ")
        .inum(fd)
        .str(": upgraded to shm (rings of ")
        .num(ring)
        .str(" bytes each way)")
        .end();
    errno = saved_errno;
    return UpgradeResult::Upgraded;
}

}  // namespace l5pg::shim
