// SPDX-License-Identifier: Apache-2.0
#include "core/accounting/cuda_devices.h"
#include "core/proc/procfs.h"

#include <gtest/gtest.h>

namespace lw {
namespace {

uint16_t dev_flags(int device) { return static_cast<uint16_t>((device + 1) << LW_EVF_DEVICE_SHIFT); }

Event alloc(uint32_t kind, uint64_t addr, uint64_t size, uint64_t ns, int device, uint16_t extra = 0) {
  return Event{EventType::kAlloc, static_cast<uint16_t>(dev_flags(device) | extra), 1, 1, kind, ns, addr, size, ns, 7};
}
Event free_of(uint32_t kind, uint64_t addr, uint64_t size, uint64_t ns) {
  return Event{EventType::kFree, 0, 1, 1, kind, ns + 1, addr, size, ns, 0};
}

TEST(CudaDeviceLedger, DeviceDecodedFromFlags) {
  EXPECT_EQ(event_device(alloc(LW_KIND_CUDA_DEVICE, 1, 1, 1, 0)), 0);
  EXPECT_EQ(event_device(alloc(LW_KIND_CUDA_DEVICE, 1, 1, 1, 7)), 7);
  Event unknown = alloc(LW_KIND_CUDA_DEVICE, 1, 1, 1, 0);
  unknown.flags = LW_EVF_REPLACED;  // no device bits
  EXPECT_EQ(event_device(unknown), -1);
}

TEST(CudaDeviceLedger, TotalsPerDeviceAndKind) {
  CudaDeviceLedger l;
  l.apply(alloc(LW_KIND_CUDA_DEVICE, 0x1000, 100, 1, 0));
  l.apply(alloc(LW_KIND_CUDA_DEVICE, 0x2000, 50, 2, 1));
  l.apply(alloc(LW_KIND_CUDA_MANAGED, 0x3000, 30, 3, 1));
  l.apply(alloc(LW_KIND_CUDA_HOST, 0x4000, 20, 4, 0));
  l.apply(alloc(LW_KIND_HEAP, 0x5000, 999, 5, 0));  // not CUDA: ignored
  l.apply(free_of(LW_KIND_CUDA_DEVICE, 0x2000, 50, 2));
  auto t = l.totals();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].device, 0);
  EXPECT_EQ(t[0].kind, static_cast<uint32_t>(LW_KIND_CUDA_DEVICE));
  EXPECT_EQ(t[0].live_bytes, 100u);
  EXPECT_EQ(t[1].device, 0);
  EXPECT_EQ(t[1].kind, static_cast<uint32_t>(LW_KIND_CUDA_HOST));
  EXPECT_EQ(t[2].device, 1);
  EXPECT_EQ(t[2].kind, static_cast<uint32_t>(LW_KIND_CUDA_MANAGED));
  EXPECT_EQ(t[2].live_bytes, 30u);
}

TEST(CudaDeviceLedger, LateFreeNeverRetiresANewerRecord) {
  CudaDeviceLedger l;
  l.apply(alloc(LW_KIND_CUDA_DEVICE, 0x1000, 100, 1, 0));
  l.apply(alloc(LW_KIND_CUDA_DEVICE, 0x1000, 200, 5, 2, LW_EVF_REPLACED));
  l.apply(free_of(LW_KIND_CUDA_DEVICE, 0x1000, 100, 1));  // the old record's
  auto t = l.totals();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].device, 2);
  EXPECT_EQ(t[0].live_bytes, 200u);
}

TEST(CudaDeviceLedger, ResyncKeepsKnownDevicesAndMarksNewOnesUnknown) {
  CudaDeviceLedger l;
  l.apply(alloc(LW_KIND_CUDA_DEVICE, 0x1000, 100, 1, 3));
  l.apply(alloc(LW_KIND_CUDA_DEVICE, 0x2000, 100, 2, 3));
  l.resync({{LW_KIND_CUDA_DEVICE, 0x1000, 100, 1, 7},
            {LW_KIND_CUDA_MANAGED, 0x9000, 64, 9, 7},
            {LW_KIND_HEAP, 0x5000, 10, 3, 7}});
  auto t = l.totals();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].device, -1);
  EXPECT_EQ(t[0].live_bytes, 64u);
  EXPECT_EQ(t[1].device, 3);
  EXPECT_EQ(t[1].live_bytes, 100u);
  EXPECT_EQ(l.size(), 2u);
}

using namespace std::string_view_literals;

TEST(VisibleCudaDevices, EnvironmentAndDeviceNodes) {
  // Neither known: -1, never a guess.
  EXPECT_EQ(max_visible_cuda_devices("", 0), -1);
  EXPECT_EQ(max_visible_cuda_devices("PATH=/bin\0HOME=/root"sv, -1), -1);
  // One GPU node, no variable: one device.
  EXPECT_EQ(max_visible_cuda_devices("PATH=/bin"sv, 1), 1);
  EXPECT_EQ(max_visible_cuda_devices("PATH=/bin"sv, 8), 8);
  // The variable bounds it: one entry of eight nodes, UUIDs too.
  EXPECT_EQ(max_visible_cuda_devices("A=1\0CUDA_VISIBLE_DEVICES=3\0B=2"sv, 8), 1);
  EXPECT_EQ(max_visible_cuda_devices("CUDA_VISIBLE_DEVICES=GPU-8a1f-22"sv, 0), 1);
  EXPECT_EQ(max_visible_cuda_devices("CUDA_VISIBLE_DEVICES=0,1"sv, 8), 2);
  EXPECT_EQ(max_visible_cuda_devices("CUDA_VISIBLE_DEVICES=0,1,2"sv, 1), 1);
  EXPECT_EQ(max_visible_cuda_devices("CUDA_VISIBLE_DEVICES=,1,"sv, 4), 1);
  EXPECT_EQ(max_visible_cuda_devices("CUDA_VISIBLE_DEVICES="sv, 4), 0);
  // The first one counts (getenv), and a prefix is not the variable.
  EXPECT_EQ(max_visible_cuda_devices("CUDA_VISIBLE_DEVICES=1\0CUDA_VISIBLE_DEVICES=1,2"sv, 4), 1);
  EXPECT_EQ(max_visible_cuda_devices("XCUDA_VISIBLE_DEVICES=1"sv, 4), 4);
  // No NUL at the end (a truncated read).
  EXPECT_EQ(max_visible_cuda_devices("CUDA_VISIBLE_DEVICES=0,1"sv, -1), 2);
  // A value that contains '=' and a name that is a prefix of another.
  EXPECT_EQ(environ_value("CUDA_VISIBLE=9\0CUDA_VISIBLE_DEVICES=a=b"sv, "CUDA_VISIBLE_DEVICES"), "a=b");
  EXPECT_EQ(environ_value("CUDA_VISIBLE_DEVICES"sv, "CUDA_VISIBLE_DEVICES"), std::nullopt);
  EXPECT_EQ(sole_cuda_device(1), 0);
  EXPECT_EQ(sole_cuda_device(2), -1);
  EXPECT_EQ(sole_cuda_device(-1), -1);
  EXPECT_EQ(sole_cuda_device(0), -1);
}

}  // namespace
}  // namespace lw
