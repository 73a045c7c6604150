#!/usr/bin/env bash
# perf/bw_vs_size.sh: vrnic loopback bandwidth against message size, next to memcpy.
# Each of ROUNDS rounds (default 3) runs, with one vrnicd, perftest server and client on
# 127.0.0.1:
#   ib_write_bw -a -n ITERS -d vrnic0 -x 0 -F   perftest's own sweep, one row per size 2 B..8 MiB
#   ib_read_bw  -a -n ITERS -d vrnic0 -x 0 -F   the same for RDMA READ
#   memcpy_bw SIZE --runs 5 --ms 20             memcpy of each of those sizes, one core
# and takes the median per size over the rounds. Writes perf/bw_vs_size.csv
# (size_bytes,write_GBps,read_GBps,memcpy_GBps) and plots it to perf/bw_vs_size.png with
# perf/plot_bw.gp (gnuplot). perftest logs go to perf/out/bw-vs-size-<date>/.
# About a minute on 2 cores with the defaults. Installs missing packages (as root) and builds
# first, like perf/bench_loopback.sh.
#
# Usage: perf/bw_vs_size.sh [ROUNDS]
# Environment:
#   BW_ITERS           perftest iterations per size (-n; default 1000)
#   BW_READ=0          skip the ib_read_bw sweep (its CSV column stays empty)
#   VRNIC_SKIP_SETUP=1 skip the build step (gnuplot-nox is still installed when missing)
# Units: GB/s = 1e9 bytes/s; perftest's MB/sec are MiB/s (2^20) and are converted.

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh

rounds=${1:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "usage: perf/bw_vs_size.sh [ROUNDS]" >&2; exit 2; }
iters=${BW_ITERS:-1000}
tests=(ib_write_bw)
[[ ${BW_READ:-1} == 0 ]] || tests+=(ib_read_bw)
csv=perf/bw_vs_size.csv
png=perf/bw_vs_size.png

vrnic_tmp_init || exit 1

if [[ ${VRNIC_SKIP_SETUP:-0} != 1 ]]; then
  echo "== setup"
  vrnic_install_packages "${VRNIC_BUILD_PACKAGES[@]}" gnuplot-nox || exit 1
  vrnic_build || exit 1
else
  vrnic_install_packages gnuplot-nox || echo "note: no gnuplot; writing the CSV only"
fi
require_provider || exit 1
memcpy_bw=$VRNIC_BUILD_DIR/perf/memcpy_bw
[[ -x $memcpy_bw ]] || { echo "memcpy_bw not built: $memcpy_bw missing" >&2; exit 1; }

out=perf/out/bw-vs-size-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out" || exit 1
raw=$out/raw.txt # one line per measurement: ROUND TEST SIZE GBPS
: >"$raw"

commit="$(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' + local changes')"
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
echo "== vrnic bandwidth vs message size: $rounds rounds, perftest -a -n $iters"
echo "$(date -Is), $(nproc) CPUs ($cpu), commit $commit, logs in $out/"
echo "note: anything else running on this machine shows up as noise; medians absorb some of it"

start_vrnicd >"$out/vrnicd-start.log" 2>&1 || { cat "$out/vrnicd-start.log"; exit 1; }

