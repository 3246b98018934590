#!/usr/bin/env bash
# End-to-end benchmark: the same fio jobs (ioengine=nbd, one NBD connection per fio job) against
#   ftld     `ftld serve --timing off` (profile `dist`) on an image in /dev/shm
#   nbdkit   `nbdkit memory SIZE`
#   qemu-nbd `qemu-nbd -f raw` on a raw file in /dev/shm (writeback cache, thread pool AIO)
# all on unix sockets, alternating the servers job by job (and rotating their order every
# repetition) so they share the machine's noise. Prints IOPS, mean and p99 completion latency
# and the ratio ftld / peer for every job, with each server's CPU time per request (the fio
# client shares the machine's CPUs, so on a small machine this is the fairer efficiency figure)
# and, for ftld, the write amplification during the job and its ratio to the Lambert-W limit
# of greedy GC at the device's physical spare (`ftld stats` ftl.waf_limit_greedy; meaningful
# for the random-write jobs, where every write overwrites a random page of a full device).
#
# Jobs: 4 KiB random read and random write at QD1 (1 connection) and at QD32 on each of 4
# connections (numjobs=4), and 128 KiB sequential write (QD8, 1 connection). Every server is
# filled once with sequential writes before the first job, so reads hit written data (and
# ftld's map is full).
# The jobs ending in `-pin` run the server (every thread) and fio on one CPU (`taskset`; the
# last CPU unless --pin-cpu): a QD1 round trip then never crosses CPUs, so its latency and CPU
# per request are the server's own work and not the wake-up of a thread on another, idle CPU
# (on a virtual machine an inter-processor wake-up of a halted vCPU costs tens of
# microseconds, which dominates a QD1 round trip of a single-threaded server).
#
# Usage: benches/fio/run.sh [--smoke] [--size SIZE] [--runtime SECONDS] [--reps N]
#                           [--ftld PATH] [--servers "ftld nbdkit qemu-nbd"]
#                           [--overprovision FRACTION] [--ftl SCHEME[,SCHEME...]]
#                           [--preset NAME]
#                           [--pin-cpu N | --no-pin]
#   --overprovision  format ftld's image with this over-provisioning (default: ftld's, 0.07)
#   --preset   format ftld's image on this NAND preset (default: ftld's, `default`; rftl needs
#              one of the presets `ftld presets` names for it, e.g. slc-large-004)
#   --ftl      format ftld's image with this FTL scheme (default: ftld's, page; `ftld presets`);
#              a list (e.g. page,bast,fast) runs one ftld per scheme, named ftld-SCHEME, all
#              alternated with the peers on the same jobs; MERGES is then each hybrid's
#              switch/partial/full merges during the job
#   --pin-cpu  the CPU the `-pin` jobs run on (default: the last one this script may use)
#   --no-pin   leave the `-pin` jobs out
#   --smoke    64 MiB export, 1 s per job, 1 repetition: checks the script works (a test runs it)
# Needs fio, nbdkit, qemu-utils (qemu-nbd, qemu-img), jq, taskset (util-linux); builds ftld
# (cargo build --profile dist, the shipped daemon) unless --ftld is given.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"

SIZE=1G
RUNTIME=15
RAMP=2
REPS=2
FTLD=""
OP=""
SCHEME=""
PRESET=""
SERVERS="ftld nbdkit qemu-nbd"
PIN_CPU=""
PIN=1
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) SIZE=64M RUNTIME=1 RAMP=0 REPS=1 ;;
        --size) SIZE="$2"; shift ;;
        --runtime) RUNTIME="$2"; shift ;;
        --reps) REPS="$2"; shift ;;
        --ftld) FTLD="$2"; shift ;;
        --overprovision) OP="$2"; shift ;;
        --ftl) SCHEME="$2"; shift ;;
        --preset) PRESET="$2"; shift ;;
        --servers) SERVERS="$2"; shift ;;
        --pin-cpu) PIN_CPU="$2"; shift ;;
        --no-pin) PIN=0 ;;
        -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

for t in fio nbdkit qemu-nbd qemu-img jq taskset; do
    if ! command -v "$t" >/dev/null 2>&1; then
        echo "missing $t (Debian packages: fio nbdkit qemu-utils jq util-linux)" >&2
        exit 1
    fi
done
if [ -z "$PIN_CPU" ]; then
    # The last CPU of this script's own affinity list (e.g. "0-1" or "0,2-3").
    PIN_CPU=$(taskset -c -p $$ | sed 's/.*: //' | tr ',' '\n' | tail -1 | sed 's/.*-//')
