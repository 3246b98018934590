//! nand-model: a file-backed emulated multi-channel, multi-bank NAND SSD (docs filled in below).

mod bankmem;
mod clock;
mod completion;
mod config;
mod device;
mod error;
mod faults;
mod geometry;
mod header;
mod image;
mod presets;
mod stats;
mod timeline;
mod timer;
mod timing;

pub use bankmem::BlockState;
pub use completion::{Completion, CompletionFuture};
pub use config::{NandConfig, MIN_SCALED_BLOCKS_PER_BANK};
pub use device::{BankLoad, NandDevice};
pub use error::{BufferKind, GeometryError, ImageError, NandError};
pub use faults::{FaultCounts, FaultInjector, FaultRates};
pub use geometry::{
    BankId, BlockAddr, Geometry, PageAddr, MAX_PAGE_SIZE, MIN_OOB_SIZE, MIN_PAGE_SIZE,
};
pub use presets::{preset, presets, Preset};
pub use stats::{BankStats, ChannelStats, NandStats, TotalStats};
pub use timing::{Timing, TimingMode};
