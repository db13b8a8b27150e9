#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "test_util.hpp"
#include "transport/shm/layout.hpp"
#include "transport/shm/segment.hpp"

using namespace l5pg::shm;
using l5pg::shm::test::make_segment;

namespace {

bool fd_is_open(int fd) {
    return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF;
}

int dup_or_fail(int fd) {
    const int d = ::dup(fd);
    REQUIRE(d >= 0);
    return d;
}

struct HeaderFields {
    uint64_t magic = kMagic;
    uint32_t version = kLayoutVersion;
    uint32_t header_size = kHeaderSize;
    uint64_t c2s_size = kMinRingSize;
    uint64_t s2c_size = kMinRingSize;
};

// A memfd sized `file_size` with the given header fields written by hand and the given
// seals applied (0 = none; no MFD_ALLOW_SEALING at all when `allow_sealing` is false),
// every page allocated unless `allocate` is false.
int raw_memfd(size_t file_size, const HeaderFields& h, int seals, bool allow_sealing = true,
              bool allocate = true) {
    const int fd =
        ::memfd_create("l5pg-test", MFD_CLOEXEC | (allow_sealing ? MFD_ALLOW_SEALING : 0));
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(file_size)) == 0);
    if (allocate) {  // written, as the shim does: a page only fallocate()d is still a hole
        const std::string zeros(file_size, '\0');
        REQUIRE(::pwrite(fd, zeros.data(), zeros.size(), 0) == static_cast<ssize_t>(file_size));
    }
    REQUIRE(::pwrite(fd, &h.magic, 8, offsetof(Header, magic)) == 8);
    REQUIRE(::pwrite(fd, &h.version, 4, offsetof(Header, version)) == 4);
    REQUIRE(::pwrite(fd, &h.header_size, 4, offsetof(Header, header_size)) == 4);
    REQUIRE(::pwrite(fd, &h.c2s_size, 8, offsetof(Header, c2s_size)) == 8);
    REQUIRE(::pwrite(fd, &h.s2c_size, 8, offsetof(Header, s2c_size)) == 8);
    if (seals != 0)
        REQUIRE(::fcntl(fd, F_ADD_SEALS, seals) == 0);
    return fd;
}

constexpr int kGoodSeals = F_SEAL_SHRINK | F_SEAL_GROW;
constexpr size_t kSmallTotal = kHeaderSize + 2 * kMinRingSize;

// attach() must fail, set a message, and close the fd it was given.
void expect_attach_fails(int fd, size_t c2s, size_t s2c, const char* why) {
    INFO(why);
    SysError err;
    auto seg = Segment::attach(fd, c2s, s2c, err);
    CHECK_FALSE(seg.has_value());
    CHECK(err.what != nullptr);
    CHECK_FALSE(fd_is_open(fd));
}

}  // namespace

TEST_CASE("Segment: create sets up header, fd and seals", "[shm][segment]") {
    Segment seg = make_segment(8192, 4096);
    CHECK(seg.fd() >= 0);
    CHECK(seg.c2s_size() == 8192);
    CHECK(seg.s2c_size() == 4096);
    const Header& h = seg.header();
    CHECK(h.magic == kMagic);
    CHECK(h.version == kLayoutVersion);
    CHECK(h.header_size == kHeaderSize);
    CHECK(h.c2s_size == 8192);
    CHECK(h.s2c_size == 4096);
    CHECK(h.client_closed.load() == 0);
    CHECK(h.server_closed.load() == 0);
    CHECK(h.c2s.read_pos.load() == 0);
    CHECK(h.s2c.reader_waiting.load() == 0);
    CHECK(h.s2c.writer_waiting.load() == 0);

    // SEAL and FUTURE_WRITE are left to the server, which adds them once it has mapped.
    CHECK(::fcntl(seg.fd(), F_GET_SEALS) == (F_SEAL_SHRINK | F_SEAL_GROW));
    struct stat st {};
    REQUIRE(::fstat(seg.fd(), &st) == 0);
    CHECK(static_cast<size_t>(st.st_size) == kHeaderSize + 8192 + 4096);
    CHECK(::lseek(seg.fd(), 0, SEEK_HOLE) == static_cast<off_t>(kHeaderSize + 8192 + 4096));
    CHECK((::fcntl(seg.fd(), F_GETFD) & FD_CLOEXEC) != 0);
    // Grow/shrink are refused.
    CHECK(::ftruncate(seg.fd(), 0) != 0);
    CHECK(::ftruncate(seg.fd(), 1 << 20) != 0);
}

