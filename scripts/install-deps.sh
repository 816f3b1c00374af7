#!/usr/bin/env bash
# Installs the Debian packages loom builds and tests with. Idempotent; run as root (or with sudo).
set -euo pipefail
pkgs=(cmake gcc make pkg-config binutils libopenblas-openmp-dev libdnnl-dev libpcre2-dev libcjson-dev libmicrohttpd-dev libopenmpi-dev openmpi-bin
      libunistring-dev libxxhash-dev libhwloc-dev libudev-dev libjpeg62-turbo-dev libpng-dev libwebp-dev
      python3 python3-venv)
# libhwloc-dev places ranks (src/runtime/topology.c); libudev-dev only for the -ludev that
# hwloc's pkg-config file adds to a static link (scripts/check-install.sh links libloom.a)
[ "${LOOM_WITH_FUZZ:-0}" = 1 ] && pkgs+=(clang libclang-rt-14-dev libomp-14-dev)
[ "${LOOM_WITH_FORMAT:-0}" = 1 ] && pkgs+=(clang-format) # scripts/check-format.sh
[ "${LOOM_WITH_BROWSER:-0}" = 1 ] && pkgs+=(chromium chromium-driver) # tests/chat_page.py
# The aarch64 cross build (scripts/test-aarch64.sh): cross gcc, qemu, and the arm64 multiarch
# libraries it links. Not libopenmpi-dev:arm64: it conflicts with the amd64 libopenmpi-dev
# above (and needs gfortran-12:arm64, which would replace the amd64 gcc), so that build has
# no MPI (-DLOOM_MPI=OFF). Nor libdnnl-dev:arm64: its dnnl_config.h differs from the amd64
# one's at the same path, so that build runs its GEMMs on OpenBLAS (-DLOOM_DNNL=OFF).
[ "${LOOM_WITH_AARCH64:-0}" = 1 ] && pkgs+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
                                             libopenblas-openmp-dev:arm64 libpcre2-dev:arm64 libcjson-dev:arm64
                                             libmicrohttpd-dev:arm64 libxxhash-dev:arm64 libjpeg62-turbo-dev:arm64
                                             libpng-dev:arm64 libwebp-dev:arm64)
missing=()
# A bare name is ambiguous to dpkg once the arm64 instance of a library is installed too: the
# native one is then asked for by name:arch.
arch=$(dpkg --print-architecture)
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || dpkg -s "$p:$arch" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ "${LOOM_WITH_AARCH64:-0}" = 1 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
fi
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
