#!/usr/bin/env bash
# Start a Docker engine for the container tests, unless one already answers.
# Debian's dockerd (package docker.io) with no bridge network and no iptables changes (these
# machines allow neither; worker containers use network_mode=none), and a data root outside
# the repository. Images are built locally: there is no registry.
#   INFBENCH_DOCKER_DATA_ROOT  (default /var/lib/infbench-docker)
#   INFBENCH_DOCKERD_LOG       (default /tmp/infbench-dockerd.log)
set -euo pipefail
if docker info > /dev/null 2>&1; then
    exit 0
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
data_root=${INFBENCH_DOCKER_DATA_ROOT:-/var/lib/infbench-docker}
log=${INFBENCH_DOCKERD_LOG:-/tmp/infbench-dockerd.log}
$SUDO mkdir -p "$data_root"
# A non-root user reaches the socket through its own group.
group_opt=()
[ -n "$SUDO" ] && group_opt=(--group "$(id -gn)")
# The daemon outlives this script: close every inherited descriptor above stderr first, or it
# keeps whatever the caller held open (a `flock` lock file, a pipe a CI runner waits on).
close_fds='for fd in /proc/$$/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done 2>/dev/null'
$SUDO bash -c "$close_fds; nohup dockerd --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
    --data-root '$data_root' ${group_opt[*]:-} > '$log' 2>&1 &"
for _ in $(seq 60); do
    if docker info > /dev/null 2>&1; then
        echo "dockerd started (data root $data_root, log $log)"
        exit 0
    fi
    sleep 1
done
echo "dockerd did not answer within 60 s; the end of its log ($log):" >&2
$SUDO tail -30 "$log" >&2
exit 1
