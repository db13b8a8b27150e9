// Sending and receiving a Hello over the session socket, for callers that do not embed
// it in their own handshake (tests, tools). Works on blocking and non-blocking sockets;
// never waits longer than `timeout` in total.
#pragma once

#include <chrono>
#include <string>

#include "transport/rdma/channel/hello.hpp"

namespace l5pg::rdma {

[[nodiscard]] bool send_hello(int fd, const Hello& hello, std::chrono::milliseconds timeout,
                              std::string& error);
[[nodiscard]] bool recv_hello(int fd, Hello& hello, std::chrono::milliseconds timeout,
                              std::string& error);

}  // namespace l5pg::rdma
