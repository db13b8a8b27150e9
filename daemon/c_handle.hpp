// Owning handles for objects of C libraries (libevent, OpenSSL): a unique_ptr whose
// deleter is the library's own free function, named once per type.
#pragma once

#include <memory>

namespace l5pg::daemon {

template <auto Free>
struct CFree {
    template <class T>
    void operator()(T* object) const noexcept {
        Free(object);
    }
};

// CHandle<SSL, SSL_free>: an SSL* that SSL_free()s it.
template <class T, auto Free>
using CHandle = std::unique_ptr<T, CFree<Free>>;

}  // namespace l5pg::daemon
