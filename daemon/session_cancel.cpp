// Cancel keys (cancel_keys.hpp). Every session's client holds a key l5pgd knows: the
// backend's own, which a plain session picks out of Postgres's first bytes as they pass
// (protocol/backend_key_watcher.hpp), or one of l5pgd's for a pooled session
// (session_pool.cpp). A CancelRequest reaches Postgres only with such a key, translated to
// the backend's, and counts as on its way until its session ends (a backend is not kept
// for the pool meanwhile). Any other key is dropped as Postgres drops a wrong one: the
// connection closes without an answer.
#include <sys/socket.h>

#include <array>
#include <cerrno>

#include <spdlog/spdlog.h>

#include "daemon/session.hpp"
#include "daemon/worker.hpp"
#include "protocol/wire.hpp"

namespace l5pg::daemon {
// Guessing keys through l5pgd costs no fork: a CancelRequest is looked up only within
// limits.wrong_cancel_keys_per_second* (cancel_guess_limiter.hpp).
bool Session::look_up_cancel_key(const protocol::StartupPacket& packet) {
    CancelGuessLimiter& guesses = worker_.cancel_guesses();
    const std::string peer = peer_.limit_key();
    const auto now = CancelGuessLimiter::clock::now();
    switch (guesses.admit(peer, now)) {
        case CancelGuessLimiter::Verdict::LookUp:
            break;
        case CancelGuessLimiter::Verdict::OverPeerCap:
            refuse_cancel(CancelOutcome::Throttled,
                          fmt::format("more than {} a second with wrong keys from {} "
                                      "(limits.wrong_cancel_keys_per_second_per_peer)",
                                      guesses.per_peer_rate(), peer));
            return false;
        case CancelGuessLimiter::Verdict::OverTotalCap:
            refuse_cancel(CancelOutcome::Throttled,
                          fmt::format("more than {} a second with wrong keys in all "
                                      "(limits.wrong_cancel_keys_per_second)",
                                      guesses.total_rate()));
            return false;
    }
    if (!translate_cancel_key(packet)) {
        guesses.charge(peer, now);
        // Postgres logs a wrong key too (processCancelRequest); none of these reach it.
        refuse_cancel(CancelOutcome::UnknownKey,
                      fmt::format("its key (process {}) is not one of a session l5pgd serves",
                                  packet.cancel.backend_pid));
        return false;
    }
    return true;
}

bool Session::translate_cancel_key(const protocol::StartupPacket& packet) {
    std::optional<CancelKeys::Translation> translation =
        worker_.cancel_keys().backend_for(packet.cancel);
    if (!translation || startup_.size() < protocol::kCancelRequestLength)
        return false;
    protocol::write_be32(startup_.data() + 8, translation->backend.key.backend_pid);
    protocol::write_be32(startup_.data() + 12, translation->backend.key.secret);
    if (translation->backend.address.length > 0)  // else: what upstream.* names now
        dial_.pinned = translation->backend.address;
    cancel_in_flight_ = std::move(translation->in_flight);
    return true;
}

// Postgres closes a cancel connection once it has signalled the backend (or found the key
// wrong), and libpq's PQcancel() waits for that close: so does the session, and the cancel
// counts as on its way until then. Having written the 16 bytes is not enough: a postmaster
// slow to fork (a connection storm) takes them from its accept queue seconds later, when
// the backend may have been kept and serve another client (CancelKeys::cancelled_within()).
// Upstream reading stays on (Postgres sends nothing before it closes: discard_upstream()
// sees the EOF); bounded by limits.drain_timeout_ms, as any wait for Postgres to finish
// what a client sent.
void Session::finish_after_upstream_close(std::string reason) {
    finish_when_ = FinishWhen::UpstreamClosed;
    close_reason_ = std::move(reason);
    arm_timer(worker_.config().limits.drain_timeout_ms);
    update_upstream_reading();
}

// Under passthrough nothing the client sends reaches Postgres before Postgres has asked it to
// authenticate: were the login one pg_hba.conf trusts (refused when its AuthenticationOk
// comes), a query pipelined behind the StartupMessage would already have run.
bool Session::holding_for_authentication() const noexcept {
    return passthrough_login_ && key_watcher_ && !key_watcher_->asked();
}

void Session::release_held_input() {
    if (!input_held_ || holding_for_authentication() || state_ != SessionState::Forwarding)
        return;
    input_held_ = false;
    if (!client_gone_)
        end_->want_input(true);
    (void)forward_client_to_upstream();
}

bool Session::watch_for_key(std::span<const std::byte> copy) {
    if (!key_watcher_)
        return true;
    const protocol::BackendKeyWatcher::Status status = key_watcher_->feed(copy);
    if (passthrough_login_ && key_watcher_->accepted_without_asking())
        return false;
    if (status == protocol::BackendKeyWatcher::Status::Watching)
        return true;
    if (key_watcher_->logged_in())
        note_logged_in();
    if (const std::optional<protocol::CancelKey> key = key_watcher_->key()) {
        cancel_lease_ = worker_.cancel_keys().serve({*key, upstream_address_});
        backend_key_ = *key;
        if (record_)
            record_->backend_pid.store(key->backend_pid, std::memory_order_relaxed);
    } else
        spdlog::debug("session {}: Postgres sent no cancel key l5pgd can use", id_);
    key_watcher_.reset();
    return true;
}

}  // namespace l5pg::daemon
