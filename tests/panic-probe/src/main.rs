//! A test fixture, not a tool: it panics on purpose. tests/packaging/test_binaries.py builds it the way the
//! release binary is built (scripts/lib.sh `release_cargo TRIPLE -p panic-probe`: the release profile with
//! panic = "abort", and the link step that discards the unwind tables) and checks that a panic still prints
//! its message and ends in an abort (SIGABRT), with and without RUST_BACKTRACE, on x86_64 and aarch64.
//! istio-cni-node itself has no input that panics, so this stands in for it.

use std::hint::black_box;

#[inline(never)]
fn innermost(depth: usize) -> usize {
    panic!("panic probe at depth {depth}");
}

/// A few real frames between main and the panic, for the unwinder to walk (or fail to).
#[inline(never)]
fn nest(depth: usize) -> usize {
    if depth == 0 {
        innermost(black_box(3))
    } else {
        nest(black_box(depth - 1)) + 1
    }
}

fn main() {
    println!("{}", nest(black_box(3)));
}
