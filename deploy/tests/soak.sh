#!/usr/bin/env bash
# Soak: one kiln serve under steady load (wrk, 4 connections) for SECONDS (default 60) while the
# repository cycles: each cycle rolls model NAME to a new version (copy, rename, SIGHUP; the old
# version is retired once its last request is answered) and unloads and loads a second model
# through the repository API. SOAK_LOAD_API=1 rolls NAME through its load API instead. The server's RSS
# (/proc/PID/status VmRSS) is sampled every cycle; after a warm-up (the first quarter), it must
# stay within 10% of its value at the end of the warm-up. Every request must get a 2xx.
# Writes the samples to $SOAK_CSV when set (seconds,rss_kib,cycle).
# usage: deploy/tests/soak.sh [SECONDS]
source "$(dirname "$0")/lib.sh"
secs=${1:-60}
port=$(free_ports 1)
token=soak-token
repo=$work/repo
mkdir -p "$repo/$NAME/1" "$repo/soak_b/1"
cp "$MODEL" "$repo/$NAME/1/model.onnx"; cp "$MODEL" "$repo/soak_b/1/model.onnx"
"$KILN" serve --model-repository "$repo" --http-port "$port" --admin-token "$token" \
  > "$work/serve.log" 2>&1 &
srv=$!
for _ in $(seq 1 300); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v2/health/ready")" = 200 ] && break
  sleep 0.1
done
api() { curl -s -o /dev/null -m 30 -w '%{http_code}' -X POST -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v2/repository/models/$1/$2"; }
say "kiln serve pid $srv on $port; wrk -c4 for ${secs}s with load/unload cycles"
wrk_bg 4 "$secs" "http://127.0.0.1:$port/v2/models/$NAME/infer"
csv=$work/rss.csv
: > "$csv"
t0=$(date +%s.%N)
cycle=0 ver=1 api_fail=0
while kill -0 "$wrk_pid" 2>/dev/null; do
  cycle=$((cycle + 1))
  next=$((ver + 1))
  cp -r "$repo/$NAME/$ver" "$repo/$NAME/.tmp-$next"
  mv "$repo/$NAME/.tmp-$next" "$repo/$NAME/$next"
  if [ "${SOAK_LOAD_API:-0}" = 1 ]; then
    [ "$(api "$NAME" load)" = 200 ] || api_fail=$((api_fail + 1))
  else
    kill -HUP "$srv"
    for _ in $(seq 1 100); do [ "$(infer_version "$port")" = "$next" ] && break; sleep 0.1; done
    [ "$(infer_version "$port")" = "$next" ] || api_fail=$((api_fail + 1))
  fi
  rm -rf "$repo/$NAME/$ver"
  ver=$next
  [ "$(api soak_b unload)" = 200 ] || api_fail=$((api_fail + 1))
  [ "$(api soak_b load)" = 200 ] || api_fail=$((api_fail + 1))
  now=$(date +%s.%N)
  echo "$(awk -v a="$t0" -v b="$now" 'BEGIN { printf "%.2f", b - a }'),$(rss_kb "$srv"),$cycle" >> "$csv"
  sleep 0.5
done
wrk_wait
say "wrk: $r"
served=$(infer_version "$port")
kill -TERM "$srv"; wait "$srv" || true
[ -n "${SOAK_CSV:-}" ] && cp "$csv" "$SOAK_CSV"
read -r base peak last n < <(awk -F, -v w="$(awk -v s="$secs" 'BEGIN { print s / 4 }')" '
  $1 >= w && !b { b = $2 } $1 >= w { if ($2 > p) p = $2; l = $2; k++ }
  END { print b, p, l, k }' "$csv")
growth=$(awk -v b="$base" -v p="$peak" 'BEGIN { printf "%.1f", (p - b) * 100 / b }')
sent=$(jfield "$r" requests); lost=$(jfield "$r" lost)
echo "result soak: seconds $secs cycles $cycle requests $sent lost $lost rss_kib warm $base peak $peak last $last growth ${growth}%"
check "$cycle load/unload cycles" [ "$cycle" -ge 5 ]
check "every roll-out and load/unload call took effect ($api_fail did not)" [ "$api_fail" = 0 ]
check "the last version ($ver) serves (answered '$served')" [ "$served" = "$ver" ]
check "no request lost ($lost of $sent)" [ "$lost" = 0 ]
check "RSS growth after warm-up ${growth}% <= 10% ($n samples)" awk -v g="$growth" 'BEGIN { exit !(g <= 10) }'
finish
