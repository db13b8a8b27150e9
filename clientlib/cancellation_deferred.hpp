// pthread_cancel() acted upon inside a step that must finish would leave it half done for
// good: an upgrade holds its fd Upgrading (other threads' calls on it wait, then fail with
// EAGAIN), and a channel's teardown runs in destructors (a cancellation point there, such
// as close() of the RDMA soft wire, ends in std::terminate). For the guard's lifetime the
// thread's cancellation is disabled; a cancel asked for meanwhile stays pending and happens
// at the thread's next cancellation point, as deferred cancellation does.
#pragma once

#include <pthread.h>

namespace l5pg::shim {

class CancellationDeferred {
  public:
    // pthread_setcancelstate() takes no lock in glibc: fine in a signal handler (PQcancel's
    // first send on its own connection comes through here).
    CancellationDeferred() { ::pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &previous_); }
    ~CancellationDeferred() { ::pthread_setcancelstate(previous_, nullptr); }
    CancellationDeferred(const CancellationDeferred&) = delete;
    CancellationDeferred& operator=(const CancellationDeferred&) = delete;

  private:
    int previous_ = PTHREAD_CANCEL_ENABLE;
};

}  // namespace l5pg::shim
