// Builders for the few backend messages l5pgd sends as a server of its own: the admin
// console (daemon/admin_console.hpp) answers simple queries with text rows. PG v3
// protocol, "Message Formats" in the PostgreSQL documentation. Pure code, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/error_response.hpp"

namespace l5pg::protocol {

// Appends complete messages to one buffer, so a whole answer goes out in one write.
class BackendWriter {
  public:
    void authentication_ok();                                              // 'R', 0
    void parameter_status(std::string_view name, std::string_view value);  // 'S'
    void backend_key_data(uint32_t pid, uint32_t key);                     // 'K'
    // 'v': the protocol version the server speaks, and the protocol options ("_pq_."
    // parameters) of the StartupMessage it does not know.
    void negotiate_protocol_version(uint32_t version,
                                    const std::vector<std::string_view>& unrecognized);
    void ready_for_query(char status = 'I');  // 'Z'
    // 'T': text columns of type text (OID 25).
    void row_description(const std::vector<std::string_view>& columns);
    // 'D': a NULL where a value is absent.
    void data_row(const std::vector<std::optional<std::string>>& values);
    void command_complete(std::string_view tag);  // 'C'
    void empty_query_response();                  // 'I'
    // 'E' with severity ERROR (the session goes on) or FATAL.
    void error(std::string_view severity, std::string_view sqlstate, std::string_view message);
    // 'N' with severity WARNING, NOTICE, ...
    void notice(std::string_view severity, std::string_view sqlstate, std::string_view message);

    [[nodiscard]] const std::vector<std::byte>& bytes() const noexcept { return out_; }
    [[nodiscard]] std::vector<std::byte> take() noexcept { return std::move(out_); }

  private:
    void append_response(const ErrorFields& fields);
    // Starts a message of `type`; end() fills in its length.
    void begin(char type);
    void end();
    void put_u16(uint16_t v);
    void put_u32(uint32_t v);
    void put_cstring(std::string_view s);  // NUL bytes inside are dropped

    std::vector<std::byte> out_;
    size_t start_ = 0;
};

}  // namespace l5pg::protocol
