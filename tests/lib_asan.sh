# shellcheck shell=bash
# tests/lib_asan.sh: the vrnicd built with ASan+UBSan that the fuzz and hostile groups attack.
# Source it after lib.sh. Provides build_asan (configures build-asan/ once, builds vrnicd
# alone), ASAN_VRNICD, SANITIZER_ENV (any report ends the daemon with a non-zero status),
# SANITIZER_REPORT (a grep -E pattern for a report in a log) and sanitizer_excerpt LOG.
# Setting: VRNIC_ASAN_BUILD_DIR (default build-asan).

ASAN_BUILD_DIR=${VRNIC_ASAN_BUILD_DIR:-$VRNIC_ROOT/build-asan}
[[ $ASAN_BUILD_DIR == /* ]] || ASAN_BUILD_DIR=$VRNIC_ROOT/$ASAN_BUILD_DIR
ASAN_VRNICD=$ASAN_BUILD_DIR/control/vrnicd
# Any report ends the daemon with a non-zero status; its stderr goes to its log.
SANITIZER_ENV=(ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=1:print_summary=1
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:print_summary=1)
SANITIZER_REPORT='runtime error|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|SUMMARY: '
VRNIC_FAIL_TAIL=${VRNIC_FAIL_TAIL:-70}  # enough for a sanitizer report's first frames

# sanitizer_excerpt LOG: the start of the first sanitizer report in LOG (else its last lines).
sanitizer_excerpt() {
  local n
  n=$(grep -n -m1 -E 'ERROR: [A-Za-z]*Sanitizer|runtime error' "$1" | cut -d: -f1)
  if [[ -n $n ]]; then
    sed -n "${n},$((n + 30))p" "$1" | sed 's/^/    /'
  else
    vrnic_tail "$1" 5
  fi
}

# build_asan [BINARY...]: the sanitized vrnicd, and nothing else (clients and attackers use
# build/, and must be built there: each BINARY is checked). About a minute on two cores when
# build-asan is new, nothing after.
build_asan() {
  # shellcheck disable=SC2054 # the comma is meson's list separator
  local opts=(-Db_sanitize=address,undefined -Db_lundef=false -Doptimization=1 -Ddebug=false
    -Dcpp_args=-g1)
  if [[ ! -f $ASAN_BUILD_DIR/build.ninja ]]; then
    echo "+ meson setup ${ASAN_BUILD_DIR#"$VRNIC_ROOT"/} ${opts[*]}"
    if [[ -d $ASAN_BUILD_DIR/meson-private ]]; then
      vrnic_fg meson setup --wipe "$ASAN_BUILD_DIR" "$VRNIC_ROOT" "${opts[@]}" || return 1
    else
      vrnic_fg meson setup "$ASAN_BUILD_DIR" "$VRNIC_ROOT" "${opts[@]}" || return 1
    fi
  fi
  echo "+ ninja -C ${ASAN_BUILD_DIR#"$VRNIC_ROOT"/} control/vrnicd"
  vrnic_fg ninja -C "$ASAN_BUILD_DIR" control/vrnicd || return 1
  local b
  b=$(meson introspect --buildoptions "$ASAN_BUILD_DIR" 2>/dev/null |
    python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "b_sanitize"))' 2>/dev/null)
  echo "b_sanitize=$b"
  [[ $b == address,undefined ]] || { echo "FAIL: $ASAN_BUILD_DIR is not an address,undefined build"; return 1; }
  nm -C "$ASAN_VRNICD" 2>/dev/null | grep -q '__asan_init\|__ubsan_handle' ||
    ldd "$ASAN_VRNICD" | grep -q 'libasan' || { echo "FAIL: vrnicd carries no sanitizer runtime"; return 1; }
  ldd "$ASAN_VRNICD" | grep -E 'asan|ubsan'
  for b in "$@"; do
    [[ -x $b ]] || { echo "FAIL: ${b#"$VRNIC_ROOT"/} is not built (ninja -C build)"; return 1; }
  done
}
