//! Synthetic workloads, for what no trace file exists: `--workload KIND[,KEY=VALUE...]`.
//!
//! | kind | what |
//! |---|---|
//! | `random` | uniform random offsets over the span |
//! | `hotcold` | `hot=X/Y`: X % of requests go to the first Y % of the span (default 80/20) |
//! | `seq` | sequential, wrapping at the end of the span |
//! | `thinktime` | LFTL's application (paper 001 §4): one stream that pauses `think` after each write and `long` after every `every`-th write |
//! | `periodic` | RFTL's periodic task (paper 004): one request every `period` (its L(p)) |
//!
//! Keys every kind takes: `requests=N` (default 100000), `bs=SIZE` (default 4k), `read=PCT`
//! (share of reads, default 0), `span=PCT%|SIZE` (the part of the device used, from offset 0;
//! default all of it), `flush_every=N` (a flush after every N writes, on top of the `requests`:
//! 50 000 writes with `flush_every=1000` replay 50 000 writes and 50 flushes), `fua=1` (every write is
//! FUA: complete when durable, as a synchronous write). `random`, `hotcold` and `seq` also take
//! `iops=N` (open loop at that rate; without it requests are closed loop: each stream sends
//! the next when its previous one completes, `--queue-depth` streams) and
//! `arrival=fixed|poisson` (with `iops`); `thinktime` and `periodic` take
//! `pattern=random|seq`. A key the kind does not use, or a key given twice, is an error. Sizes take k/m/g suffixes (powers of 2).
//! The random choices come from `--seed`, so a workload is the same on every run.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::request::{Arrival, Op, Request};

/// A workload's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Random,
    HotCold,
    Seq,
    ThinkTime,
    Periodic,
}

impl Kind {
    /// The kind as `--workload` names it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Random => "random",
            Kind::HotCold => "hotcold",
            Kind::Seq => "seq",
            Kind::ThinkTime => "thinktime",
            Kind::Periodic => "periodic",
        }
    }
}

/// A parsed `--workload` spec.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadSpec {
    pub kind: Kind,
    pub requests: u64,
    pub bs: u64,
    pub read_pct: f64,
    /// Span as a fraction of the device, or bytes.
    pub span: Span,
    pub iops: Option<f64>,
    pub poisson: bool,
    pub hot_requests_pct: f64,
    pub hot_space_pct: f64,
    pub think_ns: u64,
    pub long_ns: u64,
    pub every: u64,
    pub period_ns: u64,
    pub sequential: bool,
    pub flush_every: u64,
    /// Every write is FUA.
    pub fua: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Span {
    Fraction(f64),
    Bytes(u64),
}

fn size(v: &str, key: &str) -> Result<u64, String> {
    let v = v.trim();
    let (num, mul) = match v.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (&v[..v.len() - 1], 1u64 << 10),
        Some('m') => (&v[..v.len() - 1], 1 << 20),
        Some('g') => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("{key}={v}: not a size (e.g. 4k, 1m, 4096)"))
}

fn duration_ns(v: &str, key: &str) -> Result<u64, String> {
    let v = v.trim();
    let (num, unit) = if let Some(n) = v.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = v.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e9)
    } else {
        return Err(format!("{key}={v}: give a unit (ns, us, ms or s)"));
    };
    let x: f64 = num
        .parse()
        .map_err(|_| format!("{key}={v}: not a duration"))?;
    // A day at most: a virtual-time run still simulates the idle time (GC and maintenance
    // tick through it), so years of pauses would never end.
    if !(0.0..=86_400e9).contains(&(x * unit)) {
        return Err(format!("{key}={v}: out of range (0 to 1 day)"));
    }
    Ok((x * unit).round() as u64)
}

fn pct(v: &str, key: &str) -> Result<f64, String> {
    let x: f64 = v
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{key}={v}: not a percentage"))?;
    if !(0.0..=100.0).contains(&x) {
        return Err(format!("{key}={v}: not between 0 and 100"));
    }
    Ok(x)
}

