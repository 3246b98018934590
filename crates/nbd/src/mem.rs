//! [`MemBackend`]: a RAM-backed [`BlockBackend`] for tests, examples and as a reference for what
//! the contract in [`crate::backend`] asks of an implementation.
//!
//! The whole device is one `Vec<u8>` behind a mutex; every call takes the lock for the copy only,
//! so calls are atomic with respect to each other. Trim and write-zeroes fill the range with
//! zeroes. There is no volatile cache, so flush and FUA have nothing to do. Not meant for large
//! devices or performance measurements.

use crate::backend::{BackendError, BlockBackend};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// A RAM-backed block device (test/reference backend).
#[derive(Debug)]
pub struct MemBackend {
    /// The device contents; the lock protects only this buffer.
    data: Mutex<Vec<u8>>,
    read_only: bool,
    queues: usize,
    /// Number of `flush` calls, for tests.
    flushes: AtomicU64,
}

impl MemBackend {
    /// A zero-filled writable device of `size` bytes with one write queue.
    pub fn new(size: usize) -> Self {
        Self::from_vec(vec![0; size])
    }

    /// A writable device holding `data`.
    pub fn from_vec(data: Vec<u8>) -> Self {
        Self {
            data: Mutex::new(data),
            read_only: false,
            queues: 1,
            flushes: AtomicU64::new(0),
        }
    }

    /// Marks the device read-only (writes, trims and zeroing fail with `ReadOnly`).
    #[must_use]
    pub fn with_read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Sets the number of write queues reported by [`BlockBackend::queues`] (at least 1).
    #[must_use]
    pub fn with_queues(mut self, queues: usize) -> Self {
        self.queues = queues.max(1);
        self
    }

    /// A copy of the current contents.
    pub fn contents(&self) -> Vec<u8> {
        self.data.lock().clone()
    }

    /// How many times `flush` was called.
    pub fn flush_count(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }

    /// The byte range `[offset, offset + len)` as `usize` indexes, if it lies inside `size`.
    fn range(offset: u64, len: u64, size: usize) -> Result<std::ops::Range<usize>, BackendError> {
        let start = usize::try_from(offset).ok();
        let end = offset
            .checked_add(len)
            .and_then(|e| usize::try_from(e).ok());
        match (start, end) {
            (Some(s), Some(e)) if e <= size => Ok(s..e),
            _ => Err(BackendError::Invalid(format!(
                "range {offset}+{len} outside device of {size} bytes"
            ))),
        }
    }

    fn check_writable(&self) -> Result<(), BackendError> {
        if self.read_only {
            Err(BackendError::ReadOnly("memory device is read-only".into()))
        } else {
            Ok(())
        }
    }

    fn zero(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.check_writable()?;
        let mut data = self.data.lock();
        let r = Self::range(offset, len, data.len())?;
        data[r].fill(0);
        Ok(())
    }
}

impl BlockBackend for MemBackend {
    fn size(&self) -> u64 {
        self.data.lock().len() as u64
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn queues(&self) -> usize {
        self.queues
    }

    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        let data = self.data.lock();
        let r = Self::range(offset, buf.len() as u64, data.len())?;
        buf.copy_from_slice(&data[r]);
        Ok(())
    }

    async fn write(
        &self,
        _queue: usize,
        offset: u64,
        src: Vec<u8>,
        _fua: bool,
    ) -> Result<(), BackendError> {
        self.check_writable()?;
        let mut data = self.data.lock();
        let r = Self::range(offset, src.len() as u64, data.len())?;
        data[r].copy_from_slice(&src);
        Ok(())
    }

    async fn flush(&self) -> Result<(), BackendError> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn trim(
        &self,
        _queue: usize,
        offset: u64,
        len: u64,
        _fua: bool,
    ) -> Result<(), BackendError> {
        self.zero(offset, len)
    }

    async fn write_zeroes(
        &self,
        _queue: usize,
        offset: u64,
        len: u64,
        _fua: bool,
    ) -> Result<(), BackendError> {
        self.zero(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn write_read_trim() {
        let m = MemBackend::new(4096);
        block_on(async {
            m.write(0, 512, vec![7u8; 512], false).await.expect("write");
            let mut buf = [0u8; 1024];
            m.read(0, &mut buf).await.expect("read");
            assert!(buf[..512].iter().all(|&b| b == 0));
            assert!(buf[512..].iter().all(|&b| b == 7));
            m.trim(0, 512, 512, false).await.expect("trim");
            m.read(0, &mut buf).await.expect("read");
            assert!(buf.iter().all(|&b| b == 0));
            assert!(m.read(4096, &mut buf).await.is_err());
        });
    }

    #[test]
    fn read_only_refuses_writes() {
        let m = MemBackend::new(1024).with_read_only(true);
        block_on(async {
            assert!(matches!(
                m.write(0, 0, vec![1; 512], false).await,
                Err(BackendError::ReadOnly(_))
            ));
            assert!(m.write_zeroes(0, 0, 512, false).await.is_err());
        });
    }
}
