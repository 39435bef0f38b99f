#!/bin/sh
#  The systemd units as `meson install` writes them pass `systemd-analyze
#  verify` without a word: install the build into a scratch root, point
#  each unit's programs into it (verify checks that they exist and run),
#  and verify every unit named, a template with an instance
#  (dsh-component@demo.service). verify exits 0 on most warnings (an
#  unknown key, a bad value), so any line it says about a unit fails too.
#  Each unit must also keep its sandbox: an exposure of 2.0 at most in
#  `systemd-analyze security` (each scores 1.4), so a hardening line lost
#  fails here.
#  usage: systemd_units.sh BUILD_DIR BINDIR UNITDIR UNIT...
set -eu
build="$1" bindir="$2" unitdir="$3"
shift 3
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "systemd-analyze is missing (Debian: apt-get install systemd): skipped"
    exit 77
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
meson install -C "$build" --destdir "$stage/root" --quiet --no-rebuild >/dev/null
mkdir "$stage/units"
for file in "$stage/root$unitdir"/dsh-*.service; do
    sed "s|$bindir/|$stage/root$bindir/|g" "$file" > "$stage/units/$(basename "$file")"
done
cd "$stage/units"
failed=0
for unit in "$@"; do
    good=1
    #  A template's instance is loaded from the template beside it
    rc=0
    said=$(systemd-analyze verify "$stage/units/$unit" 2>&1) || rc=$?
    #  verify also loads the host's units, whose warnings are not ours
    ours=$(printf '%s\n' "$said" | grep -F -e "${unit%%@*}" || true)
    if [ "$rc" -ne 0 ] || [ -n "$ours" ]; then
        printf 'systemd-analyze verify %s: exit %d\n%s\n' "$unit" "$rc" "$said"
        good=0
    fi
    #  --threshold is on a scale of 100: 20 is an exposure of 2.0
    if ! exposure=$(systemd-analyze security --offline=true --threshold=20 --no-pager "$stage/units/$unit" 2>&1)
    then
        printf 'systemd-analyze security %s: over 2.0\n%s\n' "$unit" "$exposure"
        good=0
    fi
    if [ "$good" -eq 1 ]; then
        echo "$unit: verify clean; $(printf '%s\n' "$exposure" | tail -n 1)"
    else
        failed=$((failed + 1))
    fi
done
echo "systemd-units: $(($# - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
