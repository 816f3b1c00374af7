# Sourced by the benchmarks that run llama.cpp beside loom (vs-llama-cpp.sh, serve.sh), from
# the repository root: progress lines (phase, phase_end, timings), die, the loom binary a job
# runs (loom_prepare), a run's header (bench_info), llama.cpp's source (llama_cpp_source), its builds (build_llama,
# llama_server_build), the venv that writes GGUFs (gguf_venv) and random-weight GGUFs (gguf_write).

die() { echo "$(basename "$0"): $*" >&2; exit 1; }
stamp() { date +%s; }
phase_t0=0
phase() { phase_t0=$(stamp); echo "== $*" >&2; }
phase_end() { echo "   ($(( $(stamp) - phase_t0 )) s)" >&2; timings+=("$1: $(( $(stamp) - phase_t0 )) s"); }
timings=()

# loom_prepare: builds build/loom if $loom is that and missing, then runs a copy in $RESULTS, so
# a rebuild of build/ during the job cannot change the binary between rows; sets loom (the
# copy) and loom_src (the original).
loom_prepare() {
  if [ ! -x "$loom" ]; then
    [ "$loom" = build/loom ] || die "no loom binary at $loom"
    phase "building loom into build/ (only the loom target)"
    scripts/install-deps.sh
    nice -n 10 cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
    nice -n 10 cmake --build build --target loom -j2 >"$RESULTS/loom-build.log" 2>&1 \
      || { tail -20 "$RESULTS/loom-build.log" >&2; die "loom did not build (log: $RESULTS/loom-build.log)"; }
    phase_end "loom build"
  fi
  cp "$loom" "$RESULTS/loom"
  loom_src=$(cd "$(dirname "$loom")" && pwd)/$(basename "$loom")
  loom=$RESULTS/loom
}

# bench_info: the run's header into $RESULTS/info.txt and on stderr: the date, the CPU (name,
# family and model), loom's kernel variant at $THREADS threads, the threads and $REPS rounds,
# the caller's own lines (its stdin), then loom's commit. Sets cpu and variant.
bench_info() {
  cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1) (family $(grep -m1 '^cpu family' /proc/cpuinfo | sed 's/.*: //'), model $(grep -m1 '^model\s' /proc/cpuinfo | sed 's/.*: //'))"
  variant=$("$loom" bench machine --threads "$THREADS" 2>&1 | sed -n 's/.*kernels \([a-z0-9]*\).*/\1/p' | head -1)
  {
    echo "date: $(date -Is)"
    echo "cpu: $cpu; loom kernels: ${variant:-?}; threads: $THREADS; rounds: $REPS"
    cat
    echo "loom: git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ', with uncommitted changes')"
  } | tee "$RESULTS/info.txt" >&2
}

