#include "protocol/error_response.hpp"

#include <algorithm>

#include "protocol/framing.hpp"
#include "protocol/wire.hpp"

namespace l5pg::protocol {
namespace {

void append_field(std::vector<std::byte>& out, char code, std::string_view value) {
    out.push_back(static_cast<std::byte>(code));
    for (const char c : value)
        if (c != '\0')
            out.push_back(static_cast<std::byte>(c));
    out.push_back(std::byte{0});
}

}  // namespace

std::vector<std::byte> build_error_response(const ErrorFields& fields) {
    std::vector<std::byte> out(kMessageHeaderSize);
    out[0] = static_cast<std::byte>(fields.notice ? 'N' : 'E');
    append_field(out, 'S', fields.severity);
    append_field(out, 'V', fields.severity);  // non-localized severity (PG >= 9.6)
    append_field(out, 'C', fields.sqlstate);
    append_field(out, 'M', fields.message);
    if (!fields.detail.empty())
        append_field(out, 'D', fields.detail);
    if (!fields.hint.empty())
        append_field(out, 'H', fields.hint);
    out.push_back(std::byte{0});  // terminates the field list
    write_be32(out.data() + 1, static_cast<uint32_t>(out.size() - 1));
    return out;
}

// Fields are a code byte and a NUL-terminated value each, the list ends with a zero byte.
std::optional<ReceivedError> read_error_response(std::span<const std::byte> body) {
    ReceivedError out;
    std::string_view localized_severity;
    while (!body.empty() && body[0] != std::byte{0}) {
        const char code = static_cast<char>(body[0]);
        const auto nul = std::find(body.begin() + 1, body.end(), std::byte{0});
        if (nul == body.end())
            return std::nullopt;
        const std::string_view value(reinterpret_cast<const char*>(body.data() + 1),
                                     static_cast<size_t>(nul - body.begin()) - 1);
        if (code == 'V')
            out.severity = value;
        else if (code == 'S')
            localized_severity = value;
        else if (code == 'C')
            out.sqlstate = value;
        else if (code == 'M')
            out.message = value;
        body = body.subspan(value.size() + 2);
    }
    if (body.size() != 1)  // the terminating zero byte, and nothing after it
        return std::nullopt;
    if (out.severity.empty())
        out.severity = localized_severity;
    return out;
}

}  // namespace l5pg::protocol