TEST_CASE("Segment: this kernel takes the seals the server adds", "[shm][segment]") {
    CHECK(server_seals_supported());  // F_SEAL_FUTURE_WRITE: Linux 5.1 and later
}

TEST_CASE("Segment: create rejects invalid ring sizes", "[shm][segment]") {
    for (const size_t bad : {size_t{0}, size_t{1}, size_t{2048}, size_t{4095}, size_t{6144},
                             size_t{4097}, kMaxRingSize * 2, kMaxRingSize + 4096}) {
        INFO("size " << bad);
        SysError err;
        CHECK_FALSE(Segment::create(bad, kMinRingSize, err).has_value());
        CHECK(err.err == EINVAL);
        CHECK(err.what != nullptr);
        SysError err2;
        CHECK_FALSE(Segment::create(kMinRingSize, bad, err2).has_value());
        CHECK(err2.what != nullptr);
    }
}

TEST_CASE("Segment: create + attach round trip", "[shm][segment]") {
    Segment a = make_segment(8192, 16384);
    SysError err;
    const int fd = dup_or_fail(a.fd());
    auto b = Segment::attach(fd, 8192, 16384, err);
    INFO((err.what ? err.what : ""));
    REQUIRE(b.has_value());
    CHECK(b->fd() == fd);
    CHECK(b->c2s_size() == 8192);
    CHECK(b->s2c_size() == 16384);
    CHECK(b->header().magic == kMagic);

    // Shared: writes on one side show up on the other, through every mapping.
    a.header().c2s.read_pos.store(4242);
    CHECK(b->header().c2s.read_pos.load() == 4242);
    b->header().server_closed.store(1);
    CHECK(a.header().server_closed.load() == 1);
    for (size_t i = 0; i < 8192; i += 511) {
        a.c2s_data()[i] = std::byte(i & 0xff);
        CHECK(b->c2s_data()[i] == std::byte(i & 0xff));
        CHECK(b->c2s_data()[i + 8192] == std::byte(i & 0xff));
    }
    for (size_t i = 0; i < 16384; i += 777) {
        b->s2c_data()[i + 16384] = std::byte((i * 3) & 0xff);
        CHECK(a.s2c_data()[i] == std::byte((i * 3) & 0xff));
    }

    // Attached, the memfd is sealed against hole punching and new writable mappings (whose
    // pages l5pgd would be charged for); the two existing mappings still write.
    CHECK(::fcntl(fd, F_GET_SEALS) ==
          (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL));
    errno = 0;
    CHECK(::fallocate(a.fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kHeaderSize, 4096) != 0);
    CHECK(errno == EPERM);
    CHECK(::madvise(a.c2s_data(), 4096, MADV_REMOVE) != 0);
    CHECK(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd(), 0) == MAP_FAILED);
    // One memfd, one session: attaching it again is refused.
    SysError again;
    CHECK_FALSE(Segment::attach(dup_or_fail(a.fd()), 8192, 16384, again).has_value());
    CHECK_THAT(std::string(again.what), Catch::Matchers::Contains("already sealed"));

    // The attached segment survives the creator going away.
    a.reset();
    CHECK(a.fd() == -1);
    b->c2s_data()[0] = std::byte{0x5a};
    CHECK(b->c2s_data()[8192] == std::byte{0x5a});
    CHECK(b->header().c2s.read_pos.load() == 4242);
}

