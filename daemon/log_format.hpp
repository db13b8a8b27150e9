// How l5pgd's log lines look, by where stderr goes:
//   a terminal:        2026-11-25 11:40:02.123 4242 [info] message   (level in colour)
//   the journal:       <6>message   (JOURNAL_STREAM is set by systemd for a service whose
//                      stderr is the journal: the syslog priority prefix lets
//                      `journalctl -p err` filter, and journald adds time and pid itself)
//   anything else:     the terminal format without colour (files, docker logs, pipes)
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <spdlog/logger.h>

namespace l5pg::daemon {

enum class LogDestination { Terminal, Journal, Plain };

// From isatty(2) and JOURNAL_STREAM (which names stderr's device:inode: a stale value
// inherited by a child whose stderr was redirected does not count).
[[nodiscard]] LogDestination detect_log_destination() noexcept;

// Sets the logger's sink pattern for `destination`.
void apply_log_format(spdlog::logger& logger, LogDestination destination);

// A name a client chose (role, database), in double quotes for a log line, with `"` and `\`
// escaped: a database named `x" from uid 0` must not forge the fields after it. As valid
// UTF-8 (journald shows a line that is not as "[blob data]"), and at most the 63 bytes
// Postgres keeps of a name, then "...". (Control characters are escaped for the whole line
// by the format.)
[[nodiscard]] std::string quoted_name(std::string_view name);

}  // namespace l5pg::daemon
