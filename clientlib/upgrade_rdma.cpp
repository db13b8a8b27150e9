// The RDMA upgrade of a TCP connection to l5pgd (docs/wire-format.md section 5).
#include "clientlib/upgrade.hpp"

#include <arpa/inet.h>
#include <cxxabi.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "clientlib/debug_log.hpp"
#include "clientlib/foreign_waiters.hpp"
#include "clientlib/handshake_stream.hpp"
#include "clientlib/real_calls.hpp"
#include "clientlib/reconnect.hpp"
#include "clientlib/settings.hpp"
#include "clientlib/upgrade_common.hpp"
#include "protocol/startup.hpp"
#include "transport/rdma/channel/client.hpp"
#include "transport/rdma/channel/hello.hpp"
#include "transport/rdma/channel/offer.hpp"

namespace l5pg::shim {
namespace {

// One RDMA device per process, opened on the first RDMA upgrade. Never destroyed (queue
// pairs of live channels refer to it; at exit the process goes away anyway). A failure
// is remembered, so a host without a device pays for the attempt once.
pthread_mutex_t g_rdma_mutex = PTHREAD_MUTEX_INITIALIZER;
rdma::Device* g_rdma_device = nullptr;
bool g_rdma_failed = false;
char g_rdma_failure[256] = {};

rdma::Device* rdma_device() {
    ::pthread_mutex_lock(&g_rdma_mutex);
    // Unlocked also when pthread_cancel() unwinds the opening (it reads files).
    const struct Unlock {
        ~Unlock() { ::pthread_mutex_unlock(&g_rdma_mutex); }
    } unlock;
    if (g_rdma_device == nullptr && !g_rdma_failed) {
        try {
            const Settings& s = settings();
            rdma::DeviceOptions options;
            options.device_name = s.rdma_device_name;
            options.port = s.rdma_device_port;
            options.gid_index = s.rdma_gid_index;
            std::string error;
            std::unique_ptr<rdma::Device> device = rdma::open_device(s.rdma_device, options, error);
            if (device != nullptr) {
                g_rdma_device = device.release();
            } else {
                g_rdma_failed = true;
                std::strncpy(g_rdma_failure, error.c_str(), sizeof g_rdma_failure - 1);
            }
        } catch (const abi::__forced_unwind&) {
            throw;
        } catch (...) {
            g_rdma_failed = true;
            std::strncpy(g_rdma_failure, "out of memory", sizeof g_rdma_failure - 1);
        }
    }
    rdma::Device* device = g_rdma_device;
    return device;
}

// Opens the soft device's wire: a second TCP connection to the same l5pgd host, at the
// port from its offer, greeted with the offer's token. Returns the fd or -1.
int connect_wire(int session_fd, const rdma::Offer& offer, const char*& why) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (::getpeername(session_fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) {
        why = "getpeername failed";
        return -1;
    }
    if (peer.ss_family == AF_INET)
        reinterpret_cast<sockaddr_in*>(&peer)->sin_port = htons(offer.soft_port);
    else if (peer.ss_family == AF_INET6)
        reinterpret_cast<sockaddr_in6*>(&peer)->sin6_port = htons(offer.soft_port);
    else {
        why = "the session is not a TCP connection";
        return -1;
    }
    const int wire = ::socket(peer.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (wire < 0) {
        why = "socket() failed";
        return -1;
    }
    // The real connect: ours would consider the wire for an upgrade itself.
    if (real().connect(wire, reinterpret_cast<const sockaddr*>(&peer), len) != 0 &&
        errno != EINPROGRESS) {
        why = "cannot connect to l5pgd's soft wire port";
        real().close(wire);
        return -1;
    }
    if (!await_connected(wire)) {
        why = "cannot connect to l5pgd's soft wire port";
        real().close(wire);
        return -1;
    }
    std::array<std::byte, rdma::kWireHelloSize> greeting{};
    rdma::encode_wire_hello(offer.token, greeting);
    if (!HandshakeStream(wire).send_all(greeting.data(), greeting.size())) {
        why = "cannot send the soft wire greeting";
        real().close(wire);
        return -1;
    }
    return wire;
}

const char* answer_text(char answer) {
    return answer == 'E' ? "an ErrorResponse: the server is not l5pgd (or l5pgd too old); list "
                           "only l5pgd ports in L5PG_RDMA_PORTS"
                         : "an unexpected byte";
}

// The upgrade will not happen: the connection carries on as plain TCP for libpq. After
// TLS began that needs a fresh connection (reconnect.hpp).
UpgradeResult leave_for_tcp(HandshakeStream& stream, int fd, int saved_errno, const char* why) {
    UpgradeClock::begin_fallback();
    if (!stream.encrypted())
        return stay_plain(fd, saved_errno, ": ", why, ", staying on TCP");
    if (!reconnect_plain(fd))
        return upgrade_failed(fd, ": ", why,
                              "; reconnecting for plain TCP failed: ", std::strerror(errno));
    return stay_plain(fd, saved_errno, ": ", why, ", staying on TCP (a fresh connection)");
}

// After l5pgd's offer we cannot simply stop: it waits for our Hello. An all-zero Hello
// says "never mind"; l5pgd answers 'N' and the connection carries on as plain TCP.
UpgradeResult abandon_rdma(HandshakeStream& stream, int fd, const char* why, int saved_errno) {
    debug_log().str("fd ").inum(fd).str(": RDMA upgrade abandoned (").str(why).str(")").end();
    UpgradeClock::begin_fallback();
    const std::array<std::byte, rdma::kHelloSize> zeros{};
    if (!stream.send_all(zeros.data(), zeros.size()))
        return UpgradeResult::Failed;
    const char answer = stream.await_answer();
    if (answer != static_cast<char>(protocol::kL5Declined)) {
        if (answer != 0)
            errno = ECONNRESET;
        return UpgradeResult::Failed;
    }
    return leave_for_tcp(stream, fd, saved_errno, "the upgrade was abandoned");
}

// L5PG_SSLMODE: the rest of the handshake inside TLS when l5pgd offers it (prefer) or
// insists on it. Plain when TLS may go on as planned; otherwise the result to return.
std::optional<UpgradeResult> secure_handshake(HandshakeStream& stream, int fd, int saved_errno) {
    const SslMode mode = settings().ssl_mode;
    if (mode == SslMode::Disable)
        return std::nullopt;
    switch (stream.start_tls()) {
        case HandshakeStream::Tls::On:
            return std::nullopt;
        case HandshakeStream::Tls::Refused:
            if (mode == SslMode::Prefer)
                return std::nullopt;
            return stay_plain(fd, saved_errno,
                              ": l5pgd answered our SSLRequest with N (no TLS) and L5PG_SSLMODE=",
                              to_string(mode),
                              " forbids the RDMA upgrade in clear, staying on TCP");
        case HandshakeStream::Tls::Failed:
            debug_log()
                .str("fd ")
                .inum(fd)
                .str(": TLS with l5pgd failed: ")
                .str(stream.error())
                .end();
            if (!reconnect_plain(fd))
                return upgrade_failed(
                    fd, ": reconnecting for plain TCP failed: ", std::strerror(errno));
            return stay_plain(fd, saved_errno,
                              ": no RDMA upgrade without TLS (L5PG_SSLMODE=", to_string(mode),
                              "), staying on TCP (a fresh connection)");
    }
    return std::nullopt;
}

UpgradeResult try_upgrade_rdma_impl(int fd, Channel*& channel, int saved_errno) {
    const Settings& s = settings();
    note_io_uring_instances();
    if (foreign_waiters_possible()) {
        // The RDMA channel cannot yet keep the socket readable while received data sits
        // unread ("poke", docs/wire-format.md section 5): an application that waits in
        // its own epoll (psycopg 3, asyncio) could miss a response. Stay on TCP.
        return stay_plain(
            fd, saved_errno,
            ": the application waits in epoll, which the RDMA channel does not support "
            "yet, staying on TCP");
    }
    rdma::Device* device = rdma_device();
    if (device == nullptr) {
        return stay_plain(fd, saved_errno, ": no RDMA device (", g_rdma_failure,
                          "), staying on TCP");
    }
    HandshakeStream stream(fd);
    if (std::optional<UpgradeResult> result = secure_handshake(stream, fd, saved_errno))
        return *result;
    protocol::L5UpgradeRequest request;
    request.transport = protocol::L5Transport::Rdma;
    request.c2s_ring_size = s.ring_size;
    request.s2c_ring_size = s.ring_size;
    const auto packet = protocol::build_l5_upgrade_request(request);
    if (!stream.send_all(packet.data(), packet.size())) {
        return upgrade_failed(fd,
                              ": sending the RDMA upgrade request failed: ", std::strerror(errno));
    }
    char answer = stream.await_answer();
    if (answer == static_cast<char>(protocol::kL5Declined))
        return leave_for_tcp(stream, fd, saved_errno,
                             "l5pgd declined the RDMA upgrade (see its log)");
    if (answer != static_cast<char>(rdma::kOfferTag)) {
        if (answer != 0)
            errno = ECONNRESET;
        return upgrade_failed(fd, ": no valid answer to the RDMA upgrade request: ",
                              answer != 0 ? answer_text(answer) : std::strerror(errno));
    }
    std::array<std::byte, rdma::kOfferSize> offer_bytes{};
    rdma::Offer offer;
    if (!stream.recv_exact(offer_bytes.data(), offer_bytes.size())) {
        return upgrade_failed(fd, ": reading l5pgd's RDMA offer failed: ", std::strerror(errno));
    }
    if (!rdma::decode_offer(offer_bytes, offer))
        return abandon_rdma(stream, fd, "invalid offer from l5pgd", saved_errno);
    if (offer.kind != device->kind()) {
        debug_log()
            .str("fd ")
            .inum(fd)
            .str(": l5pgd uses the ")
            .str(rdma::to_string(offer.kind))
            .str(" RDMA device, we the ")
            .str(rdma::to_string(device->kind()))
            .str(" one (L5PG_RDMA_DEVICE)")
            .end();
        return abandon_rdma(stream, fd, "device kinds differ", saved_errno);
    }
    rdma::QpOptions qp_options;
    if (offer.kind == rdma::DeviceKind::Soft) {
        const char* why = "";
        qp_options.soft_wire_fd = connect_wire(fd, offer, why);
        if (qp_options.soft_wire_fd < 0)
            return abandon_rdma(stream, fd, why, saved_errno);
    }
    rdma::ClientOptions options;
    options.c2s_ring_size = s.ring_size;
    options.s2c_ring_size = s.ring_size;
    options.budget = s.budget;
    std::string error;
    std::unique_ptr<rdma::ClientChannel> rdma =
        rdma::ClientChannel::create(*device, fd, options, qp_options, error);  // takes the wire
    if (rdma == nullptr) {
        debug_log()
            .str("fd ")
            .inum(fd)
            .str(": cannot create the RDMA channel: ")
            .str(error.c_str())
            .end();
        return abandon_rdma(stream, fd, "no channel", saved_errno);
    }
    // Another thread may have registered a socket with epoll since the check above (the
    // soft device's wire, the channel's setup take milliseconds): look again while the
    // upgrade can still be abandoned. (io_uring instances are looked for above only: a look
    // is rate-limited to one a second.)
    if (foreign_waiters_possible())
        return abandon_rdma(stream, fd, "the application started waiting in epoll", saved_errno);
    std::array<std::byte, rdma::kHelloSize> hello{};
    rdma::encode_hello(rdma->hello(), hello);
    if (!stream.send_all(hello.data(), hello.size()))
        return UpgradeResult::Failed;
    answer = stream.await_answer();
    if (answer == static_cast<char>(protocol::kL5Declined)) {
        return leave_for_tcp(stream, fd, saved_errno,
                             "l5pgd declined the RDMA upgrade after our hello (see its log)");
    }
    rdma::Hello server;
    std::array<std::byte, rdma::kHelloSize> server_hello{};
    if (answer != static_cast<char>(protocol::kL5Accepted) ||
        !stream.recv_exact(server_hello.data(), server_hello.size()) || !stream.drained() ||
        !rdma::decode_hello(server_hello, server, error) || !rdma->connect(server, error)) {
        if (answer != static_cast<char>(protocol::kL5Accepted))
            error = answer != 0 ? "unexpected answer" : std::strerror(errno);
        else if (error.empty())
            error = stream.drained() ? std::strerror(errno) : "bytes after l5pgd's hello";
        debug_log().str("fd ").inum(fd).str(": RDMA upgrade failed: ").str(error.c_str()).end();
        errno = ECONNRESET;
        return UpgradeResult::Failed;
    }
    channel = channel_acquire_rdma(rdma, socket_nonblocking(fd));
    if (channel == nullptr)
        return no_free_channel(fd);
    debug_log()
        .str("fd ")
        .inum(fd)
        .str(": upgraded to rdma (")
        .str(rdma::to_string(offer.kind))
        .str(" device, rings of ")
        .num(s.ring_size)
        .str(" bytes each way")
        .str(stream.encrypted() ? ", handshake inside TLS)" : ")")
        .end();
    errno = saved_errno;
    return UpgradeResult::Upgraded;
}

}  // namespace

bool is_rdma_upgrade_target(const sockaddr* addr, socklen_t len) {
    if (addr == nullptr || settings().mode != TransportMode::Rdma)
        return false;
    if (addr->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in)))
        return is_rdma_port(ntohs(reinterpret_cast<const sockaddr_in*>(addr)->sin_port));
    if (addr->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6)))
        return is_rdma_port(ntohs(reinterpret_cast<const sockaddr_in6*>(addr)->sin6_port));
    return false;
}

UpgradeResult try_upgrade_rdma(int fd, const std::byte* first, size_t len, Channel*& channel) {
    if (!first_packet_may_upgrade(fd, first, len))
        return UpgradeResult::Plain;
    const int saved_errno = errno;
    const UpgradeClock clock;
    try {
        return try_upgrade_rdma_impl(fd, channel, saved_errno);
    } catch (const abi::__forced_unwind&) {
        throw;       // pthread_cancel(): the thread ends as it would in libc's call
    } catch (...) {  // std::bad_alloc; the handshake may be half done
        debug_log().str("fd ").inum(fd).str(": out of memory during the RDMA upgrade").end();
        errno = ENOMEM;
        return UpgradeResult::Failed;
    }
}

void rdma_forget_after_fork() {
    // The parent's device (and any lock another thread held at fork()) stay behind; a
    // child that upgrades a connection of its own opens a device of its own.
    g_rdma_device = nullptr;
    g_rdma_failed = false;
    ::pthread_mutex_init(&g_rdma_mutex, nullptr);
}

}  // namespace l5pg::shim
