// The admin console's commands (daemon/admin_query.cpp) facing whatever a client sends: a
// stream of messages whose 'Q' bodies are answered as the console answers them. The answer
// must always be well-framed backend messages ending in ReadyForQuery.
#include <chrono>
#include <memory>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "daemon/admin_query.hpp"
#include "protocol/framing.hpp"
#include "protocol/wire.hpp"
#include "tests/fuzz/fuzz_target.hpp"

namespace {

void check_framing(const std::vector<std::byte>& out) {
    size_t at = 0;
    char last = 0;
    while (at < out.size()) {
        if (out.size() - at < 5)
            __builtin_trap();
        const uint32_t len = l5pg::protocol::read_be32(out.data() + at + 1);
        if (len < 4 || len > out.size() - at - 1)
            __builtin_trap();
        last = static_cast<char>(out[at]);
        at += 1 + len;
    }
    if (last != 'Z')
        __builtin_trap();
}

const l5pg::daemon::SessionDirectory& directory() {
    static l5pg::daemon::SessionDirectory sessions;
    static const bool filled = [] {
        auto r = std::make_shared<l5pg::daemon::SessionRecord>();
        r->id = 1;
        r->client = "uid 1000 pid 42";
        r->database = "app";
        r->role = "alice";
        sessions.add(std::move(r));
        return true;
    }();
    (void)filled;
    return sessions;
}

const l5pg::daemon::PoolDirectory& pools() {
    static l5pg::daemon::PoolDirectory idle;
    static const bool filled = [] {
        idle.change({"app", "alice"}, 2);
        return true;
    }();
    (void)filled;
    return idle;
}

const l5pg::config::Config& config() {
    static const l5pg::config::Config defaults;
    return defaults;
}

// Counters with something in them, so SHOW STATS formats real values.
const l5pg::daemon::Metrics& metrics() {
    static l5pg::daemon::Metrics counters;
    static const bool filled = [] {
        counters.session_opened(l5pg::daemon::Transport::Shm);
        counters.observe_round_trip(l5pg::daemon::Transport::Shm, std::chrono::microseconds(40));
        return true;
    }();
    (void)filled;
    return counters;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto in = l5pg::fuzz::bytes(data, size);
    while (!in.empty()) {
        const auto parse = l5pg::protocol::parse_message_header(in, 64 * 1024);
        if (parse.status != l5pg::protocol::ParseStatus::Ok)
            break;
        const size_t total = parse.header.total_size();
        if (total > in.size())
            break;
        if (parse.header.type == 'Q') {
            const auto body = in.subspan(l5pg::protocol::kMessageHeaderSize,
                                         total - l5pg::protocol::kMessageHeaderSize);
            l5pg::protocol::BackendWriter out;
            (void)l5pg::daemon::answer_admin_query(
                std::string_view(reinterpret_cast<const char*>(body.data()), body.size()),
                l5pg::daemon::AdminView{directory(), pools(), config(), metrics()}, out);
            check_framing(out.bytes());
        }
        in = in.subspan(total);
    }
    return 0;
}
