#!/usr/bin/env bash
# Capture what this GPU node answers to the questions gpuaccept's probe asks, as a folder
# in the corpus format of tests/captures (docs/probe.md, "Captures of real machines").
#
#   scripts/capture-node.sh OUTDIR
#
# Runs, each where it is installed: nvidia-smi -q, nvidia-smi -q -x, nvidia-smi topo -m,
# nvidia-smi nvlink -s, ibstat, ibstatus, lspci -vvv of the NVIDIA (10de) and Mellanox
# (15b3) devices, cpupower frequency-info, numactl -H; and lists /sys/class/infiniband
# (SYSFS, default /sys). Masks the hostname, serial numbers, GPU/MIG UUIDs, InfiniBand
# GUIDs and GIDs, numbering each distinct value in order of appearance, and records the
# masking in OUTDIR/source.yaml, whose other fields (where it is published, what the
# node's owner says about it) are left for you to fill in. Attach the folder when
# gpuaccept misjudged a node. Needs bash, awk and sed; root only for lspci's link lines.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
out=$1
sysfs=${SYSFS:-/sys}
if [[ -e $out && -n $(ls -A "$out" 2>/dev/null) ]]; then
    echo "$0: $out exists and is not empty" >&2
    exit 2
fi
mkdir -p "$out"
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT

ran=()
skipped=()
# run NAME FILE COMMAND...: the command's stdout into $raw/FILE when the command exists
# and succeeds with output; otherwise say why in skipped.
run() {
    local name=$1 file=$2
    shift 2
    if ! command -v "$1" >/dev/null 2>&1; then
        skipped+=("$name: $1 is not installed")
        return 0
    fi
    if "$@" >"$raw/$file" 2>"$raw/$file.err" && [[ -s $raw/$file ]]; then
        ran+=("$file: $name")
    else
        skipped+=("$name: exit $? $(head -c 200 "$raw/$file.err" | tr '\n' ' ')")
        rm -f "$raw/$file"
    fi
    rm -f "$raw/$file.err"
}

