//! FTL configuration: what a user can tune, with defaults that suit a test machine.

use serde::{Deserialize, Serialize};

/// How garbage collection is scheduled (the benches compare them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum GcPolicy {
    /// LFTL's NPGC: no background threads; a writer that finds a bank short of free blocks cleans
    /// it in its own write path.
    InPath,
    /// LFTL's PLLGC: `gc_threads` background workers clean idle banks in parallel.
    Parallel,
    /// LFTL §3.4: like `Parallel`, but the number of active workers shrinks as host load grows.
    /// The load decides whether a worker starts cleaning; one that started goes on until the
    /// free pool is full again.
    #[default]
    Adaptive,
}

impl GcPolicy {
    pub const ALL: [GcPolicy; 3] = [GcPolicy::InPath, GcPolicy::Parallel, GcPolicy::Adaptive];

    pub fn name(self) -> &'static str {
        match self {
            GcPolicy::InPath => "in-path",
            GcPolicy::Parallel => "parallel",
            GcPolicy::Adaptive => "adaptive",
        }
    }
}

impl std::str::FromStr for GcPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        GcPolicy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!("unknown GC policy {s:?} (expected in-path, parallel or adaptive)")
            })
    }
}

/// How a GC victim is chosen inside a bank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum VictimPolicy {
    /// Fewest valid slots.
    #[default]
    Greedy,
    /// Rosenblum's cost-benefit: maximise `age * (1 - u) / (2 u)`.
    CostBenefit,
}

/// How the page scheme groups host writes into blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Separation {
    /// One write frontier per bank for every host page (per bank and writer with frontiers
    /// `per-queue`; GC-moved data has its own).
    #[default]
    None,
    /// Hot/cold separation by update recency: a page the host wrote before within the last
    /// half to whole `hot_window` goes to a second write frontier on each bank (each writer's,
    /// with frontiers `per-queue`; an open block per plane) (`schemes/page/recency.rs`), and
    /// GC moves a page to a hot or a cold GC frontier by the same bitmaps (hot: the host wrote
    /// it within the window), through the controller: no copyback, which cannot tell a page's
    /// temperature before it moves it.
    HotCold,
}

/// Who holds the page scheme's host write frontiers (`schemes/page/frontiers.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Frontiers {
    /// LFTL's current-writing block per bank (paper 001): a bank's open block is lent to one
    /// writer at a time for one program, so the device has one partly written block per bank
    /// (and temperature) whatever the number of queues.
    #[default]
    PerBank,
    /// Paper 000's working block per worker: each queue's writer owns an open block on every
    /// bank, so with `q` queues about `q / 2` blocks per bank of spare sit idle, half written.
    PerQueue,
}

