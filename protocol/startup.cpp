#include "protocol/startup.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/error_response.hpp"
#include "protocol/wire.hpp"

namespace l5pg::protocol {
namespace {

StartupParse invalid(std::string message, std::string_view sqlstate = kSqlstateProtocolViolation) {
    StartupParse result;
    result.status = ParseStatus::Invalid;
    result.error = std::move(message);
    result.sqlstate = sqlstate;
    return result;
}

// Reads a NUL-terminated string starting at `pos` within `body`; false if unterminated.
bool read_cstring(std::span<const std::byte> body, size_t& pos, std::string& out) {
    for (size_t i = pos; i < body.size(); ++i) {
        if (body[i] == std::byte{0}) {
            out.assign(reinterpret_cast<const char*>(body.data() + pos), i - pos);
            pos = i + 1;
            return true;
        }
    }
    return false;
}

// Postgres takes the *last* value of a repeated parameter ("user", "database", "options"
// ...), l5pgd's checks would look at one of them: a packet with user=alice and then
// user=postgres must not pass as alice. No client library repeats a name, so refuse them all.
bool no_repeated_names(const StartupPacket& packet, std::string& error) {
    std::vector<std::string_view> names;
    names.reserve(packet.parameters.size());
    for (const auto& [name, value] : packet.parameters)
        names.emplace_back(name);
    std::sort(names.begin(), names.end());
    const auto repeated = std::adjacent_find(names.begin(), names.end());
    if (repeated == names.end())
        return true;
    error = "invalid startup packet: parameter \"" + std::string(*repeated) +
            "\" appears more than once";
    return false;
}

// StartupMessage body: name\0value\0 ... \0. Postgres requires the final terminator.
bool parse_parameters(std::span<const std::byte> body, StartupPacket& packet, std::string& error) {
    size_t pos = 0;
    for (;;) {
        if (pos >= body.size()) {
            error = "invalid startup packet layout: expected terminator as last byte";
            return false;
        }
        if (body[pos] == std::byte{0}) {
            if (pos + 1 != body.size()) {
                error = "invalid startup packet layout: data after the terminator";
                return false;
            }
            return no_repeated_names(packet, error);
        }
        std::string name, value;
        if (!read_cstring(body, pos, name) || !read_cstring(body, pos, value)) {
            error = "invalid startup packet layout: unterminated parameter";
            return false;
        }
        packet.parameters.emplace_back(std::move(name), std::move(value));
    }
}

bool parse_upgrade(std::span<const std::byte> packet_bytes, StartupPacket& packet,
                   std::string& error) {
    if (packet.length != kL5UpgradeRequestLength) {
        error = "invalid L5 upgrade request length";
        return false;
    }
    const std::byte* p = packet_bytes.data() + 8;
    L5UpgradeRequest& req = packet.upgrade;
    req.version = read_be32(p);
    const uint32_t transport = read_be32(p + 4);
    req.c2s_ring_size = read_be64(p + 8);
    req.s2c_ring_size = read_be64(p + 16);
    if (req.version != kL5UpgradeVersion) {
        error = "unsupported L5 upgrade request version " + std::to_string(req.version);
        return false;
    }
    if (transport != static_cast<uint32_t>(L5Transport::Shm) &&
        transport != static_cast<uint32_t>(L5Transport::Rdma)) {
        error = "unknown L5 transport " + std::to_string(transport);
        return false;
    }
    req.transport = static_cast<L5Transport>(transport);
    return true;
}

bool classify(uint32_t code, StartupKind& kind) {
    switch (code) {
        case kCancelRequestCode:
            kind = StartupKind::CancelRequest;
            return true;
        case kSslRequestCode:
            kind = StartupKind::SslRequest;
            return true;
        case kGssEncRequestCode:
            kind = StartupKind::GssEncRequest;
            return true;
        case kL5UpgradeRequestCode:
            kind = StartupKind::L5Upgrade;
            return true;
        default:
            break;
    }
    if ((code >> 16) == 3) {
        kind = StartupKind::Startup;
        return true;
    }
    return false;
}

}  // namespace

// As Postgres answers any code it does not know, its own 1234.x request codes included.
StartupParse unsupported_protocol(uint32_t code) {
    return invalid("unsupported frontend protocol " + std::to_string(code >> 16) + "." +
                       std::to_string(code & 0xffff) + ": server supports 3.0 to 3.0",
                   kSqlstateFeatureNotSupported);
}

StartupParse parse_startup_packet(std::span<const std::byte> buf) {
    StartupParse result;
    if (buf.size() < 4) {
        result.bytes_needed = 0;
        return result;  // NeedMore, length not known yet
    }
    const uint32_t length = read_be32(buf.data());
    // The length is a signed int32 on the wire; "negative" ones are huge here.
    if (length < kMinStartupPacketLength)
        return invalid("invalid length of startup packet");
    if (length > kMaxStartupPacketLength)
        return invalid("invalid length of startup packet: longer than " +
                       std::to_string(kMaxStartupPacketLength) + " bytes");
    if (buf.size() < length) {
        result.bytes_needed = length;
        return result;
    }
    StartupPacket& packet = result.packet;
    packet.length = length;
    packet.code = read_be32(buf.data() + 4);
    if (!classify(packet.code, packet.kind))
        return unsupported_protocol(packet.code);
    const std::span<const std::byte> whole = buf.first(length);
    std::string error;
    switch (packet.kind) {
        case StartupKind::Startup:
            if (!parse_parameters(whole.subspan(8), packet, error))
                return invalid(error);
            break;
        case StartupKind::CancelRequest:
            if (length != kCancelRequestLength)
                return invalid("invalid length of cancel request");
            packet.cancel.backend_pid = read_be32(whole.data() + 8);
            packet.cancel.secret = read_be32(whole.data() + 12);
            break;
        case StartupKind::SslRequest:
        case StartupKind::GssEncRequest:
            if (length != 8)
                return invalid("invalid length of encryption request");
            break;
        case StartupKind::L5Upgrade:
            if (!parse_upgrade(whole, packet, error))
                return invalid(error);
            break;
    }
    result.status = ParseStatus::Ok;
    return result;
}

bool is_cancel_request(std::span<const std::byte> buf) noexcept {
    return buf.size() >= kCancelRequestLength && read_be32(buf.data()) == kCancelRequestLength &&
           read_be32(buf.data() + 4) == kCancelRequestCode;
}

std::string_view startup_parameter(const StartupPacket& packet, std::string_view name) noexcept {
    for (const auto& [key, value] : packet.parameters)
        if (key == name)
            return value;
    return {};
}

namespace {

// `value` is a non-empty prefix of `word`, in any case (Postgres's parse_bool_with_len).
bool abbreviates(std::string_view value, std::string_view word) noexcept {
    if (value.empty() || value.size() > word.size())
        return false;
    for (size_t i = 0; i < value.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(value[i])) != word[i])
            return false;
    return true;
}

}  // namespace