TEST_CASE("Segment: double mapping of both rings", "[shm][segment]") {
    Segment seg = make_segment(kMinRingSize, 2 * kMinRingSize);
    for (auto [data, size] :
         {std::pair{seg.c2s_data(), seg.c2s_size()}, std::pair{seg.s2c_data(), seg.s2c_size()}}) {
        for (size_t i = 0; i < size; ++i)
            data[i] = std::byte((i * 7 + 1) & 0xff);
        for (size_t i = 0; i < size; ++i) {
            if (data[i + size] != std::byte((i * 7 + 1) & 0xff)) {
                FAIL("second mapping differs at " << i);
            }
        }
        // And the other way round.
        for (size_t i = 0; i < size; ++i)
            data[i + size] = std::byte((i * 13 + 5) & 0xff);
        for (size_t i = 0; i < size; ++i) {
            if (data[i] != std::byte((i * 13 + 5) & 0xff))
                FAIL("first mapping differs at " << i);
        }
        // A write straddling the end lands at the start.
        std::memcpy(data + size - 2, "wxyz", 4);
        CHECK(std::memcmp(data, "yz", 2) == 0);
    }
    // The rings do not overlap each other or the header.
    CHECK(seg.c2s_data() == reinterpret_cast<std::byte*>(&seg.header()) + kHeaderSize);
    CHECK(seg.s2c_data() == seg.c2s_data() + 2 * seg.c2s_size());
    std::memset(seg.c2s_data(), 0xaa, 2 * seg.c2s_size());
    CHECK(seg.header().magic == kMagic);
    CHECK(seg.s2c_data()[2] == std::byte((2 * 13 + 5) & 0xff));
}

TEST_CASE("Segment: move and reset", "[shm][segment]") {
    Segment a = make_segment();
    const int fd = a.fd();
    Segment b(std::move(a));
    CHECK(a.fd() == -1);  // NOLINT(bugprone-use-after-move)
    CHECK(b.fd() == fd);
    Segment c = make_segment();
    const int fd_c = c.fd();
    c = std::move(b);
    CHECK(c.fd() == fd);
    CHECK_FALSE(fd_is_open(fd_c));  // the old segment of c was released
    c.reset();
    CHECK(c.fd() == -1);
    CHECK_FALSE(fd_is_open(fd));
    c.reset();  // idempotent
}