impl std::str::FromStr for WorkloadSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<WorkloadSpec, String> {
        let mut parts = s.split(',');
        let kind = match parts.next().unwrap_or("").trim() {
            "random" => Kind::Random,
            "hotcold" => Kind::HotCold,
            "seq" => Kind::Seq,
            "thinktime" => Kind::ThinkTime,
            "periodic" => Kind::Periodic,
            k => {
                return Err(format!(
                    "workload kind {k:?} is not one of random, hotcold, seq, thinktime, periodic"
                ))
            }
        };
        let mut w = WorkloadSpec {
            kind,
            requests: 100_000,
            bs: 4096,
            read_pct: 0.0,
            span: Span::Fraction(1.0),
            iops: None,
            poisson: false,
            hot_requests_pct: 80.0,
            hot_space_pct: 20.0,
            think_ns: 1_000_000,
            long_ns: 100_000_000,
            every: 64,
            period_ns: 10_000_000,
            sequential: false,
            flush_every: 0,
            fua: false,
        };
        let mut seen: Vec<&str> = Vec::new();
        for kv in parts {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("{kv:?} is not KEY=VALUE"))?;
            let k = k.trim();
            if seen.contains(&k) {
                return Err(format!("{k} is given twice"));
            }
            seen.push(k);
            match k {
                "requests" => {
                    w.requests = v
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|x| *x >= 1.0 && *x < 1e12 && x.fract() == 0.0)
                        .ok_or_else(|| format!("requests={v}: not a count"))?
                        as u64
                }
                "bs" => w.bs = size(v, "bs")?,
                "read" => w.read_pct = pct(v, "read")?,
                "span" => {
                    w.span = if v.trim().ends_with('%') {
                        Span::Fraction(pct(v, "span")? / 100.0)
                    } else {
                        Span::Bytes(size(v, "span")?)
                    }
                }
                "iops" => {
                    let x: f64 = v
                        .trim()
                        .parse()
                        .map_err(|_| format!("iops={v}: not a rate"))?;
                    // Down to one request in 1000 s (slower would leave a virtual-time run
                    // simulating idle time for days of wall time).
                    if !(1e-3..=1e9).contains(&x) {
                        return Err(format!("iops={v}: out of range (0.001 to 1e9)"));
                    }
                    w.iops = Some(x);
                }
                "arrival" => {
                    w.poisson = match v.trim() {
                        "fixed" => false,
                        "poisson" => true,
                        a => return Err(format!("arrival={a}: fixed or poisson")),
                    }
                }
                "hot" => {
                    let (a, b) = v.split_once('/').ok_or_else(|| {
                        format!("hot={v}: give X/Y (X % of requests to Y % of the space)")
                    })?;
                    w.hot_requests_pct = pct(a, "hot")?;
                    w.hot_space_pct = pct(b, "hot")?;
                    if w.hot_space_pct == 0.0 || w.hot_space_pct == 100.0 {
                        return Err(format!(
                            "hot={v}: the hot space must be between 0 and 100 %"
                        ));
                    }
                }
                "think" => w.think_ns = duration_ns(v, "think")?,
                "long" => w.long_ns = duration_ns(v, "long")?,
                "every" => {
                    w.every = v
                        .trim()
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| format!("every={v}: a count above 0"))?
                }
                "period" => {
                    w.period_ns = duration_ns(v, "period")?;
                    if w.period_ns == 0 {
                        return Err("period must be above 0".into());
                    }
                }
                "pattern" => {
                    w.sequential = match v.trim() {
                        "random" => false,
                        "seq" => true,
                        p => return Err(format!("pattern={p}: random or seq")),
                    }
                }
                "flush_every" => {
                    w.flush_every = v
                        .trim()
                        .parse()
                        .map_err(|_| format!("flush_every={v}: a count"))?
                }
                "fua" => {
                    w.fua = match v.trim() {
                        "1" | "true" => true,
                        "0" | "false" => false,
                        f => return Err(format!("fua={f}: 1 or 0")),
                    }
                }
                k => return Err(format!("unknown workload key {k:?}")),
            }
        }
        if w.bs == 0 || !w.bs.is_multiple_of(512) {
            return Err(format!("bs={} is not a positive multiple of 512", w.bs));
        }
        if w.bs > crate::request::MAX_REQUEST_BYTES {
            return Err(format!(
                "bs={} is above {} bytes (64 MiB), more than any block request",
                w.bs,
                crate::request::MAX_REQUEST_BYTES
            ));
        }
        // A key another kind's generator reads would be silently ignored here.
        for &k in &seen {
            let applies = match k {
                "hot" => kind == Kind::HotCold,
                "think" | "long" | "every" => kind == Kind::ThinkTime,
                "period" => kind == Kind::Periodic,
                "pattern" => matches!(kind, Kind::ThinkTime | Kind::Periodic),
                // thinktime's pauses and periodic's period are their arrivals.
                "iops" | "arrival" => matches!(kind, Kind::Random | Kind::HotCold | Kind::Seq),
                _ => true,
            };
            if !applies {
                return Err(format!("{k} does not apply to a {} workload", kind.name()));
            }
        }
        if seen.contains(&"arrival") && w.iops.is_none() {
            return Err("arrival needs iops (without it requests are closed loop)".into());
        }
        Ok(w)
    }
}