fi
if ! [[ "$PIN_CPU" =~ ^[0-9]+$ ]] || ! taskset -c "$PIN_CPU" true 2>/dev/null; then
    echo "--pin-cpu $PIN_CPU: not a CPU this script may run on" >&2
    exit 2
fi
if [ -z "$FTLD" ]; then
    (cd "$ROOT" && cargo build --profile dist -q -p ftld)
    FTLD="${CARGO_TARGET_DIR:-$ROOT/target}/dist/ftld"
fi

declare -A SPID # server name -> pid
TICK=$(getconf CLK_TCK)
PAGE_SIZE=4096 # the default preset's NAND page (for the write amplification)
SHM=/dev/shm
[ -d "$SHM" ] && [ -w "$SHM" ] || SHM=/tmp
W="$(mktemp -d "$SHM/ftld-bench.XXXXXX")"
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$W"
}
trap cleanup EXIT

wait_socket() { # SOCKET PID NAME
    local i
    for i in $(seq 1 600); do
        if ! kill -0 "$2" 2>/dev/null; then
            echo "$3 exited before listening; its log:" >&2
            cat "$W/$3.log" >&2
            exit 1
        fi
        [ -S "$1" ] && return 0
        sleep 0.1
    done
    echo "$3 did not create $1 in 60 s" >&2
    exit 1
}

start_server() { # NAME (ftld, ftld-SCHEME, nbdkit, qemu-nbd)
    case "$1" in
        ftld*)
            local cfg=() scheme="${1#ftld}"
            scheme="${scheme#-}"
            [ -n "$scheme" ] || scheme="$SCHEME"
            if [ -n "$OP" ]; then
                printf '[ftl]\noverprovision = %s\n' "$OP" >"$W/ftld.toml"
                cfg=(--config "$W/ftld.toml")
            fi
            if [ -n "$scheme" ]; then
                cfg+=(--ftl "$scheme")
            fi
            if [ -n "$PRESET" ]; then
                cfg+=(--preset "$PRESET")
            fi
            "$FTLD" serve "${cfg[@]}" --timing off --capacity "$SIZE" --image "$W/$1.img" \
                --nbd-socket "$W/$1.sock" --control-socket "$W/$1.ctl" >"$W/$1.log" 2>&1 &
            ;;
        nbdkit)
            nbdkit --foreground --unix "$W/nbdkit.sock" memory "$SIZE" >"$W/nbdkit.log" 2>&1 &
            ;;
        qemu-nbd)
            qemu-img create -q -f raw "$W/qemu.raw" "$SIZE"
            qemu-nbd -f raw --persistent --shared=8 --cache=writeback --aio=threads \
                --socket "$W/qemu-nbd.sock" "$W/qemu.raw" >"$W/qemu-nbd.log" 2>&1 &
            ;;
        *) echo "unknown server $1" >&2; exit 2 ;;
    esac
    PIDS+=($!)
    SPID[$1]=$!
    wait_socket "$W/$1.sock" "$!" "$1"
}

# CPU time (user + system, clock ticks) a server process has used so far.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# An ftld's NAND page programs (host + GC), host bytes written and switch, partial and full
# merges (0 for `page`), from its control socket.
ftld_writes() { # NAME
    "$FTLD" stats --control-socket "$W/$1.ctl" |
        jq -r '.ftl | "\(.nand_page_programs + .gc_page_programs) \(.host_write_bytes) \(
            .merges.switch.count // 0) \(.merges.partial.count // 0) \(.merges.full.count // 0) \(
            .waf_limit_greedy // "-")"'
}

uri() { echo "nbd+unix:///?socket=$W/$1.sock"; }

# name | fio arguments (a name ending in -pin: server and fio on one CPU, see the top)
JOBS=(
    "randread-4k-qd1|--rw=randread --bs=4k --iodepth=1 --numjobs=1"
    "randwrite-4k-qd1|--rw=randwrite --bs=4k --iodepth=1 --numjobs=1"
    "randread-4k-qd32x4|--rw=randread --bs=4k --iodepth=32 --numjobs=4"
    "randwrite-4k-qd32x4|--rw=randwrite --bs=4k --iodepth=32 --numjobs=4"
    "seqwrite-128k-qd8|--rw=write --bs=128k --iodepth=8 --numjobs=1"
)
if [ "$PIN" = 1 ]; then
    JOBS+=(
        "randread-4k-qd1-pin|--rw=randread --bs=4k --iodepth=1 --numjobs=1"
        "randwrite-4k-qd1-pin|--rw=randwrite --bs=4k --iodepth=1 --numjobs=1"
        "seqwrite-128k-qd8-pin|--rw=write --bs=128k --iodepth=8 --numjobs=1"
    )
