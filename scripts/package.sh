#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the Debian package ${BUILD_DIR:-build}/leakwatch_<version>-<revision>_amd64.deb
# (binary, systemd unit, default config, dashboard, rules, docs,
# changelog.Debian) with CPack. Arguments go to scripts/build.sh (e.g.
# -DLEAKWATCH_BUILD_TESTS=OFF, -DLEAKWATCH_DEB_MAINTAINER="Name <email>").
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
./scripts/build.sh "$@"
rm -f "$BUILD_DIR"/leakwatch_*.deb
(cd "$BUILD_DIR" && cpack -G DEB >/dev/null)
deb=$(ls "$BUILD_DIR"/leakwatch_*.deb)
maintainer=$(dpkg-deb -f "$deb" Maintainer)
case "$maintainer" in
  *@localhost*) echo "package.sh: Maintainer is the placeholder '$maintainer': before publishing the package," \
                     "rebuild with -DLEAKWATCH_DEB_MAINTAINER=\"Name <email>\"" >&2 ;;
esac
echo "$deb"
