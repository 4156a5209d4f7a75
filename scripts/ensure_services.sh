#!/usr/bin/env bash
# Start Redis and PostgreSQL where they are not already running (CI machines start them
# before the session; a fresh machine may not). Safe to run repeatedly.
set -uo pipefail

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    echo "starting redis"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
if ! pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
    echo "starting postgresql"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
fi
# The compose file is checked with `docker-compose config -q` (no Docker engine needed);
# best effort: without the checker that one test skips and says so.
if ! command -v docker-compose >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "installing docker-compose (config checker)"
    (apt-get update -qq && apt-get install -y -qq docker-compose) >/dev/null 2>&1 || echo "could not install docker-compose" >&2
fi
# The job explorer's browser tests drive Debian's Chromium through Playwright (never Playwright's
# own browser download). Without apt the tests skip and say so.
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium (browser tests)"
    (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1 || echo "could not install chromium" >&2
fi
# The multi-host partition test builds hosts as network namespaces and drops packets with nftables.
# Without them it skips and says so.
if ! command -v nft >/dev/null 2>&1 && [ ! -x /usr/sbin/nft ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing nftables (partition test)"
    (apt-get update -qq && apt-get install -y -qq nftables iproute2) >/dev/null 2>&1 || echo "could not install nftables" >&2
fi
for i in $(seq 1 30); do
    if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
        exit 0
    fi
    sleep 1
done
echo "redis or postgresql did not come up" >&2
exit 1
