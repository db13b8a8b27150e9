// Test helper for tests/integration/test_shim_libc.py: libc calls on an upgraded libpq
// connection that Python cannot make safely, each answered on one stdout line.
//
//   l5pg-libc-probe vfork            (connection from the PG* environment)
//       A vfork() child (as Python's subprocess makes one) dup2()s the connection's fd to
//       kSpareFd and close()s it, then _exit()s. The child shares the parent's memory, so
//       the shim must leave its table alone: the parent keeps its connection.
//       Prints "transport=<fd's> spare=<kSpareFd's> answer=<select 42>".
//   l5pg-libc-probe _Fork
//       A _Fork() child (fork() without the fork handlers) sends on its copy of the
//       connection, closes it and makes a pipe, which gets the same fd number, and sends a
//       byte through it. Prints "child_send=<EPIPE or the result> child_pipe_fd=<same|other>
//       child_pipe_transport=<the pipe's> child_pipe=<what came through>" from the child,
//       then "transport=<fd's> answer=<select 42>" from the parent.
//   l5pg-libc-probe io-uring-epoll
//       With an io_uring instance open (as libuv makes one when its loop starts), the
//       connection is registered with epoll by a raw system call, as libuv does through
//       IORING_OP_EPOLL_CTL where the epoll_ctl interposer cannot see it, and a query's
//       answer is awaited in epoll_wait() (up to 5 s per wait). Prints "io_uring=<yes or
//       unavailable> transport=<fd's> answer=<the second column, or none>".
//   l5pg-libc-probe poll-in-handler
//       A signal handler poll()s the connection (at once, and with a 10 ms wait on an empty
//       ring) and select()s it; both are async-signal-safe and must not call malloc there.
//       Prints "transport=<fd's> mallocs=<count, -1 when not counted under sanitizers>
//       out=<POLLOUT poll's revents> in=<POLLIN poll's result> select=<its result>".
//   l5pg-libc-probe pthread-cancel
//       pthread_cancel() of a thread blocked in read() on a pipe (a descriptor the shim does
//       not track), and of one blocked in PQgetResult() on the upgraded connection (the
//       shim's own wait): each thread ends cancelled, as with libc, and the process goes on.
//       Prints "pipe=<cancelled|returned> conn=<cancelled|returned> transport=<fd's>
//       after=<select 42 on a new connection>".
//   l5pg-libc-probe cancel-during-upgrade
//       A thread begins a connection (PQconnectStart), has a pthread_cancel() pending, and
//       sends its StartupMessage (PQconnectPoll), where the shim upgrades the connection:
//       the cancel must wait for the upgrade's end, not leave the fd half upgraded. The
//       thread ends cancelled; main() finishes the connection and asks select 42. Prints
//       "thread=<cancelled|returned> transport=<fd's> after=<answer>".
//   l5pg-libc-probe exit-while-polling
//       A thread poll()s the upgraded connection in a loop (1 ms at a time) while main()
//       returns: exit() runs the static destructors with the thread still polling, which
//       must not find its rings unmapped. Prints "transport=<fd's>"; exit status 0.
//
// The shim's l5pg_fd_transport() is looked up at run time: this program runs with and
// without it. Exit status 1 with a message on stderr when the connection fails.
#include <dlfcn.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <libpq-fe.h>

namespace {

constexpr int kSpareFd = 200;

// malloc() calls while `g_counting` is set. The executable's malloc() comes before libc's
// for every library in the process, the shim included. Not under sanitizers, which
// replace malloc themselves.
std::atomic<bool> g_counting{false};
std::atomic<int> g_mallocs{0};

}  // namespace

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define L5PG_COUNT_MALLOCS 1
extern "C" void* __libc_malloc(size_t size);
extern "C" void* malloc(size_t size) {
    if (g_counting.load(std::memory_order_relaxed))
        g_mallocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_malloc(size);
}
#endif

