// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/overlay.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lw {
namespace {

// As kernel 6.18 printed it here for
//   mount -t overlay overlay -o 'lowerdir=/tmp/lw ov\:t/l1:/tmp/lw ov\:t/l2,upperdir=...'
// (the mounter's "\:" shown with its backslash octal-escaped).
const char kEscaped[] =
    "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard\n"
    "45 27 0:39 / /tmp/lw\\040ov:t/m rw,relatime - overlay overlay "
    "rw,lowerdir=/tmp/lw\\040ov\\134:t/l1:/tmp/lw\\040ov\\134:t/l2,upperdir=/tmp/lw\\040ov\\134:t/u,"
    "workdir=/tmp/lw\\040ov\\134:t/w,uuid=on\n";

TEST(Overlay, ParsesLayersInLookupOrderWithEscapes) {
  auto m = parse_overlay_mount(kEscaped, 0, 39);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->mount_point, "/tmp/lw ov:t/m");
  EXPECT_EQ(m->root, "/");
  EXPECT_EQ(m->layers, (std::vector<std::string>{"/tmp/lw ov:t/u", "/tmp/lw ov:t/l1", "/tmp/lw ov:t/l2"}));
}

TEST(Overlay, OtherDevicesAndFilesystemsAreNotOverlays) {
  EXPECT_FALSE(parse_overlay_mount(kEscaped, 254, 0));  // ext4
  EXPECT_FALSE(parse_overlay_mount(kEscaped, 0, 40));   // no such mount
  EXPECT_FALSE(parse_overlay_mount("50 27 0:41 / /dev/shm rw - tmpfs tmpfs rw\n", 0, 41));
}

TEST(Overlay, DockerStyleMountWithOptionalFieldsAndDataOnlyLayers) {
  const char text[] =
      "812 700 0:123 / / rw,relatime master:307 - overlay overlay "
      "rw,lowerdir=/var/lib/docker/overlay2/l/AAA:/var/lib/docker/overlay2/l/BBB::/data/CCC,"
      "upperdir=/var/lib/docker/overlay2/x/diff,workdir=/var/lib/docker/overlay2/x/work\n";
  auto m = parse_overlay_mount(text, 0, 123);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->mount_point, "/");
  EXPECT_EQ(m->layers, (std::vector<std::string>{"/var/lib/docker/overlay2/x/diff", "/var/lib/docker/overlay2/l/AAA",
                                                  "/var/lib/docker/overlay2/l/BBB", "/data/CCC"}));
  EXPECT_EQ(overlay_layer_paths(*m, "/usr/bin/python3"),
            (std::vector<std::string>{"/var/lib/docker/overlay2/x/diff/usr/bin/python3",
                                      "/var/lib/docker/overlay2/l/AAA/usr/bin/python3",
                                      "/var/lib/docker/overlay2/l/BBB/usr/bin/python3", "/data/CCC/usr/bin/python3"}));
}

TEST(Overlay, LowerdirPlusAndReadOnlyOverlays) {
  const char text[] = "60 27 0:50 / /mnt/ro ro - overlay none ro,lowerdir+=/a,lowerdir+=/b,datadir+=/d\n";
  auto m = parse_overlay_mount(text, 0, 50);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->layers, (std::vector<std::string>{"/a", "/b", "/d"}));
}

TEST(Overlay, LayerPathsOnlyUnderTheMountPoint) {
  OverlayMount m{"/srv/app", "/", {"/up", "/low"}};
  EXPECT_EQ(overlay_layer_paths(m, "/srv/app/bin/x"), (std::vector<std::string>{"/up/bin/x", "/low/bin/x"}));
  EXPECT_TRUE(overlay_layer_paths(m, "/srv/application/bin/x").empty());
  EXPECT_TRUE(overlay_layer_paths(m, "/srv/app").empty());
  EXPECT_TRUE(overlay_layer_paths(m, "/srv/app/../etc/shadow").empty());
  // A bind mount of a directory inside the overlay: its root is that directory.
  OverlayMount bind{"/opt", "/usr/local", {"/up"}};
  EXPECT_EQ(overlay_layer_paths(bind, "/opt/lib/a.so"), (std::vector<std::string>{"/up/usr/local/lib/a.so"}));
}

TEST(Overlay, MalformedLinesAreSkipped) {
  EXPECT_FALSE(parse_overlay_mount("garbage\n0:39\n1 2 0:39 / /m - overlay\n", 0, 39));
  EXPECT_FALSE(parse_overlay_mount("1 2 0:39 / /m rw - overlay overlay rw,workdir=/w\n", 0, 39));  // no layer
  EXPECT_FALSE(parse_overlay_mount("", 0, 39));
}

}  // namespace
}  // namespace lw
