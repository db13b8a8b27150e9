#include "daemon/secure_random.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace l5pg::daemon {

void fill_secure_random(std::span<std::byte> out) {
    size_t have = 0;
    while (have < out.size()) {
        const ssize_t n = ::getrandom(out.data() + have, out.size() - have, 0);
        if (n > 0)
            have += static_cast<size_t>(n);
        else if (errno != EINTR)
            throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    }
}

uint64_t secure_random64() {
    uint64_t value = 0;
    fill_secure_random(std::as_writable_bytes(std::span(&value, 1)));
    return value;
}

}  // namespace l5pg::daemon
