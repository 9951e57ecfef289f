// SPDX-License-Identifier: Apache-2.0
// open_in_root / open_untrusted_file: a container's files are opened without
// following links out of its root, regular files only, never blocking.
#include "core/platform/fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/symbols/elf_file.h"

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

// A directory (sole_cuda_device_of lists /dev): opened inside the root; a
// link to a host directory resolves inside it too; a file is not one.
TEST_F(OpenInRoot, DirectoryInsideTheRootAndALinkOutOfItNot) {
  Result<int> fd = open_dir_in_root(root_, "/lib");
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  struct stat st;
  ASSERT_EQ(fstat(*fd, &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  close(*fd);
  ASSERT_EQ(symlink("/tmp", (root_ + "/dev").c_str()), 0);  // ROOT/tmp does not exist
  Result<int> out = open_dir_in_root(root_, "/dev");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, ENOENT);
  Result<int> file = open_dir_in_root(root_, "/lib/real.so");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().code, ENOTDIR);
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

// Issue 32: a path a traced process names (.gnu_debuglink, a mapping) is
// never opened unless it is a regular file, so a FIFO's writer is not woken
// (nor a device opened): the writer below stays blocked in its open.
TEST_F(OpenInRoot, AFifoIsNeverOpenedSoItsWriterStaysBlocked) {
  const std::string fifo = root_ + "/lib/debug.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0666), 0);
  for (const bool in_root : {false, true}) {
    pid_t writer = fork();
    ASSERT_GE(writer, 0);
    if (writer == 0) {
      int fd = open(fifo.c_str(), O_WRONLY);  // blocks until a reader opens it
      _exit(fd >= 0 ? 0 : 1);
    }
    usleep(100 * 1000);  // the writer is in its open
    Result<int> fd = in_root ? open_in_root(root_, "/lib/debug.fifo") : open_untrusted_file(fifo);
    ASSERT_FALSE(fd.ok());
    EXPECT_EQ(fd.error().code, EINVAL);
    usleep(200 * 1000);
    int status = 0;
    EXPECT_EQ(waitpid(writer, &status, WNOHANG), 0) << "the FIFO was opened for reading (in_root " << in_root << ")";
    kill(writer, SIGKILL);
    waitpid(writer, &status, 0);
  }
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

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

TEST_F(OpenInRoot, OutputFilesAreCreated0600AndNeverThroughASymlink) {
  const std::string out = root_ + "/out.pb.gz";
  Result<OutputFile> file = create_output_file(out);
  ASSERT_TRUE(file.ok()) << file.error().message;
  ASSERT_TRUE(file->write("x", 1).ok());
  // Not there until committed: a failed snapshot leaves nothing half-written.
  EXPECT_NE(access(out.c_str(), F_OK), 0);
  ASSERT_TRUE(file->commit().ok());
  struct stat st;
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(slurp(out), "x");
  // A planted link to the host secret: refused, the secret untouched.
  const std::string link = root_ + "/planted";
  ASSERT_EQ(symlink(secret_.c_str(), link.c_str()), 0);
  Result<OutputFile> through = create_output_file(link);
  ASSERT_FALSE(through.ok());
  EXPECT_EQ(through.error().code, ELOOP);
  EXPECT_EQ(slurp(secret_), "host secret");
  // A FIFO without a reader: refused at once.
  ASSERT_EQ(mkfifo((root_ + "/fifo").c_str(), 0600), 0);
  EXPECT_FALSE(create_output_file(root_ + "/fifo").ok());
  // Nothing but the files made here is left in the directory.
  int entries = 0;
  for (auto& e : std::filesystem::directory_iterator(root_)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 4) << "lib, out.pb.gz, planted, fifo";
}

TEST_F(OpenInRoot, OutputThroughASymlinkedParentDirectoryIsRefused) {
  // Another user's link in place of a directory: root's snapshot must not
  // follow it to overwrite a file in a directory only root can write.
  ASSERT_EQ(mkdir((root_ + "/private").c_str(), 0700), 0);
  std::ofstream(root_ + "/private/precious") << "root's file";
  ASSERT_EQ(symlink((root_ + "/private").c_str(), (root_ + "/linkdir").c_str()), 0);
  Result<OutputFile> file = create_output_file(root_ + "/linkdir/precious");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().code, ELOOP);
  EXPECT_NE(file.error().message.find("symlink"), std::string::npos) << file.error().message;
  EXPECT_EQ(slurp(root_ + "/private/precious"), "root's file");
  // Deeper too: a link anywhere in the path.
  ASSERT_EQ(mkdir((root_ + "/private/sub").c_str(), 0700), 0);
  EXPECT_FALSE(create_output_file(root_ + "/linkdir/sub/x").ok());
}

TEST_F(OpenInRoot, ProcSelfMemIsRefused) {
  // /proc/self is a symlink: writing "events" into our own memory is refused
  // before any byte is written.
  Result<OutputFile> file = create_output_file("/proc/self/mem");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().code, ELOOP);
  // And through the real pid: not a regular file.
  Result<OutputFile> real = create_output_file("/proc/" + std::to_string(getpid()) + "/mem");
  EXPECT_FALSE(real.ok());
}

TEST_F(OpenInRoot, APreCreatedFileIsReplacedNotReused) {
  // A 0666 file someone else could still read through an fd they hold.
  const std::string out = root_ + "/events.bin";
  std::ofstream(out) << "old";
  ASSERT_EQ(chmod(out.c_str(), 0666), 0);
  int held = open(out.c_str(), O_RDONLY);
  ASSERT_GE(held, 0);
  struct stat before;
  ASSERT_EQ(stat(out.c_str(), &before), 0);
  Result<OutputFile> file = create_output_file(out, OutputFile::Publish::kNow);
  ASSERT_TRUE(file.ok()) << file.error().message;
  ASSERT_TRUE(file->write("secret heap pointers", 20).ok());
  ASSERT_TRUE(file->commit().ok());
  struct stat after;
  ASSERT_EQ(stat(out.c_str(), &after), 0);
  EXPECT_NE(after.st_ino, before.st_ino) << "the pre-created inode was reused";
  EXPECT_EQ(after.st_mode & 0777, 0600u);
  EXPECT_EQ(read_fd(held), "old") << "the holder of the old file sees the new data";
}

TEST_F(OpenInRoot, AnotherUsersFileIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create a file owned by another user";
  const std::string out = root_ + "/theirs";
  std::ofstream(out) << "theirs";
  ASSERT_EQ(chown(out.c_str(), 65534, 65534), 0);
  Result<OutputFile> file = create_output_file(out);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().code, EPERM);
  EXPECT_EQ(slurp(out), "theirs");
}

TEST_F(OpenInRoot, AFailedWriteIsReportedAndLeavesNoFile) {
  // RLIMIT_FSIZE makes writes past 4 KiB fail with EFBIG (SIGXFSZ ignored),
  // as a full disk would: in a child, so the test's own limit is untouched.
  const std::string out = root_ + "/big.pb.gz";
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &lim);
    Result<OutputFile> file = create_output_file(out);
    if (!file) _exit(10);
    std::string chunk(100000, 'x');
    Status st = file->write(chunk.data(), chunk.size());
    if (st) st = file->commit();
    if (st) _exit(11);
    _exit(st.error().code == EFBIG ? 0 : 12);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_NE(access(out.c_str(), F_OK), 0) << "a partial file was left";
}

}  // namespace
}  // namespace lw
