#!/bin/sh
# Start the fleet's Redis: password from a secret file, append-only persistence, no eviction.
#
# Used as the entrypoint of the official redis image in compose.yaml, and of mediafleet:redis
# (docker/Dockerfile.redis, Debian's redis-server) where no registry answers. The password goes into a
# config file that only redis can read, never onto a command line (`ps` and `docker inspect`
# would show it there). Extra arguments go to redis-server.
#
#   REDIS_PASSWORD_FILE  default /run/secrets/redis_password
#   REDIS_CONFIG_FILE    where the generated config goes; default /tmp/mediafleet-redis.conf
set -eu

secret=${REDIS_PASSWORD_FILE:-/run/secrets/redis_password}
conf=${REDIS_CONFIG_FILE:-/tmp/mediafleet-redis.conf}

if [ ! -r "$secret" ]; then
    echo "redis-start: cannot read the password file (REDIS_PASSWORD_FILE)" >&2
    exit 66
fi
password=$(cat "$secret")
# The fleet puts the password into redis:// URLs and Redis parses it from a config line: keep it
# to characters neither treats specially (e.g. `openssl rand -hex 32`).
case "$password" in
    ''|*[!A-Za-z0-9._~-]*)
        echo "redis-start: the password must be non-empty and use only A-Z a-z 0-9 . _ ~ -" >&2
        exit 65
        ;;
esac
if [ "${#password}" -lt 16 ]; then
    echo "redis-start: the password must be at least 16 characters" >&2
    exit 65
fi

umask 077
{
    printf 'requirepass %s\n' "$password"
    # Every write reaches the append-only file within a second; queued and finished jobs
    # survive a restart.
    printf 'appendonly yes\nappendfsync everysec\n'
    # Never evict a key to make room: evicting a queue or a job record would lose a job.
    printf 'maxmemory-policy noeviction\n'
} >"$conf"
unset password
if [ "$(id -u)" = 0 ] && id redis >/dev/null 2>&1; then
    chown redis "$conf"
fi

# The official image's own entrypoint drops from root to the redis user and owns /data; Debian's
# redis-server (docker/Dockerfile.redis) already runs as redis.
if command -v docker-entrypoint.sh >/dev/null 2>&1; then
    exec docker-entrypoint.sh redis-server "$conf" "$@"
fi
exec redis-server "$conf" "$@"
