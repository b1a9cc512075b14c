#!/usr/bin/env bash
# Make sure a PostgreSQL server is installed for the leaderboard tests (they start their own server on
# 127.0.0.1 in a temporary directory; nothing is configured system-wide). Installs Debian's package
# when it is missing and this user may use apt-get. Prints what it did; never fails the build by
# itself: the tests say what is missing.
set -u
find_initdb() {
  command -v initdb 2>/dev/null && return 0
  ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1
}
if [ -n "$(find_initdb)" ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "ensure-postgres: PostgreSQL is not installed and apt-get needs root; install the 'postgresql' package" \
         "or set PODIUM_SKIP_POSTGRES=1 to skip the PostgreSQL leaderboard tests" >&2
    exit 0
  fi
fi
if command -v apt-get >/dev/null; then
  echo "ensure-postgres: installing Debian's postgresql package for the leaderboard tests"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null ||
    echo "ensure-postgres: apt-get could not install postgresql" >&2
  # Debian's package starts a system cluster on port 5432; the tests do not use it.
else
  echo "ensure-postgres: no apt-get here; install PostgreSQL (server binaries) yourself" >&2
fi
exit 0
