#!/usr/bin/env bash
# Debian's Chromium (and its driver) for the headless UI tests; Playwright drives /usr/bin/chromium,
# so no browser is downloaded. Needs root; does nothing when Chromium is already there.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then echo "installing chromium needs root" >&2; exit 2; fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver > /tmp/torchx-airflow-chromium-apt.log 2>&1 \
  || { cat /tmp/torchx-airflow-chromium-apt.log >&2; exit 1; }
