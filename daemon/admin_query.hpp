// The admin console's commands (admin_console.hpp): one simple Query's text in, complete
// backend messages out. Pure of I/O, so unit tests drive it directly.
//
//   SHOW SESSIONS   who is connected (also SHOW CLIENTS, as in PgBouncer)
//   SHOW POOLS      per database and role: sessions now, server connections kept idle
//   SHOW STATS      per transport: sessions, errors, bytes, round trips since l5pgd started
//   SHOW CONFIG     every configuration key: value in force, default, reloadable or not
//   SHOW VERSION    l5pgd's version
//   SHOW HELP       these commands
//   RELOAD          as SIGHUP (and PgBouncer's RELOAD): l5pgd reloads its configuration;
//                   the answer comes once the reload ran: RELOAD, or an ERROR (F0000)
//                   saying why the configuration was not valid
//
// Case does not matter; a trailing ';' and surrounding white space are ignored.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "config/config.hpp"
#include "daemon/metrics.hpp"
#include "daemon/pool_directory.hpp"
#include "daemon/reload_ledger.hpp"
#include "daemon/session_directory.hpp"
#include "protocol/backend_messages.hpp"

namespace l5pg::daemon {

struct AdminClock {
    std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
};

// What the console reads: the admitted sessions, the kept server connections, the
// configuration the answering worker runs with (after a reload, the reloaded one) and
// l5pgd's counters; and how it asks for a reload, which returns a ReloadLedger ticket
// (unset: RELOAD is refused, 42501).
struct AdminView {
    const SessionDirectory& sessions;
    const PoolDirectory& pools;
    const config::Config& config;
    const Metrics& metrics;
    std::function<uint64_t()> request_reload = {};
};

// Appends the answer to `sql`, ending with ReadyForQuery. An unknown command is an ERROR
// (SQLSTATE 0A000) naming SHOW HELP; the session goes on. For a RELOAD it appends nothing
// and returns the reload's ticket: answer_reload() answers it once the ledger has its outcome.
[[nodiscard]] std::optional<uint64_t> answer_admin_query(std::string_view sql, AdminView view,
                                                         protocol::BackendWriter& out,
                                                         AdminClock clock = {});
// The answer to a RELOAD whose reload went as `outcome`, ending with ReadyForQuery; its
// warnings (keys that need a restart) come first, as NoticeResponses.
void answer_reload(const ReloadLedger::Outcome& outcome, protocol::BackendWriter& out);

}  // namespace l5pg::daemon