namespace {

[[noreturn]] void die(PGconn* conn, const char* what) {
    std::fprintf(stderr, "%s: %s", what, conn != nullptr ? PQerrorMessage(conn) : "\n");
    std::exit(1);
}

int transport_of(int fd) {
    using Fn = int (*)(int);
    const auto fn = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, "l5pg_fd_transport"));
    return fn != nullptr ? fn(fd) : 0;
}

PGconn* connect_and_ask(const char* sql, char* answer, size_t size) {
    PGconn* conn = PQconnectdb("");
    if (PQstatus(conn) != CONNECTION_OK)
        die(conn, "connect");
    PGresult* res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        die(conn, sql);
    std::snprintf(answer, size, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return conn;
}

int vfork_mode() {
    char answer[32];
    PGconn* conn = connect_and_ask("select 1", answer, sizeof answer);
    const int fd = PQsocket(conn);
    const pid_t pid = ::vfork();
    if (pid == 0) {
        ::dup2(fd, kSpareFd);
        ::close(fd);
        ::_exit(0);
    }
    if (pid < 0 || ::waitpid(pid, nullptr, 0) != pid)
        die(nullptr, "vfork");
    PGresult* res = PQexec(conn, "select 42");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        die(conn, "select 42 after the vfork child");
    std::printf("transport=%d spare=%d answer=%s\n", transport_of(fd), transport_of(kSpareFd),
                PQgetvalue(res, 0, 0));
    PQclear(res);
    PQfinish(conn);
    return 0;
}

void fork_child_mode_child(int fd) {
    const ssize_t sent = ::send(fd, "X", 1, MSG_NOSIGNAL);
    const int send_errno = errno;
    ::close(fd);
    int pipe_fds[2];
    char got[2] = {'-', '\0'};
    if (::pipe(pipe_fds) == 0 && ::write(pipe_fds[1], "p", 1) == 1)
        (void)!::read(pipe_fds[0], got, 1);
    std::printf("child_send=%s child_pipe_fd=%s child_pipe_transport=%d child_pipe=%s\n",
                sent < 0 && send_errno == EPIPE ? "EPIPE" : std::to_string(sent).c_str(),
                pipe_fds[0] == fd ? "same" : "other", transport_of(pipe_fds[0]), got);
    std::fflush(stdout);
    ::_exit(0);
}

int fork_without_handlers_mode() {
    char answer[32];
    PGconn* conn = connect_and_ask("select 1", answer, sizeof answer);
    const int fd = PQsocket(conn);
    std::fflush(stdout);
    const pid_t pid = ::_Fork();
    if (pid == 0)
        fork_child_mode_child(fd);
    if (pid < 0 || ::waitpid(pid, nullptr, 0) != pid)
        die(nullptr, "_Fork");
    PGresult* res = PQexec(conn, "select 42");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        die(conn, "select 42 after the _Fork child");
    std::printf("transport=%d answer=%s\n", transport_of(fd), PQgetvalue(res, 0, 0));
    PQclear(res);
    PQfinish(conn);
    return 0;
}

int io_uring_epoll_mode() {
    io_uring_params params{};
    const int ring = static_cast<int>(::syscall(SYS_io_uring_setup, 4, &params));
    if (ring < 0) {
        std::printf("io_uring=unavailable\n");
        return 0;
    }
    char answer[32];
    PGconn* conn = connect_and_ask("select 1", answer, sizeof answer);
    const int fd = PQsocket(conn);
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (ep < 0 || ::syscall(SYS_epoll_ctl, ep, EPOLL_CTL_ADD, fd, &ev) != 0)
        die(nullptr, "epoll");
    if (PQsendQuery(conn, "select pg_sleep(0.2), 42") != 1)
        die(conn, "send");
    while (PQflush(conn) == 1) {
    }
    bool answered = true;
    while (answered && PQconsumeInput(conn) == 1 && PQisBusy(conn)) {
        epoll_event out{};
        answered = ::epoll_wait(ep, &out, 1, 5000) == 1;
    }
    PGresult* res = answered ? PQgetResult(conn) : nullptr;
    std::printf("io_uring=yes transport=%d answer=%s\n", transport_of(fd),
                PQresultStatus(res) == PGRES_TUPLES_OK ? PQgetvalue(res, 0, 1) : "none");
    PQclear(res);
    PQfinish(conn);
    ::close(ep);
    ::close(ring);
    return 0;
}

int g_fd = -1;
short g_out_revents = -1;
int g_in_rc = -2;
int g_select_rc = -2;

void poll_in_handler(int) {
    const int saved = errno;
    g_counting.store(true, std::memory_order_relaxed);
    pollfd out{g_fd, POLLOUT, 0};
    if (::poll(&out, 1, 0) >= 0)
        g_out_revents = out.revents;
    pollfd in{g_fd, POLLIN, 0};  // nothing to read: the whole wait, to its timeout
    g_in_rc = ::poll(&in, 1, 10);
    fd_set writable;
    FD_ZERO(&writable);
    FD_SET(g_fd, &writable);
    timeval zero{0, 0};
    g_select_rc = ::select(g_fd + 1, nullptr, &writable, nullptr, &zero);
    g_counting.store(false, std::memory_order_relaxed);
    errno = saved;
}

int poll_in_handler_mode() {
    char answer[32];
    PGconn* conn = connect_and_ask("select 1", answer, sizeof answer);
    g_fd = PQsocket(conn);
    struct sigaction sa {};
    sa.sa_handler = poll_in_handler;
    ::sigaction(SIGUSR1, &sa, nullptr);
    ::raise(SIGUSR1);
#ifdef L5PG_COUNT_MALLOCS
    const int mallocs = g_mallocs.load();
#else
    const int mallocs = -1;
#endif
    std::printf("transport=%d mallocs=%d out=%d in=%d select=%d\n", transport_of(g_fd), mallocs,
                g_out_revents, g_in_rc, g_select_rc);
    PQfinish(conn);
    return 0;
}

void* read_pipe(void* fd) {
    char byte = 0;
    (void)!::read(*static_cast<int*>(fd), &byte, 1);  // nothing ever comes
    return nullptr;
}

void* wait_for_sleep(void* conn) {
    PQgetResult(static_cast<PGconn*>(conn));  // pg_sleep(30): cancelled long before
    return nullptr;
}

const char* join_outcome(pthread_t thread) {
    void* result = nullptr;
    ::pthread_join(thread, &result);
    return result == PTHREAD_CANCELED ? "cancelled" : "returned";
}

const char* cancel_after_200ms(pthread_t thread) {
    ::usleep(200 * 1000);
    ::pthread_cancel(thread);
    return join_outcome(thread);
}

void* poll_for_ever(void* fd) {
    pollfd p{*static_cast<int*>(fd), POLLIN, 0};
    for (;;)
        (void)::poll(&p, 1, 1);
    return nullptr;
}

struct CancelDuringUpgrade {
    PGconn* conn = nullptr;
    int to_main[2] = {-1, -1};    // the thread: "started, cancel me now"
    int to_thread[2] = {-1, -1};  // main: "cancelled"
};

void* start_then_poll_cancelled(void* arg) {
    auto* s = static_cast<CancelDuringUpgrade*>(arg);
    s->conn = PQconnectStart("");  // connect() here, before any cancel is pending
    int previous = 0;
    ::pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &previous);
    char byte = 1;
    (void)!::write(s->to_main[1], &byte, 1);
    (void)!::read(s->to_thread[0], &byte, 1);  // the cancel is pending from here on
    ::pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, nullptr);
    (void)PQconnectPoll(s->conn);  // its first send upgrades; a cancellation point follows
    ::pthread_testcancel();
    return nullptr;
}

