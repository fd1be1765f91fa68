#!/usr/bin/env bash
# Start a Docker engine in the background unless one already answers, then wait until it does.
# Usage: scripts/start-dockerd.sh [WAIT_SECONDS]   (default 30). Logs: /tmp/gitpilot-dockerd.log
set -euo pipefail

wait_sec="${1:-30}"
log="${DOCKERD_LOG:-/tmp/gitpilot-dockerd.log}"

answers() { docker info >/dev/null 2>&1; }

if answers; then
    echo "start-dockerd: a Docker engine already answers"
    exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
    echo "start-dockerd: dockerd is not installed (apt-get install -y docker.io)" >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "start-dockerd: starting dockerd needs root" >&2
    exit 1
fi

echo "start-dockerd: starting dockerd (log: $log)"
nohup dockerd >"$log" 2>&1 &
for _ in $(seq 1 "$((wait_sec * 5))"); do
    if answers; then
        echo "start-dockerd: the Docker engine answers"
        exit 0
    fi
    sleep 0.2
done
echo "start-dockerd: dockerd did not answer within ${wait_sec}s; last log lines:" >&2
tail -n 20 "$log" >&2 || true
exit 1
