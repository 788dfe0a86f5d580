# Shared by entrypoint.sh and healthcheck.sh (POSIX sh; sourced, not run).
#
# A container's health check runs as a separate process that never passes through the entrypoint,
# so both scripts read secrets and name the worker node with these same functions.

# Secrets that may come from files (Docker and Kubernetes secrets): NAME_FILE names a file whose
# content (trailing newlines dropped) becomes NAME. Files keep secrets out of `docker inspect`,
# `kubectl describe` and process listings. (MEDIAFLEET_MANIFEST_FILE and MEDIAFLEET_SETTINGS_FILE
# are settings that name files, not secrets, hence the explicit list.)
MEDIAFLEET_SECRETS="MEDIAFLEET_REDIS_PASSWORD MEDIAFLEET_SENTINEL_PASSWORD FLOWER_BASIC_AUTH AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY"

mf_fail() {
    code=$1
    shift
    echo "mediafleet: $*" >&2
    exit "$code"
}

# Export each secret named in MEDIAFLEET_SECRETS whose _FILE variable is set. The messages name
# variables, never values.
mf_load_secrets() {
    for name in $MEDIAFLEET_SECRETS; do
        eval "file=\${${name}_FILE:-}"
        [ -n "$file" ] || continue
        eval "current=\${${name}:-}"
        if [ -n "$current" ]; then
            mf_fail 64 "set ${name} or ${name}_FILE, not both"
        fi
        if [ ! -f "$file" ] || [ ! -r "$file" ]; then
            mf_fail 66 "${name}_FILE names a file this user cannot read"
        fi
        value=$(cat "$file")
        if [ -z "$value" ]; then
            mf_fail 66 "the file named by ${name}_FILE is empty"
        fi
        export "${name}=${value}"
        unset "${name}_FILE"
    done
    unset file current value
}

# The Celery node name of this container's worker: unique per container (the host name is the
# container id under Docker and the pod name under Kubernetes) and prefixed by the device class,
# so Flower's metrics can be summed per class (deploy/k8s/keda.yaml relies on "mf-<device>@").
#
# On the host's network (compose.loopback.yaml sets MEDIAFLEET_HOST_NETWORK=true) every container
# has the host's name, so the container's short id is added: mf-<device>@<host name>-<id>.
mf_worker_name() {
    if [ -n "${MEDIAFLEET_WORKER_NAME:-}" ]; then
        printf '%s\n' "$MEDIAFLEET_WORKER_NAME"
        return
    fi
    node=$(uname -n)
    if [ "${MEDIAFLEET_HOST_NETWORK:-}" = true ]; then
        id=$(mf_container_id)
        [ -n "$id" ] || mf_fail 70 "MEDIAFLEET_HOST_NETWORK is set but this container's id cannot be read: set MEDIAFLEET_WORKER_NAME"
        node="$node-$id"
    fi
    printf 'mf-%s@%s\n' "${MEDIAFLEET_DEVICE:-cpu}" "$node"
}

# This container's short id, read from where Docker mounts its /etc/hostname
# (.../containers/<64 hex>/hostname); empty outside Docker.
mf_container_id() {
    sed -n 's|^.* \(/[^ ]*\)*/containers/\([0-9a-f]\{64\}\)/hostname .*$|\2|p' /proc/self/mountinfo 2>/dev/null \
        | head -n 1 | cut -c 1-12
}
