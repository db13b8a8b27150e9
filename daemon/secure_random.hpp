// Unguessable bytes from the kernel (getrandom(2)), for what keeps one client from acting
// for another: cancel keys, the RDMA wire token, the pool reset's nonce.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace l5pg::daemon {

// Throws std::runtime_error if the kernel refuses (not on any supported kernel).
void fill_secure_random(std::span<std::byte> out);
[[nodiscard]] uint64_t secure_random64();

}  // namespace l5pg::daemon
