# Helpers shared by scripts/serve and scripts/test (sourced, not run).

# ensure_packages PKG...: installs the Debian packages that are missing, when run as root.
# Not root: lists what is missing and returns 1 (the caller decides whether that is fatal).
ensure_packages() {
    local missing=() p
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
            missing+=("$p")
        fi
    done
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
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# require_cargo: fails with a clear message when there is no Rust toolchain.
require_cargo() {
    if ! command -v cargo >/dev/null 2>&1; then
        echo "cargo not found: install a Rust toolchain (1.80 or newer), e.g. with rustup" >&2
        exit 1
    fi
}
