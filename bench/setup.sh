# The benchmarks' shared environment, sourced by bench/run and bench/profile
# after they set `bin` (a directory holding gw-control-plane, gw-data-plane
# and gwctl): installs wrk, nginx and redis-server when missing, then starts
# on free ports the nginx upstreams (a fixed JSON answer, a short stream, an
# OTLP sink, the agent workload's streams as files) and the nginx hop in
# front of them, the held-open stream upstream, redis-server and a control
# plane on it, with a channel per workload, an account and a token (`key`).
# Defines wrk_script, start_data_plane, cpu_ticks and per_request; every
# process is stopped when the sourcing script exits. `cp_wrap` and
# `dp_wrap` (arrays) prefix the control plane's and data plane's command
# lines (a profiler), and `ready_polls` is how many 10 ms polls a data plane
# gets to answer its first request (1,000).
[[ -v cp_wrap ]] || cp_wrap=()
[[ -v dp_wrap ]] || dp_wrap=()
ready_polls=${ready_polls:-1000}

missing=()
for tool in wrk nginx redis-server; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing ${missing[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for name in upstream agent hop sink sse; do
        [ -f "$work/$name.pid" ] && kill "$(cat "$work/$name.pid")" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
# Hundreds of held streams need as many descriptors in the data plane.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# Free ports, all held at once while they are picked so that none repeats.
read -r upstream_port hop_port redis_port cp_port dp_port sink_port sse_port bare_port agent_port \
    agent_hop_port slow_port portkey_port <<<"$(python3 -c '
import socket
held = [socket.socket() for _ in range(12)]
for s in held:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))')"

answer='{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}'

nginx_conf() { # name, server blocks (and upstream blocks)
    cat >"$work/$1.conf" <<EOF
worker_processes 1;
pid $work/$1.pid;
error_log $work/$1.err;
events { worker_connections 4096; }
http {
    access_log off;
    upstream fixed { server 127.0.0.1:$upstream_port; keepalive 64; }
    $2
}
EOF
    nginx -c "$work/$1.conf" -p "$work"
}
# The one worker of an nginx started by nginx_conf: the process that serves.
nginx_worker() { # name
    local master worker=""
    master=$(cat "$work/$1.pid")
    for _ in $(seq 50); do
        read -r worker _ <"/proc/$master/task/$master/children" 2>/dev/null || true
        [ -n "$worker" ] && break
        sleep 0.1
    done
    echo "$worker"
}
nginx_conf upstream "server { listen 127.0.0.1:$upstream_port; location / { default_type application/json; return 200 '$answer'; } }"
# A streamed answer (two events, usage in the last), for the first-byte
# overhead of a stream.
chunk='{"id":"c","object":"chat.completion.chunk","created":1,"model":"bench","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}'
last='{"id":"c","object":"chat.completion.chunk","created":1,"model":"bench","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13}}'
sse=$(printf 'data: %s\n\ndata: %s\n\ndata: [DONE]\n\n' "$chunk" "$last")
nginx_conf sse "server { listen 127.0.0.1:$sse_port; location / { default_type text/event-stream; return 200 '$sse'; } }"
# An OTLP/HTTP "collector" that takes every export: an empty protobuf
# answer is a valid ExportTraceServiceResponse.
nginx_conf sink "server { listen 127.0.0.1:$sink_port; location / { default_type application/x-protobuf; return 200 ''; } }"
# The agent workload's upstream: each 300-event stream is a file at the path
# its channel calls (nginx refuses a POST to a file with 405, which
# `error_page` turns into the file itself).
python3 bench/agent.py "$work/agent"
# nginx started as root serves as `nobody`, which must reach the files.
chmod go+x "$work" && chmod -R go+rX "$work/agent"
nginx_conf agent "server { listen 127.0.0.1:$agent_port; root $work/agent/upstream; default_type text/event-stream;
    location / { error_page 405 =200 \$uri; } }"
