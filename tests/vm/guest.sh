#!/bin/busybox sh
# /init of the test VM (see tests/vm/run). Each scenario prints `VMTEST <name> PASS` or
# `VMTEST <name> FAIL at: <step>` followed by the daemon's log tail; `VMTEST DONE` at the end.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs -o size=700m tmp /tmp
mount -t tmpfs run /run
mkdir -p /mnt/fs /run/ublksrvd
echo 1 >/proc/sys/kernel/printk 2>/dev/null
STEP=""
LOG=/tmp/ftld.log
PID=""
SERVE="ftld serve --timing off --capacity 128M --queues 2"

step() { STEP="$*"; echo "step: $*"; }
pass() { echo "VMTEST $1 PASS"; }
fail() {
    echo "VMTEST $1 FAIL at: $STEP"
    echo "--- ftld log tail ($LOG)"
    tail -n 25 "$LOG" 2>/dev/null
    echo "---"
    cleanup
}
cleanup() {
    umount /mnt/fs 2>/dev/null
    [ -b /dev/nbd0 ] && nbd-client -d /dev/nbd0 >/dev/null 2>&1
    if [ -n "$PID" ]; then kill -TERM "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; fi
    PID=""
    rm -f /tmp/*.img
}
# start LOGFILE ARGS...: runs ftld serve in the background.
start() {
    LOG="$1"; shift
    $SERVE "$@" >"$LOG" 2>&1 &
    PID=$!
}
# wait_for TEST...: up to 60 s for `test TEST...` to hold while the daemon lives.
wait_for() {
    i=0
    while ! test "$@"; do
        kill -0 "$PID" 2>/dev/null || { echo "ftld exited"; return 1; }
        i=$((i + 1)); [ $i -gt 240 ] && return 1
        sleep 0.25
    done
}
# wait_log PATTERN: up to 60 s for the daemon log to contain PATTERN.
wait_log() {
    i=0
    while ! grep -q "$1" "$LOG"; do
        kill -0 "$PID" 2>/dev/null || { echo "ftld exited"; return 1; }
        i=$((i + 1)); [ $i -gt 240 ] && return 1
        sleep 0.25
    done
}
# stop: SIGTERM, expect exit 0.
stop() {
    kill -TERM "$PID" && wait "$PID"
    rc=$?
    PID=""
    [ $rc -eq 0 ]
}
# write_files DIR PREFIX N SUMS: N files of random data, checksums appended to SUMS.
write_files() {
    n=1
    while [ $n -le "$3" ]; do
        dd if=/dev/urandom of="$1/$2$n" bs=4k count=$((n * 7 % 50 + 1)) 2>/dev/null || return 1
        n=$((n + 1))
    done
    (cd "$1" && sha256sum $2*) >>"$4"
}
verify() { (cd "$1" && sha256sum -c -s "$2"); }
remount() { umount /mnt/fs && echo 3 >/proc/sys/vm/drop_caches && mount "$1" /mnt/fs; }

scenario_auto_nbd() {
    step "auto without ublk_drv: start"; start /tmp/auto1.log --image /tmp/a.img || return 1
    step "auto without ublk_drv: NBD socket"; wait_for -S /tmp/a.sock || return 1
    step "auto without ublk_drv: log says NBD"; grep -q "frontend: NBD" "$LOG" || return 1
    step "auto without ublk_drv: stop"; stop || return 1
}

scenario_ublk_fs() {
    step "start --frontend ublk"; start /tmp/ublk.log --frontend ublk --image /tmp/u.img || return 1
    step "wait for /dev/ublkb0"; wait_for -b /dev/ublkb0 || return 1
    wait_log "ready" || return 1
    step "mkfs.ext4"; mkfs.ext4 -q -F /dev/ublkb0 || return 1
    step "mount"; mount /dev/ublkb0 /mnt/fs || return 1
    step "write files"; : >/tmp/sums; write_files /mnt/fs f 40 /tmp/sums || return 1
    step "discard (fstrim)"; rm -f /mnt/fs/f1 && sed -i '/ f1$/d' /tmp/sums && sync && fstrim /mnt/fs || return 1
    step "sync, umount, remount, verify"; sync && remount /dev/ublkb0 && verify /mnt/fs /tmp/sums || return 1
    step "umount"; umount /mnt/fs || return 1
    step "SIGTERM removes the device"; stop || return 1
    test -e /dev/ublkb0 && return 1
    test -e /sys/class/ublk-char/ublkc0 && return 1
    step "serve again (checkpoint), verify"; start /tmp/ublk2.log --frontend ublk --image /tmp/u.img
    wait_for -b /dev/ublkb0 && wait_log "ready" && mount /dev/ublkb0 /mnt/fs && verify /mnt/fs /tmp/sums || return 1
    umount /mnt/fs && stop || return 1
    rm -f /tmp/u.img
}

# kill_and_recover HOW: kill -9 during writes, restart with HOW, check the synced files.
kill_and_recover() {
    step "$1: writes in flight"
    # The writer stops at a flag, not by signal: killing the loop's shell would leave its
    # current dd running with a file open, and the remount below would find /mnt/fs busy.
    rm -f /tmp/stop-writer
    (i=0; while ! test -e /tmp/stop-writer; do dd if=/dev/urandom of=/mnt/fs/b$i bs=64k count=8 2>/dev/null; i=$((i + 1)); done) &
    W=$!
    sleep 2
    step "$1: kill -9 the daemon"; kill -9 "$PID"; wait "$PID" 2>/dev/null; PID=""
    step "$1: the device node survived"; test -b /dev/ublkb0 || return 1
    step "$1: restart with recovery"; start /tmp/rec-$1.log --frontend ublk --image /tmp/r.img $2
    wait_log "ready" || return 1
    grep -q "recovered=true" "$LOG" || return 1
    sleep 1
    step "$1: writes resume"; touch /tmp/stop-writer; wait "$W" 2>/dev/null
    sync || return 1
    step "$1: remount, verify files synced before the kill"; remount /dev/ublkb0 && verify /mnt/fs /tmp/rsums || return 1
}

scenario_ublk_recovery() {
    step "start --ublk-id 0"; start /tmp/rec.log --frontend ublk --image /tmp/r.img --ublk-id 0 || return 1
    wait_for -b /dev/ublkb0 && wait_log "ready" || return 1
    step "mkfs, mount, write, sync"; mkfs.ext4 -q -F /dev/ublkb0 && mount /dev/ublkb0 /mnt/fs || return 1
    : >/tmp/rsums; write_files /mnt/fs a 30 /tmp/rsums && sync || return 1
    kill_and_recover explicit "--recover 0" || return 1
    kill_and_recover by-id "--ublk-id 0" || return 1
    step "umount, SIGTERM"; umount /mnt/fs && stop || return 1
    test -e /dev/ublkb0 && return 1
    rm -f /tmp/r.img
}

scenario_auto_ublk() {
    step "auto with ublk_drv: start"; start /tmp/auto2.log --image /tmp/a.img || return 1
    step "auto with ublk_drv: /dev/ublkb0"; wait_for -b /dev/ublkb0 && wait_log "ready" || return 1
    step "auto with ublk_drv: log says ublk"; grep -q "frontend: ublk" "$LOG" || return 1
    step "auto with ublk_drv: no NBD socket"; test -S /tmp/a.sock && return 1
    step "auto with ublk_drv: stop"; stop || return 1
    rm -f /tmp/a.img
}

scenario_nbd_kernel() {
    step "insmod nbd"; test -b /dev/nbd0 || insmod /modules/nbd.ko nbds_max=2 || return 1
    step "start --frontend nbd"; start /tmp/nbd.log --frontend nbd --image /tmp/n.img --nbd-socket /tmp/n.sock || return 1
    wait_for -S /tmp/n.sock || return 1
    step "nbd-client -unix"; nbd-client -unix /tmp/n.sock /dev/nbd0 -N ftld -b 4096 >/tmp/nbd-client.log 2>&1 || { cat /tmp/nbd-client.log; return 1; }
    step "mkfs.ext4 on /dev/nbd0"; mkfs.ext4 -q -F /dev/nbd0 || return 1
    step "mount, write, verify"; mount /dev/nbd0 /mnt/fs || return 1
    : >/tmp/nsums; write_files /mnt/fs n 30 /tmp/nsums && sync && remount /dev/nbd0 && verify /mnt/fs /tmp/nsums || return 1
    step "umount, disconnect"; umount /mnt/fs && nbd-client -d /dev/nbd0 >/dev/null 2>&1 || return 1
    step "stop"; stop || return 1
    rm -f /tmp/n.img
}

# fio_iops DEV RW: 4 KiB random I/O at queue depth 16 for a few seconds; prints the IOPS.
fio_iops() {
    fio --name=b --filename="$1" --rw="$2" --bs=4k --direct=1 --ioengine=libaio --iodepth=16 \
        --size=64M --time_based --runtime=6 --ramp_time=1 --randseed=42 --minimal 2>/dev/null |
        awk -F';' -v rw="$2" '{ print (rw == "randread") ? $8 : $49 }'
}

scenario_bench() {
    step "bench: ublk"; start /tmp/bu.log --frontend ublk --image /tmp/bu.img || return 1
    wait_for -b /dev/ublkb0 && wait_log "ready" || return 1
    dd if=/dev/zero of=/dev/ublkb0 bs=1M count=64 oflag=direct 2>/dev/null
    uw=$(fio_iops /dev/ublkb0 randwrite); ur=$(fio_iops /dev/ublkb0 randread)
    stop || return 1; rm -f /tmp/bu.img
    step "bench: kernel NBD"; start /tmp/bn.log --frontend nbd --image /tmp/bn.img --nbd-socket /tmp/bn.sock || return 1
    wait_for -S /tmp/bn.sock || return 1
    nbd-client -unix /tmp/bn.sock /dev/nbd1 -N ftld -b 4096 >/dev/null 2>&1 || return 1
    dd if=/dev/zero of=/dev/nbd1 bs=1M count=64 oflag=direct 2>/dev/null
    nw=$(fio_iops /dev/nbd1 randwrite); nr=$(fio_iops /dev/nbd1 randread)
    nbd-client -d /dev/nbd1 >/dev/null 2>&1
    stop || return 1; rm -f /tmp/bn.img
    step "bench: results"
    [ -n "$uw" ] && [ -n "$ur" ] && [ -n "$nw" ] && [ -n "$nr" ] || return 1
    echo "BENCH 4k randwrite iops: ublk $uw nbd $nw ratio $(awk -v a="$uw" -v b="$nw" 'BEGIN{printf "%.2f", (b > 0) ? a / b : 0}')"
    echo "BENCH 4k randread  iops: ublk $ur nbd $nr ratio $(awk -v a="$ur" -v b="$nr" 'BEGIN{printf "%.2f", (b > 0) ? a / b : 0}')"
}

run() { # run NAME: one scenario with its marker
    t=$(date +%s)
    if "scenario_$(echo "$1" | tr - _)"; then pass "$1"; else fail "$1"; fi
    echo "time: $1 $(($(date +%s) - t)) s"
    cleanup
}

echo "VMTEST START $(uname -r)"
run auto-nbd
step "insmod ublk_drv"; insmod /modules/ublk_drv.ko || echo "VMTEST ublk FAIL at: insmod"
run ublk-fs
run ublk-recovery
run auto-ublk
run nbd-kernel
run bench
echo "VMTEST DONE"
sync
poweroff -f
