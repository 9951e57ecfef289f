# SPDX-License-Identifier: Apache-2.0
# The image deploy/kubernetes runs (ghcr.io/leakwatch/leakwatch). Built and
# installed through the same scripts as README, "Run it in production"
# (tests/deploy/dockerfile_test.sh checks that): the build stage makes the
# .deb, the runtime stage installs it with apt-get, which pulls the shared
# libraries it needs and nothing else.
#   docker build -t ghcr.io/leakwatch/leakwatch:0.1.0 .

FROM debian:bookworm AS build
WORKDIR /src
COPY . .
RUN ./scripts/install-deps.sh
RUN ./scripts/package.sh -DLEAKWATCH_BUILD_TESTS=OFF -DLEAKWATCH_BUILD_BENCH=OFF

FROM debian:bookworm-slim
COPY --from=build /src/build/leakwatch_*.deb /tmp/
RUN apt-get update \
 && apt-get install -y --no-install-recommends /tmp/leakwatch_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/leakwatch_*.deb
# The DaemonSet mounts its ConfigMap over /etc/leakwatch.
ENTRYPOINT ["/usr/bin/leakwatch"]
CMD ["run", "--config", "/etc/leakwatch/leakwatch.yaml"]
