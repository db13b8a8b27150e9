#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <set>

#include <catch2/catch.hpp>

#include "transport/wait/wait_id.hpp"

using l5pg::wait::kUnnamedWait;
using l5pg::wait::next_wait_id;
using l5pg::wait::seed_wait_ids;

TEST_CASE("wait ids: never unnamed, never repeated", "[wait][wait_id]") {
    seed_wait_ids();
    std::set<uint64_t> seen;
    for (int i = 0; i < 10000; ++i) {
        const uint64_t id = next_wait_id();
        CHECK(id != kUnnamedWait);
        CHECK(seen.insert(id).second);
    }
}

TEST_CASE("wait ids: a forked child that reseeds does not repeat its parent's", "[wait][wait_id]") {
    seed_wait_ids();
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        seed_wait_ids();  // what the shim's pthread_atfork handler does
        const uint64_t id = next_wait_id();
        (void)!::write(pipe_fds[1], &id, sizeof id);
        ::_exit(0);
    }
    const uint64_t parent_id = next_wait_id();
    uint64_t child_id = 0;
    REQUIRE(::read(pipe_fds[0], &child_id, sizeof child_id) == sizeof child_id);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    // Both would have been the same number without the new start (2^-64 by chance).
    CHECK(child_id != parent_id);
    CHECK(child_id != kUnnamedWait);
}
