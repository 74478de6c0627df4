//! Pooled TCP send and receive buffers, and the out-of-order queue.
//!
//! An idle connection holds no buffer memory: every byte a TCP socket buffers sits in a
//! fixed-size [`CHUNK`] of one per-stack [`BufferPool`]; a [`SendBuffer`] or
//! [`RecvBuffer`] is a handful of inline `u32`s (chunk indices and counters) and holds no
//! chunk and no heap when empty. Chunks go back to the pool as soon
//! as the bytes in them are acknowledged (send side) or read (receive side).
//!
//! Buffers are deliberately neither `Copy` nor `Clone`: a copy would own the same chunks
//! twice. A buffer must be emptied with `clear` (or drained) before it is dropped, or its
//! chunks stay counted in [`BufferPool::in_use_bytes`] (which is how a leak shows).
//! A buffer must always be used with the pool it took its chunks from.
//!
//! The pool is in `pool`, the send buffer in `send`, the receive buffer with its
//! out-of-order queue in `recv`.

pub(crate) mod held;
pub(crate) mod lent;
mod pool;
mod recv;
mod send;

pub use pool::{BufferPool, CHUNK, MemAsk};
#[cfg(test)]
pub use recv::{EXTENT_TRUESIZE, ooo_mem_bound};
pub use recv::{InsertResult, RecvBuffer};
pub use send::SendBuffer;

#[cfg(test)]
mod tests;