fi

read -r -a SERVER_LIST <<<"$SERVERS"
# A list of schemes: one ftld per scheme in place of "ftld".
if [[ "$SCHEME" == *,* ]]; then
    expanded=()
    for s in "${SERVER_LIST[@]}"; do
        if [ "$s" = ftld ]; then
            IFS=, read -r -a schemes <<<"$SCHEME"
            for sc in "${schemes[@]}"; do
                if [ -z "$sc" ] || [[ " ${expanded[*]} " == *" ftld-$sc "* ]]; then
                    echo "--ftl $SCHEME: empty or repeated scheme name" >&2
                    exit 2
                fi
                expanded+=("ftld-$sc")
            done
        else
            expanded+=("$s")
        fi
    done
    SERVER_LIST=("${expanded[@]}")
    SERVERS="${SERVER_LIST[*]}"
fi
for s in "${SERVER_LIST[@]}"; do
    start_server "$s"
    # Fill the whole export once (not measured).
    fio --name=fill --ioengine=nbd --uri="$(uri "$s")" --rw=write --bs=1m --iodepth=8 \
        --size="$SIZE" --output-format=json >"$W/fill-$s.out" 2>&1 ||
        { echo "filling $s failed:" >&2; cat "$W/fill-$s.out" >&2; exit 1; }
done

