#!/usr/bin/env bash
# Verifies the GPU build of the native backend (docs/native.md) on a Linux x86-64 machine with an NVIDIA GPU:
#   1. the machine: GPU, driver (CUDA 12.3's libraries need driver ≥ 525.60.13);
#   2. installs tfjs-node-gpu (CM2_NATIVE=gpu scripts/ensure-native.mjs: PyPI's tensorflow 2.16.2 wheel and the CUDA
#      pip packages its and-cuda extra pins, in CM2_CACHE_DIR or ~/.cache/cm2) and checks the recorded status;
#   3. the CUDA libraries TensorFlow dlopens are found from the cache without LD_LIBRARY_PATH: a small C program
#      dlopens each of them with the RUNPATH of the library that loads it, $ORIGIN put as glibc puts it;
#   4. `cm2 backend` says tfjs-node-gpu;
#   5. a chain of 4096² float32 matmuls runs on the GPU: TensorFlow's own log says where each op executes
#      (TF_CPP_VMODULE=execute=1) and which GPU devices it created; the same chain with the GPU hidden
#      (CUDA_VISIBLE_DEVICES=) gives the CPU's rate to compare; nvidia-smi shows the process's GPU memory;
#   6. training and generation steps of the project's model on tfjs-node-gpu (bench/model-throughput.ts, no PyTorch).
# Prints PASS/FAIL per check and exits non-zero when any failed.
#
#   scripts/verify-gpu.sh [--allow-no-gpu] [--skip-train]
#
# --allow-no-gpu runs every step on a machine without a GPU (where TensorFlow's CUDA build computes on the CPU) and
# reports the GPU-only checks as skipped: the install, the library probe and the model steps are still checked.
# Note: this switches the project's native backend to the GPU build (node_modules/.cm2-native.json), as `auto` does
# on a GPU machine; `CM2_NATIVE=cpu node scripts/ensure-native.mjs --force` switches back.
set -euo pipefail
cd "$(dirname "$0")/.."
allow_no_gpu=0
skip_train=0
for a in "$@"; do
  case "$a" in
    --allow-no-gpu) allow_no_gpu=1 ;;
    --skip-train) skip_train=1 ;;
    *) echo "usage: scripts/verify-gpu.sh [--allow-no-gpu] [--skip-train]" >&2; exit 2 ;;
  esac
done

failures=0
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; failures=$((failures + 1)); }
skip() { echo "SKIP  $*"; }
section() { echo; echo "== $*"; }
work="$(mktemp -d "${TMPDIR:-/tmp}/cm2-verify-gpu-XXXXXX")"
trap 'rm -rf "$work"' EXIT

section "1. machine"
echo "$(uname -sm), Node $(node --version)"
have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  have_gpu=1
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | sed 's/^/  GPU /'
  driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  if [ "${driver%%.*}" -ge 525 ]; then pass "NVIDIA driver $driver (CUDA 12 needs ≥ 525.60.13)"; else fail "NVIDIA driver $driver is older than CUDA 12 needs (≥ 525.60.13)"; fi
elif [ "$allow_no_gpu" = 1 ]; then
  skip "no NVIDIA GPU visible (nvidia-smi -L); GPU-only checks are skipped (--allow-no-gpu)"
else
  echo "no NVIDIA GPU visible (nvidia-smi -L failed); run on a GPU machine, or pass --allow-no-gpu to check the rest" >&2
  exit 1
fi

section "2. install (CM2_NATIVE=gpu node scripts/ensure-native.mjs --force)"
[ -d node_modules/@tensorflow/tfjs-node-gpu ] || npm ci --no-audit --no-fund
CM2_NATIVE=gpu node scripts/ensure-native.mjs --force --print > "$work/status.json"
sed -n '/^{/,$p' "$work/status.json" > "$work/status-only.json"
node -e '
  const s = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  console.log(`  ${s.ok ? `${s.backend}, ${s.package}, TensorFlow ${s.tensorflow}, libraries in ${s.libDir}` : `not installed: ${s.reason}`}`);
  console.log(`  GPU devices TensorFlow created: ${(s.gpuDevices ?? []).join("; ") || "none"}`);
  process.exit(s.ok && s.backend === "tfjs-node-gpu" ? 0 : 1);' "$work/status-only.json" \
  && pass "tfjs-node-gpu installed and loads" || { fail "tfjs-node-gpu did not install (the lines above say why)"; exit 1; }
lib_dir="$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).libDir)' "$work/status-only.json")"
du -sh "$lib_dir" | sed 's/^/  cache size: /'
if [ "$have_gpu" = 1 ]; then
  node -e 'process.exit(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).gpuDevices?.length ? 0 : 1)' "$work/status-only.json" && pass "TensorFlow created a GPU device at install time" || fail "TensorFlow created no GPU device (driver or libraries; see step 3)"