failures=0
sizes=()
for ((r = 1; r <= rounds; r++)); do
  for t in "${tests[@]}"; do
    log=$out/$t.$r.log
    start=$(vrnic_now_us)
    ok=0
    # shellcheck disable=SC2119 # no vrnicd arguments
    if ensure_vrnicd >>"$log" 2>&1 &&
      verbs_pair "$t.$r" "$(next_port)" "$t" -a -n "$iters" -d vrnic0 -x 0 -F >>"$log" 2>&1; then
      ok=1
    fi
    [[ -n $CLIENT_LOG && -f $CLIENT_LOG ]] && { echo "=== client output"; cat "$CLIENT_LOG"; } >>"$log"
    # Rows "bw BYTES AVG UNIT" -> "ROUND TEST BYTES GB/s" (also those of a sweep cut short).
    rows=$([[ -n $CLIENT_LOG && -f $CLIENT_LOG ]] && perftest_parse "$CLIENT_LOG" |
      awk -v r="$r" -v t="$t" '$1 == "bw" {
        printf "%s %s %s %.4f\n", r, t, $2, ($4 == "Gb/s") ? $3 / 8 : $3 * 1048576 / 1e9 }')
    [[ -n $rows ]] && echo "$rows" >>"$raw"
    n=$(grep -c . <<<"$rows")
    peak=$(awk 'BEGIN { m = 0 } $4 > m { m = $4; s = $3 } END { if (m) printf "peak %.2f GB/s at %d B", m, s }' <<<"$rows")
    printf '[round %d/%d] %-11s %2d sizes in %5ss  %s\n' "$r" "$rounds" "$t" "$n" \
      "$(vrnic_elapsed "$start")" "$peak"
    if ((!ok || n == 0)); then
      failures=$((failures + 1))
      echo "    FAILED; last lines of $log:"
      tail -n 8 "$log" | sed 's/^/    | /'
    fi
  done
  # memcpy of every size perftest measured, in the same round.
  ((${#sizes[@]})) || mapfile -t sizes < <(awk '{ print $3 }' "$raw" | sort -nu)
  ((${#sizes[@]})) || mapfile -t sizes < <(for ((s = 2; s <= 8388608; s *= 2)); do echo $s; done)
  start=$(vrnic_now_us)
  for s in "${sizes[@]}"; do
    g=$("$memcpy_bw" "$s" --runs 5 --ms 20 2>&1 | tee -a "$out/memcpy.$r.log" |
      sed -n 's/^median_GBps=//p')
    if [[ -n $g ]]; then echo "$r memcpy $s $g" >>"$raw"; else failures=$((failures + 1)); fi
  done
  printf '[round %d/%d] %-11s %2d sizes in %5ss  %s\n' "$r" "$rounds" memcpy_bw "${#sizes[@]}" \
    "$(vrnic_elapsed "$start")" \
    "$(awk -v r="$r" '$1 == r && $2 == "memcpy" && $4 > m { m = $4; s = $3 } END { if (m) printf "peak %.2f GB/s at %d B", m, s }' "$raw")"
done

vrnicd_check_alive >/dev/null || failures=$((failures + 1))
stop_vrnicd TERM >"$out/vrnicd-stop.log" 2>&1 || { failures=$((failures + 1)); cat "$out/vrnicd-stop.log"; }

# Median per size and column over the rounds (mean of the middle two for an even count), then
# one CSV row per size.
sort -k2,2 -k3,3n -k4,4g "$raw" | awk '
  function flush() {
    if (n) print size, test, (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    n = 0
  }
  $2 != test || $3 != size { flush(); test = $2; size = $3 }
  { a[++n] = $4 }
  END { flush() }' | sort -n -k1,1 | awk '
  BEGIN { print "size_bytes,write_GBps,read_GBps,memcpy_GBps" }
  function row() { if (size != "") printf "%s,%s,%s,%s\n", size, v["ib_write_bw"], v["ib_read_bw"], v["memcpy"] }
  $1 != size { row(); size = $1; split("", v) }
  { v[$2] = sprintf("%.3f", $3) }
  END { row() }' >"$csv"
cp "$csv" "$out/"

echo
echo "== Medians over $rounds rounds (GB/s; saved to $csv)"
column -s, -t -R 1,2,3,4 "$csv" 2>/dev/null || cat "$csv"

if command -v gnuplot >/dev/null; then
  ttl="vrnic loopback bandwidth vs message size: perftest -a -n $iters, medians of $rounds rounds\\n"
  ttl+="$(date +%Y-%m-%d), $(nproc) CPUs ($cpu), commit $commit"
  if gnuplot -e "csv='$csv'; png='$png'; ttl=\"$ttl\"" perf/plot_bw.gp 2>"$out/gnuplot.log"; then
    echo "plot: $png"
  else
    failures=$((failures + 1))
    echo "gnuplot failed:"
    cat "$out/gnuplot.log"
  fi
fi
((failures)) && echo "FAILED measurements: $failures (left out of the medians; logs in $out/)"
((failures == 0))
