//! Throughput of the Internet checksum (`checksum::data`, RFC 1071) on a minimum-size
//! frame's worth (64 B), a standard Ethernet MTU (1500 B), a jumbo frame (9000 B) and a
//! maximal IPv4/GSO buffer (64 KiB).
//!
//! Run: `cargo bench -p ustack-wire --bench checksum`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ustack_wire::checksum;

fn bench_data(c: &mut Criterion) {
    let mut group = c.benchmark_group("checksum::data");
    for size in [64usize, 1500, 9000, 65536] {
        // Deterministic, non-trivial contents (the sum's cost does not depend on them).
        let buf: Vec<u8> = (0..size)
            .map(|i| (i.wrapping_mul(31) ^ (i >> 8)) as u8)
            .collect();
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &buf, |b, buf| {
            b.iter(|| checksum::data(black_box(buf)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_data);
criterion_main!(benches);
