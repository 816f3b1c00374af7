#!/usr/bin/env bash
# The format check: every C file of the project is as clang-format (Debian 12's, 14) leaves it
# with the committed .clang-format. Lists the files that are not and exits 1; `--fix` formats
# them in place instead.
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM_WITH_FORMAT=1 scripts/install-deps.sh
mapfile -t files < <(git ls-files -co --exclude-standard 'src/*.[ch]' 'tools/*.[ch]' 'tests/*.[ch]' 'fuzz/*.[ch]' \
                     'examples/*.[ch]' include/loom.h)
if [ "${1:-}" = --fix ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run -Werror "$f" 2>/dev/null; then
    echo "check-format: $f is not formatted (scripts/check-format.sh --fix)"
    bad=1
  fi
done
[ $bad = 0 ] && echo "check-format: ${#files[@]} files formatted as .clang-format says"
exit $bad
