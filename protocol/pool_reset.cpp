#include "protocol/pool_reset.hpp"

#include <algorithm>
#include <array>
#include <string_view>

#include <fmt/format.h>

#include "protocol/framing.hpp"
#include "protocol/wire.hpp"

namespace l5pg::protocol {
namespace {

constexpr std::string_view kDiscard = "DISCARD ALL";
// `role` is left out of RESET ALL: whether DISCARD ALL brings it back to what the login set
// (ALTER ROLE ... SET role, options -c role=...) depends on the Postgres version (15 does;
// other poolers report versions that end it). RESET ROLE restores that default everywhere,
// so the next client starts as a new connection would.
constexpr std::string_view kResetRole = "RESET ROLE";
// The answer, message by message: DISCARD ALL's CommandComplete and ReadyForQuery, then the
// second query's: RESET's CommandComplete, the nonce's RowDescription, DataRow and
// CommandComplete, ReadyForQuery.
constexpr std::array<char, 7> kAnswer = {'C', 'Z', 'C', 'T', 'D', 'C', 'Z'};
constexpr size_t kMaxResetReply = 16 * 1024;

bool body_is(std::span<const std::byte> body, std::string_view text, bool nul_terminated) {
    const size_t size = text.size() + (nul_terminated ? 1 : 0);
    return body.size() == size &&
           std::equal(text.begin(), text.end(), reinterpret_cast<const char*>(body.data())) &&
           (!nul_terminated || body.back() == std::byte{0});
}

// A DataRow of one column whose value is `text`.
bool single_value_is(std::span<const std::byte> body, std::string_view text) {
    if (body.size() != 6 + text.size() || body[0] != std::byte{0} || body[1] != std::byte{1} ||
        read_be32(body.data() + 2) != text.size())
        return false;
    return body_is(body.subspan(6), text, false);
}

}  // namespace

PoolReset::PoolReset(uint64_t nonce) : nonce_text_(fmt::format("l5pgd-reset-{:016x}", nonce)) {}

std::vector<std::byte> PoolReset::request() const {
    std::vector<std::byte> out;
    append_query_message(out, kDiscard);
    append_query_message(out, fmt::format("{}; SELECT '{}'", kResetRole, nonce_text_));
    return out;
}

PoolReset::Status PoolReset::feed(std::span<const std::byte> bytes, ServerGreeting& greeting) {
    if (status_ != Status::NeedMore)
        return status_ = Status::Failed;  // nothing may follow the answer
    buffer_.append(bytes);
    status_ = buffer_.size() > kMaxResetReply ? Status::Failed : parse(greeting);
    return status_;
}

bool PoolReset::expected(char type, std::span<const std::byte> body) const {
    if (type != kAnswer[step_])
        return false;
    switch (step_) {
        case 0:
            return body_is(body, kDiscard, true);
        case 1:
        case 6:
            return body.size() == 1 && body[0] == std::byte{'I'};
        case 2:
            return body_is(body, "RESET", true);
        case 3:  // one column
            return body.size() >= 2 && body[0] == std::byte{0} && body[1] == std::byte{1};
        case 4:
            return single_value_is(body, nonce_text_);
        case 5:
            return body_is(body, "SELECT 1", true);
        default:
            return false;
    }
}

PoolReset::Status PoolReset::parse(ServerGreeting& greeting) {
    for (;;) {
        const MessageView msg = buffer_.next(kMaxResetReply);
        if (msg.status == ParseStatus::Invalid)
            return Status::Failed;
        if (msg.status == ParseStatus::NeedMore)
            return Status::NeedMore;
        if (msg.type == 'S') {  // RESET ALL reports what it changed back
            std::string name, value;
            if (!parse_parameter_status(msg.body, name, value))
                return Status::Failed;
            greeting.set_parameter(name, value);
            continue;
        }
        if (!expected(msg.type, msg.body))
            return Status::Failed;
        if (++step_ == kAnswer.size())
            return buffer_.rest().empty() ? Status::Done : Status::Failed;
    }
}

}  // namespace l5pg::protocol
