//! Operation counters (plain integers under each bank's lock, plus a few lock-free atomics for
//! the in-flight count and the timeline's end), and the serializable snapshot [`NandStats`]
//! built from them on demand.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use serde::Serialize;

use crate::faults::FaultCounts;

/// Live counters of one bank that are read without its lock: the in-flight count (a
/// [`crate::Completion`] drops its share without the lock, possibly after its device is gone,
/// which is why this sits behind an `Arc`) and the end of the bank's timeline.
/// Aligned so two banks' counters (updated by different threads) never share a cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct BankCounters {
    /// Ops submitted whose `Completion` is not yet waited or dropped.
    pub(crate) inflight: AtomicU32,
    pub(crate) max_inflight: AtomicU32,
    /// End of the bank's modelled timeline (internal clock ns); a copy readable without the bank
    /// lock for [`crate::NandDevice::bank_load`].
    pub(crate) busy_until: AtomicU64,
}

impl BankCounters {
    pub(crate) fn submit(&self) {
        let now = self.inflight.fetch_add(1, Ordering::Relaxed) + 1;
        // The maximum rarely moves: a load spares a locked read-modify-write of a line other
        // threads write, on every operation.
        if now > self.max_inflight.load(Ordering::Relaxed) {
            self.max_inflight.fetch_max(now, Ordering::Relaxed);
        }
    }

    pub(crate) fn retire(&self) {
        self.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Operation counters of one bank, kept under the bank's lock as plain integers: every
/// operation holds that lock anyway, and a dozen atomic additions per operation on lines that
/// several threads write cost more than the rest of a timing-off operation.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OpCounters {
    pub(crate) reads: u64,
    pub(crate) programs: u64,
    pub(crate) erases: u64,
    pub(crate) copybacks: u64,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_programmed: u64,
    /// Modelled busy time (sum of each op's bank occupancy), also counted with timing off.
    pub(crate) busy_ns: u64,
    pub(crate) faults: u64,
    /// Reads that suspended a program or erase.
    pub(crate) suspends: u64,
    /// The bank's share of its channel's traffic: transfers, bytes and modelled busy time.
    pub(crate) xfers: u64,
    pub(crate) xfer_bytes: u64,
    pub(crate) xfer_busy_ns: u64,
}

/// Snapshot of one bank's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BankStats {
    /// Global bank index.
    pub bank: u32,
    /// Channel the bank sits on.
    pub channel: u32,
    /// Reads (including faults, which occupy the bank too), copybacks included.
    pub reads: u64,
    /// Page programs (including failed ones), copybacks included.
    pub programs: u64,
    /// Erases (including failed and worn-out ones).
    pub erases: u64,
    /// Copybacks: pages moved inside the bank without crossing the channel (each is also one
    /// of `reads` and, unless its read failed, one of `programs`).
    pub copybacks: u64,
    /// Data + OOB bytes returned by reads (a copyback's OOB read-out included).
    pub bytes_read: u64,
    /// Data + OOB bytes programmed (a copyback's whole page included).
    pub bytes_programmed: u64,
    /// Modelled time the bank was busy, in nanoseconds.
    pub busy_ns: u64,
    /// Operations submitted and not yet waited or dropped.
    pub inflight: u32,
    /// Highest `inflight` seen.
    pub max_inflight: u32,
    /// Faults returned by this bank (injected and wear-out).
    pub faults: u64,
    /// Reads that suspended a program or erase (`Timing::suspend`).
    pub suspends: u64,
}

/// Snapshot of one channel's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ChannelStats {
    /// Channel index.
    pub channel: u32,
    /// Transfers carried.
    pub transfers: u64,
    /// Bytes carried.
    pub bytes: u64,
    /// Modelled time the channel was busy, in nanoseconds.
    pub busy_ns: u64,
}

/// Sums over all banks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TotalStats {
    /// Reads.
    pub reads: u64,
    /// Programs.
    pub programs: u64,
    /// Erases.
    pub erases: u64,
    /// Copybacks.
    pub copybacks: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes programmed.
    pub bytes_programmed: u64,
    /// Faults returned.
    pub faults: u64,
    /// Reads that suspended a program or erase.
    pub suspends: u64,
    /// Operations in flight now.
    pub inflight: u64,
}

/// Snapshot of a device's statistics ([`crate::NandDevice::stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NandStats {
    /// Per bank, indexed by global bank id.
    pub banks: Vec<BankStats>,
    /// Per channel: the transfers of the channel's banks. Under PMCD the channels do not limit
    /// transfers (the controllers do); these are then the traffic of each group of banks.
    pub channels: Vec<ChannelStats>,
    /// Sums over the banks.
    pub totals: TotalStats,
    /// Flash-rule violations returned.
    pub violations: u64,
    /// Faults the injector fired.
    pub injected: FaultCounts,
    /// Blocks whose pages the prefault thread mapped in before their programs (timing `off` and
    /// `virtual`; see the `prefault` module), and those it could not.
    pub prefault: PrefaultCounts,
}

/// What the prefault thread did: blocks populated, and populates that failed (left to the
/// programs' own page faults).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PrefaultCounts {
    /// Blocks whose data frames and OOB entries were populated.
    pub blocks: u64,
    /// Blocks whose populate failed (e.g. a full tmpfs).
    pub failures: u64,
}

impl OpCounters {
    pub(crate) fn snapshot(&self, live: &BankCounters, bank: u32, channel: u32) -> BankStats {
        BankStats {
            bank,
            channel,
            reads: self.reads,
            programs: self.programs,
            erases: self.erases,
            copybacks: self.copybacks,
            bytes_read: self.bytes_read,
            bytes_programmed: self.bytes_programmed,
            busy_ns: self.busy_ns,
            inflight: live.inflight.load(Ordering::Relaxed),
            max_inflight: live.max_inflight.load(Ordering::Relaxed),
            faults: self.faults,
            suspends: self.suspends,
        }
    }
}

impl TotalStats {
    pub(crate) fn sum(banks: &[BankStats]) -> TotalStats {
        let mut t = TotalStats::default();
        for b in banks {
            t.reads += b.reads;
            t.programs += b.programs;
            t.erases += b.erases;
            t.copybacks += b.copybacks;
            t.bytes_read += b.bytes_read;
            t.bytes_programmed += b.bytes_programmed;
            t.faults += b.faults;
            t.suspends += b.suspends;
            t.inflight += u64::from(b.inflight);
        }
        t
    }
}
