//! The FTL in this process, opened with timing `real`, as a replay target: the same calls a
//! frontend makes, each blocking the issuing thread until the FTL's future completes (the
//! NAND model's timer thread wakes it when the modelled time has passed).

use ftl::Ftl;

use super::{Target, TargetError};

/// An FTL in this process.
pub struct FtlTarget<'a> {
    ftl: &'a Ftl,
    /// The device was read-only before the first request (an image that opened so).
    read_only_at_start: bool,
}

impl<'a> FtlTarget<'a> {
    /// Drives `ftl` (best opened with timing `real`; with `off` every request is instant).
    pub fn new(ftl: &'a Ftl) -> FtlTarget<'a> {
        FtlTarget {
            ftl,
            read_only_at_start: ftl.read_only_reason().is_some(),
        }
    }

    /// A request refused because the device is read-only ends the replay; any other error
    /// (an uncorrectable read, even on a read-only device) is the request's.
    fn error(&self, e: ftl::FtlError) -> TargetError {
        match e {
            ftl::FtlError::ReadOnly(reason) | ftl::FtlError::NoSpace(reason) => {
                TargetError::Fatal(if self.read_only_at_start {
                    format!("failed on a device read-only since its open: {reason}")
                } else {
                    format!("the device turned read-only: {reason}")
                })
            }
            e => TargetError::Request(e.to_string()),
        }
    }
}

impl Target for FtlTarget<'_> {
    fn describe(&self) -> String {
        format!("the {} FTL in this process", self.ftl.stats().scheme)
    }

    fn capacity(&self) -> u64 {
        self.ftl.capacity()
    }

    fn read(&self, _stream: usize, offset: u64, buf: &mut [u8]) -> Result<(), TargetError> {
        futures::executor::block_on(self.ftl.read(offset, buf)).map_err(|e| self.error(e))
    }

    fn write(&self, stream: usize, offset: u64, data: &[u8], fua: bool) -> Result<(), TargetError> {
        futures::executor::block_on(self.ftl.write(stream, offset, data, fua))
            .map_err(|e| self.error(e))
    }

    fn flush(&self) -> Result<(), TargetError> {
        futures::executor::block_on(self.ftl.flush()).map_err(|e| self.error(e))
    }

    fn trim(&self, stream: usize, offset: u64, len: u64, fua: bool) -> Result<(), TargetError> {
        futures::executor::block_on(self.ftl.trim(stream, offset, len, fua))
            .map_err(|e| self.error(e))
    }

    fn queues(&self) -> usize {
        self.ftl.queues()
    }

    fn waf_counters(&self) -> Option<(u64, u64)> {
        Some(self.ftl.waf_counters())
    }
}