/// The requests of a workload on a device of `capacity` bytes.
pub struct Workload {
    spec: WorkloadSpec,
    rng: SmallRng,
    /// Blocks of `bs` in the span.
    blocks: u64,
    issued: u64,
    writes: u64,
    next_seq: u64,
    /// Open loop: the next arrival (ns).
    clock: f64,
    pending_flush: bool,
    /// The previous request was a write (the think time follows writes).
    last_write: bool,
}

impl Workload {
    pub fn new(spec: WorkloadSpec, capacity: u64, seed: u64) -> Result<Workload, String> {
        let span = match spec.span {
            Span::Fraction(f) => (capacity as f64 * f) as u64,
            // Cut to the device silently, a span changes the workload's locality and every
            // figure measured on it without a word.
            Span::Bytes(b) if b > capacity => {
                return Err(format!(
                    "span={b} bytes is more than the device's {capacity} bytes (span=100% is the \
                     whole device)"
                ))
            }
            Span::Bytes(b) => b,
        };
        let blocks = span / spec.bs;
        if blocks == 0 {
            return Err(format!(
                "the workload's span ({span} bytes) holds no {}-byte request",
                spec.bs
            ));
        }
        Ok(Workload {
            spec,
            rng: SmallRng::seed_from_u64(seed),
            blocks,
            issued: 0,
            writes: 0,
            next_seq: 0,
            clock: 0.0,
            pending_flush: false,
            last_write: false,
        })
    }

    fn block(&mut self) -> u64 {
        let s = &self.spec;
        let seq = matches!(s.kind, Kind::Seq)
            || matches!(s.kind, Kind::ThinkTime | Kind::Periodic) && s.sequential;
        if seq {
            let b = self.next_seq % self.blocks;
            self.next_seq += 1;
            return b;
        }
        if s.kind == Kind::HotCold {
            let hot = ((self.blocks as f64 * s.hot_space_pct / 100.0) as u64).clamp(1, self.blocks);
            let to_hot = self.rng.gen_bool(s.hot_requests_pct / 100.0);
            return if to_hot || hot == self.blocks {
                self.rng.gen_range(0..hot)
            } else {
                self.rng.gen_range(hot..self.blocks)
            };
        }
        self.rng.gen_range(0..self.blocks)
    }

