// SPDX-License-Identifier: Apache-2.0
// open_in_root / open_untrusted_file: a container's files are opened without
// following links out of its root, regular files only, never blocking.
#include "core/fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "core/elf_file.h"

namespace lw {
namespace {

class OpenInRoot : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lw_root_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    // The "host secret": outside the root, at a path a link inside names.
    secret_ = root_ + ".secret";
    std::ofstream(secret_) << "host secret";
    ASSERT_EQ(mkdir((root_ + "/lib").c_str(), 0755), 0);
    std::ofstream(root_ + "/lib/real.so") << "inside the root";
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + root_ + "' '" + secret_ + "'";
    (void)system(cmd.c_str());
  }
  std::string read_fd(int fd) {
    char buf[64] = {};
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
  std::string root_, secret_;
};

TEST_F(OpenInRoot, OpensARegularFileInsideTheRoot) {
  Result<int> fd = open_in_root(root_, "/lib/real.so");
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  EXPECT_EQ(read_fd(*fd), "inside the root");
}

TEST_F(OpenInRoot, AbsoluteSymlinkToAHostFileResolvesInsideTheRoot) {
  // In the container, /lib/libc.so.6 -> /abs/path/of/the/host/secret.
  ASSERT_EQ(symlink(secret_.c_str(), (root_ + "/lib/libc.so.6").c_str()), 0);
  // A plain open follows it to the host file: the attack.
  int plain = open((root_ + "/lib/libc.so.6").c_str(), O_RDONLY);
  ASSERT_GE(plain, 0);
  EXPECT_EQ(read_fd(plain), "host secret");
  // Resolved in the root, it names ROOT/abs/path/..., which does not exist.
  Result<int> fd = open_in_root(root_, "/lib/libc.so.6");
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().code, ENOENT);
}

TEST_F(OpenInRoot, DotDotCannotClimbOutOfTheRoot) {
  std::string rel = "../../../../../../../../.." + secret_;
  ASSERT_EQ(symlink(rel.c_str(), (root_ + "/lib/up.so").c_str()), 0);
  Result<int> fd = open_in_root(root_, "/lib/up.so");
  ASSERT_FALSE(fd.ok());
  Result<int> direct = open_in_root(root_, rel);
  ASSERT_FALSE(direct.ok());
}

TEST_F(OpenInRoot, FifoInPlaceOfLibcIsRefusedWithoutBlocking) {
  ASSERT_EQ(mkfifo((root_ + "/lib/libc.so.6").c_str(), 0644), 0);
  const auto t0 = std::chrono::steady_clock::now();
  Result<int> fd = open_in_root(root_, "/lib/libc.so.6");
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().code, EINVAL);
  EXPECT_NE(fd.error().message.find("not a regular file"), std::string::npos);
  // And through the ELF reader, which counts it.
  auto elf = ElfFile::open_path("/proc/self/root" + root_ + "/lib/libc.so.6");
  ASSERT_FALSE(elf.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

TEST_F(OpenInRoot, ProcPidRootPathsGoThroughTheRoot) {
  // /proc/self/root is "/" here, so an absolute link stays valid: what
  // matters is that the path is split at /root/ and resolved there.
  Result<int> fd = open_untrusted_file("/proc/" + std::to_string(getpid()) + "/root" + root_ +
                                       "/lib/real.so");
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  EXPECT_EQ(read_fd(*fd), "inside the root");
  // Magic links (/proc/self/fd/N) are refused inside a root...
  int inner = open((root_ + "/lib/real.so").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(inner, 0);
  Result<int> magic = open_in_root("/", "/proc/self/fd/" + std::to_string(inner));
  EXPECT_FALSE(magic.ok());
  // ...but other paths (map_files-style) are opened as given.
  Result<int> direct = open_untrusted_file("/proc/self/fd/" + std::to_string(inner));
  ASSERT_TRUE(direct.ok()) << direct.error().message;
  close(*direct);
  close(inner);
  EXPECT_FALSE(open_untrusted_file("/proc/self/root/").ok());  // a directory
}

}  // namespace
}  // namespace lw

namespace lw {
namespace {

TEST_F(OpenInRoot, OutputFilesAreCreated0600AndNeverThroughASymlink) {
  const std::string out = root_ + "/out.pb.gz";
  Result<int> fd = create_output_file(out);
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  ASSERT_EQ(write(*fd, "x", 1), 1);
  close(*fd);
  struct stat st;
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A planted link to the host secret: refused, the secret untouched.
  const std::string link = root_ + "/planted";
  ASSERT_EQ(symlink(secret_.c_str(), link.c_str()), 0);
  Result<int> through = create_output_file(link);
  ASSERT_FALSE(through.ok());
  EXPECT_EQ(through.error().code, ELOOP);
  std::ifstream secret(secret_);
  std::string text((std::istreambuf_iterator<char>(secret)), {});
  EXPECT_EQ(text, "host secret");
  // A FIFO without a reader: refused at once.
  ASSERT_EQ(mkfifo((root_ + "/fifo").c_str(), 0600), 0);
  EXPECT_FALSE(create_output_file(root_ + "/fifo").ok());
}

}  // namespace
}  // namespace lw
