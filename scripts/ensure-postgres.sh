#!/usr/bin/env bash
# Make sure a PostgreSQL server is installed for the leaderboard tests (they start their own server on
# 127.0.0.1 in a temporary directory; nothing is configured system-wide). Installs Debian's package
# when it is missing and this user may use apt-get (scripts/apt-install.sh). Prints what it did; never
# fails the build by itself: the tests say what is missing.
set -u
find_initdb() {
  command -v initdb 2>/dev/null && return 0
  ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1
}
if [ -n "$(find_initdb)" ]; then
  exit 0
fi
# Debian's package starts a system cluster on port 5432; the tests do not use it.
exec bash "$(dirname "$0")/apt-install.sh" postgresql "for the leaderboard tests" \
  "or set PODIUM_SKIP_POSTGRES=1 to skip the PostgreSQL leaderboard tests"
