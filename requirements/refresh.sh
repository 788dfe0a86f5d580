#!/usr/bin/env bash
# Refresh requirements/lock.txt: resolve, install the candidate into a fresh venv, run the suite
# against it, say what moved, and write the lock only when asked and the run passed.
#
#   bash requirements/refresh.sh [--write] [--keep] [--no-tests] [PYTEST ARGS...]
#
#   (default)   the newest releases pyproject.toml and requirements/lock.in allow (every pin may move)
#   --keep      keep today's pins wherever pyproject still admits them: only what a change to
#               pyproject needs moves (after adding or narrowing a dependency)
#   --write     copy the candidate over requirements/lock.txt when the suite passed
#   --no-tests  resolve and say what moved only; with --write, write it untested (say so in the commit)
#   PYTEST ARGS the slice of the suite to run (default: the whole suite, 20+ minutes on 2 cores),
#               e.g. tests/test_lock.py tests/test_pdf_textlayer.py -x
#
# The resolver is uv's pip compile (pinned below), for Linux x86_64 and CPython 3.11 (the images'),
# with every file's hash. The candidate is installed with requirements/install.sh (non-editable, so
# the working tree's compiled extensions are left alone) into a venv under a temporary folder that
# is removed afterwards unless the run failed (then its path is printed).
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.10
write=0 keep=0 tests=1
args=()
for a in "$@"; do
  case "$a" in
    --write) write=1 ;;
    --keep) keep=1 ;;
    --no-tests) tests=0 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$a") ;;
  esac
done

work=$(mktemp -d "${TMPDIR:-/tmp}/mediafleet-refresh.XXXXXX")
keep_work=0
cleanup() { if ((keep_work)); then echo "refresh: kept $work" >&2; else rm -rf "$work"; fi; }
trap cleanup EXIT

echo "refresh: resolving with uv $UV_VERSION"
python3 -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" packaging
candidate="$work/lock.txt"
upgrade=(--upgrade)
if ((keep)); then
  cp requirements/lock.txt "$candidate"  # uv prefers the pins already in its output file
  upgrade=()
fi
"$work/tools/bin/uv" pip compile -q pyproject.toml requirements/lock.in \
  --extra all --extra test --extra ocr-gpu --extra cuda \
  --python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes \
  --custom-compile-command "bash requirements/refresh.sh --write" \
  "${upgrade[@]}" -o "$candidate"

echo "refresh: what moved (requirements/lock.txt -> candidate)"
changes=$("$work/tools/bin/python" requirements/lockfile.py moved requirements/lock.txt "$candidate")
echo "${changes:-nothing}" | sed 's/^/  /'
"$work/tools/bin/python" requirements/lockfile.py check "$candidate" | sed 's/^/refresh: candidate: /' || {
  keep_work=1; echo "refresh: the candidate disagrees with pyproject.toml (above)" >&2; exit 1; }

if ((tests)); then
  echo "refresh: installing the candidate into a fresh venv"
  python3 -m venv "$work/venv"
  INSTALL_LOCK="$candidate" bash requirements/install.sh "$work/venv/bin/python" '.[all,test]'
  echo "refresh: running pytest ${args[*]:-(the whole suite)}"
  if ! INSTALL_LOCK="$candidate" "$work/venv/bin/python" -m pytest "${args[@]}"; then
    keep_work=1
    echo "refresh: the suite FAILED against the candidate (kept: $candidate); requirements/lock.txt unchanged" >&2
    exit 1
  fi
  echo "refresh: the suite passed against the candidate"
fi

if ((write)); then
  cp "$candidate" requirements/lock.txt
  echo "refresh: wrote requirements/lock.txt$( ((tests)) || echo ' (UNTESTED: --no-tests)')"
else
  echo "refresh: requirements/lock.txt unchanged (--write writes it)"
fi
