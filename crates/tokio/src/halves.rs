//! The owned halves of a split stream, for both models: [`owned_halves!`] writes the two
//! types for a stream shared behind a pointer (`Arc` in model (a), `Rc` in model (b)).

/// The read and write halves of `into_split` over `$ptr<$shared>`, reuniting into
/// `$stream` (built by `$whole` from the pointer). `$shared` has `poll_read_shared`,
/// `poll_write_shared` and `shutdown_shared`; dropping the write half shuts the stream's
/// writing (the FIN), as tokio's `OwnedWriteHalf`.
macro_rules! owned_halves {
    ($ptr:ident, $shared:ty, $stream:ty, $whole:expr, $doc:literal) => {
        #[doc = concat!("The read half of ", $doc, ".")]
        #[derive(Debug)]
        pub struct OwnedReadHalf {
            shared: $ptr<$shared>,
        }

        #[doc = concat!("The write half of ", $doc, ": dropping it sends the FIN.")]
        #[derive(Debug)]
        pub struct OwnedWriteHalf {
            shared: $ptr<$shared>,
            shutdown_on_drop: bool,
        }

        /// The two halves over one shared stream.
        fn halves(shared: $ptr<$shared>) -> (OwnedReadHalf, OwnedWriteHalf) {
            (
                OwnedReadHalf {
                    shared: shared.clone(),
                },
                OwnedWriteHalf {
                    shared,
                    shutdown_on_drop: true,
                },
            )
        }

        impl OwnedReadHalf {
            /// Put the halves back together (`InvalidInput` if they are not of one stream).
            pub fn reunite(self, mut write: OwnedWriteHalf) -> io::Result<$stream> {
                if !$ptr::ptr_eq(&self.shared, &write.shared) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "the halves are of different streams",
                    ));
                }
                write.shutdown_on_drop = false;
                drop(write);
                ($whole)(self.shared)
            }
        }

        impl Drop for OwnedWriteHalf {
            fn drop(&mut self) {
                if self.shutdown_on_drop {
                    let _ = self.shared.shutdown_shared();
                }
            }
        }

        impl AsyncRead for OwnedReadHalf {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                self.shared.poll_read_shared(cx, buf)
            }
        }

        impl AsyncWrite for OwnedWriteHalf {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                self.shared.poll_write_shared(cx, buf)
            }

            /// Nothing to flush: a write hands its bytes to the stack.
            fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }

            fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(self.shared.shutdown_shared())
            }
        }
    };
}

pub(crate) use owned_halves;
