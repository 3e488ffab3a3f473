#!/usr/bin/env bash
# tinyol setup: everything `make test` and `make demo` need, installed idempotently.
#
#   scripts/setup.sh           install what is missing (root for apt; prints commands otherwise)
#   scripts/setup.sh --check   only report what is missing (exit 1 if anything is)
#
# 1. System packages: arm-none-eabi-gcc + newlib, QEMU >= 9.1 (Debian 12: from
#    bookworm-backports, enabled by deriving a sources entry from the machine's
#    own Debian entry), python3-venv, ccache (firmware builds share the objects
#    that do not depend on the model).
# 2. .venv with the package and its pinned dependency ranges (pyproject.toml).
# 3. PlatformIO core dir .pio-core/ seeded offline with tool-scons.
# 4. Renode (optional; see the section at the end and docs/renode.md).
# Fast path: when all is in place this takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CHECK_ONLY=0
[[ "${1:-}" == "--check" ]] && CHECK_ONLY=1
PY=${PYTHON:-python3}
VENV=$ROOT/.venv
STAMP=$VENV/.tinyol-setup
QEMU_MIN=9.1

say() { printf 'setup: %s\n' "$*"; }

# ---- 1. system packages ------------------------------------------------------
missing=()
need_backports=0
command -v arm-none-eabi-gcc >/dev/null || missing+=(gcc-arm-none-eabi binutils-arm-none-eabi)
[[ -f /usr/lib/arm-none-eabi/newlib/thumb/v7e-m+fp/hard/libc_nano.a || -n "$(ls /usr/lib/arm-none-eabi/lib/thumb/v7e-m+fp/hard/libc_nano.a 2>/dev/null)" ]] \
    || missing+=(libnewlib-arm-none-eabi)
qemu_ok=0
if command -v qemu-system-arm >/dev/null; then
    v=$(qemu-system-arm --version | sed -n 's/.*version \([0-9]*\.[0-9]*\).*/\1/p')
    if printf '%s\n%s\n' "$QEMU_MIN" "$v" | sort -V -C; then qemu_ok=1; fi
fi
if [[ $qemu_ok == 0 ]]; then
    missing+=(qemu-system-arm)
    if grep -qs 'VERSION_CODENAME=bookworm' /etc/os-release; then need_backports=1; fi
fi
"$PY" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v gcc >/dev/null || missing+=(gcc)
# ccache: firmware builds share the objects that do not depend on the model (tinyol_build.compiler_cache)
command -v ccache >/dev/null || missing+=(ccache)

backports_file=/etc/apt/sources.list.d/tinyol-backports.sources
derive_backports() {
    # Copy the machine's own Debian stanza (deb822 or one-line format) with the
    # suite changed to bookworm-backports: no mirror host is written by us.
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
        awk 'BEGIN { RS = ""; ORS = "\n\n" }
             /Suites:/ && /bookworm/ && !/security/ {
                 sub(/Suites:[^\n]*/, "Suites: bookworm-backports"); print; exit }' \
            /etc/apt/sources.list.d/debian.sources
    elif [[ -f /etc/apt/sources.list ]]; then
        awk '$1 == "deb" && $3 == "bookworm" {
                 printf "Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents:", $2
                 for (i = 4; i <= NF; i++) printf " %s", $i
                 printf "\n"; exit }' /etc/apt/sources.list
    fi
}

