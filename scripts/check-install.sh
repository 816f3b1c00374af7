#!/usr/bin/env bash
# Checks loom as an installed C library: builds the library into a temporary directory, installs
# it into a temporary prefix, checks that libloom.so and libloom.a export exactly the functions
# include/loom.h declares, then builds examples/generate.c against the installed tree three
# ways (pkg-config with libloom.so, pkg-config --static with libloom.a, CMake's
# find_package(loom)) and runs each: all must exit 0 and print the same generated text.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build=$tmp/build prefix=$tmp/prefix
lib=$prefix/lib

# Only the libraries: the loom binary and the tests are scripts/test.sh's.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_NATIVE=OFF -DCMAKE_INSTALL_PREFIX="$prefix" \
      -DCMAKE_INSTALL_LIBDIR=lib >/dev/null
cmake --build "$build" -j "$(nproc)" --target loomcore loom_shared loom_static >/dev/null
cmake --install "$build" >/dev/null

# Global defined symbols, one name a line.
globals() { awk 'NF == 3 { print $3 }' | sort -u; }
not_loom() { grep -vc '^loom_' || true; }
api=$(grep -o '^LOOM_API [^(]*(' include/loom.h | sed 's/($//; s/.*[ *]//' | sort)
core=$(nm -g --defined-only "$build/libloomcore.a" | globals)
shared=$(nm -D --defined-only "$lib/libloom.so" | globals)
static=$(nm -g --defined-only "$lib/libloom.a" | globals)
echo "check-install: global symbols: libloomcore.a $(wc -l <<<"$core") ($(not_loom <<<"$core") not loom_)," \
     "libloom.so $(wc -l <<<"$shared") ($(not_loom <<<"$shared") not loom_)," \
     "libloom.a $(wc -l <<<"$static") ($(not_loom <<<"$static") not loom_); loom.h declares $(wc -l <<<"$api")"
exports_api() { # LIBRARY SYMBOLS
  [ "$2" = "$api" ] && return
  echo "check-install: $1 does not export exactly loom.h's functions (< loom.h, > $1):" >&2
  diff <(echo "$api") <(echo "$2") >&2
  exit 1
}
exports_api libloom.so "$shared"
exports_api libloom.a "$static"

# The example, three ways. -l:libloom.a names the archive, where -lloom would take libloom.so.
export PKG_CONFIG_PATH=$lib/pkgconfig
cc=${CC:-cc}
cflags=(-std=c17 -Wall -Wextra -Werror)
# shellcheck disable=SC2046 # pkg-config's flags are meant to split into words
$cc "${cflags[@]}" examples/generate.c -o "$tmp/generate-shared" $(pkg-config --cflags --libs loom) -Wl,-rpath,"$lib"
# shellcheck disable=SC2046
$cc "${cflags[@]}" examples/generate.c -o "$tmp/generate-static" \
    $(pkg-config --static --cflags --libs loom | sed 's/-lloom\b/-l:libloom.a/')
cmake -S examples -B "$tmp/build-examples" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="${cflags[*]}" >/dev/null
cmake --build "$tmp/build-examples" >/dev/null
if readelf -d "$tmp/generate-static" | grep -q 'NEEDED.*libloom'; then
  echo "check-install: the static build of generate.c still needs libloom.so" >&2
  exit 1
fi

# Each prints "loom VERSION: PROMPT" and the text after it, then the counts; all the same text.
version=$(sed -n 's/^#define LOOM_VERSION_\(MAJOR\|MINOR\|PATCH\) \+//p' include/loom.h | paste -sd .)
first=
for exe in "$tmp/generate-shared" "$tmp/generate-static" "$tmp/build-examples/generate"; do
  out=$(OMP_NUM_THREADS=2 "$exe") || { echo "check-install: ${exe#"$tmp/"} failed" >&2; exit 1; }
  if [[ ${out%%$'\n'*} != "loom $version: Once upon a time"?* || $out != *", 32 generated)" ]]; then
    printf 'check-install: %s printed no generated text:\n%s\n' "${exe#"$tmp/"}" "$out" >&2
    exit 1
  fi
  if [ -n "$first" ] && [ "$out" != "$first" ]; then
    printf 'check-install: %s printed other text than generate-shared:\n%s\n' "${exe#"$tmp/"}" "$out" >&2
    exit 1
  fi
  first=$out
done
echo "$first"
echo "check-install: libloom $version installs and runs (pkg-config shared and static, find_package)"
