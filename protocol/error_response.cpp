#include "protocol/error_response.hpp"

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
    out[0] = std::byte{'E'};
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

}  // namespace l5pg::protocol
