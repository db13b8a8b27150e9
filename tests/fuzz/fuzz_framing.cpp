// PG v3 message framing: walks a buffer message by message as a forwarder would.
#include "protocol/framing.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto in = l5pg::fuzz::bytes(data, size);
    const uint32_t max_length = size > 0 ? 4 + data[0] * 64u : 4;
    while (!in.empty()) {
        const auto parse = l5pg::protocol::parse_message_header(in, max_length);
        if (parse.status != l5pg::protocol::ParseStatus::Ok)
            break;
        if (parse.header.length < 4 || parse.header.length > max_length)
            __builtin_trap();  // the parser promised these bounds
        const size_t total = parse.header.total_size();
        if (total > in.size())
            break;
        in = in.subspan(total);
    }
    return 0;
}
