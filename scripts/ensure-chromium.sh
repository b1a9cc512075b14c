#!/usr/bin/env bash
# Make sure a Chromium browser is installed for the live tournament page's browser test
# (tests/test_dashboard.py drives it through Playwright's Python package; Playwright's own browser
# download is not used). Installs Debian's chromium package when it is missing and this user may use
# apt-get (scripts/apt-install.sh). Prints what it did; never fails the build by itself: the test says
# what is missing.
set -u
if command -v chromium >/dev/null || [ -x /usr/bin/chromium ]; then
  exit 0
fi
exec bash "$(dirname "$0")/apt-install.sh" chromium "for the dashboard's browser test"
