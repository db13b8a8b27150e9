// Test helper for tests/integration/test_close_delivery.py: a libpq client that publishes
// a statement without waiting for its result and then leaves, N times, each time in a
// forked child so that every way of leaving can be repeated in one process:
//
//   l5pg-send-then-close <mode> <table> <count>     (connection from the PG* environment)
//
// modes: finish  PQsendQuery + PQflush + PQfinish (Terminate follows the statement)
//        exit    PQsendQuery + PQflush + exit(0)   (atexit handlers run, no PQfinish)
//        _exit   PQsendQuery + PQflush + _exit(0)  (the process just dies)
//        copy    COPY <table> FROM STDIN, one row, PQputCopyEnd + PQflush + PQfinish
//        bigcopy COPY <table> FROM STDIN, kBigRows rows (i, padding) with values
//                i * kBigRows .. i * kBigRows + kBigRows - 1, then as copy: far more than
//                the sockets and rings hold, so the proxy is still sending when we leave
//
// Each child first runs "select 1" and waits for it, so the connection is fully up (and
// upgraded, under the shim) before the statement that must not be lost. Row i has value i.
// Exit status 0 when every child reported success; the parent prints "ok <count>".
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <libpq-fe.h>

namespace {

[[noreturn]] void die(PGconn* conn, const char* what) {
    std::fprintf(stderr, "%s: %s\n", what, conn ? PQerrorMessage(conn) : "");
    std::_Exit(2);
}

PGconn* connect_ready() {
    PGconn* conn = PQconnectdb("");
    if (PQstatus(conn) != CONNECTION_OK)
        die(conn, "connect");
    PGresult* r = PQexec(conn, "select 1");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        die(conn, "select 1");
    PQclear(r);
    return conn;
}

constexpr int kBigRows = 20000;

void put_copy(PGconn* conn, const std::string& data) {
    if (PQputCopyData(conn, data.data(), static_cast<int>(data.size())) != 1)
        die(conn, "copy data");
}

void copy_many_rows(PGconn* conn, const std::string& table, int i) {
    const std::string sql = "copy " + table + " from stdin";
    PGresult* r = PQexec(conn, sql.c_str());
    if (PQresultStatus(r) != PGRES_COPY_IN)
        die(conn, "copy");
    PQclear(r);
    const std::string pad(200, 'x');
    std::string batch;
    for (int row = 0; row < kBigRows; ++row) {
        batch += std::to_string(i * kBigRows + row) + "\t" + pad + "\n";
        if (batch.size() > 60000) {
            put_copy(conn, batch);
            batch.clear();
        }
    }
    put_copy(conn, batch);
    if (PQputCopyEnd(conn, nullptr) != 1 || PQflush(conn) != 0)
        die(conn, "copy end");
}

void send_insert(PGconn* conn, const std::string& table, int i) {
    const std::string sql = "insert into " + table + " values (" + std::to_string(i) + ")";
    if (PQsendQuery(conn, sql.c_str()) != 1 || PQflush(conn) != 0)
        die(conn, "send insert");
}

// COPY FROM STDIN: wait for CopyInResponse, send one row and CopyDone, leave at once.
void copy_one_row(PGconn* conn, const std::string& table, int i) {
    const std::string sql = "copy " + table + " from stdin";
    PGresult* r = PQexec(conn, sql.c_str());
    if (PQresultStatus(r) != PGRES_COPY_IN)
        die(conn, "copy");
    PQclear(r);
    const std::string row = std::to_string(i) + "\n";
    if (PQputCopyData(conn, row.data(), static_cast<int>(row.size())) != 1 ||
        PQputCopyEnd(conn, nullptr) != 1 || PQflush(conn) != 0)
        die(conn, "copy data");
}

[[noreturn]] void child(const std::string& mode, const std::string& table, int i) {
    PGconn* conn = connect_ready();
    if (mode == "copy")
        copy_one_row(conn, table, i);
    else if (mode == "bigcopy")
        copy_many_rows(conn, table, i);
    else
        send_insert(conn, table, i);
    if (mode == "exit")
        std::exit(0);
    if (mode == "_exit")
        ::_exit(0);
    PQfinish(conn);
    std::exit(0);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s finish|exit|_exit|copy|bigcopy <table> <count>\n", argv[0]);
        return 2;
    }
    const std::string mode = argv[1];
    const std::string table = argv[2];
    const int count = std::atoi(argv[3]);
    if (mode != "finish" && mode != "exit" && mode != "_exit" && mode != "copy" &&
        mode != "bigcopy") {
        std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
        return 2;
    }
    int failed = 0;
    for (int i = 0; i < count; ++i) {
        std::fflush(nullptr);  // nothing buffered may be written twice by a child
        const pid_t pid = ::fork();
        if (pid < 0) {
            std::perror("fork");
            return 2;
        }
        if (pid == 0)
            child(mode, table, i);
        int status = 0;
        if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            ++failed;
    }
    if (failed > 0) {
        std::fprintf(stderr, "%d of %d children failed\n", failed, count);
        return 1;
    }
    std::printf("ok %d\n", count);
    return 0;
}