int cancel_during_upgrade_mode() {
    CancelDuringUpgrade s;
    if (::pipe(s.to_main) != 0 || ::pipe(s.to_thread) != 0)
        die(nullptr, "pipe");
    pthread_t thread;
    ::pthread_create(&thread, nullptr, start_then_poll_cancelled, &s);
    char byte = 0;
    (void)!::read(s.to_main[0], &byte, 1);
    ::pthread_cancel(thread);
    (void)!::write(s.to_thread[1], &byte, 1);
    const char* outcome = join_outcome(thread);
    for (int round = 0; round < 1000; ++round) {  // PQconnectPoll as PQconnectdb would
        const PostgresPollingStatusType status = PQconnectPoll(s.conn);
        if (status == PGRES_POLLING_OK || status == PGRES_POLLING_FAILED)
            break;
        pollfd p{PQsocket(s.conn),
                 static_cast<short>(status == PGRES_POLLING_READING ? POLLIN : POLLOUT), 0};
        (void)::poll(&p, 1, 1000);
    }
    if (PQstatus(s.conn) != CONNECTION_OK)
        die(s.conn, "connect after the cancelled thread");
    PGresult* res = PQexec(s.conn, "select 42");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        die(s.conn, "select 42");
    std::printf("thread=%s transport=%d after=%s\n", outcome, transport_of(PQsocket(s.conn)),
                PQgetvalue(res, 0, 0));
    PQclear(res);
    PQfinish(s.conn);
    return 0;
}

