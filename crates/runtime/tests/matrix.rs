//! The interop matrix (`kernel/matrix.rs`) over each link: the kernel's TCP options and
//! congestion control, and faults from the relay around ustack's queue, with 1 MiB through
//! ustack's echo server and 1 MiB each way between ustack's client and a kernel server in
//! every cell, SHA-256 checked at both ends and the capture read by tshark.
//!
//! - `tun` and `packet`, 40 cells each: every combination of SACK, timestamps and window
//!   scaling with reno, cubic and bbr (24 cells); loss 1% and 5%, duplication and
//!   reordering, each with four kernel settings (16 cells).
//! - `xdp`, 5 cells: the kernel's defaults without faults and under each fault (the relay
//!   around the xdp queue).
//! - over IPv6 (`tun6`, `packet6`, `xdp6`), 5 cells each: the kernel's defaults without
//!   faults and under each fault, ustack at `2001:db8:7::2`, the kernel at
//!   `2001:db8:7::1` (neighbour discovery over the veth pair, under the faults too).
//!
//! Run one link's: `cargo nextest run -p ustack-runtime --test matrix -E 'test(/^packet::/)'`.

mod kernel;

use kernel::matrix::{
    Cell, DEFAULTS, clean_cells, duplication, fault_cells, loss_1pct, loss_5pct, reordering,
    run_matrix, run_spread,
};

/// One `#[test]` per `name: body;`.
macro_rules! tests {
    ($($name:ident: $body:expr;)*) => {$(
        #[test]
        fn $name() {
            $body;
        }
    )*};
}

/// The whole matrix over `$link`, in seven tests (each its cells in sequence, one
/// namespace per cell).
macro_rules! full_matrix {
    ($module:ident, $link:expr) => {
        mod $module {
            use super::*;

            tests! {
                reno_every_option_combination:
                    run_matrix(&$link, "matrix_reno", &clean_cells("reno"));
                cubic_every_option_combination:
                    run_matrix(&$link, "matrix_cubic", &clean_cells("cubic"));
                bbr_every_option_combination:
                    run_matrix(&$link, "matrix_bbr", &clean_cells("bbr"));
                under_1_percent_loss: run_spread(&$link, "matrix_loss_1pct", loss_1pct());
                under_5_percent_loss: run_spread(&$link, "matrix_loss_5pct", loss_5pct());
                under_duplication: run_spread(&$link, "matrix_duplication", duplication());
                under_reordering: run_spread(&$link, "matrix_reordering", reordering());
            }
        }
    };
}

full_matrix!(tun, kernel::matrix::TUN);
full_matrix!(packet, kernel::matrix::PACKET);

/// The kernel's defaults, without faults and under each fault condition: 5 cells.
fn defaults_and_faults() -> Vec<Cell> {
    let mut cells = fault_cells(&[("no faults", Default::default())], &[DEFAULTS]);
    let faults = [loss_1pct(), loss_5pct(), duplication(), reordering()];
    cells.extend(fault_cells(&faults, &[DEFAULTS]));
    cells
}

/// The kernel's defaults without faults and under each fault over `$link`, in a module
/// `$module` (its test `defaults_clean_and_under_each_fault`).
macro_rules! defaults_matrix {
    ($module:ident, $link:expr) => {
        mod $module {
            use super::*;

            tests! {
                defaults_clean_and_under_each_fault:
                    run_matrix(&$link, "matrix_defaults", &defaults_and_faults());
            }
        }
    };
}

defaults_matrix!(xdp, kernel::matrix::XDP);
defaults_matrix!(tun6, kernel::matrix::TUN6);
defaults_matrix!(packet6, kernel::matrix::PACKET6);
defaults_matrix!(xdp6, kernel::matrix::XDP6);
