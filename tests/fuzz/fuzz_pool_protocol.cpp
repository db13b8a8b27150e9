// Session pooling's readers of what Postgres sends (protocol/server_greeting.hpp,
// protocol/pool_reset.hpp, protocol/pool_login_check.hpp), the cancel-key watcher
// (protocol/backend_key_watcher.hpp) and the tracker's walk (protocol/framing.hpp), fed the
// input in pieces whose sizes the first byte chooses.
#include <algorithm>
#include <vector>

#include "protocol/backend_key_watcher.hpp"
#include "protocol/framing.hpp"
#include "protocol/pool_login_check.hpp"
#include "protocol/pool_reset.hpp"
#include "protocol/server_greeting.hpp"
#include "tests/fuzz/fuzz_target.hpp"

namespace {

template <class Feed>
void in_pieces(std::span<const std::byte> in, size_t piece, Feed&& feed) {
    while (!in.empty()) {
        const size_t n = std::min(piece, in.size());
        feed(in.first(n));
        in = in.subspan(n);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0)
        return 0;
    const size_t piece = 1 + data[0] % 64;
    const auto in = l5pg::fuzz::bytes(data + 1, size - 1);
    using l5pg::protocol::GreetingReader;
    GreetingReader greeting;
    GreetingReader::Status status = GreetingReader::Status::NeedMore;
    in_pieces(in, piece, [&](auto bytes) {
        if (status == GreetingReader::Status::NeedMore)
            status = greeting.feed(bytes);
    });
    if (status == GreetingReader::Status::Complete) {
        if (greeting.rest().size() > in.size())
            __builtin_trap();
        (void)greeting.greeting().build({1, 2});
    }
    l5pg::protocol::ServerGreeting kept;
    l5pg::protocol::PoolReset reset(0);
    in_pieces(in, piece, [&](auto bytes) { (void)reset.feed(bytes, kept); });
    using l5pg::protocol::PoolLoginCheck;
    for (const PoolLoginCheck::Purpose purpose :
         {PoolLoginCheck::Purpose::AtStart, PoolLoginCheck::Purpose::BeforeReuse}) {
        PoolLoginCheck login_check("postgres", "postgres", purpose, "0 5 {work_mem=8MB}");
        PoolLoginCheck::Status status = PoolLoginCheck::Status::NeedMore;
        in_pieces(in, piece, [&](auto bytes) {
            if (status == PoolLoginCheck::Status::NeedMore)
                status = login_check.feed(bytes, kept);
        });
        if (status != PoolLoginCheck::Status::NeedMore && login_check.rest().size() > in.size())
            __builtin_trap();
    }
    l5pg::protocol::BackendKeyWatcher watcher;
    in_pieces(in, piece, [&](auto bytes) { (void)watcher.feed(bytes); });
    l5pg::protocol::MessageBoundaryTracker tracker;
    size_t walked = 0;
    in_pieces(in, piece, [&](auto bytes) {
        const size_t n = tracker.walk(bytes, [](char type, size_t) { return type != 'X'; });
        if (n > bytes.size())
            __builtin_trap();
        walked += n;
    });
    if (walked > in.size())
        __builtin_trap();
    return 0;
}