run "nvidia-smi -q" nvidia-smi-q.txt nvidia-smi -q
run "nvidia-smi -q -x" nvidia-smi-q-x.xml nvidia-smi -q -x
run "nvidia-smi topo -m" nvidia-smi-topo-m.txt nvidia-smi topo -m
run "nvidia-smi nvlink -s" nvidia-smi-nvlink-s.txt nvidia-smi nvlink -s
run "ibstat" ibstat.txt ibstat
run "ibstatus" ibstatus.txt ibstatus
run "lspci -vvv -d 10de:" lspci-vvv-nvidia.txt lspci -vvv -d 10de:
run "lspci -vvv -d 15b3:" lspci-vvv-mellanox.txt lspci -vvv -d 15b3:
run "cpupower frequency-info" cpupower-frequency-info.txt cpupower frequency-info
run "numactl -H" numactl-H.txt numactl -H
if [[ -d $sysfs/class/infiniband ]]; then
    # one line per port: hca/port state phys_state rate link_layer (the files gpuaccept reads)
    for port in "$sysfs"/class/infiniband/*/ports/*; do
        [[ -d $port ]] || continue
        hca=$(basename "$(dirname "$(dirname "$port")")")
        printf '%s/%s | %s | %s | %s | %s | board_id %s | fw_ver %s\n' "$hca" "$(basename "$port")" \
            "$(cat "$port/state" 2>/dev/null)" "$(cat "$port/phys_state" 2>/dev/null)" \
            "$(cat "$port/rate" 2>/dev/null)" "$(cat "$port/link_layer" 2>/dev/null)" \
            "$(cat "$sysfs/class/infiniband/$hca/board_id" 2>/dev/null)" \
            "$(cat "$sysfs/class/infiniband/$hca/fw_ver" 2>/dev/null)"
    done >"$raw/sys-class-infiniband.txt"
    [[ -s $raw/sys-class-infiniband.txt ]] && ran+=("sys-class-infiniband.txt: $sysfs/class/infiniband")
fi
if [[ ${#ran[@]} -eq 0 ]]; then
    echo "$0: nothing to capture (no nvidia-smi, ibstat, lspci, ...); skipped: ${skipped[*]}" >&2
    exit 1
fi

host=$(hostname 2>/dev/null || true)
# regular expressions without interval braces: mawk (Debian's and Ubuntu's awk) has none
hex() { local out="" i; for ((i = 0; i < $1; i++)); do out+="[0-9a-fA-F]"; done; printf '%s' "$out"; }
uuid_re="(GPU|MIG)-$(hex 8)-$(hex 4)-$(hex 4)-$(hex 4)-$(hex 12)"
guid_re="GUID: *0x$(hex 16)"
gid_re="fe80:$(hex 4):$(hex 4):$(hex 4):$(hex 4):$(hex 4):$(hex 4):$(hex 4)"
serial_re="(Serial Number *: *|<serial>|Serial Number: )[0-9A-Za-z][0-9A-Za-z][0-9A-Za-z][0-9A-Za-z][0-9A-Za-z][0-9A-Za-z]+"
# The masking, one awk program over every file (in one pass, so that a UUID keeps its
# number across files): UUIDs, serial numbers and the hostname; then GUIDs and GIDs.
# shellcheck disable=SC2016 # an awk program: its $fields are awk's, not the shell's
mask_awk='
function number(kind, value,    key) {
    key = kind SUBSEP value
    if (!(key in seen)) { count[kind]++; seen[key] = count[kind]; used[kind] = 1 }
    return seen[key]
}
function each(re, kind, fmt, prefixlen,    out, piece, start, n) {
    out = ""
    while (match($0, re)) {
        piece = substr($0, RSTART, RLENGTH)
        start = substr(piece, 1, prefixlen)
        n = number(kind, piece)
        out = out substr($0, 1, RSTART - 1) sprintf(fmt, start, n)
        $0 = substr($0, RSTART + RLENGTH)
    }
    $0 = out $0
}
FNR == 1 { if (outfile) close(outfile); outfile = dir "/" substr(FILENAME, length(raw) + 2) }
{
    each(uuid_re, "uuid", "%s00000000-0000-0000-0000-%012d", 4)
    if (host != "" && index($0, host)) { gsub(host, "[hostname]"); used["host"] = 1 }
    if (match($0, serial_re)) {
        piece = substr($0, RSTART, RLENGTH); sub(/[0-9A-Za-z]+$/, "0000000000000", piece)
        $0 = substr($0, 1, RSTART - 1) piece substr($0, RSTART + RLENGTH); used["serial"] = 1
    }
    print > outfile
}
END { for (k in used) print k > (dir "/.masked") }
'
awk -v raw="$raw" -v dir="$out" -v host="$host" -v uuid_re="$uuid_re" -v serial_re="$serial_re" \
    "$mask_awk" "$raw"/*
# InfiniBand node, system image and port GUIDs, numbered across files
awk '
FNR == 1 { if (outfile) close(outfile); outfile = FILENAME ".masked" }
{
    while (match($0, guid_re)) {
        piece = substr($0, RSTART, RLENGTH); value = substr(piece, length(piece) - 17)
        if (value != "0x0000000000000000") {
            if (!(value in seen)) { seen[value] = ++n }
            value = sprintf("0x%016x", seen[value])
        }
        printf "%s%s", substr($0, 1, RSTART - 1), substr(piece, 1, length(piece) - 18) value > outfile
        $0 = substr($0, RSTART + RLENGTH)
    }
    print > outfile
}
END { if (n > 0) print "guid" >> (dir "/.masked") }' dir="$out" guid_re="$guid_re" "$out"/*.txt
for f in "$out"/*.txt.masked; do
    [[ -e $f ]] && mv "$f" "${f%.masked}"
done
# ibstatus GIDs: the interface half numbered
if [[ -f $out/ibstatus.txt ]]; then
    awk -v gid_re="$gid_re" '{
        if (match($0, gid_re)) {
            value = substr($0, RSTART, RLENGTH)
            if (!(value in seen)) { seen[value] = ++n }
            $0 = substr($0, 1, RSTART - 1) sprintf("fe80:0000:0000:0000:0000:0000:0000:%04x", seen[value]) substr($0, RSTART + RLENGTH)
        }
        print
    }' "$out/ibstatus.txt" >"$out/ibstatus.txt.tmp" && mv "$out/ibstatus.txt.tmp" "$out/ibstatus.txt"
fi

masked=$(cat "$out/.masked" 2>/dev/null || true)
rm -f "$out/.masked"
{
    echo "# Written by scripts/capture-node.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ). Fill in source and"
    echo "# owner_said; add expect_check for a fault (the check that must fail)."
    echo "source:"
    echo "  url: https://github.com/OWNER/REPO/issues/NUMBER  # where it is published"
    echo "captured: '$(date -u +%Y-%m-%d)'"
    echo "platform: '$(grep -m1 -E '^ +Product Name' "$out/nvidia-smi-q.txt" 2>/dev/null | sed 's/.*: //; s/'"'"'/ /g') (fill in: server, NVSwitch, PCIe host)'"
    echo "driver: '$(grep -m1 -E '^Driver Version' "$out/nvidia-smi-q.txt" 2>/dev/null | sed 's/.*: //')'"
    echo "owner_said:"
    echo "  state: unknown  # healthy | fault | unknown"
    echo "  words: 'fill in: what the owner of the node says about it'"
    echo "files:"
    for entry in "${ran[@]}"; do
        file=${entry%%: *}
        echo "  $file: '${entry#*: }'"
    done
    echo "masked:"
    grep -q uuid <<<"$masked" && echo "- GPU/MIG UUIDs replaced by <GPU|MIG>-00000000-0000-0000-0000-<n>, n numbering distinct UUIDs in order of first appearance"
    grep -q serial <<<"$masked" && echo "- serial numbers replaced by 0000000000000"
    grep -q guid <<<"$masked" && echo "- InfiniBand GUIDs replaced by 0x<n> (0x0000000000000000 kept)"
    grep -q host <<<"$masked" && echo "- the hostname replaced by [hostname]"
    [[ -f $out/ibstatus.txt ]] && echo "- ibstatus GIDs replaced by fe80::<n>"
    [[ -z $masked && ! -f $out/ibstatus.txt ]] && echo "- nothing: no hostname, serial number, UUID or GUID in the outputs"
    if [[ ${#skipped[@]} -gt 0 ]]; then
        echo "not_captured:"
        for entry in "${skipped[@]}"; do
            echo "- '${entry//\'/ }'"
        done
    fi
} >"$out/source.yaml"
echo "wrote $out: ${#ran[@]} outputs; fill in $out/source.yaml" >&2
