#!/bin/sh
# Container health check: exit 0 when this container's role answers, non-zero otherwise.
#
#   healthcheck.sh [worker]  the worker node named as entrypoint.sh names it answers a ping sent
#                            through the broker (so broker, password and worker are all checked);
#                            a busy prefork worker still answers: its tasks run in child processes
#   healthcheck.sh flower    Flower's /healthcheck on 127.0.0.1:${FLOWER_PORT:-5555} says OK
#   healthcheck.sh mcp       serve-mcp --http answers HTTP on 127.0.0.1:${MEDIAFLEET_MCP_PORT:-8765}
#
# MEDIAFLEET_HEALTHCHECK_TIMEOUT_S (default 10) bounds the wait for the worker's reply.
set -eu

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source=docker/common.sh
. "$here/common.sh"

mf_load_secrets

case "${1:-worker}" in
    worker)
        exec celery -A mediafleet.workers.celery_app inspect ping \
            --destination "$(mf_worker_name)" --timeout "${MEDIAFLEET_HEALTHCHECK_TIMEOUT_S:-10}" >/dev/null
        ;;
    flower)
        exec python -c '
import sys
import urllib.request

url = "http://127.0.0.1:%s/healthcheck" % sys.argv[1]
try:
    with urllib.request.urlopen(url, timeout=10) as reply:
        sys.exit(0 if reply.read().strip() == b"OK" else 1)
except OSError as exc:
    sys.exit("flower does not answer: %s" % type(exc).__name__)
' "${FLOWER_PORT:-5555}"
        ;;
    mcp)
        # Any HTTP answer from /mcp (a plain GET is refused: the transport wants an MCP client).
        exec python -c '
import sys
import urllib.error
import urllib.request

url = "http://127.0.0.1:%s/mcp" % sys.argv[1]
try:
    urllib.request.urlopen(url, timeout=10).close()
except urllib.error.HTTPError:
    pass
except OSError as exc:
    sys.exit("the MCP server does not answer: %s" % type(exc).__name__)
' "${MEDIAFLEET_MCP_PORT:-8765}"
        ;;
    *)
        mf_fail 64 "healthcheck.sh [worker|flower|mcp]"
        ;;
esac
