#include "bench/microbench/process.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/core.h>

namespace l5pg::microbench {

SharedReport::SharedReport() : page_(sizeof(ChildReport), Mapping::Kind::Shared) {
    report_ = std::construct_at(reinterpret_cast<ChildReport*>(page_.data()));
}

std::string SharedReport::message() const {
    return std::string(report_->message, ::strnlen(report_->message, sizeof report_->message));
}

void set_child_message(ChildReport& report, std::string_view text) noexcept {
    const size_t n = std::min(text.size(), sizeof report.message - 1);
    std::memcpy(report.message, text.data(), n);
    report.message[n] = '\0';
}

pid_t ChildProcess::fork_pinned(const Placement& placement, ChildReport& report) {
    std::fflush(stdout);  // the child must not inherit (and later flush) buffered output
    std::fflush(stderr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0)
        throw_errno("fork");
    if (pid > 0)
        return pid;
    // Child: die with the parent (a spinning orphan would eat a CPU forever).
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent)
        exit_child(kChildFailed);
    if (placement.pinned) {
        try {
            pin_to_cpu(placement.child_cpu);
        } catch (const std::exception& e) {
            set_child_message(report, e.what());
            exit_child(kChildFailed);
        }
    }
    return 0;
}

void ChildProcess::exit_child(int code) noexcept {
    ::_exit(code);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}

ChildProcess::~ChildProcess() {
    if (pid_ <= 0)
        return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
}

void ChildProcess::wait_ok(const SharedReport& report) {
    int status = 0;
    pid_t r;
    do {
        r = ::waitpid(pid_, &status, 0);
    } while (r < 0 && errno == EINTR);
    if (r < 0)
        throw_errno("waitpid");
    pid_ = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == kChildOk)
        return;
    const std::string why = report.message();
    if (WIFSIGNALED(status))
        throw BenchError(fmt::format("child killed by signal {}{}{}", WTERMSIG(status),
                                     why.empty() ? "" : ": ", why));
    throw BenchError(fmt::format("child exited with status {}: {}", WEXITSTATUS(status),
                                 why.empty() ? "(no message)" : why));
}

}  // namespace l5pg::microbench