/// Tunables of a running FTL. Values that fix the on-flash format (over-provisioning) are used
/// only when formatting; opening reads them from the superblock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FtlConfig {
    /// The FTL scheme (format time only: an image keeps the scheme it was formatted with).
    pub scheme: crate::schemes::SchemeKind,
    /// Independent write queues (MT-FTL: one buffer and one writer thread each).
    pub queues: usize,
    /// Fraction of the usable flash kept hidden from the host (format time only).
    pub overprovision: f64,
    pub gc_policy: GcPolicy,
    pub victim_policy: VictimPolicy,
    /// Page scheme: hot/cold separation of host writes (a running policy). Each bank (each
    /// writer's, with frontiers `per-queue`) then has two write frontiers, so more spare sits
    /// idle in open blocks (the image's format reserves room for one per queue and bank; a
    /// writer with no room in its page's temperature takes the other's open block before it
    /// cleans).
    pub separation: Separation,
    /// Page scheme: whether host write frontiers are shared per bank (the default) or owned
    /// per queue (a running policy). See [`Frontiers`].
    pub frontiers: Frontiers,
    /// With `separation = "hot-cold"`: the window, in exported capacities, within which a
    /// rewrite makes a page hot (judged over the last half to whole window; 1.0: the exported
    /// capacity).
    pub hot_window: f64,
    /// Background GC workers (Parallel and Adaptive policies). 0: one per two banks (at least
    /// two) when NAND time is modelled (timing `real` or `virtual`), two with timing `off`.
    /// A worker cleans one victim at a time and waits for each of its operations, so with
    /// modelled time the workers bound how many banks clean at once, where a controller
    /// cleans every die at once. Steady random 4 KiB writes on the default preset (16 banks,
    /// `experiments/README.md`, "Steady random writes"), timing real / virtual: 2 workers
    /// 1150 / 870 IOPS at WAF 4.83 / 4.85; 8 workers 2580 / 2060 at 4.92 / 4.92; 16 workers
    /// 3610 / 3030 at 4.94 / 5.10 (the greedy limit is 4.46). With timing `off` GC is CPU
    /// work and more threads than CPUs buy nothing.
    pub gc_threads: usize,
    /// Free blocks per bank under which in-path GC cleans the bank (0: the GC reserve + 2,
    /// i.e. 3; at least the reserve + 1), and to which an open cleans every bank (0: the
    /// reserve + 1 with background workers, which otherwise keep `gc_free_pool`). Each free
    /// block is spare space held idle: a higher floor absorbs longer write bursts without
    /// foreground GC and costs write amplification.
    pub gc_soft_free: u32,
    /// Background GC workers (parallel and adaptive policies) clean while the device has fewer
    /// free blocks than this above the banks' GC reserves, taking the cheapest victim anywhere
    /// (0: an eighth of the banks, at least 2). Free blocks are spare space held idle, so the
    /// pool is device-wide rather than a floor per bank: a floor of one block over the reserve
    /// on each of 16 banks measured 1.13x the greedy WAF limit (fio, 4 x QD32 random 4 KiB
    /// writes over NBD, timing off), this pool 1.06x. A larger pool absorbs longer bursts
    /// before writers clean in the foreground.
    pub gc_free_pool: u32,
    /// Erase-count spread that triggers static wear levelling.
    pub wear_level_spread: u32,
    /// GC moves a fully valid victim page with one NAND copyback (t_read + t_prog, no channel
    /// transfer) instead of a read and a program through the controller. Off models an FTL
    /// that avoids copyback (for example to check every page's ECC on the way).
    pub gc_copyback: bool,
    /// Host bytes written between two periodic checkpoints (0 disables them).
    pub checkpoint_interval_bytes: u64,
    /// Sealed NAND pages a queue may have waiting for its writer before writes wait.
    pub max_pending_pages: usize,
    /// Read retries on an uncorrectable read before the error reaches the host. The FTL's own
    /// reads (GC and merge copies, the open's checkpoint reads and scan) retry at least 3
    /// times whatever this says (`Core::own_read_retries`).
    pub read_retries: u32,
    /// Log blocks of the hybrid schemes (`bast`, `fast`; format time only). 0: 3 % of the
    /// device's usable blocks.
    pub log_blocks: u32,
    /// Hybrid schemes: where log blocks and merge destinations go relative to their data block
    /// (`same` bank, or `spread` over channels/banks so merges run in parallel: thesis ch. 4).
    /// A running policy, not part of the image.
    pub log_placement: crate::schemes::LogPlacement,
    /// LFTL's idle flush (paper 001 §3.2.1): a write queue's partly filled NAND page is
    /// programmed once the queue has seen no write for this long (0: never; LFTL uses 60 s).
    /// Matters on presets with pages larger than 4 KiB, where a page fills only with several
    /// writes; FLUSH and FUA make data durable at once regardless.
    pub idle_flush_ms: u64,
}

impl Default for FtlConfig {
    fn default() -> Self {
        FtlConfig {
            scheme: crate::schemes::SchemeKind::default(),
            queues: std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .min(8),
            overprovision: 0.07,
            gc_policy: GcPolicy::default(),
            victim_policy: VictimPolicy::default(),
            separation: Separation::default(),
            frontiers: Frontiers::default(),
            hot_window: 1.0,
            gc_threads: 0,
            gc_soft_free: 0,
            gc_free_pool: 0,
            wear_level_spread: 256,
            gc_copyback: true,
            checkpoint_interval_bytes: 1 << 30,
            max_pending_pages: 64,
            read_retries: 3,
            log_blocks: 0,
            log_placement: Default::default(),
            idle_flush_ms: 60_000,
        }
    }
}
