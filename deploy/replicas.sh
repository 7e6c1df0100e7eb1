#!/usr/bin/env bash
# Run N kiln serve replicas on loopback ports behind nginx, and supervise them.
#
#   deploy/replicas.sh N MODEL.onnx [options] [-- kiln serve flags...]
#   deploy/replicas.sh N --model-repository DIR [options] [-- kiln serve flags...]
#   deploy/replicas.sh stop [--run DIR]       stop a running set (replicas drain first)
#   deploy/replicas.sh status [--run DIR]     each replica's port, pid and readiness
#
# options:
#   --run DIR        run folder (default /tmp/kiln-replicas; KILN_RUN_DIR): nginx's prefix, its
#                    config, logs and temp files, and one folder per replica (rI/repo, rI/log)
#   --port P         nginx listens on 127.0.0.1:P (default 8080; KILN_LB_PORT)
#   --base-port B    replica I listens on 127.0.0.1:B+I (default 8001)
#   --name NAME      the model's name when serving MODEL.onnx (default: its file name)
#   --drain-s S      each replica's --drain-s (default 2), --exit-timeout-s is S+10
#   --admin-token T  the replicas' admin token for the load API (default: a random one, saved in
#                    RUN/admin-token; KILN_ADMIN_TOKEN)
#   --no-restart     leave a replica that died down (default: start it again after 1 s)
#   --detach         return once everything is ready, the supervisor keeps running
#
# Each replica gets its own copy of the model repository (RUN/rI/repo), so that deploy/rollout.sh
# can roll a new version out one replica at a time. nginx runs in the foreground as this
# script's child with its own prefix (`nginx -p RUN -c RUN/nginx.conf`); the system's nginx
# configuration is never touched. Every 0.5 s the supervisor asks each replica's
# /v2/health/ready; while a replica is not ready (starting, draining, dead) RUN/rI/down exists
# and nginx's gate for it answers 503, so the request goes to the next replica; requests that
# reach a failing replica anyway are retried on the next one too (proxy_next_upstream). A file
# RUN/rI/hold takes replica I out of nginx the same way (deploy/rollout.sh uses it); neither
# needs an nginx reload. RUN/ready appears when nginx and every replica are up.
# KILN is the kiln binary (default: build/kiln in this checkout).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
KILN=${KILN:-$root/build/kiln}
run=${KILN_RUN_DIR:-/tmp/kiln-replicas}

die() { echo "replicas: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

cmd_stop() {
  [ -f "$run/supervisor.pid" ] || die "nothing running in $run (no supervisor.pid)"
  local pid; pid=$(cat "$run/supervisor.pid")
  if ! kill -0 "$pid" 2>/dev/null; then rm -f "$run/supervisor.pid"; die "supervisor $pid is gone"; fi
  kill -TERM "$pid"
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || { echo "replicas: stopped"; return 0; }; sleep 0.1; done
  die "supervisor $pid still running after 60 s"
}

cmd_status() {
  [ -f "$run/replicas" ] || die "nothing running in $run"
  local i port pid code
  while read -r i port; do
    pid=$(cat "$run/r$i/pid" 2>/dev/null || echo -)
    code=$(curl -s -o /dev/null -m 1 -w '%{http_code}' "http://127.0.0.1:$port/v2/health/ready" || true)
    echo "replica $i port $port pid $pid ready $code"
  done < "$run/replicas"
  echo "nginx port $(cat "$run/lb-port") pid $(cat "$run/nginx.pid" 2>/dev/null || echo -)"
}

case "${1:-}" in
  -h|--help|"") usage 0 ;;
  stop|status)
    sub=$1; shift
    while [ $# -gt 0 ]; do
      case $1 in --run) run=${2:?--run needs a folder}; shift 2 ;; *) die "unknown option $1" ;; esac
    done
    "cmd_$sub"; exit ;;
esac

n=$1; shift
[[ $n =~ ^[1-9][0-9]*$ ]] || die "N must be a positive number of replicas, got '$n'"
model="" repo="" name="" lb_port=${KILN_LB_PORT:-8080} base=8001 drain=2 restart=1 detach=0
token=${KILN_ADMIN_TOKEN:-}
serve_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --model-repository) repo=${2:?--model-repository needs a folder}; shift 2 ;;
    --run) run=${2:?--run needs a folder}; shift 2 ;;
    --port) lb_port=${2:?--port needs a number}; shift 2 ;;
    --base-port) base=${2:?--base-port needs a number}; shift 2 ;;
    --name) name=${2:?--name needs a value}; shift 2 ;;
    --drain-s) drain=${2:?--drain-s needs seconds}; shift 2 ;;
    --admin-token) token=${2:?--admin-token needs a value}; shift 2 ;;
    --no-restart) restart=0; shift ;;
    --detach) detach=1; shift ;;
    -h|--help) usage 0 ;;
    --) shift; serve_args=("$@"); break ;;
    -*) die "unknown option $1" ;;
    *) [ -z "$model" ] || die "one MODEL.onnx only"; model=$1; shift ;;
  esac
