//! The ustack protocol stack (sans-I/O).
