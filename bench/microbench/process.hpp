// The second benchmark process: fork(), pin, run a function, _exit. The child reports
// counters and an error message through a MAP_SHARED page.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "bench/microbench/placement.hpp"
#include "bench/microbench/posix.hpp"

namespace l5pg::microbench {

struct ChildReport {
    std::atomic<uint64_t> count[4];  // meaning depends on the benchmark
    char message[512];               // NUL-terminated error text
};

// Owns the shared page the child writes its ChildReport into.
class SharedReport {
  public:
    SharedReport();
    [[nodiscard]] ChildReport& get() const noexcept { return *report_; }
    [[nodiscard]] std::string message() const;

  private:
    Mapping page_;
    ChildReport* report_ = nullptr;
};

// Copies `text` (truncated) into report.message; async-signal-safe-ish, no allocation.
void set_child_message(ChildReport& report, std::string_view text) noexcept;

// Child exit codes.
inline constexpr int kChildOk = 0;
inline constexpr int kChildFailed = 1;  // report.message says why

class ChildProcess {
  public:
    // Forks; the child gets PR_SET_PDEATHSIG(SIGKILL), is pinned to placement.child_cpu
    // (when pinned), runs `body()` (returns an exit code; exceptions become kChildFailed
    // with the message in `report`) and _exit()s without running destructors.
    template <class Body>
    static ChildProcess spawn(const Placement& placement, ChildReport& report, Body&& body) {
        const pid_t pid = fork_pinned(placement, report);
        if (pid == 0) {
            int code = kChildFailed;
            try {
                code = body();
            } catch (const std::exception& e) {
                set_child_message(report, e.what());
            } catch (...) {
                set_child_message(report, "unknown exception");
            }
            exit_child(code);
        }
        return ChildProcess(pid);
    }

    ChildProcess(ChildProcess&& other) noexcept;
    ChildProcess& operator=(ChildProcess&&) = delete;
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;
    ~ChildProcess();  // SIGKILL + reap if still running

    // Waits for the child; throws BenchError unless it exited with kChildOk.
    void wait_ok(const SharedReport& report);

  private:
    explicit ChildProcess(pid_t pid) noexcept : pid_(pid) {}
    // Returns 0 in the child (already pinned), the pid in the parent; throws on failure.
    static pid_t fork_pinned(const Placement& placement, ChildReport& report);
    [[noreturn]] static void exit_child(int code) noexcept;

    pid_t pid_ = -1;
};

}  // namespace l5pg::microbench
