// L5PG_DEBUG output: one line per message on stderr, prefixed "l5pg[pid]: ". Built on a
// stack buffer and written with one write(2), so it is async-signal-safe (the cancel
// path runs in signal handlers) and allocates nothing. Silent unless L5PG_DEBUG is set.
#pragma once

#include <cstddef>
#include <cstdint>

namespace l5pg::shim {

void set_debug_enabled(bool on);
[[nodiscard]] bool debug_enabled();

class DebugLine {
  public:
    explicit DebugLine(bool enabled);
    DebugLine& str(const char* s);
    DebugLine& num(uint64_t v);
    DebugLine& inum(int64_t v);
    void end();  // appends '\n' and writes the line

  private:
    void put(char c);
    bool enabled_;
    size_t len_ = 0;
    char buf_[512];
};

[[nodiscard]] inline DebugLine debug_log() {
    return DebugLine(debug_enabled());
}

}  // namespace l5pg::shim
