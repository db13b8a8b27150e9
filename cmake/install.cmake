# `cmake --install` rules and the Debian package (`make package`: CPack, DEB generator).
#
# Source install (default prefix /usr/local): bin/l5pgd, lib/libl5pg.so, include/l5pg.h,
# lib/systemd/system/l5pgd.service, share/doc/l5pg/, and /etc/l5pg/l5pgd.yaml unless that
# file exists already (an edited configuration is never overwritten). The .deb installs
# under /usr and marks /etc/l5pg/l5pgd.yaml as a conffile, so dpkg keeps local edits too.
include(GNUInstallDirs)

set(L5PG_CONFIG_DIR /etc/l5pg CACHE PATH "where l5pgd.yaml is installed (absolute)")

install(TARGETS l5pgd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS l5pg LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/clientlib/l5pg.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# systemd/l5pgd.service names the package's paths (/usr/bin/l5pgd, /usr/share/doc/l5pg,
# /etc/l5pg); installed under another prefix (/usr/local from source) or with another
# L5PG_CONFIG_DIR it gets those instead.
# CMAKE_INSTALL_PREFIX is read at install time: cpack installs with /usr.
install(CODE "
  file(READ \"${PROJECT_SOURCE_DIR}/systemd/l5pgd.service\" unit)
  string(REPLACE \"/usr/bin/l5pgd\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/l5pgd\"
         unit \"\${unit}\")
  string(REPLACE \"/etc/l5pg/\" \"${L5PG_CONFIG_DIR}/\" unit \"\${unit}\")
  string(REPLACE \"/usr/share/doc/l5pg/\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DOCDIR}/\"
         unit \"\${unit}\")
  file(WRITE \"${PROJECT_BINARY_DIR}/install-unit/l5pgd.service\" \"\${unit}\")
  file(INSTALL \"${PROJECT_BINARY_DIR}/install-unit/l5pgd.service\"
       DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")
")
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/wire-format.md
              ${PROJECT_SOURCE_DIR}/docs/performance.md ${PROJECT_SOURCE_DIR}/config/l5pgd.example.yaml
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
# Not install(FILES ... RENAME): that would replace an operator's configuration on every
# `cmake --install`. CPack stages into an empty directory, so the package always has it.
install(CODE "
  set(conf \"\$ENV{DESTDIR}${L5PG_CONFIG_DIR}/l5pgd.yaml\")
  if(EXISTS \"\${conf}\")
    message(STATUS \"Keeping existing: \${conf}\")
  else()
    # file(INSTALL) prepends DESTDIR to the absolute destination itself.
    file(INSTALL \"${PROJECT_SOURCE_DIR}/config/l5pgd.example.yaml\"
         DESTINATION \"${L5PG_CONFIG_DIR}\" RENAME l5pgd.yaml
         PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  endif()
")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME l5pg)
set(CPACK_PACKAGE_VENDOR "l5pg")
set(CPACK_PACKAGE_CONTACT "l5pg maintainers <l5pg@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "L5 shared-memory and RDMA proxy for PostgreSQL (l5pgd) and its LD_PRELOAD client shim")
set(CPACK_PACKAGE_DESCRIPTION
    "l5pgd sits next to PostgreSQL and serves clients over shared-memory rings, RDMA, Unix
sockets and TCP, one upstream connection per client session. libl5pg.so, preloaded into any
libpq program, moves its connections to l5pgd onto shared memory (or RDMA).")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION database)
# Depends: computed by dpkg-shlibdeps (dpkg-dev) from what the binaries are linked
# against. libibverbs is loaded at run time only when RDMA verbs are used, so it is not
# among them; rdma-core's libibverbs1 (and a provider) is only needed for RDMA NICs.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The unit runs as `postgres`, the user postgresql-common creates (as Debian's pgbouncer,
# which depends on it for the same reason).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "postgresql-common")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libibverbs1, rdma-core, postgresql")
# The maintainer scripts stop l5pgd at removal, restart a running one after an upgrade,
# and let systemd forget the unit (cmake/debian/post*, prerm).
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/cmake/debian/conffiles ${PROJECT_SOURCE_DIR}/cmake/debian/postinst
    ${PROJECT_SOURCE_DIR}/cmake/debian/prerm ${PROJECT_SOURCE_DIR}/cmake/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
