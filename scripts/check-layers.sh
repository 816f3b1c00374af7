#!/usr/bin/env bash
# The layer check: every #include "dir/..." in src/, tools/ and examples/ must point to the
# including file's own folder or to a folder on a lower line of the layer map in
# docs/DESIGN.md (section 2), which this script reads, so the order is written once. Folders on
# the same line are siblings and may not include each other. A line may narrow what its folders
# use to a list in brackets ("serve [template util]": those folders and loom.h only).
# include/loom.h is open to all for its types, but below runtime a loom_* call must name a function
# defined in the caller's folder or a lower one (the error helpers are util's): the public API's
# implementation lives in runtime and above, and a layer under it calling back up is a circle the
# includes do not show. Heap memory comes from util/alloc.c's policy alone: malloc, calloc,
# realloc, strdup and their kin appear nowhere else in src/ and tools/. And no .c file shares its
# base name with another folder's header. Exits 1 listing each upward, sideways or unlisted
# include, call, allocation or name, and a folder the map does not place.
set -euo pipefail
cd "$(dirname "$0")/.."
map=$(sed -n '/^<!-- layer map -->/,/^<!-- end layer map -->/p' docs/DESIGN.md | sed -n '/^```/,/^```/p' | grep -v '^```')
[ -n "$map" ] || { echo "check-layers: no layer map in docs/DESIGN.md" >&2; exit 1; }
declare -A level only
n=$(wc -l <<<"$map")
i=0
while read -r line; do # the map's top line is the highest layer
  line=${line%%#*}
  uses=; [[ $line == *\[*\]* ]] && uses=${line#*[} uses=${uses%%]*}
  for dir in ${line%%[*}; do level[$dir]=$((n - i)); only[$dir]=$uses; done
  i=$((i + 1))
done <<<"$map"
bad=0
while IFS= read -r file; do
  case $file in src/*) dir=${file#src/}; dir=${dir%%/*} ;; *) dir=${file%%/*} ;; esac
  if [ -z "${level[$dir]:-}" ]; then
    echo "$file: folder '$dir' is not on the layer map (docs/DESIGN.md section 2)"; bad=1; continue
  fi
  while IFS=: read -r ln inc; do
    to=${inc%%/*}
    [ "$to" = "$dir" ] && continue
    if [ -z "${level[$to]:-}" ]; then
      echo "$file:$ln: includes \"$inc\" from '$to', which is not on the layer map"; bad=1
    elif [ "${level[$to]}" -ge "${level[$dir]}" ]; then
      echo "$file:$ln: includes \"$inc\": '$to' is not below '$dir' on the layer map"; bad=1
    elif [ -n "${only[$dir]}" ] && [[ " ${only[$dir]} " != *" $to "* ]]; then
      echo "$file:$ln: includes \"$inc\": '$dir' uses only loom.h and [${only[$dir]}]"; bad=1
    fi
  done < <(grep -no '^#include "[^"]*/[^"]*"' "$file" | sed 's/#include "//; s/"$//')
done < <(git ls-files -co --exclude-standard 'src/*.[ch]' 'tools/*.[ch]' 'examples/*.[ch]')
# where each loom_* function is defined: the level of its folder
declare -A def_level
while IFS=: read -r file name; do
  d=${file#src/}; d=${d%%/*}
  def_level[${name%(}]=${level[$d]:-0}
done < <(git ls-files -co --exclude-standard 'src/*.c' | xargs grep -oE '^[A-Za-z_][A-Za-z_0-9 *]*\bloom_[a-z_0-9]+\(' |
         sed -E 's/^([^:]*):.*\b(loom_[a-z_0-9]+\()$/\1:\2/')
runtime=${level[runtime]}
calls=0 allocs=0
while IFS= read -r file; do
  dir=${file#src/}; dir=${dir%%/*}
  [ -n "${level[$dir]:-}" ] && [ "${level[$dir]}" -lt "$runtime" ] || continue
  while IFS=: read -r ln name; do
    name=${name%(}
    if [ "${def_level[$name]:-99}" -gt "${level[$dir]}" ]; then
      echo "$file:$ln: calls $name, which '$dir' may not: below runtime, loom.h gives types and error helpers only"
      bad=1 calls=$((calls + 1))
    fi
  done < <(grep -noE '^[[:space:]]+.*\bloom_[a-z_0-9]+\(' "$file" | grep -oE '^[0-9]+:|\bloom_[a-z_0-9]+\(' |
           awk '/^[0-9]+:$/ {ln = $0; next} {print ln $0}')
done < <(git ls-files -co --exclude-standard 'src/*.c')
while IFS=: read -r file ln _; do
  echo "$file:$ln: allocates outside util/alloc.c (use mem_alloc, mem_array, mem_zalloc, mem_strdup, ARRAY_RESERVE)"
  bad=1 allocs=$((allocs + 1))
done < <(git ls-files -co --exclude-standard 'src/*.c' 'tools/*.c' | grep -v '^src/util/alloc\.c$' |
         xargs grep -nE '(^|[^_a-z0-9.>])(malloc|calloc|realloc|strdup|strndup|aligned_alloc|posix_memalign)[[:space:]]*\(' || true)
# a file's name says its folder's job: no .c shares its base name with another folder's header
declare -A header_dir
while IFS= read -r h; do header_dir[$(basename "$h" .h)]+=" $(dirname "$h")"; done < <(git ls-files -co --exclude-standard 'src/*.h')
while IFS= read -r c; do
  for d in ${header_dir[$(basename "$c" .c)]:-}; do
    [ "$d" = "$(dirname "$c")" ] && continue
    echo "$c: shares its name with $d/$(basename "$c" .c).h, another folder's header"; bad=1
  done
done < <(git ls-files -co --exclude-standard 'src/*.c')
[ $bad = 0 ] && echo "check-layers: no include points up or sideways ($(git ls-files -co --exclude-standard 'src/*.[ch]' 'tools/*.[ch]' 'examples/*.[ch]' | wc -l) files); no loom_* call up from below runtime; no allocation outside util/alloc.c"
exit $bad