done
[ -n "$model" ] || [ -n "$repo" ] || die "give MODEL.onnx or --model-repository DIR"
[ -z "$model" ] || [ -z "$repo" ] || die "give MODEL.onnx or --model-repository DIR, not both"
[ -z "$model" ] || [ -f "$model" ] || die "no such model: $model"
[ -z "$repo" ] || [ -d "$repo" ] || die "no such model repository: $repo"
[ -x "$KILN" ] || die "no kiln binary at $KILN (build it: scripts/build.sh build, or set KILN)"
command -v nginx >/dev/null || die "nginx is not installed (apt-get install nginx)"

if [ "$detach" = 1 ]; then
  # the supervisor is this same script in the background; wait until it says ready
  args=("$n"); [ -n "$model" ] && args+=("$model"); [ -n "$repo" ] && args+=(--model-repository "$repo")
  args+=(--run "$run" --port "$lb_port" --base-port "$base" --drain-s "$drain")
  [ -n "$name" ] && args+=(--name "$name"); [ -n "$token" ] && args+=(--admin-token "$token")
  [ "$restart" = 0 ] && args+=(--no-restart)
  mkdir -p "$run"; rm -f "$run/ready"
  setsid "$0" "${args[@]}" -- "${serve_args[@]}" > "$run/supervisor.log" 2>&1 < /dev/null &
  sup=$!
  for _ in $(seq 1 1200); do
    [ -f "$run/ready" ] && { echo "replicas: $n ready behind http://127.0.0.1:$lb_port (supervisor $sup, $run)"; exit 0; }
    kill -0 "$sup" 2>/dev/null || { cat "$run/supervisor.log" >&2; die "supervisor exited"; }
    sleep 0.1
  done
  die "not ready after 120 s; see $run/supervisor.log"
fi

if [ -f "$run/supervisor.pid" ] && kill -0 "$(cat "$run/supervisor.pid")" 2>/dev/null; then
  die "already running in $run (pid $(cat "$run/supervisor.pid")); deploy/replicas.sh stop --run $run"
fi
mkdir -p "$run"/logs "$run"/tmp
run=$(cd "$run" && pwd)
rm -f "$run/ready" "$run/nginx.pid"
echo $$ > "$run/supervisor.pid"
[ -n "$token" ] || token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
(umask 077; printf '%s\n' "$token" > "$run/admin-token")
echo "$lb_port" > "$run/lb-port"
: > "$run/replicas"

# one repository per replica
for ((i = 0; i < n; i++)); do
  d=$run/r$i
  rm -rf "$d/repo" "$d/hold" "$d/down" "$d/gate.sock"; mkdir -p "$d/repo"
  if [ -n "$model" ]; then
    nm=${name:-$(basename "$model" .onnx)}
    mkdir -p "$d/repo/$nm/1"; cp "$model" "$d/repo/$nm/1/model.onnx"
  else
    cp -a "$repo/." "$d/repo/"
  fi
  echo "$i $((base + i))" >> "$run/replicas"
done

declare -A pids=()
start_replica() {
  local i=$1 port=$((base + $1))
  KILN_ADMIN_TOKEN=$token "$KILN" serve --model-repository "$run/r$i/repo" --host 127.0.0.1 \
    --http-port "$port" --drain-s "$drain" --exit-timeout-s "$((drain + 10))" "${serve_args[@]}" \
    >> "$run/r$i/log" 2>&1 < /dev/null &
  pids[$i]=$!
  echo "${pids[$i]}" > "$run/r$i/pid"
  echo "replicas: replica $i pid ${pids[$i]} on 127.0.0.1:$port"
}

ready_code() {
  curl -s -o /dev/null -m 1 -w '%{http_code}' "http://127.0.0.1:$1/v2/health/ready" 2>/dev/null || true
}

# the gates (see nginx.conf.template): one per replica, and the upstream of the gates
write_nginx_replicas() {
  local i port
  : > "$run/upstreams.conf"
  : > "$run/replicas.conf"
  for ((i = 0; i < n; i++)); do
    port=$((base + i))
    echo "server unix:$run/r$i/gate.sock max_fails=1 fail_timeout=1s;" >> "$run/upstreams.conf"
    cat >> "$run/replicas.conf" <<CONF
upstream kiln_r$i {
    server 127.0.0.1:$port;
    keepalive 16;
}
server {
    listen unix:$run/r$i/gate.sock;
    location / {
        if (-f $run/r$i/hold) { return 503; }
        if (-f $run/r$i/down) { return 503; }
        proxy_pass http://kiln_r$i;
        proxy_next_upstream off;
    }
}
CONF
  done
}

