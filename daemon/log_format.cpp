#include "daemon/log_format.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string_view>

#include <spdlog/pattern_formatter.h>

#include "daemon/utf8_text.hpp"
#include "protocol/startup.hpp"

namespace l5pg::daemon {
namespace {

// "<N>" with the syslog priority of the line's level (sd-daemon(3)).
class SyslogPriorityFlag final : public spdlog::custom_flag_formatter {
  public:
    void format(const spdlog::details::log_msg& msg, const std::tm&,
                spdlog::memory_buf_t& dest) override {
        // Indexed by spdlog's levels: trace, debug, info, warn, err, critical, off.
        static constexpr std::string_view kPrefix[] = {"<7>", "<7>", "<6>", "<4>",
                                                       "<3>", "<2>", ""};
        const auto level = static_cast<size_t>(msg.level);
        const std::string_view prefix = level < std::size(kPrefix) ? kPrefix[level] : "<6>";
        dest.append(prefix.data(), prefix.data() + prefix.size());
    }
    [[nodiscard]] std::unique_ptr<custom_flag_formatter> clone() const override {
        return std::make_unique<SyslogPriorityFlag>();
    }
};

// The message, with control characters written out: a line holds what clients name (roles,
// databases, rejected packets), and a newline in a name must not start a line of its own --
// under the journal one that begins "<3>session 9: login: ..." at the priority it names.
class EscapedMessageFlag final : public spdlog::custom_flag_formatter {
  public:
    void format(const spdlog::details::log_msg& msg, const std::tm&,
                spdlog::memory_buf_t& dest) override {
        static constexpr char kHex[] = "0123456789abcdef";
        for (const char c : std::string_view(msg.payload.data(), msg.payload.size())) {
            const auto byte = static_cast<unsigned char>(c);
            if (byte >= 0x20 && byte != 0x7f) {
                dest.push_back(c);
                continue;
            }
            const char escaped[] = {'\\', 'x', kHex[byte >> 4], kHex[byte & 0xf]};
            dest.append(escaped, escaped + sizeof escaped);
        }
    }
    [[nodiscard]] std::unique_ptr<custom_flag_formatter> clone() const override {
        return std::make_unique<EscapedMessageFlag>();
    }
};

bool stderr_is_journal() noexcept {
    const char* stream = std::getenv("JOURNAL_STREAM");
    if (stream == nullptr)
        return false;
    unsigned long long dev = 0, ino = 0;
    struct stat st {};
    return std::sscanf(stream, "%llu:%llu", &dev, &ino) == 2 && ::fstat(STDERR_FILENO, &st) == 0 &&
           static_cast<unsigned long long>(st.st_dev) == dev &&
           static_cast<unsigned long long>(st.st_ino) == ino;
}

}  // namespace

std::string quoted_name(std::string_view name) {
    std::string out = "\"";
    for (const char c : valid_utf8(name, protocol::kMaxNameBytes)) {
        if (c == '"' || c == '\\')
            out += '\\';
        out += c;
    }
    out += '"';
    if (name.size() > protocol::kMaxNameBytes)
        out += "...";
    return out;
}

LogDestination detect_log_destination() noexcept {
    if (stderr_is_journal())
        return LogDestination::Journal;
    return ::isatty(STDERR_FILENO) ? LogDestination::Terminal : LogDestination::Plain;
}

void apply_log_format(spdlog::logger& logger, LogDestination destination) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<EscapedMessageFlag>('~');
    if (destination == LogDestination::Journal) {
        formatter->add_flag<SyslogPriorityFlag>('*').set_pattern("%*%~");
    } else {
        // %^...%$ colours the level on a terminal and is empty elsewhere.
        formatter->set_pattern("%Y-%m-%d %H:%M:%S.%e %P [%^%l%$] %~");
    }
    logger.set_formatter(std::move(formatter));
}

}  // namespace l5pg::daemon
