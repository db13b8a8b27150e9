// What may leave the shim for its caller's C frames (libpq's, the application's): the
// unwinding of pthread_cancel() (abi::__forced_unwind), which must go on as it does through
// libc's own call, and nothing else. std::bad_alloc (more fds than poll()'s stack buffers
// hold, an RDMA channel's error text) becomes ENOMEM, the answer of a libc call out of
// memory; any other exception would be a bug, and ends the program as noexcept would.
#pragma once

#include <cxxabi.h>

#include <cerrno>
#include <exception>
#include <new>
#include <type_traits>

namespace l5pg::shim {

template <class Call>
auto within_c_boundary(Call call) -> decltype(call()) {
    static_assert(std::is_signed_v<decltype(call())>, "-1 with errno: a libc call's failure");
    try {
        return call();
    } catch (const abi::__forced_unwind&) {
        throw;
    } catch (const std::bad_alloc&) {
        errno = ENOMEM;
        return -1;
    } catch (...) {
        std::terminate();
    }
}

}  // namespace l5pg::shim
