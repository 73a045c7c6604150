#!/usr/bin/env bash
# Checks that one of vrnic's drop-in libraries (libibverbs.so.1, librdmacm.so.1) exports exactly
# the ABI of the system's library of that name:
#   - the same defined dynamic symbols with the same versions, telling default versions
#     (sym@@VER; objdump prints "VER") from non-default compat ones (sym@VER; objdump "(VER)"),
#     including the version-node symbols themselves;
#   - the same kind for each (function vs data object, and the size of data objects, which
#     copy relocations depend on);
#   - the same version definitions and inheritance chain (readelf -V);
#   - the system library's SONAME, and no NEEDED entry for the library it replaces.
# Any difference is a failure: a missing entry breaks programs or the distribution's provider
# libraries at load time (they bind now), and an extra one is either a leaked internal symbol or
# an ABI the real library does not have.
#
# Usage: tests/abi_check.sh [OUR_LIB] [SYSTEM_LIB]
#   OUR_LIB     default build/provider/libibverbs.so.1
#   SYSTEM_LIB  default /usr/lib/x86_64-linux-gnu/libibverbs.so.1
# Exit status: 0 match, 1 mismatch, 2 usage or tool error.

set -euo pipefail
export LC_ALL=C

ours=${1:-build/provider/libibverbs.so.1}
system=${2:-/usr/lib/x86_64-linux-gnu/libibverbs.so.1}

die() {
  echo "abi_check: $*" >&2
  exit 2
}

for tool in objdump readelf comm sort awk; do
  command -v "$tool" >/dev/null || die "missing tool: $tool"
done
[[ -f $ours ]] || die "no such library: $ours"
[[ -f $system ]] || die "no such library: $system"
[[ $(realpath "$ours") != $(realpath "$system") ]] || die "$ours IS the system library"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One line per defined dynamic symbol: "name@@VER<TAB>kind" (default version) or
# "name@VER<TAB>kind" (non-default), kind being "function" or "object size N" (or the raw type
# flag for anything else). objdump -T lines look like
#   <16 hex addr> <7 flag chars> <section>\t<size> <version or (version)> <name>
symbols() {
  objdump -T "$1" | awk -F'\t' '
    /^[0-9a-f]+ / {
      left = $1
      section = substr(left, 26)
      if (section == "*UND*") next
      type = substr(left, 24, 1)
      n = split($2, f, " ")
      if (n == 3) { version = f[2]; name = f[3] }
      else if (n == 2) { version = ""; name = f[2] }
      else next
      if (version ~ /^\(.*\)$/) {
        key = name "@" substr(version, 2, length(version) - 2)
      } else if (version == "" || version == "Base") {
        key = name " (unversioned)"
      } else {
        key = name "@@" version
      }
      if (type == "F") kind = "function"
      else if (type == "O") kind = "object size " strtonum_hex(f[1])
      else kind = "type \"" type "\""
      print key "\t" kind
    }
    # mawk has no strtonum; sizes are printed as 16 hex digits.
    function strtonum_hex(s,   i, v, c) {
      v = 0
      for (i = 1; i <= length(s); i++) {
        c = index("0123456789abcdef", tolower(substr(s, i, 1))) - 1
        if (c < 0) return s
        v = v * 16 + c
      }
      return v
    }' | sort -u
}

# Version definitions, one per line: "VER" or "VER <- PARENT".
verdefs() {
  readelf -V -W "$1" | awk '
    /^Version definition section/ { in_d = 1; next }
    /^Version (needs|symbols) section/ { in_d = 0 }
    in_d && /Name:/ { if (cur != "") print cur; cur = $NF; next }
    in_d && /Parent [0-9]+:/ { cur = cur " <- " $NF }
    END { if (cur != "") print cur }'
}

symbols "$system" >"$tmp/system.sym"
symbols "$ours" >"$tmp/ours.sym"
[[ -s $tmp/system.sym ]] || die "no symbols read from $system"
cut -f1 "$tmp/system.sym" | sort -u >"$tmp/system.keys"
cut -f1 "$tmp/ours.sym" | sort -u >"$tmp/ours.keys"

status=0
report() {  # title, file
  if [[ -s $2 ]]; then
    echo "$1 ($(wc -l <"$2")):"
    sed 's/^/  /' "$2"
    status=1
  fi
}

comm -23 "$tmp/system.keys" "$tmp/ours.keys" >"$tmp/missing"
comm -13 "$tmp/system.keys" "$tmp/ours.keys" >"$tmp/extra"
report "MISSING from $ours (exported by the system library)" "$tmp/missing"
report "EXTRA in $ours (not exported by the system library)" "$tmp/extra"

# Same symbol@version, different kind.
join -t $'\t' "$tmp/system.sym" "$tmp/ours.sym" |
  awk -F'\t' '$2 != $3 { print $1 ": system " $2 ", ours " $3 }' >"$tmp/kind"
report "KIND differs" "$tmp/kind"

verdefs "$system" >"$tmp/system.ver"
verdefs "$ours" >"$tmp/ours.ver"
if ! diff -u --label system --label ours "$tmp/system.ver" "$tmp/ours.ver" >"$tmp/verdiff"; then
  report "VERSION DEFINITIONS differ (- system, + ours)" "$tmp/verdiff"
fi

want_soname=$(readelf -d -W "$system" | awk '/\(SONAME\)/ { gsub(/.*\[|\].*/, ""); print }')
soname=$(readelf -d -W "$ours" | awk '/\(SONAME\)/ { gsub(/.*\[|\].*/, ""); print }')
if [[ $soname != "$want_soname" ]]; then
  echo "SONAME is '${soname}', expected $want_soname"
  status=1
fi
# A drop-in never links the library it replaces (libibverbs.so.1 for vrnic's libibverbs; the
# system's librdmacm for vrnic's librdmacm, which links vrnic's libibverbs instead).
readelf -d -W "$ours" | awk -v lib="${want_soname%%.so*}" '/\(NEEDED\)/ && index($0, lib ".so")' >"$tmp/needed"
report "NEEDED entries naming ${want_soname%%.so*} (it must not link what it replaces)" "$tmp/needed"

if ((status == 0)); then
  echo "abi_check: OK: $ours exports the same $(wc -l <"$tmp/system.keys") symbol versions" \
    "as $system ($(grep -c '^[^@]*@[^@]' "$tmp/system.keys") non-default), SONAME" \
    "$want_soname, no ${want_soname%%.so*} NEEDED"
else
  echo "abi_check: FAILED for $ours (reference: $system)"
fi
exit "$status"
