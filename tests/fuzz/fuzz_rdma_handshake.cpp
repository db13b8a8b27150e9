// The RDMA upgrade's fixed-size messages a remote peer controls: Hello (both ways), the
// offer and the soft device's wire hello.
#include <string>

#include "tests/fuzz/fuzz_target.hpp"
#include "transport/rdma/channel/hello.hpp"
#include "transport/rdma/channel/offer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto in = l5pg::fuzz::bytes(data, size);
    l5pg::rdma::Hello hello;
    std::string error;
    if (l5pg::rdma::decode_hello(in, hello, error)) {
        std::byte again[l5pg::rdma::kHelloSize];
        l5pg::rdma::encode_hello(hello, again);
        l5pg::rdma::Hello round;
        if (!l5pg::rdma::decode_hello(again, round, error))
            __builtin_trap();  // what decodes must survive a re-encode
    }
    if (size >= l5pg::rdma::kOfferSize) {
        l5pg::rdma::Offer offer;
        (void)l5pg::rdma::decode_offer(in.first<l5pg::rdma::kOfferSize>(), offer);
    }
    if (size >= l5pg::rdma::kWireHelloSize) {
        l5pg::rdma::WireToken token;
        (void)l5pg::rdma::decode_wire_hello(in.first<l5pg::rdma::kWireHelloSize>(), token);
    }
    return 0;
}