    fn arrival(&mut self, after_write: bool) -> Arrival {
        let s = &self.spec;
        if s.kind == Kind::Periodic {
            let t = self.issued.saturating_sub(1) * s.period_ns;
            return Arrival::At(t);
        }
        if let Some(iops) = s.iops {
            let at = self.clock;
            let gap = if s.poisson {
                let u: f64 = self.rng.gen_range(f64::MIN_POSITIVE..1.0);
                -u.ln() / iops
            } else {
                1.0 / iops
            };
            self.clock += gap * 1e9;
            return Arrival::At(at as u64);
        }
        if s.kind == Kind::ThinkTime && after_write {
            // The pause follows the previous write.
            return Arrival::After(if self.writes.is_multiple_of(s.every) {
                s.long_ns
            } else {
                s.think_ns
            });
        }
        Arrival::After(0)
    }
}

impl Iterator for Workload {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.pending_flush {
            self.pending_flush = false;
            return Some(Request {
                arrival: Arrival::After(0),
                op: Op::Flush,
                offset: 0,
                len: 0,
                fua: false,
                queue: None,
                before_first: false,
            });
        }
        if self.issued >= self.spec.requests {
            return None;
        }
        let after_write = self.last_write;
        self.issued += 1;
        let read = self.spec.read_pct > 0.0 && self.rng.gen_bool(self.spec.read_pct / 100.0);
        let arrival = self.arrival(after_write);
        let block = self.block();
        let op = if read { Op::Read } else { Op::Write };
        if !read {
            self.writes += 1;
            if self.spec.flush_every > 0 && self.writes.is_multiple_of(self.spec.flush_every) {
                self.pending_flush = true;
            }
        }
        self.last_write = !read;
        Some(Request {
            arrival,
            op,
            offset: block * self.spec.bs,
            len: self.spec.bs,
            fua: !read && self.spec.fua,
            queue: None,
            before_first: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(spec: &str) -> String {
        spec.parse::<WorkloadSpec>().expect_err(spec)
    }

    /// Keys another kind's generator reads, a key given twice, a fractional count and an
    /// arrival law without a rate are refused rather than ignored.
    #[test]
    fn keys_the_kind_does_not_use_are_refused() {
        for (spec, want) in [
            (
                "periodic,iops=10",
                "iops does not apply to a periodic workload",
            ),
            (
                "thinktime,iops=10",
                "iops does not apply to a thinktime workload",
            ),
            ("seq,hot=90/10", "hot does not apply to a seq workload"),
            (
                "random,think=5ms",
                "think does not apply to a random workload",
            ),
            (
                "hotcold,period=1s",
                "period does not apply to a hotcold workload",
            ),
            (
                "seq,pattern=random",
                "pattern does not apply to a seq workload",
            ),
            ("random,arrival=poisson", "arrival needs iops"),
            ("random,bs=4k,bs=8k", "bs is given twice"),
            ("random,bs=128m", "more than any block request"),
            ("random,requests=2.9", "requests=2.9: not a count"),
            ("random,iops=1e-300", "iops=1e-300: out of range"),
            ("thinktime,long=100000s", "long=100000s: out of range"),
        ] {
            let e = err(spec);
            assert!(e.contains(want), "{spec}: {e}");
        }
        let spec: WorkloadSpec = "random,span=1g".parse().unwrap();
        let e = Workload::new(spec, 64 << 20, 1).err().expect("refused");
        assert!(
            e.contains("span=1073741824 bytes is more than the device's 67108864 bytes"),
            "{e}"
        );
        let spec: WorkloadSpec = "random,span=64m".parse().unwrap();
        assert!(Workload::new(spec, 64 << 20, 1).is_ok());
        for ok in [
            "periodic,period=10ms,pattern=seq,read=25,fua=1",
            "thinktime,think=1ms,every=64,long=100ms,pattern=random",
            "hotcold,hot=80/20,iops=500,arrival=poisson",
            "random,requests=5.3e6,bs=4k",
            // The ends of the range its error names.
            "random,iops=1e9",
            "random,iops=0.001",
        ] {
            ok.parse::<WorkloadSpec>().expect(ok);
        }
    }
}
