# Helpers shared by scripts/serve and scripts/test (sourced, not run).

# The Debian packages scripts/serve needs to build ftld.
# shellcheck disable=SC2034 # used by the scripts that source this file
BUILD_PACKAGES=(build-essential pkg-config libclang-dev)
# What scripts/test needs on top (see the table in README.md).
# shellcheck disable=SC2034
TEST_PACKAGES=("${BUILD_PACKAGES[@]}" libnbd-bin python3-libnbd fuse3
    qemu-utils fio nbdkit jq e2fsprogs xfsprogs systemd qemu-system-x86 busybox-static nbd-client
    cpio xz-utils binutils python3 util-linux)

# FTLD_DPKG_ADMINDIR: a dpkg database to plan against instead of the machine's (tests use a
# fresh machine's /var/lib/dpkg/status this way; apt only simulates then).
_dpkg_query() {
    if [ -n "${FTLD_DPKG_ADMINDIR:-}" ]; then
        dpkg-query --admindir="$FTLD_DPKG_ADMINDIR" "$@"
    else
        dpkg-query "$@"
    fi
}
_apt_get() {
    if [ -n "${FTLD_DPKG_ADMINDIR:-}" ]; then
        apt-get -o Dir::State::status="$FTLD_DPKG_ADMINDIR/status" "$@"
    else
        apt-get "$@"
    fi
}

# packages_missing PKG...: prints, one a line, the packages that are not installed.
packages_missing() {
    local p
    for p in "$@"; do
        if ! _dpkg_query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
            echo "$p"
        fi
    done
}

# plan_install PKG...: prints, one a line, what to hand `apt-get install --allow-downgrades` so
# that PKG... get installed and apt removes nothing. apt resolves a version conflict by removing
# the installed package that stands in the way: the machine image ships qemu-utils from
# bookworm-backports, and qemu-system-x86 from bookworm conflicts with it, so a plain install
# removes qemu-utils. When a simulated install would remove a package, the plan re-installs that
# package from the suite apt takes its source package's siblings from (qemu-utils/oldstable next
# to qemu-system-x86 from oldstable), so related packages come from one suite, and simulates
# again. Fails, naming the packages, when that does not leave a plan that removes nothing.
plan_install() {
    local specs=("$@") round out removed x src rel line pkg ver psrc
    for round in 1 2 3 4; do
        if ! out=$(_apt_get -s -q install --no-install-recommends --allow-downgrades \
            "${specs[@]}" 2>&1); then
            echo "apt-get cannot install ${specs[*]}:" >&2
            echo "$out" | grep -E '^(E|W):' >&2 || echo "$out" | tail -5 >&2
            return 1
        fi
        mapfile -t removed < <(awk '/^Remv /{print $2}' <<<"$out")
        if [ ${#removed[@]} -eq 0 ]; then
            printf '%s\n' "${specs[@]}"
            return 0
        fi
        for x in "${removed[@]}"; do
            if printf '%s\n' "${specs[@]}" | grep -q "^$x/"; then
                echo "apt-get would still remove $x to install ${specs[*]}" >&2
                return 1
            fi
            src=$(_dpkg_query -W -f='${source:Package}' "$x" 2>/dev/null || echo "$x")
            # The suite of a package apt installs from the same source package, from its
            # simulation line: "Inst qemu-system-x86 (1:7.2+dfsg-7+deb12u18+b3 Debian:12.15/oldstable [amd64])".
            rel=""
            while read -r pkg ver line; do
                psrc=$(apt-cache show --no-all-versions "$pkg=$ver" 2>/dev/null |
                    awk '/^Source:/{print $2; exit}')
                if [ "${psrc:-$pkg}" = "$src" ]; then
                    rel=$(sed -E 's|^[^/]*/([^], ]+).*|\1|' <<<"$line")
                    break
                fi
            done < <(sed -nE 's/^Inst ([^ ]+) (\[[^]]*\] )?\(([^ ]+) (.*)$/\1 \3 \4/p' <<<"$out")
            if [ -z "$rel" ]; then
                echo "apt-get would remove $x to install ${specs[*]}, and no package of its" \
                    "source ($src) is being installed to take a suite from: install them by hand" >&2
                return 1
            fi
            echo "apt-get would remove $x to install ${specs[*]}; installing $x/$rel beside" \
                "the other $src packages from $rel instead" >&2
            specs+=("$x/$rel")
        done
    done
    echo "apt-get would still remove packages to install ${specs[*]}" >&2
    return 1
}

# ensure_packages PKG...: installs the Debian packages that are missing, when run as root, and
# checks afterwards that every one of PKG... is installed (apt may have removed one).
# Not root: lists what is missing and returns 1 (the caller decides whether that is fatal).
ensure_packages() {
    local missing=() plan=()
    mapfile -t missing < <(packages_missing "$@")
    if [ ${#missing[@]} -eq 0 ]; then
        return 0
    fi
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "missing Debian packages: ${missing[*]}" >&2
        echo "  install them with: sudo apt-get install ${missing[*]}" >&2
        return 1
    fi
    echo "installing missing Debian packages: ${missing[*]}" >&2
    if [ -z "${FTLD_APT_UPDATED:-}" ]; then
        apt-get update -q >&2
        export FTLD_APT_UPDATED=1
    fi
    mapfile -t plan < <(plan_install "${missing[@]}")
    if [ ${#plan[@]} -eq 0 ]; then
        echo "cannot install ${missing[*]} without removing other packages (see above)" >&2
        return 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        --allow-downgrades "${plan[@]}" >&2 || true
    mapfile -t missing < <(packages_missing "$@")
    if [ ${#missing[@]} -ne 0 ]; then
        echo "still missing after apt-get install: ${missing[*]}" >&2
        return 1
    fi
}

# require_cargo: fails with a clear message when there is no Rust toolchain.
require_cargo() {
    if ! command -v cargo >/dev/null 2>&1; then
        echo "cargo not found: install a Rust toolchain (1.80 or newer), e.g. with rustup" >&2
        exit 1
    fi
}
