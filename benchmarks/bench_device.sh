#!/usr/bin/env bash
# The search's numbers on a machine with an accelerator, in under 10 minutes: the vmapped-vs-loop
# ratio (benchmarks/bench_fit.py --quick) and the default search's solve rates and seconds a draw
# on planted and Gaussian blocks (--sizes), each a JSON record under $OUT (default: results/).
# Batch sizes come from the device's memory (absorbjax.fit: an eighth of it per batch).
#
#   OUT=/some/folder bash benchmarks/bench_device.sh
set -euo pipefail
cd "$(dirname "$0")"
out=${OUT:-../results}
mkdir -p "$out"
python -c "import jax; print('device:', jax.devices())"
timeout 200 python bench_fit.py --quick --out "$out/bench_fit_quick_device.json"
timeout 340 python bench_fit.py --sizes 64 --generic 16 --size 4 16 --size 8 32 --stack 2 4 \
  --activation gelu --activation relu --out "$out/fit_search_device.json"
