// The SHM ring reader facing a hostile client: the ring's bytes (record length words,
// padding, payload) and the reader's calls come from the input. Like the real segment,
// the ring is followed by its mirror, so a record never wraps.
#include <cstring>
#include <vector>

#include "tests/fuzz/fuzz_target.hpp"
#include "transport/shm/ring.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    constexpr size_t kRing = 4096;
    if (size < 2)
        return 0;
    const uint8_t ops = data[0];
    const uint8_t chunk = data[1];
    data += 2;
    size -= 2;
    std::vector<std::byte> ring(2 * kRing);
    std::memcpy(ring.data(), data, std::min(size, kRing));
    std::memcpy(ring.data() + kRing, ring.data(), kRing);
    l5pg::shm::RingControl control{};
    l5pg::shm::RingReader reader(control, ring.data(), kRing);
    std::byte out[512];
    for (unsigned i = 0; i < 64u; ++i) {
        if (((ops >> (i % 8)) & 1) != 0) {
            std::span<const std::byte> view;
            if (reader.peek(view) != l5pg::shm::RingStatus::Ok)
                break;
            if (view.empty() || view.data() < ring.data() ||
                view.data() + view.size() > ring.data() + ring.size())
                __builtin_trap();  // the reader handed out memory outside the ring
            reader.consume(std::min<size_t>(view.size(), 1 + chunk));
        } else {
            l5pg::shm::RingStatus status = l5pg::shm::RingStatus::Ok;
            const size_t n = reader.read({out, 1 + chunk % sizeof out}, status);
            if (n == 0 && status != l5pg::shm::RingStatus::Ok)
                break;
        }
        (void)reader.has_data();
        // MSG_PEEK's walk ahead over the records, from wherever the reader stands.
        l5pg::shm::RingStatus peeked = l5pg::shm::RingStatus::Ok;
        if (reader.peek_ahead({out, 1 + (chunk * 7u + i) % sizeof out}, chunk * 37u, peeked) >
            sizeof out)
            __builtin_trap();
    }
    return 0;
}