fi

section "3. CUDA libraries found from the cache (no LD_LIBRARY_PATH)"
pkg="$PWD/node_modules/@tensorflow/tfjs-node-gpu"
# The path glibc gives $ORIGIN: the one the library was found under (the addon's RUNPATH), links not resolved.
deps_lib="$pkg/lib/napi-v8/../../deps/lib"
cat > "$work/probe.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
/* dlopen()s each argument as TensorFlow's DSO loader does (RTLD_NOW | RTLD_LOCAL) and prints where it was found. */
int main(int argc, char **argv) {
  int missing = 0;
  for (int i = 1; i < argc; i++) {
    void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    struct link_map *m = 0;
    if (h && dlinfo(h, RTLD_DI_LINKMAP, &m) == 0) printf("found    %-26s %s\n", argv[i], m->l_name);
    else { printf("MISSING  %-26s %s\n", argv[i], dlerror()); missing++; }
  }
  return missing ? 1 : 0;
}
C
# probe <name> <library whose RUNPATH applies> <$ORIGIN as glibc sees it> <libraries…>
probe() {
  local name="$1" lib="$2" origin="$3"; shift 3
  local runpath
  runpath="$(readelf -d "$lib" | sed -n 's/.*Library runpath: \[\(.*\)\]/\1/p')"
  runpath="${runpath//\$ORIGIN/$origin}"
  cc -o "$work/probe-$name" "$work/probe.c" -ldl "-Wl,--enable-new-dtags,-rpath,$runpath"
  echo "  as dlopen()ed by $name:"
  if env -u LD_LIBRARY_PATH "$work/probe-$name" "$@" | sed 's/^/    /'; then pass "$name finds ${*}"; else fail "$name misses a library (MISSING lines above)"; fi
}
command -v cc >/dev/null || { echo "no C compiler (cc) for the probe; node-gyp needed one too" >&2; exit 1; }
cuda_libs=(libcudart.so.12 libcublas.so.12 libcublasLt.so.12 libcudnn.so.8 libcufft.so.11 libcusolver.so.11 libcusparse.so.12)
probe libtensorflow_cc.so.2 "$deps_lib/libtensorflow_cc.so.2" "$deps_lib" "${cuda_libs[@]}" libcupti.so.12
probe libtensorflow_framework.so.2 "$deps_lib/libtensorflow_framework.so.2" "$deps_lib" "${cuda_libs[@]}"
cudnn="$deps_lib/../nvidia/cudnn/lib"
probe libcudnn.so.8 "$cudnn/libcudnn.so.8" "$cudnn" \
  libcudnn_ops_infer.so.8 libcudnn_ops_train.so.8 libcudnn_cnn_infer.so.8 libcudnn_cnn_train.so.8 libcudnn_adv_infer.so.8 libcudnn_adv_train.so.8
probe libcudnn_cnn_infer.so.8 "$cudnn/libcudnn_cnn_infer.so.8" "$cudnn" libcublas.so.12 libcublasLt.so.12 libnvrtc.so.12
if [ "$have_gpu" = 1 ]; then
  env -u LD_LIBRARY_PATH "$work/probe-libtensorflow_cc.so.2" libcuda.so.1 | sed 's/^/    /' && pass "the driver's libcuda.so.1 is found (system)" || fail "libcuda.so.1 (the NVIDIA driver's library) is not found"
else
  skip "libcuda.so.1 comes with the NVIDIA driver (none here)"
fi

section "4. cm2 backend"
node bin/cm2.js backend 2>/dev/null | sed 's/^/  /'
[ "$(node bin/cm2.js backend --json 2>/dev/null | node -e 'let s="";process.stdin.on("data",(d)=>s+=d).on("end",()=>console.log(JSON.parse(s).backend))')" = tfjs-node-gpu ] \
  && pass "cm2 backend: tfjs-node-gpu" || fail "cm2 backend does not choose tfjs-node-gpu"

