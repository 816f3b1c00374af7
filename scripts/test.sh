#!/usr/bin/env bash
# Builds loom and runs the whole test suite (ctest). --sanitize: the same suite under
# AddressSanitizer + UndefinedBehaviorSanitizer, in build-asan/. The server's client tests run
# OpenAI's own `openai` package and Anthropic's `anthropic` (and the chat page's, `selenium` with
# Debian's Chromium), installed from PyPI into a virtual environment (.venv/), with `jsonschema`,
# the validator structured outputs are checked against, and transformers (torch, gguf,
# accelerate), which turns the real Gemma 3 GGUF into the folder tests/gemma3_real.py checks
# loom against; and, in .venv-vision/, torchvision and Pillow, which make images' pixels.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# the chat page's test drives a real browser; without one it skips, saying so
LOOM_WITH_BROWSER=1 scripts/install-deps.sh || echo "test.sh: chromium could not be installed: chat_page will skip"
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c \
  "import openai, anthropic, selenium, numpy, jsonschema, torch, transformers, gguf, accelerate" 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install -q openai==3.57.0 anthropic==2.17.0 selenium==4.45.0 numpy==2.4.6 jsonschema==4.26.0 \
    torch==2.13.0 transformers==5.24.0 gguf==0.19.0 accelerate==1.16.0
fi
export LOOM_TEST_PYTHON=$PWD/.venv/bin/python
# Images' oracle (tests/image_pixels.py): transformers' image processors run on torchvision,
# whose PyPI build does not load beside the CPU torch above, so they get a venv of their own with
# a torch it does load with (a CUDA build on x86_64, which runs on the CPU; 5.7 GB).
if [ ! -x .venv-vision/bin/python ] || ! .venv-vision/bin/python -c \
  "import torch, torchvision, transformers, PIL, numpy" 2>/dev/null; then
  python3 -m venv .venv-vision
  case $(uname -m) in
    x86_64) vision=(torch==2.14.1 torchvision==0.29.1) ;;
    *) vision=(torch==2.9.1 torchvision==0.24.1) ;;
  esac
  .venv-vision/bin/pip install -q "${vision[@]}" transformers==5.24.0 pillow==13.0.0 numpy==2.4.6
fi
export LOOM_TEST_VISION_PYTHON=$PWD/.venv-vision/bin/python
dir=$(scripts/build.sh "$@" | tail -n 1)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Two tests at a time on two cores, each with ranks and OpenMP threads: threads that spin at
# barriers take the cores the other test's ranks wait for (under the sanitizers test_spec took
# 10x its time alone). Sleeping waits leave each test its own speed; timing races still show.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if [ "${1:-}" = --sanitize ]; then
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi
ctest --test-dir "$dir" --output-on-failure -j2 # two at a time, as on a two-core machine, so timing races show
# The converter's own oracle (transformers and tokenizers) runs where they are installed.
if [ "${1:-}" != --sanitize ]; then
  if python3 -c "import torch, transformers, tokenizers" 2>/dev/null; then
    OMP_NUM_THREADS=1 python3 tests/converter_check.py
  else
    echo "tests/converter_check.py: skipped (torch, transformers, tokenizers not installed)"
  fi
fi
