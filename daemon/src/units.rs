//! Sizes and addresses as people type them: `256M`, `1GiB`, `:10809`.
//!
//! Size suffixes are binary (powers of 1024) whatever their spelling: `K`/`KB`/`KiB`,
//! `M`/`MB`/`MiB`, `G`/`GB`/`GiB`, `T`/`TB`/`TiB`, case-insensitive; a bare number is bytes.

use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};

/// Parses a size such as `4096`, `256M`, `1G` or `1GiB` into bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let num = num.replace('_', "");
    if num.is_empty() {
        return Err(format!("size {s:?} does not start with a number"));
    }
    let n: u64 = num
        .parse()
        .map_err(|e| format!("size {s:?}: {e} (expected e.g. 256M, 1G, 1GiB or bytes)"))?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
            "size {s:?} has an unknown unit {other:?} (use K, M, G, T, optionally followed by iB)"
        ))
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// Formats bytes for people: `64 MiB`, `1.5 GiB`, `512 B`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else if (v - v.round()).abs() < 0.005 {
        format!("{:.0} {}", v, UNITS[unit])
    } else {
        format!("{:.2} {}", v, UNITS[unit])
    }
}

/// Parses a TCP listen address. A bare port (`10809`) or `:PORT` binds loopback (127.0.0.1);
/// `ADDR:PORT` (`0.0.0.0:10809`, `[::1]:10809`, `localhost:10809`) is used as given.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let t = s.trim();
    let port_only = t.strip_prefix(':').unwrap_or(t);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    if let Ok(addr) = t.parse::<SocketAddr>() {
        return Ok(addr);
    }
    t.to_socket_addrs()
        .map_err(|e| format!("listen address {s:?}: {e} (expected ADDR:PORT or :PORT)"))?
        .next()
        .ok_or_else(|| format!("listen address {s:?} resolves to nothing"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1gb"), Ok(1 << 30));
        assert_eq!(parse_size("64 MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1_000"), Ok(1000));
        assert!(parse_size("").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn format() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(64 << 20), "64 MiB");
        assert_eq!(format_size(3 << 29), "1.50 GiB");
    }

    #[test]
    fn listen() {
        assert_eq!(
            parse_listen(":10809"),
            Ok("127.0.0.1:10809".parse().expect("addr"))
        );
        assert_eq!(
            parse_listen("10809"),
            Ok("127.0.0.1:10809".parse().expect("addr"))
        );
        assert_eq!(
            parse_listen("0.0.0.0:7"),
            Ok("0.0.0.0:7".parse().expect("addr"))
        );
        assert_eq!(
            parse_listen("[::1]:7"),
            Ok("[::1]:7".parse().expect("addr"))
        );
        assert!(parse_listen("nonsense").is_err());
    }
}
