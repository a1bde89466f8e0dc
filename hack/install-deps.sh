#!/usr/bin/env bash
# Installs the Debian packages sandprobe's tests, benchmarks and demo run
# against. Idempotent and quiet when everything is there already.
set -euo pipefail

# package -> a file it provides (to skip apt when it is installed)
declare -A want=(
  [nftables]=/usr/sbin/nft
  [iproute2]=/usr/sbin/ip
  [dnsmasq-base]=/usr/sbin/dnsmasq
  [tinyproxy]=/usr/bin/tinyproxy
  [openssl]=/usr/bin/openssl
  [curl]=/usr/bin/curl
  [python3]=/usr/bin/python3
  [prometheus]=/usr/bin/promtool
  [prometheus-pushgateway]=/usr/bin/prometheus-pushgateway
  [prometheus-alertmanager]=/usr/bin/prometheus-alertmanager
  [docker.io]=/usr/sbin/dockerd
  [runsc]=/usr/bin/runsc
  [chromium]=/usr/bin/chromium
  [debootstrap]=/usr/sbin/debootstrap
  [git]=/usr/bin/git
  [npm]=/usr/bin/npm
  [procps]=/usr/bin/pgrep
  [jq]=/usr/bin/jq
  [util-linux]=/usr/bin/findmnt
  [iptables]=/usr/sbin/iptables
  [ipset]=/usr/sbin/ipset
  [squid-openssl]=/usr/sbin/squid
  [bash-completion]=/usr/share/bash-completion/bash_completion
  [shellcheck]=/usr/bin/shellcheck
  [nginx]=/usr/sbin/nginx
  [clang-19]=/usr/bin/clang-19
)
missing=()
for pkg in "${!want[@]}"; do
  [[ -e ${want[$pkg]} ]] || missing+=("$pkg")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "install-deps: need root to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d 101: packages must not start their services (no systemd here,
# and the tests start their own tinyproxy, squid, dnsmasq, pushgateway, alertmanager,
# dockerd).
printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
