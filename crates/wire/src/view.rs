//! The byte access every header view shares, written once.
//!
//! [`header_view!`] declares a header's zero-copy view: the struct over a buffer,
//! `new_unchecked`, `new_checked` (which runs the header's own `check_len`), `into_inner`,
//! `AsRef<[u8]>`, and big-endian reads and writes of a field at a named byte range. A
//! header's file then holds only what is particular to it: its fields, its length checks,
//! its getters and setters, and its `Repr`.

/// Declares a header view `$name<T: AsRef<[u8]>>` (see the [module docs](self)). The
/// header's file supplies `fn check_len(&self) -> Result<()>`, the checks `new_checked`
/// makes, and the documentation of `new_checked` (what it checks, with the RFC and Linux
/// behind each check).
macro_rules! header_view {
    (
        $(#[$view_doc:meta])*
        $name:ident;
        $(#[$checked_doc:meta])*
        new_checked
    ) => {
        $(#[$view_doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wrap a buffer without checking it; accessors may panic on a short or
            /// inconsistent buffer. For buffers the caller sized itself (transmit).
            pub const fn new_unchecked(buffer: T) -> $name<T> {
                $name { buffer }
            }

            $(#[$checked_doc])*
            pub fn new_checked(buffer: T) -> $crate::Result<$name<T>> {
                let view = $name::new_unchecked(buffer);
                view.check_len()?;
                Ok(view)
            }

            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The big-endian 16-bit field at `at` (two bytes).
            #[allow(dead_code)]
            #[inline]
            fn read_u16(&self, at: core::ops::Range<usize>) -> u16 {
                let b = &self.buffer.as_ref()[at];
                u16::from_be_bytes([b[0], b[1]])
            }

            /// The big-endian 32-bit field at `at` (four bytes).
            #[allow(dead_code)]
            #[inline]
            fn read_u32(&self, at: core::ops::Range<usize>) -> u32 {
                let b = &self.buffer.as_ref()[at];
                u32::from_be_bytes([b[0], b[1], b[2], b[3]])
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// Store `value` big-endian in the 16-bit field at `at`.
            #[allow(dead_code)]
            #[inline]
            fn write_u16(&mut self, at: core::ops::Range<usize>, value: u16) {
                self.buffer.as_mut()[at].copy_from_slice(&value.to_be_bytes());
            }

            /// Store `value` big-endian in the 32-bit field at `at`.
            #[allow(dead_code)]
            #[inline]
            fn write_u32(&mut self, at: core::ops::Range<usize>, value: u32) {
                self.buffer.as_mut()[at].copy_from_slice(&value.to_be_bytes());
            }
        }

        impl<T: AsRef<[u8]>> AsRef<[u8]> for $name<T> {
            fn as_ref(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }
    };
}

pub(crate) use header_view;
