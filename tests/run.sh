#!/usr/bin/env bash
# The README's second command: install what the tests need, then run the whole suite.
#   Debian: redis-server and postgresql (the tests start their own on free loopback ports), ffmpeg, espeak-ng,
#   docker.io, docker-compose and debootstrap (the container test starts its own dockerd when none runs).
#   Python: this package with every extra, into ./.venv.
# Extra arguments go to pytest. The suite runs on MEDIAFLEET_TEST_WORKERS processes (default 2; 0 runs it
# serially), one test file per process at a time (pytest-xdist, --dist loadfile), unless the arguments
# choose (-n N, -p no:xdist).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v ffmpeg >/dev/null || missing+=(ffmpeg)
command -v espeak-ng >/dev/null || missing+=(espeak-ng)  # speech made at run time in tests/test_audio_sentences.py
command -v docker-compose >/dev/null || missing+=(docker-compose)  # validates and runs docker/compose.yaml
[ -x /usr/bin/docker ] && command -v dockerd >/dev/null || missing+=(docker.io)  # tests/test_containers.py builds and runs the images
command -v debootstrap >/dev/null || missing+=(debootstrap)  # the images' base where no registry answers (docker/build.sh)
command -v chromium >/dev/null || missing+=(chromium)  # renders the HTML report in tests/test_report.py
# PostgreSQL for the discovery index tests (they run their own server on a free loopback port).
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null || missing+=(postgresql)
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
# Every version from requirements/lock.txt, the C extensions' build included; where cv2 does not
# import (opencv-python without libGL), the headless build is put back over it (docs/install.md).
bash requirements/install.sh .venv/bin/python -e '.[all,test]'

parallel=()
workers=${MEDIAFLEET_TEST_WORKERS:-2}
if [ "$workers" != 0 ] && ! printf '%s\n' "$@" | grep -qE '^(-n|--numprocesses|-p|no:xdist)'; then
  parallel=(-n "$workers" --dist loadfile)
fi
exec .venv/bin/python -m pytest "${parallel[@]}" "$@"