# One nginx hop for both workloads; streams pass unbuffered, as an SSE
# proxy is set up.
nginx_conf hop "upstream agent { server 127.0.0.1:$agent_port; keepalive 64; }
    server { listen 127.0.0.1:$hop_port; location / { proxy_pass http://fixed; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }
    server { listen 127.0.0.1:$agent_hop_port; location / { proxy_pass http://agent; proxy_http_version 1.1;
        proxy_set_header Connection \"\"; proxy_buffering off; } }"
upstream_worker=$(nginx_worker upstream)
hop_worker=$(nginx_worker hop)
# Streams that stay open, for the data plane's memory per stream.
python3 bench/streams.py upstream "$slow_port" >"$work/slow.log" 2>&1 &
pids+=($!)

redis-server --port "$redis_port" --save '' --appendonly no >"$work/redis.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")

export GW_ADMIN_KEY GW_NODE_KEY
GW_ADMIN_KEY=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
GW_NODE_KEY=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
sleep 0.5
"${cp_wrap[@]}" "$bin/gw-control-plane" --listen "127.0.0.1:$cp_port" --store "redis://127.0.0.1:$redis_port/0" \
    --data-dir "$work/cp" >"$work/cp.log" 2>&1 &
cp_pid=$!
pids+=("$cp_pid")

gwctl() { GW_ENDPOINT="http://127.0.0.1:$cp_port" "$bin/gwctl" "$@"; }
for _ in $(seq "$((ready_polls / 20))"); do gwctl model list >/dev/null 2>&1 && break; sleep 0.2; done
channel() { # model (and channel name), channel type, base URL
    gwctl model create --id "$1" --category chat --input-price 1 --output-price 2 >/dev/null
    gwctl channel create --name "$1" --type "$2" --base-url "$3" --no-key --models "$1" --groups default >/dev/null
}
channel bench openai "http://127.0.0.1:$upstream_port/v1"
channel bench-stream openai "http://127.0.0.1:$sse_port/v1"
channel bench-agent anthropic "http://127.0.0.1:$agent_port/anthropic/v1"
channel bench-agent-chat openai "http://127.0.0.1:$agent_port/chat/v1"
channel bench-codex openai "http://127.0.0.1:$agent_port/codex/v1"
channel bench-slow anthropic "http://127.0.0.1:$slow_port/v1"
account=$(gwctl account create --name bench --balance 1000000 --groups default -o json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
created=$(gwctl token create --account "$account" --group default --quota 100000 --rate-limit 100000000/1 -o json)
key=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["key"])' <<<"$created")
token=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])' <<<"$created")

# A wrk script that POSTs a body file with the given headers.
wrk_script() { # name, body file, then "Header: value"…
    local name=$1 body=$2 header
    shift 2
    {
        echo 'wrk.method = "POST"'
        echo "local f = assert(io.open(\"$body\", \"rb\")); wrk.body = f:read(\"*a\"); f:close()"
        echo 'wrk.headers["Content-Type"] = "application/json"'
        for header in "$@"; do echo "wrk.headers[\"${header%%: *}\"] = \"${header#*: }\""; done
    } >"$work/$name.lua"
}
echo '{"model":"bench","messages":[{"role":"user","content":"hi"}],"max_tokens":16}' >"$work/small.json"
wrk_script post "$work/small.json" "Authorization: Bearer $key"
wrk_script portkey "$work/small.json" "Authorization: Bearer unused" "x-portkey-provider: openai" \
    "x-portkey-custom-host: http://127.0.0.1:$upstream_port/v1"
for body in messages messages-chat responses; do
    wrk_script "$body" "$work/agent/$body.json" "Authorization: Bearer $key" "anthropic-version: 2023-06-01"
done

dp_pid="" cold_ms="" idle_rss=""
# Starts a data plane and waits for its first 200, polled every 10 ms; the
# first start (an empty data dir: a full sync from the control plane) is
# the cold start, and its RSS then, with no traffic but that request, the
# idle RSS.
start_data_plane() { # spool-sync policy
    [ -n "$dp_pid" ] && { kill "$dp_pid"; wait "$dp_pid" 2>/dev/null || true; }
    local started=$EPOCHREALTIME code=""
    "${dp_wrap[@]}" "$bin/gw-data-plane" --listen "127.0.0.1:$dp_port" --control-plane "http://127.0.0.1:$cp_port" \
        --data-dir "$work/dp" --spool-sync "$1" >"$work/dp.log" 2>&1 &
    dp_pid=$!
    pids+=("$dp_pid")
    for _ in $(seq "$ready_polls"); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key" \
            -H 'content-type: application/json' -d '{"model":"bench","messages":[],"max_tokens":1}' \
            "http://127.0.0.1:$dp_port/v1/chat/completions" || true)
        if [ "$code" = 200 ]; then
            if [ -z "$cold_ms" ]; then
                cold_ms=$(python3 -c "print(f'{($EPOCHREALTIME - $started) * 1000:.0f}')")
                idle_rss=$(awk '/^VmRSS/ {print $2}' "/proc/$dp_pid/status")
            fi
            return 0
        fi
        sleep 0.01
    done
    echo "the data plane never answered 200 (last $code); see $work/dp.log" >&2
    exit 1
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The kernel's part of it (system time): a proxy's socket work mostly.
sys_ticks() { awk '{print $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
# CPU µs per request from clock ticks over the requests wrk counted.
per_request() { awk -v t="$1" -v n="$2" -v hz="$hz" 'BEGIN { if (n > 0) printf "%.1f", t / hz / n * 1e6 }'; }

