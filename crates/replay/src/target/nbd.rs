//! An NBD export as a replay target, through `ftl_nbd`'s blocking client (one connection,
//! requests from every stream pipelined on it).

use ftl_nbd::client::{Client, ClientError, NbdUri};

use super::{Target, TargetError};

/// An NBD export.
pub struct NbdTarget {
    client: Client,
}

fn error(e: ClientError) -> TargetError {
    if e.is_request_error() {
        TargetError::Request(e.to_string())
    } else {
        TargetError::Fatal(e.to_string())
    }
}

impl NbdTarget {
    /// Connects to `uri`.
    pub fn connect(uri: &str) -> Result<NbdTarget, TargetError> {
        let uri: NbdUri = uri
            .parse()
            .map_err(|e: ClientError| TargetError::Fatal(e.to_string()))?;
        let client = Client::connect(&uri).map_err(|e| TargetError::Fatal(e.to_string()))?;
        Ok(NbdTarget { client })
    }
}

impl Target for NbdTarget {
    fn describe(&self) -> String {
        format!("NBD export {}", self.client.uri())
    }

    fn capacity(&self) -> u64 {
        self.client.size()
    }

    fn read(&self, _stream: usize, offset: u64, buf: &mut [u8]) -> Result<(), TargetError> {
        self.client.read(offset, buf).map_err(error)
    }

    fn write(
        &self,
        _stream: usize,
        offset: u64,
        data: &[u8],
        fua: bool,
    ) -> Result<(), TargetError> {
        self.client.write(offset, data, fua).map_err(error)
    }

    fn flush(&self) -> Result<(), TargetError> {
        self.client.flush().map_err(error)
    }

    fn trim(&self, _stream: usize, offset: u64, len: u64, fua: bool) -> Result<(), TargetError> {
        self.client.trim(offset, len, fua).map_err(error)
    }
}