int exit_while_polling_mode() {
    char answer[32];
    PGconn* conn = connect_and_ask("select 1", answer, sizeof answer);
    static int fd = PQsocket(conn);
    pthread_t poller;
    ::pthread_create(&poller, nullptr, poll_for_ever, &fd);
    ::usleep(50 * 1000);
    std::printf("transport=%d\n", transport_of(fd));
    std::fflush(stdout);
    return 0;  // the connection stays open: exit() with the thread in poll()
}

int pthread_cancel_mode() {
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0)
        die(nullptr, "pipe");
    pthread_t reader;
    ::pthread_create(&reader, nullptr, read_pipe, &pipe_fds[0]);
    const char* pipe_outcome = cancel_after_200ms(reader);

    char answer[32];
    PGconn* conn = connect_and_ask("select 1", answer, sizeof answer);
    const int transport = transport_of(PQsocket(conn));
    if (PQsendQuery(conn, "select pg_sleep(30)") != 1)
        die(conn, "send pg_sleep");
    pthread_t waiter;
    ::pthread_create(&waiter, nullptr, wait_for_sleep, conn);
    const char* conn_outcome = cancel_after_200ms(waiter);
    PQfinish(conn);  // mid-statement: its backend ends it

    PGconn* again = connect_and_ask("select 42", answer, sizeof answer);
    std::printf("pipe=%s conn=%s transport=%d after=%s\n", pipe_outcome, conn_outcome, transport,
                answer);
    PQfinish(again);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "vfork") == 0)
        return vfork_mode();
    if (argc == 2 && std::strcmp(argv[1], "_Fork") == 0)
        return fork_without_handlers_mode();
    if (argc == 2 && std::strcmp(argv[1], "io-uring-epoll") == 0)
        return io_uring_epoll_mode();
    if (argc == 2 && std::strcmp(argv[1], "poll-in-handler") == 0)
        return poll_in_handler_mode();
    if (argc == 2 && std::strcmp(argv[1], "pthread-cancel") == 0)
        return pthread_cancel_mode();
    if (argc == 2 && std::strcmp(argv[1], "exit-while-polling") == 0)
        return exit_while_polling_mode();
    if (argc == 2 && std::strcmp(argv[1], "cancel-during-upgrade") == 0)
        return cancel_during_upgrade_mode();
    std::fprintf(stderr,
                 "usage: %s vfork|_Fork|io-uring-epoll|poll-in-handler|pthread-cancel|"
                 "exit-while-polling|cancel-during-upgrade\n",
                 argv[0]);
    return 2;
}