# llama_cpp_source fetches llama.cpp's source as PyPI carries it (the llama-cpp-python sdist,
# whose vendor/llama.cpp is llama.cpp's whole tree) into $bench/dl, unpacks it into $bench/src,
# and sets src, lcpp (the llama.cpp tree), commit and llama_version. Uses the caller's $bench,
# phase, phase_end and die.
llama_cpp_source() {
  local sdist pyver ggmlver
  sdist=$(ls "$bench"/dl/llama_cpp_python-*.tar.gz 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$sdist" ]; then
    phase "downloading the llama-cpp-python sdist from PyPI"
    pip3 download --no-deps --no-binary :all: llama-cpp-python -d "$bench/dl" >"$bench/dl.log" 2>&1 \
      || { tail -20 "$bench/dl.log" >&2; die "pip download of llama-cpp-python failed (log: $bench/dl.log)"; }
    sdist=$(ls "$bench"/dl/llama_cpp_python-*.tar.gz | sort -V | tail -1)
    phase_end "sdist download"
  fi
  pyver=$(basename "$sdist" .tar.gz); pyver=${pyver#llama_cpp_python-}
  src=$bench/src/llama_cpp_python-$pyver
  lcpp=$src/vendor/llama.cpp
  if [ ! -f "$lcpp/CMakeLists.txt" ]; then
    phase "unpacking $(basename "$sdist")"
    mkdir -p "$bench/src"
    tar -xzf "$sdist" -C "$bench/src"
    [ -f "$lcpp/CMakeLists.txt" ] || die "$sdist has no vendor/llama.cpp"
    phase_end "unpack"
  fi
  # llama-cpp-python's changelog names the llama.cpp commit it vendors ("update llama.cpp to
  # ggml-org/llama.cpp@<commit>", the first such line under the release's heading)
  commit=$(awk -v v="## [$pyver]" 'index($0, v) == 1 {f = 1; next} f && /^## \[/ {exit}
    f && match($0, /llama\.cpp@[0-9a-f]+/) {print substr($0, RSTART + 10, RLENGTH - 10); exit}' "$src/CHANGELOG.md")
  commit=${commit:-unknown}
  ggmlver=$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))/\2/p' "$lcpp/ggml/CMakeLists.txt" | paste -sd.)
  llama_version="llama.cpp $commit (ggml $ggmlver, from llama-cpp-python $pyver)"
}

# llama_server_build: llama.cpp's llama-server target (CPU backend; no web UI, OpenSSL or curl)
# from llama_cpp_source's tree into $bench/llama-server, unless built; sets lsdir.
llama_server_build() {
  lsdir=$bench/llama-server
  [ -x "$lsdir/bin/llama-server" ] && return
  phase "building llama.cpp llama-server (CPU) in $lsdir"
  # LLAMA_USE_PREBUILT_UI=OFF: the build would otherwise fetch the web UI from Hugging Face
  nice -n 10 cmake -S "$lcpp" -B "$lsdir" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_COMMIT="$commit" >"$lsdir.log" 2>&1 \
    || { tail -20 "$lsdir.log" >&2; die "llama.cpp cmake failed (log: $lsdir.log)"; }
  nice -n 10 cmake --build "$lsdir" --target llama-server -j2 >>"$lsdir.log" 2>&1 \
    || { grep -m5 -B2 -A5 'error' "$lsdir.log" >&2 || tail -20 "$lsdir.log" >&2; die "llama-server build failed (log: $lsdir.log)"; }
  [ -x "$lsdir/bin/llama-server" ] || die "no $lsdir/bin/llama-server after the build"
  phase_end "llama-server build"
}

# build_llama DIR LABEL [CMAKE_ARGS...]: llama.cpp's llama-bench and llama-quantize from
# llama_cpp_source's tree into DIR, unless built.
build_llama() { # dir, label, extra cmake args
  local dir=$1 label=$2; shift 2
  [ -x "$dir/bin/llama-bench" ] && [ -x "$dir/bin/llama-quantize" ] && return 0
  phase "building llama.cpp llama-bench and llama-quantize ($label) in $dir"
  nice -n 10 cmake -S "$lcpp" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_COMMIT="$commit" "$@" >"$dir.log" 2>&1 \
    || { tail -20 "$dir.log" >&2; die "llama.cpp cmake ($label) failed (log: $dir.log)"; }
  nice -n 10 cmake --build "$dir" --target llama-bench llama-quantize -j2 >>"$dir.log" 2>&1 \
    || { grep -m5 -B2 -A5 'error' "$dir.log" >&2 || tail -20 "$dir.log" >&2; die "llama.cpp build ($label) failed (log: $dir.log)"; }
  [ -x "$dir/bin/llama-bench" ] || die "no $dir/bin/llama-bench after the build"
  phase_end "llama.cpp build ($label)"
}

# gguf_venv: a venv at $bench/venv with numpy and llama.cpp's gguf-py (for benches/make_gguf.py
# and gguf-py's scripts, which use tqdm); sets py.
gguf_venv() {
  py=$bench/venv/bin/python
  if ! "$py" -c 'import gguf, numpy, tqdm' 2>/dev/null; then
    phase "venv with numpy and llama.cpp's gguf-py in $bench/venv"
    python3 -m venv "$bench/venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
    nice -n 10 "$bench/venv/bin/pip" install -q numpy "$lcpp/gguf-py" >"$bench/venv.log" 2>&1 \
      || { tail -20 "$bench/venv.log" >&2; die "pip install of numpy and gguf-py failed (log: $bench/venv.log)"; }
    phase_end "venv"
  fi
}

# gguf_write CONFIG OUT: benches/make_gguf.py's random-weight GGUF of CONFIG's shape (bf16; MXFP4
# experts for GPT-OSS) at OUT, unless written; needs gguf_venv's py.
gguf_write() {
  [ -s "$2" ] && return
  phase "writing the random-weight GGUF of $1 ($2)"
  mkdir -p "$(dirname "$2")"
  nice -n 10 "$py" benches/make_gguf.py "$1" --bf16 "$2.tmp" || die "make_gguf.py $1 failed"
  mv "$2.tmp" "$2"
  phase_end "GGUF writing"
}