# rI/down from each replica's readiness; prints what changed
mark_readiness() {
  local i
  for ((i = 0; i < n; i++)); do
    if [ "$(ready_code $((base + i)))" = 200 ]; then
      [ ! -e "$run/r$i/down" ] || { rm -f "$run/r$i/down"; echo "replica $i ready"; }
    else
      [ -e "$run/r$i/down" ] || { touch "$run/r$i/down"; echo "replica $i not ready: out of nginx"; }
    fi
  done
}

nginx_pid=""
stopping=0
# a failure while starting: stop what was started, exit 1
fail_start() {
  echo "replicas: $*" >&2
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  [ -z "$nginx_pid" ] || kill -QUIT "$nginx_pid" 2>/dev/null || true
  rm -f "$run/supervisor.pid"
  exit 1
}
shutdown() {
  stopping=1
  echo "replicas: stopping"
  rm -f "$run/ready"
  # nginx first (graceful: in-flight requests finish), then the replicas (each drains)
  [ -n "$nginx_pid" ] && kill -QUIT "$nginx_pid" 2>/dev/null || true
  for p in "${pids[@]}"; do [ -z "$p" ] || kill -TERM "$p" 2>/dev/null || true; done
  [ -n "$nginx_pid" ] && wait "$nginx_pid" 2>/dev/null || true
  for p in "${pids[@]}"; do [ -z "$p" ] || wait "$p" 2>/dev/null || true; done
  rm -f "$run/supervisor.pid"
  echo "replicas: stopped"
  exit 0
}
trap shutdown TERM INT

for ((i = 0; i < n; i++)); do start_replica "$i"; done
for _ in $(seq 1 1200); do
  all=1
  for ((i = 0; i < n; i++)); do
    kill -0 "${pids[$i]}" 2>/dev/null || { tail -n 20 "$run/r$i/log" >&2; fail_start "replica $i exited while starting"; }
    [ "$(ready_code $((base + i)))" = 200 ] || { all=0; break; }
  done
  [ "$all" = 1 ] && break
  sleep 0.1
done
[ "$all" = 1 ] || fail_start "replicas not ready after 120 s"

write_nginx_replicas
# as root, nginx's workers run as nobody: they must reach the gates' sockets and hold files
if [ "$(id -u)" = 0 ] && command -v runuser > /dev/null &&
   ! runuser -u nobody -- test -x "$run/r0" 2> /dev/null; then
  fail_start "nginx's workers (user nobody) cannot reach $run: use a run folder they can enter (chmod o+x on it and its parents)"
fi
sed -e "s|@RUN@|$run|g" -e "s|@LISTEN@|127.0.0.1:$lb_port|g" "$here/nginx.conf.template" > "$run/nginx.conf"
nginx -t -q -p "$run" -c "$run/nginx.conf" -e "$run/logs/error.log" || fail_start "nginx rejected $run/nginx.conf"
nginx -p "$run" -c "$run/nginx.conf" -e "$run/logs/error.log" &
nginx_pid=$!
for _ in $(seq 1 100); do
  [ "$(curl -s -o /dev/null -m 1 -w '%{http_code}' "http://127.0.0.1:$lb_port/nginx/live" || true)" = 200 ] && break
  kill -0 "$nginx_pid" 2>/dev/null || fail_start "nginx exited; see $run/logs/error.log"
  sleep 0.1
done
echo "replicas: nginx pid $nginx_pid on 127.0.0.1:$lb_port"
touch "$run/ready"

while [ "$stopping" = 0 ]; do
  if ! kill -0 "$nginx_pid" 2>/dev/null; then
    echo "replicas: nginx exited; stopping" >&2; shutdown
  fi
  for ((i = 0; i < n; i++)); do
    if [ -n "${pids[$i]}" ] && ! kill -0 "${pids[$i]}" 2>/dev/null; then
      wait "${pids[$i]}" 2>/dev/null && rc=0 || rc=$?
      echo "replicas: replica $i (pid ${pids[$i]}) exited with status $rc"
      if [ "$restart" = 1 ]; then sleep 1; start_replica "$i"; else pids[$i]=""; fi
    fi
  done
  mark_readiness | sed 's/^/replicas: /'
  sleep 0.5 & wait $! || true
done
