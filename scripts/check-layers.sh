#!/usr/bin/env bash
# The layer check: every #include "dir/..." in src/, tools/ and examples/ must point to the
# including file's own folder or to a folder on a lower line of the layer map in
# docs/DESIGN.md (section 2), which this script reads, so the order is written once. Folders on
# the same line are siblings and may not include each other. A line may narrow what its folders
# use to a list in brackets ("serve [template util]": those folders and loom.h only).
# include/loom.h is open to all. Exits 1 listing each upward, sideways or unlisted include, and
# on a folder the map does not place.
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
[ $bad = 0 ] && echo "check-layers: no include points up or sideways ($(git ls-files -co --exclude-standard 'src/*.[ch]' 'tools/*.[ch]' 'examples/*.[ch]' | wc -l) files)"
exit $bad
