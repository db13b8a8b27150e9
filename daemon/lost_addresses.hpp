// Addresses a worker's lookup found gone from upstream.host's answer (a failover by DNS),
// posted for the other workers: each closes the connections it keeps there, in its own loop
// once woken (Worker::close_kept_at_lost_addresses()). Each worker's own lookups decide what it
// keeps from then on (Worker::address_retired()): resolvers may disagree for a while, and an
// address back in one worker's answer is that worker's to use again.
#pragma once

#include <string>
#include <vector>

#include "daemon/worker_bulletin.hpp"

namespace l5pg::daemon {

struct LostAddresses {
    unsigned worker = 0;            // whose lookup found it (that worker closed its own)
    std::string name;               // UpstreamResolver::name_of(upstream.host, upstream.port)
    std::vector<std::string> gone;  // UpstreamAddress::bytes()
};

using LostAddressBulletin = WorkerBulletin<LostAddresses>;

}  // namespace l5pg::daemon
