// ErrorResponse ('E'): the builder for errors l5pgd reports itself, and a reader for the
// few fields l5pgd looks at in Postgres's own.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace l5pg::protocol {

// SQLSTATEs l5pgd uses.
inline constexpr std::string_view kSqlstateProtocolViolation = "08P01";
inline constexpr std::string_view kSqlstateConnectionFailure = "08006";
inline constexpr std::string_view kSqlstateCannotConnectNow = "57P03";
inline constexpr std::string_view kSqlstateAdminShutdown = "57P01";
inline constexpr std::string_view kSqlstateTooManyConnections = "53300";
inline constexpr std::string_view kSqlstateInsufficientResources = "53000";
inline constexpr std::string_view kSqlstateInvalidAuthorization = "28000";
inline constexpr std::string_view kSqlstateFeatureNotSupported = "0A000";
inline constexpr std::string_view kSqlstateInsufficientPrivilege = "42501";
inline constexpr std::string_view kSqlstateConfigFileError = "F0000";
inline constexpr std::string_view kSqlstateWarning = "01000";

struct ErrorFields {
    std::string_view severity = "FATAL";  // written as both S and V fields
    std::string_view sqlstate = kSqlstateProtocolViolation;
    std::string_view message;
    std::string_view detail;  // optional
    std::string_view hint;    // optional
    bool notice = false;      // a NoticeResponse ('N', severity WARNING, NOTICE...) instead
};

// A complete 'E' (or 'N') message. NUL bytes inside fields are dropped (they would end the field).
[[nodiscard]] std::vector<std::byte> build_error_response(const ErrorFields& fields);

// The common case: a FATAL error with a SQLSTATE and a message.
[[nodiscard]] inline std::vector<std::byte> build_fatal(std::string_view sqlstate,
                                                        std::string_view message) {
    ErrorFields fields;
    fields.sqlstate = sqlstate;
    fields.message = message;
    return build_error_response(fields);
}

// The fields of an ErrorResponse body (or NoticeResponse) that l5pgd looks at; views into
// the body. nullopt for a body that is not a well-formed field list.
struct ReceivedError {
    std::string_view severity;  // 'V' (not localized, PG >= 9.6), else 'S'
    std::string_view sqlstate;
    std::string_view message;
    // FATAL or PANIC: the backend ends after it, whatever it was answering.
    [[nodiscard]] bool ends_session() const noexcept {
        return severity == "FATAL" || severity == "PANIC";
    }
};
[[nodiscard]] std::optional<ReceivedError> read_error_response(std::span<const std::byte> body);

}  // namespace l5pg::protocol
