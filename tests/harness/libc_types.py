"""ctypes declarations of libc's struct iovec and struct msghdr (x86-64 and aarch64 glibc),
as source text for the scripts the tests run in shimmed processes (they are run with
`python3 -c` and cannot import what the test itself imported)."""

MSGHDR = r'''
class Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]

class Msghdr(ctypes.Structure):
    _fields_ = [("msg_name", ctypes.c_void_p), ("msg_namelen", ctypes.c_uint),
                ("msg_iov", ctypes.POINTER(Iovec)), ("msg_iovlen", ctypes.c_size_t),
                ("msg_control", ctypes.c_void_p), ("msg_controllen", ctypes.c_size_t),
                ("msg_flags", ctypes.c_int)]
'''
