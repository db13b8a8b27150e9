// The admin console: l5pgd answers a virtual database (admin.database, default "l5pgd")
// itself, e.g. `psql -h /run/l5pg -p 6432 -d l5pgd -c 'SHOW SESSIONS'`.
//
// A session whose StartupMessage asks for that database and passes the admin check
// (Session::admit_startup) gets, instead of a connection to Postgres, one end of a
// socketpair whose other end is served here, on the same worker thread. The session
// forwards bytes exactly as it would to Postgres, so the console works over every
// transport (Unix socket, TCP, TLS, SHM, RDMA) without a line of transport code, and is
// counted, limited and listed like any other session. Commands: admin_query.hpp.
#pragma once

#include <event2/event.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "daemon/admin_query.hpp"
#include "daemon/event_ptr.hpp"
#include "daemon/reload_ledger.hpp"
#include "daemon/unique_fd.hpp"

namespace l5pg::daemon {

class AdminConsole {
  public:
    // `view` is called for each query on the worker thread: what the console reads then.
    AdminConsole(event_base* base, std::function<AdminView()> view);
    ~AdminConsole();
    AdminConsole(const AdminConsole&) = delete;
    AdminConsole& operator=(const AdminConsole&) = delete;

    // A new console connection: the session's end (non-blocking, close-on-exec), or an
    // invalid fd with errno set. `may_reload`: its role is in admin.users, not only in
    // admin.stats_users.
    [[nodiscard]] UniqueFd open(bool may_reload);
    // After a reload (the worker took its settings): answers the RELOADs it completes.
    // A connection whose RELOAD waits reads nothing more until it is answered.
    void answer_reloads(const ReloadLedger& ledger);

  private:
    struct Connection;
    static void read_cb(int fd, short what, void* arg);
    static void write_cb(int fd, short what, void* arg);
    void on_readable(Connection& c);
    // Handles every complete message in c.in; false when the connection must end.
    bool process(Connection& c);
    bool process_startup(Connection& c);
    bool process_message(Connection& c, char type, std::span<const std::byte> body);
    void flush(Connection& c);
    bool write_out(Connection& c);
    void drop(Connection& c);

    event_base* base_;
    const std::function<AdminView()> view_;
    std::map<const Connection*, std::unique_ptr<Connection>> connections_;
};

}  // namespace l5pg::daemon
