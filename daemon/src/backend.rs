//! The FTL as an NBD [`BlockBackend`], with the one place where FTL errors become NBD errors.
//!
//! The NBD server has already checked range, alignment and read-only before calling, so an
//! [`FtlError`] reaching [`backend_error`] is a real device condition (or a race with
//! shutdown). `queue` from the server (connection index % [`Ftl::queues`]) goes straight to the
//! FTL's write queues, trims and zeroes included, so one connection's writes share a buffer.

use std::sync::Arc;

use ftl::{Bytes, Ftl, FtlError};
use ftl_nbd::{BackendError, BlockBackend, Extent};

/// An [`Ftl`] exported over NBD.
pub struct FtlBackend {
    ftl: Arc<Ftl>,
    read_only: bool,
}

impl FtlBackend {
    /// Exports `ftl`; with `read_only` the export refuses writes.
    pub fn new(ftl: Arc<Ftl>, read_only: bool) -> Self {
        Self { ftl, read_only }
    }
}

/// Which kind of request failed (range errors answer differently for reads and writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
}

/// Maps an FTL error to the NBD server's error kinds: the only such mapping in ftld.
pub fn backend_error(op: Op, e: FtlError) -> BackendError {
    match e {
        FtlError::OutOfRange { .. } if matches!(op, Op::Write | Op::WriteZeroes) => {
            BackendError::NoSpace(e.to_string())
        }
        FtlError::OutOfRange { .. } | FtlError::Misaligned { .. } => {
            BackendError::Invalid(e.to_string())
        }
        FtlError::ReadOnly(why) => BackendError::ReadOnly(why),
        FtlError::NoSpace(why) => BackendError::NoSpace(why),
        FtlError::Closed => BackendError::ShuttingDown,
        e => {
            tracing::error!(?op, error = %e, "FTL request failed");
            BackendError::Io(e.to_string())
        }
    }
}

impl BlockBackend for FtlBackend {
    fn size(&self) -> u64 {
        self.ftl.capacity()
    }

    fn read_only(&self) -> bool {
        self.read_only || self.ftl.read_only_reason().is_some()
    }

    fn queues(&self) -> usize {
        self.ftl.queues()
    }

    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        self.ftl
            .read(offset, buf)
            .await
            .map_err(|e| backend_error(Op::Read, e))
    }

    async fn write(
        &self,
        queue: usize,
        offset: u64,
        data: Vec<u8>,
        fua: bool,
    ) -> Result<(), BackendError> {
        self.ftl
            .write_bytes(queue, offset, Bytes::from(data), fua)
            .await
            .map_err(|e| backend_error(Op::Write, e))
    }

    async fn flush(&self) -> Result<(), BackendError> {
        self.ftl
            .flush()
            .await
            .map_err(|e| backend_error(Op::Flush, e))
    }

    async fn trim(
        &self,
        queue: usize,
        offset: u64,
        len: u64,
        fua: bool,
    ) -> Result<(), BackendError> {
        self.ftl
            .trim(queue, offset, len, fua)
            .await
            .map_err(|e| backend_error(Op::Trim, e))
    }

    async fn write_zeroes(
        &self,
        queue: usize,
        offset: u64,
        len: u64,
        fua: bool,
    ) -> Result<(), BackendError> {
        self.ftl
            .write_zeroes(queue, offset, len, fua)
            .await
            .map_err(|e| backend_error(Op::WriteZeroes, e))
    }

    /// The FTL's map: an unmapped page (never written, trimmed, zeroed) is a hole that reads
    /// as zeroes.
    async fn block_status(
        &self,
        offset: u64,
        len: u64,
        max_runs: usize,
    ) -> Result<Vec<Extent>, BackendError> {
        let runs = self
            .ftl
            .allocation(offset, len, max_runs)
            .map_err(|e| backend_error(Op::Read, e))?;
        Ok(runs
            .into_iter()
            .map(|r| Extent {
                len: r.len,
                hole: !r.mapped,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_mapping() {
        let oor = || FtlError::OutOfRange {
            offset: 0,
            len: 1,
            capacity: 0,
        };
        assert!(matches!(
            backend_error(Op::Write, oor()),
            BackendError::NoSpace(_)
        ));
        assert!(matches!(
            backend_error(Op::WriteZeroes, oor()),
            BackendError::NoSpace(_)
        ));
        assert!(matches!(
            backend_error(Op::Read, oor()),
            BackendError::Invalid(_)
        ));
        assert!(matches!(
            backend_error(Op::Trim, oor()),
            BackendError::Invalid(_)
        ));
        assert!(matches!(
            backend_error(Op::Read, FtlError::Misaligned { offset: 1, len: 1 }),
            BackendError::Invalid(_)
        ));
        assert!(matches!(
            backend_error(Op::Write, FtlError::ReadOnly("worn".into())),
            BackendError::ReadOnly(_)
        ));
        assert!(matches!(
            backend_error(Op::Flush, FtlError::NoSpace("full".into())),
            BackendError::NoSpace(_)
        ));
        assert!(matches!(
            backend_error(Op::Flush, FtlError::Closed),
            BackendError::ShuttingDown
        ));
        assert!(matches!(
            backend_error(Op::Read, FtlError::Uncorrectable { lpn: 1, retries: 3 }),
            BackendError::Io(_)
        ));
    }
}
