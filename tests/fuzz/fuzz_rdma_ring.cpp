// The RDMA record reader: the ring in our own memory that a remote peer fills with RDMA
// WRITEs ([u32 len][u32 ~len][payload][OK byte]), with torn and impossible records. The
// ring is followed by its mirror, as in the double-mapped registration.
#include <cstring>
#include <vector>

#include "tests/fuzz/fuzz_target.hpp"
#include "transport/rdma/channel/local_ring.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    constexpr size_t kRing = l5pg::rdma::kMinRingSize;
    if (size < 1)
        return 0;
    const uint8_t chunk = data[0];
    data += 1;
    size -= 1;
    std::vector<std::byte> ring(2 * kRing);
    std::memcpy(ring.data(), data, std::min(size, kRing));
    std::memcpy(ring.data() + kRing, ring.data(), kRing);
    l5pg::rdma::AreaControl control;
    l5pg::rdma::LocalRing reader(&control, ring.data(), kRing);
    std::byte out[256];
    for (int i = 0; i < 64; ++i) {
        l5pg::rdma::RecordState state = reader.check();
        if (state != l5pg::rdma::RecordState::Ready)
            break;
        if (reader.read({out, 1 + chunk % sizeof out}, state) == 0)
            break;
    }
    return 0;
}