TEST_CASE("Segment: attach rejects bad input", "[shm][segment]") {
    SECTION("invalid requested ring sizes") {
        Segment a = make_segment();
        expect_attach_fails(dup_or_fail(a.fd()), 1000, kMinRingSize, "c2s 1000");
        expect_attach_fails(dup_or_fail(a.fd()), kMinRingSize, 0, "s2c 0");
        expect_attach_fails(dup_or_fail(a.fd()), kMinRingSize, 3 * kMinRingSize, "s2c 12288");
        expect_attach_fails(dup_or_fail(a.fd()), kMaxRingSize * 2, kMinRingSize, "c2s 512M");
    }
    SECTION("sizes that do not match the segment") {
        Segment a = make_segment(8192, 4096);
        expect_attach_fails(dup_or_fail(a.fd()), 4096, 4096, "file too large");
        expect_attach_fails(dup_or_fail(a.fd()), 8192, 8192, "file too small");
        // Same total size, swapped: only the header can tell.
        SysError err;
        const int fd = dup_or_fail(a.fd());
        CHECK_FALSE(Segment::attach(fd, 4096, 8192, err).has_value());
        CHECK_FALSE(fd_is_open(fd));
        REQUIRE(err.what != nullptr);
        CHECK_THAT(std::string(err.what), Catch::Matchers::Contains("header"));
    }
    SECTION("unsealed memfd of the right size") {
        expect_attach_fails(raw_memfd(kSmallTotal, {}, 0), kMinRingSize, kMinRingSize,
                            "sealable but unsealed");
        expect_attach_fails(raw_memfd(kSmallTotal, {}, 0, false), kMinRingSize, kMinRingSize,
                            "not sealable");
        expect_attach_fails(raw_memfd(kSmallTotal, {}, F_SEAL_SHRINK), kMinRingSize, kMinRingSize,
                            "only SHRINK");
        expect_attach_fails(raw_memfd(kSmallTotal, {}, F_SEAL_GROW), kMinRingSize, kMinRingSize,
                            "only GROW");
    }
    SECTION("seals that are the server's to add") {
        expect_attach_fails(raw_memfd(kSmallTotal, {}, kGoodSeals | F_SEAL_SEAL), kMinRingSize,
                            kMinRingSize, "SEAL: the server could not add FUTURE_WRITE");
        expect_attach_fails(raw_memfd(kSmallTotal, {}, kGoodSeals | F_SEAL_FUTURE_WRITE),
                            kMinRingSize, kMinRingSize, "FUTURE_WRITE: no writable mapping");
    }
    SECTION("pages the client did not allocate") {
        // l5pgd would be the first to touch them and be charged for them.
        SysError err;
        CHECK_FALSE(Segment::attach(raw_memfd(kSmallTotal, {}, kGoodSeals, true, false),
                                    kMinRingSize, kMinRingSize, err)
                        .has_value());
        REQUIRE(err.what != nullptr);
        CHECK_THAT(std::string(err.what), Catch::Matchers::Contains("did not allocate"));
        // Allocated, not written: still holes to tmpfs, and to the check.
        const int allocated = raw_memfd(kSmallTotal, {}, kGoodSeals, true, false);
        REQUIRE(::fallocate(allocated, 0, 0, static_cast<off_t>(kSmallTotal)) == 0);
        expect_attach_fails(allocated, kMinRingSize, kMinRingSize, "fallocate()d only");
        // One page punched out of an allocated memfd before it was passed.
        const int fd = raw_memfd(kSmallTotal, {}, kGoodSeals);
        REQUIRE(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                            static_cast<off_t>(kHeaderSize + kMinRingSize), 4096) == 0);
        expect_attach_fails(fd, kMinRingSize, kMinRingSize, "one page punched out");
    }
    SECTION("the control: a hand-made sealed memfd is accepted") {
        SysError err;
        auto seg = Segment::attach(raw_memfd(kSmallTotal, {}, F_SEAL_SHRINK | F_SEAL_GROW),
                                   kMinRingSize, kMinRingSize, err);
        CHECK(seg.has_value());
    }
    SECTION("not a memfd") {
        int p[2];
        REQUIRE(::pipe(p) == 0);
        ::close(p[1]);
        expect_attach_fails(p[0], kMinRingSize, kMinRingSize, "pipe");

        char path[] = "/tmp/l5pg-shm-test-XXXXXX";
        const int tmp = ::mkstemp(path);
        REQUIRE(tmp >= 0);
        ::unlink(path);
        REQUIRE(::ftruncate(tmp, static_cast<off_t>(kSmallTotal)) == 0);
        expect_attach_fails(tmp, kMinRingSize, kMinRingSize, "regular file");

        const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
        REQUIRE(devnull >= 0);
        expect_attach_fails(devnull, kMinRingSize, kMinRingSize, "/dev/null");
    }
    SECTION("wrong file size") {
        expect_attach_fails(raw_memfd(kSmallTotal - 4096, {}, kGoodSeals), kMinRingSize,
                            kMinRingSize, "one page short");
        expect_attach_fails(raw_memfd(kSmallTotal + 4096, {}, kGoodSeals), kMinRingSize,
                            kMinRingSize, "one page long");
        expect_attach_fails(raw_memfd(kSmallTotal + 1, {}, kGoodSeals), kMinRingSize, kMinRingSize,
                            "one byte long");
        expect_attach_fails(raw_memfd(kHeaderSize, {}, kGoodSeals), kMinRingSize, kMinRingSize,
                            "header only");
    }
    SECTION("bad header fields") {
        HeaderFields h;
        h.magic = kMagic ^ 1;
        expect_attach_fails(raw_memfd(kSmallTotal, h, kGoodSeals), kMinRingSize, kMinRingSize,
                            "bad magic");
        h = {};
        h.magic = 0;
        expect_attach_fails(raw_memfd(kSmallTotal, h, kGoodSeals), kMinRingSize, kMinRingSize,
                            "zero magic");
        h = {};
        h.version = kLayoutVersion + 1;
        expect_attach_fails(raw_memfd(kSmallTotal, h, kGoodSeals), kMinRingSize, kMinRingSize,
                            "bad version");
        h = {};
        h.header_size = 8192;
        expect_attach_fails(raw_memfd(kSmallTotal, h, kGoodSeals), kMinRingSize, kMinRingSize,
                            "bad header size");
        h = {};
        h.c2s_size = 8192;
        expect_attach_fails(raw_memfd(kSmallTotal, h, kGoodSeals), kMinRingSize, kMinRingSize,
                            "header c2s size differs");
        h = {};
        h.s2c_size = uint64_t{1} << 40;
        expect_attach_fails(raw_memfd(kSmallTotal, h, kGoodSeals), kMinRingSize, kMinRingSize,
                            "header s2c size differs");
    }
}
