#!/usr/bin/env bash
# Installs the Debian packages Glimpse builds and tests with. Idempotent: packages that are
# already present are skipped, so a second run costs one dpkg query.
set -euo pipefail

PACKAGES=(
  g++ cmake make pkg-config git ccache unzip python3 python3-venv python3-pip
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libucx-dev ucx-utils librocksdb-dev rocksdb-tools libabsl-dev libyaml-cpp-dev
  libopenblas-dev nlohmann-json3-dev libcpp-httplib-dev libxxhash-dev zlib1g-dev libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  python3-matplotlib
  fortunes-min wordnet-base
  prometheus python3-yaml
  etcd-server
  python3-grpcio python3-protobuf
  iproute2 curl openssl
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "glimpse: installing Debian packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
