#!/bin/sh
# mediafleet container entrypoint.
#
#   worker [ARGS]   a Celery worker for MEDIAFLEET_DEVICE's queues (`mediafleet worker ARGS`), named
#                   mf-<device>@<host name> (or MEDIAFLEET_WORKER_NAME) so healthcheck.sh can ping it
#   flower [ARGS]   Flower on the fleet's broker; refuses to start without basic auth, keeps its
#                   state in FLOWER_DB (persistent mode)
#   extract | status | cancel | gc | serve-mcp | manifest | schema [ARGS]
#                   that `mediafleet` command (e.g. `docker compose run --rm cli status`)
#   anything else   run as given
#
# Secrets may come from files: MEDIAFLEET_REDIS_PASSWORD_FILE, MEDIAFLEET_SENTINEL_PASSWORD_FILE, FLOWER_BASIC_AUTH_FILE,
# AWS_ACCESS_KEY_ID_FILE, AWS_SECRET_ACCESS_KEY_FILE (see common.sh). Settings are the
# MEDIAFLEET_* variables of the README; nothing here prints a secret.
set -eu

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source=docker/common.sh
. "$here/common.sh"

mf_load_secrets

command=${1:-worker}
[ "$#" -eq 0 ] || shift

case "$command" in
    worker)
        for arg in "$@"; do
            case "$arg" in
                --hos*|-n)  # argparse also takes abbreviations such as --host
                    mf_fail 64 "set MEDIAFLEET_WORKER_NAME instead of --hostname (the health check pings that name)" ;;
            esac
        done
        exec mediafleet worker --hostname="$(mf_worker_name)" "$@"
        ;;
    flower)
        if [ -z "${FLOWER_BASIC_AUTH:-}" ]; then
            mf_fail 64 "Flower needs basic auth: set FLOWER_BASIC_AUTH_FILE (a file holding user:password) or FLOWER_BASIC_AUTH"
        fi
        # Flower reads FLOWER_<OPTION> variables, so the password never appears on a command line.
        export FLOWER_PERSISTENT="${FLOWER_PERSISTENT:-True}"
        export FLOWER_DB="${FLOWER_DB:-${MEDIAFLEET_STATE_DIR:-/var/lib/mediafleet}/flower/flower.db}"
        export FLOWER_STATE_SAVE_INTERVAL="${FLOWER_STATE_SAVE_INTERVAL:-60000}"
        mkdir -p "$(dirname -- "$FLOWER_DB")"
        exec celery -A mediafleet.workers.celery_app flower "$@"
        ;;
    extract|status|cancel|gc|serve-mcp|manifest|schema)
        exec mediafleet "$command" "$@"
        ;;
    *)
        exec "$command" "$@"
        ;;
esac
