#!/usr/bin/env bash
# The exported (global, defined) functions of an object, archive or executable whose code holds
# AVX, AVX-512 or AMX instructions (VEX/EVEX mnemonics, ymm/zmm/mask registers, tile ops), one
# per line. Used by scripts/check-isa.sh: such a function may only be an ISA variant.
# Usage: scripts/isa-wide-exports.sh FILE
set -euo pipefail
f=$1
nm -g --defined-only "$f" 2>/dev/null | awk '$2 == "T" {print $3}' | sort -u > "${TMPDIR:-/tmp}/isa-g.$$"
objdump -d --no-show-raw-insn "$f" | awk '
  /^[0-9a-f]+ <.*>:$/ { fn = $2; gsub(/[<>:]/, "", fn); next }
  /^ +[0-9a-f]+:\t/ {
    split($0, a, "\t"); m = a[2]; sub(/ .*/, "", m); ops = a[2]; sub(/<.*/, "", ops)
    if (m ~ /^(v|k|tile|ldtilecfg|sttilecfg|tdp)/ || ops ~ /%[yz]mm|%k[0-7]/) wide[fn] = 1
  }
  END { for (f in wide) print f }' | sort -u | comm -12 "${TMPDIR:-/tmp}/isa-g.$$" -
rm -f "${TMPDIR:-/tmp}/isa-g.$$"