if (( ${#missing[@]} )); then
    apt_cmds=()
    if [[ $need_backports == 1 ]] && ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        apt_cmds+=("(derive $backports_file from your Debian sources entry with Suites: bookworm-backports)")
    fi
    apt_cmds+=("apt-get update")
    others=()
    for p in "${missing[@]}"; do [[ $p == qemu-system-arm ]] || others+=("$p"); done
    (( ${#others[@]} )) && apt_cmds+=("apt-get install -y --no-install-recommends ${others[*]}")
    if [[ $qemu_ok == 0 ]]; then
        if [[ $need_backports == 1 ]]; then
            apt_cmds+=("apt-get install -y --no-install-recommends -t bookworm-backports qemu-system-arm")
        else
            apt_cmds+=("apt-get install -y --no-install-recommends qemu-system-arm   # needs QEMU >= $QEMU_MIN")
        fi
    fi
    if [[ $CHECK_ONLY == 1 || $(id -u) != 0 ]]; then
        say "missing system packages: ${missing[*]}"
        say "run as root (sudo):"
        for c in "${apt_cmds[@]}"; do printf '    %s\n' "$c"; done
        [[ $need_backports == 1 ]] && printf '  backports entry to write to %s:\n%s\n' "$backports_file" "$(derive_backports | sed 's/^/    /')"
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if [[ $need_backports == 1 ]] && ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        entry=$(derive_backports)
        [[ -n "$entry" ]] || { say "cannot find a Debian bookworm entry in /etc/apt to derive backports from"; exit 1; }
        printf '%s\n' "$entry" > "$backports_file"
        say "enabled bookworm-backports in $backports_file"
    fi
    say "installing: ${missing[*]}"
    apt-get update -qq
    (( ${#others[@]} )) && apt-get install -y -qq --no-install-recommends "${others[@]}"
    if [[ $qemu_ok == 0 ]]; then
        if [[ $need_backports == 1 ]]; then
            apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-system-arm
        else
            apt-get install -y -qq --no-install-recommends qemu-system-arm
        fi
    fi
fi

# ---- 2. the venv ------------------------------------------------------------------
want=$(cat pyproject.toml | sha256sum | cut -c1-16)
if [[ ! -x $VENV/bin/python || ! -f $STAMP || "$(cat "$STAMP")" != "$want" ]]; then
    if [[ $CHECK_ONLY == 1 ]]; then say "the venv (.venv) is missing or stale"; exit 1; fi
    say "creating/updating .venv (pip install -e '.[ml,fw,test,fleet]')"
    [[ -x $VENV/bin/python ]] || "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[ml,fw,test,fleet]"
    echo "$want" > "$STAMP"
fi

# ---- 2b. example data: BasicMotions ships inside the aeon wheel (its data files are enough) --
if ! "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('aeon') is None)"; then
    if [[ $CHECK_ONLY == 1 ]]; then say "aeon (the BasicMotions data of models/imu) is missing"; exit 1; fi
    "$VENV/bin/python" -m pip install -q --no-deps "aeon==1.6.0"
fi
# the smartwatch physiotherapy set (source `watch`, the depth study) ships inside the seglearn wheel
if ! "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('seglearn') is None)"; then
    if [[ $CHECK_ONLY == 1 ]]; then say "seglearn (the watch data of make study) is missing"; exit 1; fi
    "$VENV/bin/python" -m pip install -q --no-deps "seglearn==1.2.5"
fi

# ---- 3. PlatformIO core, offline ---------------------------------------------------
"$VENV/bin/python" scripts/seed_pio_core.py "$ROOT/.pio-core"

# ---- 4. Renode (optional: the real-Renode tests skip without it) --------------------
# Renode is on no package registry. Used, in this order:
#   a) `renode` on PATH (a user's install from the Renode project's releases);
#   b) a headless Renode tarball in ../shared/renode/ next to the checkout (CI; another
#      folder with $TINYOL_RENODE_SHARED): unpacked
#      into .tools/renode/ (ignored), plus its runtime (Debian: mono-runtime libmono-cil-dev).
# Either way renode-test gets its own Python, .tools/renode-py, with the versions it pins
# (robotframework 6.1; the project's .venv keeps robotframework 7 for its dry run).
# Nothing in tinyol depends on the tarball; without a) or b) this section does nothing.
RENODE_TOOLS=$ROOT/.tools
RENODE_PY=$RENODE_TOOLS/renode-py
RENODE_REQS=(robotframework==6.1 robotframework-retryfailed==0.2.0 psutil pyyaml)
RENODE_SHARED=${TINYOL_RENODE_SHARED:-$ROOT/../shared/renode}   # override for other layouts
renode_tarball=$(ls "$RENODE_SHARED"/renode-*.tar.xz 2>/dev/null | sort -V | tail -n 1 || true)
renode_bin=""
if command -v renode >/dev/null; then
    renode_bin=$(command -v renode)
elif [[ -n "$renode_tarball" ]]; then
    stamp=$RENODE_TOOLS/renode/.unpacked
    want_rn="$(basename "$renode_tarball") $(stat -c %s "$renode_tarball")"
    if [[ ! -f $stamp || "$(cat "$stamp")" != "$want_rn" ]]; then
        if [[ $CHECK_ONLY == 1 ]]; then say "Renode tarball $renode_tarball is not unpacked (.tools/renode)"; exit 1; fi
        say "unpacking $(basename "$renode_tarball") into .tools/renode/"
        rm -rf "$RENODE_TOOLS/renode"
        mkdir -p "$RENODE_TOOLS/renode"
        tar xJf "$renode_tarball" -C "$RENODE_TOOLS/renode"
        echo "$want_rn" > "$stamp"
    fi
    renode_bin=$(ls "$RENODE_TOOLS"/renode/*/renode 2>/dev/null | head -n 1)
    if ! command -v mono >/dev/null; then
        if [[ $CHECK_ONLY == 1 || $(id -u) != 0 ]]; then
            say "Renode needs the Mono runtime; run as root (sudo):"
            printf '    apt-get update\n    apt-get install -y --no-install-recommends mono-runtime libmono-cil-dev\n'
            [[ $CHECK_ONLY == 1 ]] && exit 1
            renode_bin=""
        else
            say "installing the Mono runtime for Renode (mono-runtime libmono-cil-dev)"
            DEBIAN_FRONTEND=noninteractive apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mono-runtime libmono-cil-dev
        fi
    fi
fi
if [[ -n "$renode_bin" ]]; then
    rstamp=$RENODE_PY/.tinyol-setup
    if [[ ! -x $RENODE_PY/bin/python || ! -f $rstamp || "$(cat "$rstamp")" != "${RENODE_REQS[*]}" ]]; then
        if [[ $CHECK_ONLY == 1 ]]; then say "the Python for renode-test (.tools/renode-py) is missing"; exit 1; fi
        say "creating .tools/renode-py for renode-test (${RENODE_REQS[*]})"
        [[ -x $RENODE_PY/bin/python ]] || "$PY" -m venv "$RENODE_PY"
        "$RENODE_PY/bin/python" -m pip install -q "${RENODE_REQS[@]}"
        echo "${RENODE_REQS[*]}" > "$rstamp"
    fi
fi
exit 0
