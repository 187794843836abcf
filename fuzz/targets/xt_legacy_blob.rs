//! The legacy x_tables blob reader and builder: any bytes as a table from the kernel (`GET_INFO`'s hooks
//! and `GET_ENTRIES`' entries) give a table or an error, never a panic; a table read builds into a blob
//! that reads back as the same model and builds into the same bytes again.
//! Input: one byte (bit 0: IPv6), then a `struct ipt_replace` (96 bytes: name, valid_hooks, num_entries,
//! size, hook_entry[5], underflow[5], num_counters, counters) and the entries, as
//! `iptables-legacy-restore` hands them to `IPT_SO_SET_REPLACE` (the seeds are such captures).
//! The body of the cargo-fuzz target of the same name (fuzz/fuzz_targets/), also run on stable by
//! tests/fuzz (seeds and mutations).

use istio_cni::netfilter::Family;
use istio_cni::xtables::legacy::{blob, parse};

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

pub fn run(data: &[u8]) {
    let Some((&flag, rest)) = data.split_first() else {
        return;
    };
    if rest.len() < 96 {
        return;
    }
    let family = if flag & 1 == 0 {
        Family::V4
    } else {
        Family::V6
    };
    let valid_hooks = u32_at(rest, 32);
    let hook_entry: [u32; 5] = std::array::from_fn(|h| u32_at(rest, 44 + 4 * h));
    let underflow: [u32; 5] = std::array::from_fn(|h| u32_at(rest, 64 + 4 * h));
    let entries = &rest[96..];
    let Ok(t) = parse::parse(family, "nat", valid_hooks, &hook_entry, &underflow, entries) else {
        return;
    };
    let model = blob::model(&t);
    let Ok(b) = blob::build(&t) else {
        return;
    };
    let again = parse::parse(
        family,
        "nat",
        b.valid_hooks,
        &b.hook_entry,
        &b.underflow,
        &b.entries,
    )
    .expect("our own blob reads back");
    assert_eq!(blob::model(&again), model);
    let b2 = blob::build(&again).expect("a table read from our own blob builds");
    assert_eq!(b2.entries, b.entries);
    assert_eq!(
        (b2.hook_entry, b2.underflow, b2.num_entries),
        (b.hook_entry, b.underflow, b.num_entries)
    );
}