section "5. matmul on the GPU"
size=4096 reps=20
[ "$have_gpu" = 1 ] || { size=2048 reps=4; } # the CPU-only rehearsal: seconds, not minutes
cat > "$work/matmul.js" <<'JS'
// node matmul.js n reps: a chain of n×n float32 matmuls with one read-back at the end, timed after a warm-up;
// prints JSON on stdout (rate, and this process's GPU memory as nvidia-smi sees it).
const { spawnSync } = require('node:child_process');
const tf = require('@tensorflow/tfjs-node-gpu');
const [n, reps] = process.argv.slice(2).map(Number);
const a = tf.randomUniform([n, n], -1, 1);
const b = tf.randomUniform([n, n], -1, 1).div(Math.sqrt(n)); // keeps the chain's values bounded
const chain = (k) => tf.tidy(() => { let c = a; for (let i = 0; i < k; i++) c = tf.matMul(c, b); return c.sum(); });
chain(2).dataSync(); // warm-up: kernels, cuBLAS handles
const t0 = process.hrtime.bigint();
const sum = chain(reps).dataSync()[0];
const sec = Number(process.hrtime.bigint() - t0) / 1e9;
const smi = spawnSync('nvidia-smi', ['--query-compute-apps=pid,used_memory', '--format=csv,noheader,nounits'], { encoding: 'utf8' });
const row = (smi.stdout ?? '').split('\n').map((l) => l.split(',').map((s) => s.trim())).find(([pid]) => Number(pid) === process.pid);
console.log(JSON.stringify({ n, gflops: (2 * n ** 3 * reps) / sec / 1e9, finite: Number.isFinite(sum), gpuMemMiB: row ? Number(row[1]) : null }));
JS
export NODE_PATH="$PWD/node_modules" TF_FORCE_GPU_ALLOW_GROWTH=true
TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=execute=1 node "$work/matmul.js" $size $reps > "$work/gpu.json" 2> "$work/gpu.log" \
  || { tail -20 "$work/gpu.log"; fail "the matmul run crashed"; echo '{}' > "$work/gpu.json"; }
CUDA_VISIBLE_DEVICES= TF_CPP_MIN_LOG_LEVEL=2 node "$work/matmul.js" $size $reps > "$work/cpu.json" 2> "$work/cpu.log" \
  || { tail -20 "$work/cpu.log"; fail "the matmul run with the GPU hidden crashed"; echo '{}' > "$work/cpu.json"; }
grep -o 'Created device [^ ]*GPU:[0-9]* with [0-9]* MB memory.*' "$work/gpu.log" | sed 's/^/  /' || true
placed="$(grep -o 'Executing op [A-Za-z_0-9]*MatMul[A-Za-z_0-9]* in device [^ ]*' "$work/gpu.log" | sort | uniq -c | sed 's/^ */  /' || true)"
echo "${placed:-  (no matmul placement lines in the TensorFlow log)}"
if grep -E "Could not load dynamic library|Cannot dlopen" "$work/gpu.log" | sed 's/^/  /'; then fail "TensorFlow could not load a CUDA library (above)"; fi
# prints the comparison; exits 0 when the GPU run was finite and more than 3× the CPU's rate
node -e '
  const [g, c] = process.argv.slice(1).map((f) => JSON.parse(require("fs").readFileSync(f, "utf8")));
  const r = (x) => (x === undefined ? "–" : x.toFixed(0));
  console.log(`  ${g.n ?? c.n}² float32 matmul: ${r(g.gflops)} GFLOP/s as installed, ${r(c.gflops)} GFLOP/s with the GPU hidden` +
    ` (${g.gflops && c.gflops ? (g.gflops / c.gflops).toFixed(1) : "–"}×); GPU memory of the process: ${g.gpuMemMiB ?? "–"} MiB`);
  process.exit(g.finite && g.gflops > 3 * c.gflops ? 0 : 1);' "$work/gpu.json" "$work/cpu.json" && faster=1 || faster=0
if [ "$have_gpu" = 1 ]; then
  echo "$placed" | grep -q 'MatMul[A-Za-z0-9_]* in device [^ ]*GPU:0' && pass "TensorFlow executed the matmuls on GPU:0" || fail "TensorFlow did not execute the matmuls on a GPU"
  [ "$faster" = 1 ] && pass "GPU matmul more than 3× the CPU's rate" || fail "GPU matmul not more than 3× the CPU's rate"
else
  echo "$placed" | grep -q 'MatMul[A-Za-z0-9_]* in device [^ ]*CPU:0' && pass "TensorFlow's CUDA build computed the matmuls on CPU:0 (no GPU here)" || fail "no matmul placement in TensorFlow's log"
  skip "GPU placement and speed"
fi

section "6. model training and generation steps on tfjs-node-gpu"
if [ "$skip_train" = 1 ]; then
  skip "--skip-train"
elif npx tsx bench/model-throughput.ts --backend tfjs-node-gpu --sizes tiny,small --steps 3 --warmup 1 --new-tokens 32 --no-torch > "$work/train.out" 2> "$work/train.log"; then
  grep -E "step|generate" "$work/train.log" | sed 's/^/  /' | tail -12
  sed 's/^/  /' "$work/train.out"
  pass "SFT-style train steps (forward, backward, AdamW) and KV-cache generation ran on tfjs-node-gpu"
else
  tail -20 "$work/train.log"
  fail "bench/model-throughput.ts failed on tfjs-node-gpu"
fi

echo
if [ "$failures" = 0 ]; then echo "verify-gpu: all checks passed"; else echo "verify-gpu: $failures check(s) failed"; exit 1; fi
