#!/bin/bash
# What NBD over TLS costs: nbdcopy a file into and out of `ftld serve --timing off` in the
# clear and with --tls require, alternating, and print wall time, the server's CPU time and
# throughput per round. Certificates are generated with openssl (Debian `openssl`).
#
# Usage: benches/tls/run.sh [--ftld PATH] [--mib N] [--rounds N]
#   defaults: target/dist/ftld, 256 MiB, 3 rounds (the first clear round warms caches).
set -euo pipefail
FTLD=target/dist/ftld
MIB=256
ROUNDS=3
while [ $# -gt 0 ]; do
    case "$1" in
        --ftld) FTLD=$2; shift 2 ;;
        --mib) MIB=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        *) echo "usage: $0 [--ftld PATH] [--mib N] [--rounds N]" >&2; exit 2 ;;
    esac
done
for t in nbdcopy nbdinfo openssl; do
    command -v "$t" >/dev/null || { echo "$0: $t missing (apt-get install libnbd-bin openssl)" >&2; exit 1; }
done
[ -x "$FTLD" ] || { echo "$0: $FTLD not built (cargo build --profile dist -p ftld)" >&2; exit 1; }
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
# A CA, a server certificate for localhost, and a client directory holding only the CA.
mkdir -p "$D/srv" "$D/cli"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=bench CA" \
    -keyout "$D/ca-key.pem" -out "$D/srv/ca-cert.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
    -keyout "$D/srv/server-key.pem" -out "$D/server.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$D/ext"
openssl x509 -req -in "$D/server.csr" -CA "$D/srv/ca-cert.pem" -CAkey "$D/ca-key.pem" \
    -CAcreateserial -days 2 -extfile "$D/ext" -out "$D/srv/server-cert.pem" 2>/dev/null
cp "$D/srv/ca-cert.pem" "$D/cli/"
head -c "${MIB}M" /dev/urandom > "$D/src"

run() { # MODE PORT
    local mode=$1 port=$2 extra=() uri
    if [ "$mode" = tls ]; then
        extra=(--tls require --tls-certificates "$D/srv")
        uri="nbds://localhost:$port/?tls-certificates=$D/cli"
    else
        uri="nbd://localhost:$port"
    fi
    rm -f "$D/x.img"
    "$FTLD" serve --image "$D/x.img" --capacity "$((MIB + MIB / 4))M" --preset k9-003 \
        --timing off --frontend nbd --nbd-listen "127.0.0.1:$port" "${extra[@]}" >"$D/log" 2>&1 &
    local pid=$!
    for _ in $(seq 200); do nbdinfo "$uri" >/dev/null 2>&1 && break; sleep 0.1; done
    local c0 t0 t1 c1
    c0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    t0=$(date +%s.%N)
    nbdcopy "$D/src" "$uri"
    nbdcopy "$uri" "$D/back"
    t1=$(date +%s.%N)
    c1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    cmp -n "$((MIB << 20))" "$D/src" "$D/back"
    kill "$pid"; wait "$pid" || true
    awk -v m="$mode" -v t0="$t0" -v t1="$t1" -v c="$((c1 - c0))" -v mib="$MIB" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%-5s %6.2f s wall  %5.2f s server CPU (%.2f ms/MiB)  %5.0f MiB/s\n", m, t1 - t0, c / hz, 1000 * c / hz / (2 * mib), 2 * mib / (t1 - t0) }'
}
echo "$MIB MiB in and out with nbdcopy, per round:"
for _ in $(seq "$ROUNDS"); do
    run clear 10931
    run tls 10932
done