RESULTS="$W/results.tsv" # job server rep iops mean_us p99_us cpu_us_per_op waf merges waf_limit
: >"$RESULTS"
run_job() { # JOB_NAME ARGS SERVER REP
    local out="$W/$1-$3-$4.json" dir cpu0 cpu1 w0=(0 0 0 0 0 -) w1=(0 0 0 0 0 -) waf=- merges=-
    local pin=() affinity=""
    case "$3" in ftld*) read -r -a w0 < <(ftld_writes "$3") ;; esac
    if [[ "$1" == *-pin ]]; then
        # Every thread of the server onto the one CPU, and fio with it; put back afterwards.
        affinity=$(taskset -c -p "${SPID[$3]}" | sed 's/.*: //')
        taskset -a -c -p "$PIN_CPU" "${SPID[$3]}" >/dev/null
        pin=(taskset -c "$PIN_CPU")
    fi
    cpu0=$(cpu_ticks "${SPID[$3]}")
    # shellcheck disable=SC2086 # $2 is a list of fio options
    if ! "${pin[@]}" fio --name="$1" --ioengine=nbd --uri="$(uri "$3")" $2 --size="$SIZE" \
        --time_based --runtime="$RUNTIME" --ramp_time="$RAMP" --group_reporting \
        --randrepeat=0 --output-format=json >"$out.raw" 2>"$W/$1-$3-$4.err"; then
        echo "fio $1 against $3 failed:" >&2
        cat "$out.raw" "$W/$1-$3-$4.err" >&2
        exit 1
    fi
    cpu1=$(cpu_ticks "${SPID[$3]}")
    if [ -n "$affinity" ]; then
        taskset -a -c -p "$affinity" "${SPID[$3]}" >/dev/null
    fi
    if [[ "$3" == ftld* ]]; then
        read -r -a w1 < <(ftld_writes "$3")
        merges="$((w1[2] - w0[2]))/$((w1[3] - w0[3]))/$((w1[4] - w0[4]))"
        # NAND bytes programmed per host byte written during the job (ramp included).
        if [ "${w1[1]}" -gt "${w0[1]}" ]; then
            waf=$(echo "${w1[0]} ${w0[0]} ${w1[1]} ${w0[1]}" |
                awk -v p="$PAGE_SIZE" '{ printf "%.2f", ($1 - $2) * p / ($3 - $4) }')
        fi
    fi
    sed -n '/^{/,$p' "$out.raw" >"$out"
    case "$1" in *read*) dir=read ;; *) dir=write ;; esac
    # Server CPU per request: the server's CPU time over the whole run (ramp included) divided
    # by the requests fio counted in the measured part, scaled by (ramp + runtime) / runtime.
    jq -r --arg j "$1" --arg s "$3" --arg r "$4" --arg d "$dir" \
        --argjson ticks "$((cpu1 - cpu0))" --argjson hz "$TICK" --arg waf "$waf" \
        --arg merges "$merges" --arg limit "${w1[5]}" \
        --argjson span "$(echo "$RAMP $RUNTIME" | awk '{ print ($1 + $2) / $2 }')" '
        .jobs[0] as $x | $x[$d] as $io |
        if $x.error != 0 then error("job error \($x.error)") else . end |
        [$j, $s, $r, $io.iops, ($io.clat_ns.mean / 1000),
         (($io.clat_ns.percentile["99.000000"] // 0) / 1000),
         (if $io.total_ios > 0 then $ticks / $hz * 1e6 / ($io.total_ios * $span) else 0 end),
         $waf, $merges, $limit] | @tsv' "$out" >>"$RESULTS"
}

for ((rep = 0; rep < REPS; rep++)); do
    for job in "${JOBS[@]}"; do
        name="${job%%|*}"
        args="${job#*|}"
        # Rotate the server order each repetition and job.
        n=${#SERVER_LIST[@]}
        for ((k = 0; k < n; k++)); do
            s="${SERVER_LIST[$(((k + rep) % n))]}"
            run_job "$name" "$args" "$s" "$rep"
            printf '.' >&2
        done
    done
done
echo >&2

# The table: means over the repetitions.
echo "fio over NBD (unix sockets), export $SIZE, ${RUNTIME}s per run after ${RAMP}s ramp, $REPS repetition(s), $(nproc) CPUs"
if [ "$PIN" = 1 ]; then
    echo "jobs ending in -pin: the server (every thread) and fio on CPU $PIN_CPU"
fi
echo "ftld: $("$FTLD" --version 2>/dev/null || echo ftld) --timing off, FTL scheme ${SCHEME:-default}, preset ${PRESET:-default}, over-provisioning ${OP:-default}; $(fio --version); $(nbdkit --version | head -1); $(qemu-nbd --version | head -1)"
echo
awk -F'\t' -v servers="$SERVERS" '
    { k = $1 SUBSEP $2; iops[k] += $4; mean[k] += $5; p99[k] += $6; cpu[k] += $7; n[k]++;
      if ($8 != "-") { waf[k] += $8; nw[k]++; if ($10 != "-" && $10 > 0) { lim[k] += $10; nl[k]++ } }
      if ($9 != "-") { split($9, m, "/"); ms[k] += m[1]; mp[k] += m[2]; mf[k] += m[3] }
      if (!($1 in seen)) { seen[$1] = 1; order[++jobs] = $1 } }
    END {
        ns = split(servers, sv, " ");
        # Each ftld row: its IOPS over that of each peer on the same job.
        printf "%-22s %-10s %11s %11s %11s %-26s %10s %6s %9s %s\n", "job", "server", "IOPS", "mean us", "p99 us", "IOPS ratio", "cpu us/op", "WAF", "WAF/limit", "merges s/p/f";
        for (j = 1; j <= jobs; j++) {
            for (i = 1; i <= ns; i++) {
                k = order[j] SUBSEP sv[i];
                if (!(k in n)) continue;
                ratio = "";
                if (sv[i] ~ /^ftld/) {
                    for (p = 1; p <= ns; p++) {
                        q = order[j] SUBSEP sv[p];
                        if (sv[p] ~ /^ftld/ || !(q in n) || iops[q] <= 0) continue;
                        ratio = ratio sprintf("%s%.2fx %s", ratio == "" ? "" : ", ", (iops[k] / n[k]) / (iops[q] / n[q]), sv[p]);
                    }
                }
                w = (k in nw) ? sprintf("%.2f", waf[k] / nw[k]) : "";
                # The measured WAF over the Lambert-W limit of greedy GC at the device spare
                # (meaningful for the random-write jobs on a full device).
                wl = (k in nl) ? sprintf("%.2f", (waf[k] / nw[k]) / (lim[k] / nl[k])) : "";
                mg = (k in ms) && (ms[k] + mp[k] + mf[k] > 0) ? sprintf("%d/%d/%d", ms[k] / n[k], mp[k] / n[k], mf[k] / n[k]) : "";
                printf "%-22s %-10s %11.0f %11.1f %11.1f %-26s %10.1f %6s %9s %s\n", order[j], sv[i],
                    iops[k] / n[k], mean[k] / n[k], p99[k] / n[k], ratio, cpu[k] / n[k], w, wl, mg;
            }
        }
    }' "$RESULTS"
