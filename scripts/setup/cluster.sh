#!/usr/bin/env bash
# What the cluster rehearsal (scripts/cluster/rehearse.py, the `cluster` test leg) needs besides the
# project's venv: an sshd for each host and rsync for Ray's file mounts (Debian's openssh-server and
# rsync), installed as root when missing. Without root it installs nothing, and the rehearsal's test
# says why it is skipped. Idempotent.
set -euo pipefail
missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v rsync >/dev/null || missing+=(rsync)
[ ${#missing[@]} -gt 0 ] || exit 0
if [ "$(id -u)" != 0 ]; then
    echo "setup: the cluster rehearsal needs ${missing[*]} (as root: apt-get install ${missing[*]}); it will be skipped" >&2
    exit 0
fi
echo "setup: installing ${missing[*]} for the cluster rehearsal" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null || {
        echo "setup: could not install ${missing[*]}; the cluster rehearsal will be skipped" >&2; exit 0; }
fi
