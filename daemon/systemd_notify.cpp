#include "daemon/systemd_notify.hpp"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <spdlog/spdlog.h>

namespace l5pg::daemon {
namespace {

std::optional<uint64_t> env_number(const char* name) {
    const char* text = std::getenv(name);
    if (text == nullptr)
        return std::nullopt;
    const std::string_view s(text);
    uint64_t value = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || end != s.data() + s.size())
        return std::nullopt;
    return value;
}

// $WATCHDOG_USEC applies to us unless $WATCHDOG_PID names another process (a child that
// inherited the environment).
std::optional<std::chrono::microseconds> watchdog_from_environment() {
    const std::optional<uint64_t> usec = env_number("WATCHDOG_USEC");
    if (!usec || *usec == 0)
        return std::nullopt;
    if (const std::optional<uint64_t> pid = env_number("WATCHDOG_PID");
        pid && *pid != static_cast<uint64_t>(::getpid()))
        return std::nullopt;
    return std::chrono::microseconds(*usec);
}

}  // namespace

SystemdNotifier SystemdNotifier::from_environment() {
    SystemdNotifier notifier;
    notifier.watchdog_ = watchdog_from_environment();
    const char* path = std::getenv("NOTIFY_SOCKET");
    if (path == nullptr || path[0] == '\0')
        return notifier;
    const size_t length = std::strlen(path);
    if ((path[0] != '/' && path[0] != '@') || length >= sizeof notifier.address_.sun_path) {
        spdlog::warn("NOTIFY_SOCKET={} is not a socket path: systemd is not notified", path);
        return notifier;
    }
    notifier.address_.sun_family = AF_UNIX;
    std::memcpy(notifier.address_.sun_path, path, length);
    if (path[0] == '@')
        notifier.address_.sun_path[0] = '\0';  // abstract: no terminating NUL counted
    notifier.address_length_ = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length);
    notifier.fd_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!notifier.fd_.valid())
        spdlog::warn("NOTIFY_SOCKET: socket(): {}: systemd is not notified", std::strerror(errno));
    return notifier;
}

bool SystemdNotifier::send(std::string_view state, bool routine) {
    if (!enabled())
        return true;
    const ssize_t sent =
        ::sendto(fd_.get(), state.data(), state.size(), MSG_NOSIGNAL | (routine ? MSG_DONTWAIT : 0),
                 reinterpret_cast<const sockaddr*>(&address_), address_length_);
    if (sent >= 0)
        return true;
    if (routine && errno == EAGAIN)
        return false;  // systemd is behind: this one is dropped, the next comes soon
    if (!failure_logged_) {
        failure_logged_ = true;
        spdlog::warn("cannot notify systemd ({}): {}", state.substr(0, state.find('\n')),
                     std::strerror(errno));
    }
    return false;
}

uint64_t monotonic_usec() noexcept {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<uint64_t>(now.tv_sec) * 1000000 + static_cast<uint64_t>(now.tv_nsec) / 1000;
}

}  // namespace l5pg::daemon
