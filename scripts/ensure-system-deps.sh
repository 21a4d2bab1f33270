#!/usr/bin/env bash
# Installs what the test suite needs beyond npm packages, if it is missing:
# python3 with numpy, for the test that reads a checkpoint with docs/read_checkpoint.py.
set -euo pipefail
for python in python3 /usr/bin/python3; do
  if command -v "$python" >/dev/null 2>&1 && "$python" -c "import numpy" >/dev/null 2>&1; then
    exit 0
  fi
done
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing python3-numpy (Debian) for the format test"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy >/dev/null
else
  echo "The format test needs python3 with numpy: run 'sudo apt-get install python3-numpy' (or 'pip install numpy')." >&2
  exit 1
fi
