use core::fmt;

/// Why a parser refused a buffer. Deliberately small and payload-free: the caller
/// records a drop reason (and so a counter); the parser only says which kind of bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header, or than a length field says.
    Truncated,
    /// A field holds a value the format does not allow (bad version, bad header length,
    /// malformed option, impossible flag combination, ...).
    Malformed,
    /// The checksum does not verify.
    Checksum,
    /// Well-formed, but a variant ustack does not handle (e.g. ARP for another hardware type).
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated",
            Error::Malformed => "malformed",
            Error::Checksum => "bad checksum",
            Error::Unsupported => "unsupported",
        })
    }
}

impl std::error::Error for Error {}

/// The result of a wire operation.
pub type Result<T> = core::result::Result<T, Error>;
