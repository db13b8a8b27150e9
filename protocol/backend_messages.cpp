#include "protocol/backend_messages.hpp"

#include "protocol/error_response.hpp"
#include "protocol/wire.hpp"

namespace l5pg::protocol {
namespace {

constexpr uint32_t kTextOid = 25;

}  // namespace

void BackendWriter::begin(char type) {
    start_ = out_.size();
    out_.push_back(static_cast<std::byte>(type));
    put_u32(0);  // length, filled in by end()
}

void BackendWriter::end() {
    write_be32(out_.data() + start_ + 1, static_cast<uint32_t>(out_.size() - start_ - 1));
}

void BackendWriter::put_u16(uint16_t v) {
    out_.push_back(static_cast<std::byte>(v >> 8));
    out_.push_back(static_cast<std::byte>(v & 0xff));
}

void BackendWriter::put_u32(uint32_t v) {
    const size_t at = out_.size();
    out_.resize(at + 4);
    write_be32(out_.data() + at, v);
}

void BackendWriter::put_cstring(std::string_view s) {
    for (const char c : s)
        if (c != '\0')
            out_.push_back(static_cast<std::byte>(c));
    out_.push_back(std::byte{0});
}

void BackendWriter::authentication_ok() {
    begin('R');
    put_u32(0);
    end();
}

void BackendWriter::parameter_status(std::string_view name, std::string_view value) {
    begin('S');
    put_cstring(name);
    put_cstring(value);
    end();
}

void BackendWriter::backend_key_data(uint32_t pid, uint32_t key) {
    begin('K');
    put_u32(pid);
    put_u32(key);
    end();
}

void BackendWriter::negotiate_protocol_version(uint32_t version,
                                               const std::vector<std::string_view>& unrecognized) {
    begin('v');
    put_u32(version);
    put_u32(static_cast<uint32_t>(unrecognized.size()));
    for (const std::string_view option : unrecognized)
        put_cstring(option);
    end();
}

void BackendWriter::ready_for_query(char status) {
    begin('Z');
    out_.push_back(static_cast<std::byte>(status));
    end();
}

void BackendWriter::row_description(const std::vector<std::string_view>& columns) {
    begin('T');
    put_u16(static_cast<uint16_t>(columns.size()));
    for (std::string_view name : columns) {
        put_cstring(name);
        put_u32(0);           // table OID: none
        put_u16(0);           // column number: none
        put_u32(kTextOid);    // type
        put_u16(0xffff);      // typlen -1 (variable), as int16
        put_u32(0xffffffff);  // typmod -1
        put_u16(0);           // text format
    }
    end();
}

void BackendWriter::data_row(const std::vector<std::optional<std::string>>& values) {
    begin('D');
    put_u16(static_cast<uint16_t>(values.size()));
    for (const std::optional<std::string>& v : values) {
        if (!v) {
            put_u32(0xffffffff);  // -1: NULL
            continue;
        }
        put_u32(static_cast<uint32_t>(v->size()));
        for (const char c : *v)
            out_.push_back(static_cast<std::byte>(c));
    }
    end();
}

void BackendWriter::command_complete(std::string_view tag) {
    begin('C');
    put_cstring(tag);
    end();
}

void BackendWriter::empty_query_response() {
    begin('I');
    end();
}

void BackendWriter::error(std::string_view severity, std::string_view sqlstate,
                          std::string_view message) {
    append_response({severity, sqlstate, message, {}, {}, /*notice=*/false});
}

void BackendWriter::notice(std::string_view severity, std::string_view sqlstate,
                           std::string_view message) {
    append_response({severity, sqlstate, message, {}, {}, /*notice=*/true});
}

void BackendWriter::append_response(const ErrorFields& fields) {
    const std::vector<std::byte> message = build_error_response(fields);
    out_.insert(out_.end(), message.begin(), message.end());
}

}  // namespace l5pg::protocol
