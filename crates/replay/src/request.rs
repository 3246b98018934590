//! A host request as a trace or a workload describes it, before it meets a device.

use serde::Serialize;

/// What a request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Write,
    Flush,
    Trim,
}

impl Op {
    /// The name used in `requests.csv` and `summary.json`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Trim => "trim",
        }
    }

    pub const ALL: [Op; 4] = [Op::Read, Op::Write, Op::Flush, Op::Trim];
}

/// When a request arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// At this time (ns) of the trace's own clock, open loop.
    At(u64),
    /// This long (ns) after the previous request of its stream completed (a closed-loop
    /// application that thinks between requests).
    After(u64),
}

/// One host request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub arrival: Arrival,
    pub op: Op,
    /// Byte offset and length (0 for a flush).
    pub offset: u64,
    pub len: u64,
    /// Force unit access: the write is durable when it completes.
    pub fua: bool,
    /// The host queue the trace says the request came through (blkparse's CPU column, which
    /// `ftld serve --record` fills with the write queue), if it says.
    pub queue: Option<u32>,
    /// The trace's time was earlier than its first request's: the trace reader gives it
    /// `Arrival::At(0)`, and an open-loop driver moves it up to its predecessor's arrival and
    /// counts it as reordered, as one earlier than its predecessor.
    pub before_first: bool,
}

impl Request {
    pub fn new(at_ns: u64, op: Op, offset: u64, len: u64) -> Request {
        Request {
            arrival: Arrival::At(at_ns),
            op,
            offset,
            len,
            fua: false,
            queue: None,
            before_first: false,
        }
    }
}

/// The largest read or write a trace or workload may hold (trims are not limited): 64 MiB, twice the most a Linux block
/// device issues as one request (`max_sectors_kb` is at most 32 MiB) and NBD's usual limit.
/// A longer one is a corrupt line; a real-time replay would hold buffers of its size in every
/// worker.
pub const MAX_REQUEST_BYTES: u64 = 64 << 20;
