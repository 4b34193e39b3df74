#!/usr/bin/env bash
# A newcomer's `npm run demo`, timed: on a fresh machine (--fresh: a clean clone and an empty home folder, so no npm,
# pip or Go cache, no ~/.cache/cm2: everything is fetched and built as on a new machine; only the machine's own
# settings files, ~/.npmrc, ~/.gitconfig and ~/.config/go, are copied) or warm (the clone and caches of a first run).
# With --hog, a CPU-bound process (`nice -n 5` busy loop) runs beside it, as the README's figures are measured.
# Prints the demo's output with a timestamp per line, the set-up steps' times, and a summary line for bench/README.md.
#
#   bash bench/first-run.sh --fresh --hog [--dir DIR]   # DIR (default a new temp folder) keeps the clone and the home
#   bash bench/first-run.sh --warm --hog --dir DIR      # again in DIR: a new run (new id) on that set-up machine
#   bash bench/first-run.sh --clone --hog               # a clean clone of HEAD with this machine's home and caches as they are
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
mode="" hog=0 dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --fresh) mode=fresh ;;
    --warm) mode=warm ;;
    --clone) mode=clone ;;
    --hog) hog=1 ;;
    --dir) dir="$2"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$mode" ] || { echo "--fresh, --warm or --clone" >&2; exit 2; }
if [ "$mode" = clone ]; then
  dir="${dir:-$(mktemp -d /tmp/cm2-clone-run-XXXX)}"
  git clone -q "$repo" "$dir/clone"
  ln -s "$HOME" "$dir/home"
elif [ "$mode" = fresh ]; then
  dir="${dir:-$(mktemp -d /tmp/cm2-first-run-XXXX)}"
  mkdir -p "$dir/home"
  git clone -q "$repo" "$dir/clone"
  for f in .npmrc .gitconfig .config/go; do
    if [ -e "$HOME/$f" ]; then mkdir -p "$(dirname "$dir/home/$f")"; cp -r "$HOME/$f" "$dir/home/$f"; fi
  done
else
  [ -n "$dir" ] && [ -d "$dir/clone" ] || { echo "--warm needs --dir of a --fresh run" >&2; exit 2; }
fi
log="$dir/demo-$mode.log"
# Warm: a new run on the machine the first run set up (the finished run itself would redo nothing).
demo_args=()
[ "$mode" = warm ] && demo_args=(-- --run "warm-$(date +%s)")
echo "first-run bench: $mode, hog=$hog, clone $dir/clone, home $dir/home, log $log"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%Y-%m-%d), commit $(git -C "$dir/clone" rev-parse --short HEAD)"
hogpid=""
if [ "$hog" = 1 ]; then
  nice -n 5 sh -c 'while :; do :; done' &
  hogpid=$!
fi
trap '[ -n "$hogpid" ] && kill "$hogpid" 2>/dev/null || true' EXIT
t0=$(date +%s)
set +e
( cd "$dir/clone" && env -u CM2_TEMPORAL_BIN -u CM2_MINIO_BIN -u CM2_CACHE_DIR -u GOPATH -u GOCACHE -u GOMODCACHE HOME="$dir/home" \
    npm run demo ${demo_args[@]+"${demo_args[@]}"} 2>&1 ) | while IFS= read -r line; do printf '%5ds %s\n' "$(( $(date +%s) - t0 ))" "$line"; done | tee "$log"
rc=${PIPESTATUS[0]}
set -e
total=$(( $(date +%s) - t0 ))
echo
echo "set-up steps (seconds since start):"
grep -E "building MinIO|installing npm|npm dependencies installed|fetching PyPI|fetched |compiling @tensorflow|native TensorFlow: tfjs-node ready|set-up so far|test infrastructure|Temporal dev server|MinIO (up|started)|Web UI:" "$log" | head -40 || true
held=$(grep -Eo "SFT [0-9.]+ ± [0-9.]+ → RL [0-9.]+ ± [0-9.]+" "$log" | tail -1 || true)
echo
echo "| $(date -u +%Y-%m-%d) | $mode | $([ "$hog" = 1 ] && echo 'CPU-bound process beside it' || echo 'nothing beside it') | ${total} s | exit $rc | ${held:-no held-out line} |"
exit "$rc"