bool physical_replication(const StartupPacket& packet) noexcept {
    const std::string_view value = startup_parameter(packet, "replication");
    return abbreviates(value, "true") || abbreviates(value, "yes") || value == "1" ||
           (value.size() >= 2 && abbreviates(value, "on"));
}

std::string_view login_database(const StartupPacket& packet) noexcept {
    if (physical_replication(packet))
        return {};
    const std::string_view database = startup_parameter(packet, "database");
    return database.empty() ? startup_parameter(packet, "user") : database;
}

bool is_startup_message(std::span<const std::byte> buf) noexcept {
    if (buf.size() < kMinStartupPacketLength)
        return false;
    const uint32_t length = read_be32(buf.data());
    return length >= kMinStartupPacketLength && length <= kMaxStartupPacketLength &&
           (read_be32(buf.data() + 4) >> 16) == 3;
}

std::array<std::byte, kL5UpgradeRequestLength> build_l5_upgrade_request(
    const L5UpgradeRequest& req) noexcept {
    std::array<std::byte, kL5UpgradeRequestLength> out{};
    write_be32(out.data(), kL5UpgradeRequestLength);
    write_be32(out.data() + 4, kL5UpgradeRequestCode);
    write_be32(out.data() + 8, req.version);
    write_be32(out.data() + 12, static_cast<uint32_t>(req.transport));
    write_be64(out.data() + 16, req.c2s_ring_size);
    write_be64(out.data() + 24, req.s2c_ring_size);
    return out;
}

std::array<std::byte, kCancelRequestLength> build_cancel_request(CancelKey key) noexcept {
    std::array<std::byte, kCancelRequestLength> out{};
    write_be32(out.data(), kCancelRequestLength);
    write_be32(out.data() + 4, kCancelRequestCode);
    write_be32(out.data() + 8, key.backend_pid);
    write_be32(out.data() + 12, key.secret);
    return out;
}

std::vector<std::byte> build_startup_message(
    const std::vector<std::pair<std::string, std::string>>& parameters) {
    std::vector<std::byte> out(8);
    auto append = [&out](const std::string& s) {
        for (const char c : s)
            out.push_back(static_cast<std::byte>(c));
        out.push_back(std::byte{0});
    };
    for (const auto& [name, value] : parameters) {
        append(name);
        append(value);
    }
    out.push_back(std::byte{0});
    write_be32(out.data(), static_cast<uint32_t>(out.size()));
    write_be32(out.data() + 4, kProtocolVersion3);
    return out;
}

}  // namespace l5pg::protocol
