#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "daemon/shutdown_cancels.hpp"
#include "daemon/unique_fd.hpp"
#include "protocol/wire.hpp"

using l5pg::daemon::CancelKeys;
using l5pg::daemon::ShutdownCancels;
using l5pg::daemon::UniqueFd;
using l5pg::daemon::UpstreamAddress;

namespace {

UpstreamAddress unix_address(const std::string& path) {
    UpstreamAddress address;
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    std::strncpy(un.sun_path, path.c_str(), sizeof un.sun_path - 1);
    std::memcpy(&address.storage, &un, sizeof un);
    address.length = sizeof un;
    return address;
}

}  // namespace

TEST_CASE("shutdown cancels: a server whose listen backlog is full gets the cancel when it frees",
          "[shutdown]") {
    std::array<char, 64> dir{};
    std::strcpy(dir.data(), "/tmp/l5pg-cancel-XXXXXX");
    REQUIRE(::mkdtemp(dir.data()) != nullptr);
    const std::string path = std::string(dir.data()) + "/.s.PGSQL.5432";
    const UpstreamAddress address = unix_address(path);
    UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address.storage),
                   address.length) == 0);
    REQUIRE(::listen(listener.get(), 0) == 0);
    // A postmaster busy forking: its backlog holds connections it has not accepted yet.
    std::vector<UniqueFd> waiting;
    for (;;) {
        UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address.storage),
                      address.length) != 0) {
            REQUIRE(errno == EAGAIN);
            break;
        }
        waiting.push_back(std::move(fd));
    }
    // It takes those after a while, then the cancel.
    std::vector<std::byte> received(16);
    std::thread server([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        for (size_t i = 0; i < waiting.size(); ++i)
            UniqueFd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        pollfd p{listener.get(), POLLIN, 0};
        if (::poll(&p, 1, 5000) != 1)
            return;  // no cancel came
        UniqueFd cancel(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (cancel.valid())
            (void)::recv(cancel.get(), received.data(), received.size(), MSG_WAITALL);
    });

    ShutdownCancels cancels;
    cancels.add(CancelKeys::Backend{{4242, 0x5eed}, address});
    const size_t sent = cancels.send(std::chrono::milliseconds(3000));
    server.join();
    ::unlink(path.c_str());
    ::rmdir(dir.data());
    CHECK(sent == 1);
    CHECK(l5pg::protocol::read_be32(received.data() + 8) == 4242);
    CHECK(l5pg::protocol::read_be32(received.data() + 12) == 0x5eed);
}
