#!/usr/bin/env bash
# Make sure a Chromium browser is installed for the live tournament page's browser test
# (tests/test_dashboard.py drives it through Playwright's Python package; Playwright's own browser
# download is not used). Installs Debian's chromium package, without its recommended packages, when it
# is missing and this user may use apt-get. Prints what it did; never fails the build by itself: the
# test says what is missing.
set -u
if command -v chromium >/dev/null || [ -x /usr/bin/chromium ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "ensure-chromium: Chromium is not installed and apt-get needs root; install the 'chromium' package" \
         "for the dashboard's browser test" >&2
    exit 0
  fi
fi
if command -v apt-get >/dev/null; then
  echo "ensure-chromium: installing Debian's chromium package for the dashboard's browser test"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null ||
    echo "ensure-chromium: apt-get could not install chromium" >&2
else
  echo "ensure-chromium: no apt-get here; install Chromium yourself (the test looks for 'chromium' on PATH)" >&2
fi
exit 0
