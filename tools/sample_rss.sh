#!/usr/bin/env bash
# Runs a command and samples its resident memory each second, as the OOM killer counts it
# (RssAnon + RssShmem of /proc/PID/status), beside the command's own report.
#   tools/sample_rss.sh SAMPLES_LOG COMMAND...
# SAMPLES_LOG gets one line a second: "seconds anon_kib shmem_kib"; the last line says the peak.
# Exits with the command's status.
set -u
log="$1"; shift
"$@" &
pid=$!
start=$(date +%s)
peak=0
: > "$log"
while kill -0 "$pid" 2>/dev/null; do
  if read -r anon shmem < <(awk '/^RssAnon:/ {a=$2} /^RssShmem:/ {s=$2} END {print a+0, s+0}' "/proc/$pid/status" 2>/dev/null); then
    echo "$(( $(date +%s) - start )) $anon $shmem" >> "$log"
    (( anon + shmem > peak )) && peak=$(( anon + shmem ))
  fi
  sleep 1
done
wait "$pid"
rc=$?
echo "peak RssAnon+RssShmem $(( peak / 1024 )) MiB ($(awk -v k="$peak" 'BEGIN {printf "%.2f", k / 1048576}') GiB), exit $rc" | tee -a "$log"
exit "$rc"
