#!/usr/bin/env bash
# scripts/apt-install.sh PACKAGE PURPOSE [HINT]: install Debian's PACKAGE (without its recommended packages)
# for PURPOSE when this user may use apt-get (root, or sudo without a password). Prints what it did, and HINT
# when it cannot; never fails the build by itself (the tests that need the package say what is missing).
# Called by ensure-postgres.sh and ensure-chromium.sh once they found the package missing.
set -u
PACKAGE=$1 PURPOSE=$2 HINT=${3:-}
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "ensure: $PACKAGE is not installed and apt-get needs root; install the '$PACKAGE' package ($PURPOSE)" \
         "$HINT" >&2
    exit 0
  fi
fi
if command -v apt-get >/dev/null; then
  echo "ensure: installing Debian's $PACKAGE package ($PURPOSE)"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$PACKAGE" >/dev/null ||
    echo "ensure: apt-get could not install $PACKAGE" >&2
else
  echo "ensure: no apt-get here; install $PACKAGE yourself ($PURPOSE) $HINT" >&2
fi
exit 0
