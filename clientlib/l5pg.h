/* libl5pg public C API: lets a program (or a test) ask the preloaded shim about a
 * connection. Resolve with dlsym(RTLD_DEFAULT, ...) when the library may be absent. */
#ifndef L5PG_H
#define L5PG_H

#ifdef __cplusplus
extern "C" {
#endif

#define L5PG_TRANSPORT_SOCKET 0 /* not upgraded: plain socket I/O */
#define L5PG_TRANSPORT_SHM 1    /* bytes travel through shared-memory rings */
#define L5PG_TRANSPORT_RDMA 2   /* bytes travel through the L5 RDMA channel */

/* The transport `fd` currently uses. */
int l5pg_fd_transport(int fd);

/* "l5pg <version>". */
const char* l5pg_version(void);

#ifdef __cplusplus
}
#endif

#endif
