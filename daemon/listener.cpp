#include "daemon/listener.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "config/config.hpp"

namespace l5pg::daemon {
namespace {

[[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

sockaddr_un unix_address(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path)
        throw std::runtime_error(fmt::format("Unix socket path too long: \"{}\"", path));
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    return addr;
}

// A socket file may be left over from a crashed l5pgd. Remove it only if nobody answers
// on it; refuse to start if a live server (l5pgd or Postgres) owns it.
void remove_stale_socket(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0)
        return;
    if (!S_ISSOCK(st.st_mode))
        throw std::runtime_error(fmt::format("\"{}\" exists and is not a socket", path));
    UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_un addr = unix_address(path);
    if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0)
        throw std::runtime_error(
            fmt::format("another server is already listening on \"{}\"", path));
    ::unlink(path.c_str());
}

void write_marker(const std::string& socket_path) {
    struct stat st {};
    if (::stat(socket_path.c_str(), &st) != 0)
        fail("stat " + socket_path);
    const std::string marker = UnixListener::marker_path(socket_path);
    std::string tmp = marker + ".XXXXXX";
    const std::string line = fmt::format("l5pgd 1 {} {}\n", st.st_ino, ::getpid());
    // A new file of a name nobody could guess (O_EXCL), never one a link put there points at:
    // in a directory others may write to, another user's symbolic link at a fixed name would
    // have l5pgd truncate and chmod a file of its own, or (sticky) keep it from starting.
    UniqueFd fd(::mkostemp(tmp.data(), O_CLOEXEC));
    if (!fd.valid())
        fail("cannot create marker file " + tmp);
    const auto give_up = [&tmp](const std::string& what) {
        const int err = errno;
        ::unlink(tmp.c_str());  // no file of a new name left behind at each failed start
        errno = err;
        fail(what);
    };
    // Clients of every user read it to recognise l5pgd, whatever our umask (the unit's is
    // 0077).
    if (::fchmod(fd.get(), 0644) != 0)
        give_up("cannot chmod marker file " + tmp);
    if (::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
        give_up("cannot write marker file " + tmp);
    fd.reset();
    if (::rename(tmp.c_str(), marker.c_str()) != 0)
        give_up("cannot rename to " + marker);
}

}  // namespace

std::string UnixListener::marker_path(const std::string& socket_path) {
    return socket_path + ".l5pg";
}

UnixListener::UnixListener(const std::string& dir, uint16_t port, int backlog, uint32_t mode)
    : path_(config::socket_path(dir, port)) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw std::runtime_error(
            fmt::format("listen.unix_socket_dir \"{}\" is not a directory", dir));
    const sockaddr_un addr = unix_address(path_);
    remove_stale_socket(path_);
    fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd_.valid())
        fail("socket(AF_UNIX)");
    if (::bind(fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
        fail("cannot bind " + path_);
    if (::chmod(path_.c_str(), mode) != 0)
        fail("cannot chmod " + path_);
    if (::listen(fd_.get(), backlog) != 0)
        fail("cannot listen on " + path_);
    write_marker(path_);
}

UnixListener::~UnixListener() {
    ::unlink(marker_path(path_).c_str());
    ::unlink(path_.c_str());
}

TcpListener::TcpListener(const std::string& address, uint16_t port, int backlog) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* result = nullptr;
    const std::string service = std::to_string(port);
    const int rc = ::getaddrinfo(address.empty() ? nullptr : address.c_str(), service.c_str(),
                                 &hints, &result);
    if (rc != 0)
        throw std::runtime_error(
            fmt::format("listen.tcp_address \"{}\": {}", address, ::gai_strerror(rc)));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(result, &::freeaddrinfo);
    description_ = fmt::format("{}:{}", address, port);
    fd_.reset(::socket(result->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd_.valid())
        fail("socket(TCP)");
    const int one = 1;
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd_.get(), result->ai_addr, result->ai_addrlen) != 0)
        fail("cannot bind TCP " + description_);
    if (::listen(fd_.get(), backlog) != 0)
        fail("cannot listen on TCP " + description_);
}

}  // namespace l5pg::daemon
